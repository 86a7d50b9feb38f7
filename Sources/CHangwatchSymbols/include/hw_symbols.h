// Offline symbolication over elfutils' libdwfl/libdw. Never called from a signal handler:
// everything here allocates. One `hws_module` wraps one ELF file opened at link-time
// addresses (load bias 0), so a cached module serves every process that loaded the file,
// whatever address it was loaded at.
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hws_module hws_module;

/// One frame of an address's (possibly inlined) call chain. Strings are owned by the
/// module and stay valid until its next lookup or `hws_module_close`, whichever comes first:
/// a unit's file names are let go of when a later lookup reads past the unit reader's budget
/// (hw_unit_reader.c). Copy them before the next call.
typedef struct hws_frame {
    /// Raw (possibly mangled) function name; NULL when unknown.
    const char *function;
    /// Source file (absolute, or as the compiler recorded it); NULL when unknown.
    const char *file;
    /// 0 when unknown.
    int32_t line;
    int32_t column;
    /// Offset of the address from the start of the ELF symbol containing it.
    uint64_t function_offset;
    /// 1 when `function_offset` is meaningful (only for the outermost, real function).
    int32_t has_function_offset;
    /// 1 when this frame was inlined into the next one.
    int32_t inlined;
} hws_frame;

/// Opens `path` (a regular ELF file) for symbolication. `debuginfo_path` is an elfutils
/// search string (e.g. ":.debug:/usr/lib/debug") used to find separate debug files;
/// NULL means elfutils' default. On failure returns NULL and writes a message to `error`.
hws_module *hws_module_open(const char *path, const char *debuginfo_path, char *error, size_t error_size);

void hws_module_close(hws_module *module);

/// Symbolicates the link-time address `link_address` (runtime address minus load bias).
/// Writes up to `capacity` frames, innermost inlined frame first, the real function last.
/// Returns the number of frames written (0 when nothing at all is known about the address).
int hws_module_symbolicate(hws_module *module, uint64_t link_address, hws_frame *frames, int capacity);

/// How `hws_module_symbolicate_scopes` reads a unit's lines and scopes.
enum {
    /// What `hws_module_symbolicate` does: straight from the file's bytes where it has no
    /// .debug_aranges (Sources/CHangwatchSymbols/hw_unit_reader.h), else (and wherever that
    /// reader does not follow the unit) through libdw, the chain from the unit's function index.
    HWS_DIRECTLY_OR_INDEX = 0,
    /// Through libdw, the chain from libdw's dwarf_getscopes and dwarf_getscopes_die.
    HWS_THROUGH_LIBDW = 1,
    /// Through libdw, the chain from the unit's function index over libdw's DIEs.
    HWS_THROUGH_INDEX = 2,
};

/// `hws_module_symbolicate` read one of the ways above (`way`), for tests that compare them.
int hws_module_symbolicate_scopes(hws_module *module, uint64_t link_address, hws_frame *frames, int capacity, int way);

/// How many lookups of `module` the direct reader answered (HWS_DIRECTLY_OR_INDEX).
uint32_t hws_module_direct_answers(const hws_module *module);

/// How many compilation units of the module had more functions than the direct reader keeps for
/// one (524,288: 16 MiB): their frames have a symbol and a line, no inline frames.
uint32_t hws_module_units_over_bounds(const hws_module *module);

/// The rows a unit's line table keeps before each lookup runs the unit's line program again
/// for its own row (524,288, 16 MiB, by default), for tests that compare the two ways. Call it
/// before the module's first lookup.
void hws_module_set_unit_row_bound(hws_module *module, size_t rows);

/// The ELF symbol holding `link_address` and the address's offset into it, as libdwfl's
/// `dwfl_module_addrinfo` chooses it: through the module's sorted symbol table, or through
/// libdwfl itself when `through_libdwfl` (for tests that compare the two). NULL when no
/// symbol holds it.
const char *hws_module_symbol(hws_module *module, uint64_t link_address, uint64_t *offset, int through_libdwfl);

/// The code ranges of the module's compilation units (DWARF addresses, and the offset of each
/// unit's DIE), read from the unit DIEs (Sources/CHangwatchSymbols/hw_unit_ranges.c) or through
/// libdw's dwarf_ranges when `through_libdw`, in unit order, for tests that compare the two:
/// how many there are (at most `capacity` written), or -1 when they cannot be read that way.
long hws_module_unit_ranges(hws_module *module, int through_libdw, uint64_t *lows, uint64_t *highs, uint64_t *units, size_t capacity);

/// The most unit ranges the reader of hw_unit_ranges.c gives for a module (a release build of
/// this package has 4,426): the units of a crafted file may all name one long list.
#define HWS_MAX_UNIT_RANGES (1u << 21)

/// The unit-range reader of hw_unit_ranges.c over sections packed into one buffer, for the
/// fuzzer (Sources/hangwatch-fuzz, `unit-ranges`): four little-endian u32 sizes (.debug_info,
/// .debug_abbrev, .debug_ranges, .debug_rnglists), those sections in turn, and .debug_addr the
/// rest. How many ranges it reads, or -1 when it declines.
long hws_unit_ranges_packed(const uint8_t *bytes, size_t size);

/// The unit reader of hw_unit_reader.c over sections packed into one buffer, for the fuzzer
/// (`unit-reader`): eight little-endian u32 sizes (.debug_info, .debug_abbrev, .debug_ranges,
/// .debug_rnglists, .debug_addr, .debug_line, .debug_str, .debug_line_str), those sections in
/// turn, and .debug_str_offsets the rest. Each unit the range reader finds is asked for three
/// of its addresses. How many frames they gave, or -1 when the ranges were refused.
long hws_unit_reader_packed(const uint8_t *bytes, size_t size);

/// How many lookups the sorted table has answered (the others went to libdwfl), for tests.
uint32_t hws_module_symbol_table_answers(const hws_module *module);

/// Names the link addresses the next lookups will ask (a report's addresses in this module):
/// their symbols are chosen in one pass over the symbol table, as libdwfl chooses them, and
/// the sorted table is built only if an address not named here is asked. A cold report asks a
/// few addresses of each module, for which sorting a whole table cost more than the lookups
/// (CHANGELOG.md, issue 29). Nothing is done once the table is built or a first priming was
/// made. 0, or -1 without memory.
int hws_module_prime_symbols(hws_module *module, const uint64_t *link_addresses, size_t count);

/// How many lookups the primed choices have answered, for tests.
uint32_t hws_module_primed_answers(const hws_module *module);

// MARK: whole-module walks, for the symbol index (Sources/HangwatchSymbolication/SymbolIndex.swift)
//
// Addresses are link-time addresses, as for `hws_module_symbolicate`. Strings belong to the
// module (valid until `hws_module_close`). A visitor returning nonzero stops the walk; the walk
// then returns 1. Otherwise it returns 0, or -1 when the module cannot be read.

/// One ELF symbol as `hws_module_symbolicate` may choose it (named, not a section, file or TLS
/// symbol, defined in the module).
typedef struct hws_symbol_entry {
    uint64_t start;
    uint64_t size;
    const char *name;
    /// STB_LOCAL 0, STB_GLOBAL 1, STB_WEAK 2, …
    int32_t binding;
    /// STT_NOTYPE 0, STT_OBJECT 1, STT_FUNC 2, STT_GNU_IFUNC 10, …
    int32_t type;
    /// The section index (SHN_* values above 0xff00 are special); sizeless symbols match only
    /// addresses in their own section.
    uint32_t section;
} hws_symbol_entry;

typedef int (*hws_symbol_visitor)(void *context, const hws_symbol_entry *entry);
int hws_module_each_symbol(hws_module *module, hws_symbol_visitor visitor, void *context);

/// The module's allocated sections, [start, end) at link-time addresses: a sizeless symbol
/// names only addresses in its own section.
typedef int (*hws_section_visitor)(void *context, uint32_t index, uint64_t start, uint64_t end);
int hws_module_each_section(hws_module *module, hws_section_visitor visitor, void *context);

/// One row of a compilation unit's line table, in the table's (address) order.
typedef struct hws_line_entry {
    uint64_t address;
    const char *file;
    int32_t line;
    int32_t column;
    /// 1 for the row that ends a sequence: it starts no line.
    int32_t end_sequence;
} hws_line_entry;

typedef int (*hws_line_visitor)(void *context, const hws_line_entry *entry);
/// Visits every unit's rows; a unit's rows are followed by one row with `file == NULL` and
/// `end_sequence == 2` (the unit's end), so a visitor can tell units apart.
int hws_module_each_line(hws_module *module, hws_line_visitor visitor, void *context);

/// A function scope (subprogram, inlined subroutine, entry point) with code ranges.
typedef struct hws_scope_entry {
    /// The DIE's offset; unique within the module.
    uint64_t id;
    /// The nearest enclosing function scope's id, or UINT64_MAX for none.
    uint64_t parent;
    /// The name `hws_module_symbolicate` reports (linkage name first).
    const char *function;
    /// 1 for DW_TAG_inlined_subroutine; then `call_*` say where it was inlined.
    int32_t inlined;
    const char *call_file;
    int32_t call_line;
    int32_t call_column;
    /// [low, high) ranges of its code.
    const uint64_t *ranges;
    size_t range_count;
} hws_scope_entry;

typedef int (*hws_scope_visitor)(void *context, const hws_scope_entry *entry);
/// Visits function scopes parents first (a scope's parent was visited before it).
int hws_module_each_scope(hws_module *module, hws_scope_visitor visitor, void *context);

/// Lets go of the pages of the module's files (the ELF file, and its separate debug file) that
/// lookups read: libelf maps each file whole, and every page a lookup touched would otherwise
/// count in this process's resident memory until the module is closed. The kernel keeps them in
/// its page cache; the next lookup that needs one maps it again. Nothing is done where a file
/// was read into memory instead of mapped.
void hws_module_release_pages(hws_module *module);

/// 1 when the module has DWARF (in the file itself or in a separate debug file found).
int hws_module_has_dwarf(hws_module *module);

/// Demangles an Itanium C++ name ("_Z…") through libstdc++'s __cxa_demangle when it is
/// present in the process. Returns a malloc'd string (free() it) or NULL.
char *hws_cxx_demangle(const char *name);

#ifdef __cplusplus
}
#endif
