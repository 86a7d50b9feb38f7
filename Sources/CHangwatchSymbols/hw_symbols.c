// Offline symbolication with elfutils, following what `eu-addr2line -i -f` does: the ELF
// symbol libdwfl's dwfl_module_addrinfo chooses (from a sorted table, hws_symbol_at), the line
// via dwfl_module_getsrc, and the inline chain of concrete DIE scopes, using each
// DW_TAG_inlined_subroutine's DW_AT_call_file/line as the location in its caller. The unit of
// an address and the function in it come from indexes built once per module and unit
// (hw_unit_ranges.c, hws_unit_functions) where libdw walks whole units per address; in a file
// without .debug_aranges a unit's lines, functions and scopes are read straight from its bytes
// (hw_unit_reader.c), libdw answering only what that reader does not follow. libdw itself is
// loaded on first use (hw_libdw.h).
#define _GNU_SOURCE
#include "hw_symbols.h"
#include "hw_libdw.h"
#include "hw_unit_ranges.h"
#include "hw_unit_reader.h"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <pthread.h>
#include <time.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

// Swift reads hws_frame directly: pin its layout.
_Static_assert(sizeof(hws_frame) == 40, "hws_frame layout is shared with Swift");
_Static_assert(offsetof(hws_frame, function_offset) == 24, "hws_frame layout is shared with Swift");

// Symbols with a size, of one part of the table (globals or locals), sorted by address; each
// `reach` is the highest end of it and every symbol before it, so that a backwards scan from
// an address can stop at the first symbol whose reach is at or below it.
struct hws_sized_symbol {
    uint64_t value, end, reach;
    uint32_t index;  // in libdwfl's symbol numbering (dwfl_module_getsym_info)
    uint32_t binding_value;
};

struct hws_symbol_part {
    struct hws_sized_symbol *symbols;
    size_t count;
};

struct hws_module {
    // The callbacks struct must outlive the Dwfl: libdwfl keeps a pointer to it.
    Dwfl_Callbacks callbacks;
    char *debuginfo_path;
    Dwfl *dwfl;
    Dwfl_Module *mod;
    // Dwfl address of link-time address 0 (libdwfl places ET_DYN at bias 0 here; ET_EXEC is
    // never relocated), so dwfl address = link address + dwfl_bias.
    GElf_Addr dwfl_bias;
    // Fallback CU index for files without .debug_aranges (Swift/LLVM output): libdwfl 0.188
    // finds CUs only through aranges. Built lazily from each CU's DW_AT_ranges/low_pc.
    int cu_ranges_built;
    struct hws_cu_range *cu_ranges;
    size_t cu_range_count;
    // Per compilation unit looked up so far, its functions' ranges (hws_unit_functions): found
    // by one walk of the unit, where dwarf_getscopes and dwarf_getscopes_die walked it twice
    // per address.
    struct hws_unit_functions *units;
    size_t unit_count, unit_capacity;
    // Units read straight from the file's bytes (hw_unit_reader.h), made on the first lookup
    // (0 not yet, 1 made, -1 not for this file); `direct_answers` counts the lookups they answered.
    struct hwsr_module *direct;
    int direct_state;
    size_t unit_row_bound;  // 0, or a test's bound on the rows a unit's table keeps
    // The link addresses the last priming named, for the direct reader (hwsr_module_expect);
    // `expected_given` once it has them.
    uint64_t *expected;
    size_t expected_count;
    int expected_given;
    uint32_t direct_answers;
    // The symbol table sorted by address, built on the module's first symbol lookup
    // (hws_symbol_at): libdwfl's dwfl_module_addrinfo reads every symbol on each lookup, and
    // building the table costs about as much as one such read.
    uint32_t table_answers;
    int symbols_state;  // 0 not built, 1 built, -1 unusable (every lookup goes to libdwfl)
    struct hws_symbol_part globals, locals;
    uint64_t *global_sizeless;  // addresses of the global symbols without a size, sorted
    size_t global_sizeless_count;
    // The addresses a report named in advance (hws_module_prime_symbols), with the symbol each
    // was given by one pass over the table: sorted by address. A cold report asks a few
    // addresses of a module; sorting its whole table for them cost more than the lookups.
    struct hws_primed_symbol *primed;
    size_t primed_count;
    uint32_t primed_answers;
};

// One primed address (a dwfl address) and libdwfl's choice for it: the index of the symbol in
// libdwfl's numbering, or -1 where libdwfl's own lookup decides (no sized holder, a global
// sizeless symbol at the address, more than HWS_MAX_HOLDERS holders).
struct hws_primed_symbol {
    uint64_t address;
    int32_t chosen;
};

// A function's code range in a unit: DWARF addresses, and the offset of its DW_TAG_subprogram.
// `reach` is the highest `high` of it and every range before it (as in the symbol table).

struct hws_unit_functions {
    Dwarf_Off cu_offset;
    struct hws_function_range *ranges;  // sorted by low
    size_t count;
    int complete;  // 0: the walk ran out of memory; lookups in this unit go to dwarf_getscopes
};

static void hws_set_error(char *error, size_t error_size, const char *what, const char *detail) {
    if (error == NULL || error_size == 0) return;
    snprintf(error, error_size, "%s%s%s", what, detail ? ": " : "", detail ? detail : "");
}

// Only regular files: a FIFO or device named as a module must not block or be read.
static int hws_is_regular_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

// Separate debug files are found by build-id only, under the debug directories
// (/usr/lib/debug/.build-id/xx/yyyy.debug, where Debian's -dbg and -dbgsym packages put them).
// dwfl_standard_find_debuginfo would, when that finds nothing, dlopen libdebuginfod (and with it
// libcurl, GnuTLS, Kerberos, LDAP: ~10 ms and 20 M instructions) and, where DEBUGINFOD_URLS is
// set (Debian and Fedora set it for login shells), download debug files from the network in the
// middle of a crash report. Symbolication never reaches the network.
static int hws_find_debuginfo_locally(Dwfl_Module *mod, void **userdata, const char *modname, GElf_Addr base,
                                      const char *file_name, const char *debuglink_file, GElf_Word debuglink_crc,
                                      char **debuginfo_file_name) {
    return dwfl_build_id_find_debuginfo(mod, userdata, modname, base, file_name, debuglink_file, debuglink_crc,
                                        debuginfo_file_name);
}

hws_module *hws_module_open(const char *path, const char *debuginfo_path, char *error, size_t error_size) {
    if (hws_libdw_load(error, error_size) != 0) return NULL;
    if (path == NULL || !hws_is_regular_file(path)) {
        hws_set_error(error, error_size, "not a readable regular file", path ? strerror(errno) : NULL);
        return NULL;
    }
    hws_module *module = calloc(1, sizeof *module);
    if (module == NULL) {
        hws_set_error(error, error_size, "out of memory", NULL);
        return NULL;
    }
    if (debuginfo_path != NULL) {
        module->debuginfo_path = strdup(debuginfo_path);
        if (module->debuginfo_path == NULL) {
            free(module);
            hws_set_error(error, error_size, "out of memory", NULL);
            return NULL;
        }
    }
    module->callbacks.find_elf = dwfl_build_id_find_elf;
    module->callbacks.find_debuginfo = hws_find_debuginfo_locally;
    module->callbacks.section_address = dwfl_offline_section_address;
    module->callbacks.debuginfo_path = module->debuginfo_path ? &module->debuginfo_path : NULL;

    module->dwfl = dwfl_begin(&module->callbacks);
    if (module->dwfl == NULL) {
        hws_set_error(error, error_size, "dwfl_begin failed", dwfl_errmsg(-1));
        free(module->debuginfo_path);
        free(module);
        return NULL;
    }
    dwfl_report_begin(module->dwfl);
    // base 0 + add_p_vaddr: an ET_DYN file lands at its link-time addresses.
    module->mod = dwfl_report_elf(module->dwfl, path, path, -1, 0, true);
    if (module->mod == NULL || dwfl_report_end(module->dwfl, NULL, NULL) != 0) {
        hws_set_error(error, error_size, "cannot read ELF", dwfl_errmsg(-1));
        hws_module_close(module);
        return NULL;
    }
    GElf_Addr bias = 0;
    if (dwfl_module_getelf(module->mod, &bias) == NULL) {
        hws_set_error(error, error_size, "cannot read ELF", dwfl_errmsg(-1));
        hws_module_close(module);
        return NULL;
    }
    module->dwfl_bias = bias;
    return module;
}

void hws_module_close(hws_module *module) {
    if (module == NULL) return;
    if (module->dwfl != NULL) dwfl_end(module->dwfl);
    hwsr_module_free(module->direct);
    free(module->cu_ranges);
    for (size_t i = 0; i < module->unit_count; i++) free(module->units[i].ranges);
    free(module->units);
    free(module->globals.symbols);
    free(module->locals.symbols);
    free(module->global_sizeless);
    free(module->primed);
    free(module->expected);
    free(module->debuginfo_path);
    free(module);
}

// Whether the pages of the file libelf opened as `elf` may be let go of (hws_is_file_mapping):
// not where it read the file into memory, nor for a small file.
static int hws_elf_is_droppable(Elf *elf) {
    size_t size = 0;
    const char *bytes = elf ? elf_rawfile(elf, &size) : NULL;
    return bytes != NULL && hws_is_file_mapping(bytes, size);
}

static void hws_release_elf_pages(Elf *elf) {
    size_t size = 0;
    const char *bytes = elf ? elf_rawfile(elf, &size) : NULL;
    if (bytes != NULL && hws_is_file_mapping(bytes, size)) hws_drop_pages(bytes, size);
}

void hws_module_release_pages(hws_module *module) {
    if (module == NULL) return;
    Dwarf_Addr bias = 0;
    Elf *main_file = dwfl_module_getelf(module->mod, &bias);
    hws_release_elf_pages(main_file);
    Dwarf *dwarf = module->direct_state != 0 || module->cu_ranges_built ? dwfl_module_getdwarf(module->mod, &bias) : NULL;
    Elf *debug_file = dwarf ? dwarf_getelf(dwarf) : NULL;
    if (debug_file != NULL && debug_file != main_file) hws_release_elf_pages(debug_file);
}

int hws_module_has_dwarf(hws_module *module) {
    if (module == NULL) return 0;
    Dwarf_Addr bias = 0;
    return dwfl_module_getdwarf(module->mod, &bias) != NULL;
}

// The name eu-addr2line prints: the linkage (mangled) name when there is one, following
// DW_AT_abstract_origin / DW_AT_specification, else the plain DW_AT_name.
static const char *hws_die_function_name(Dwarf_Die *die) {
    Dwarf_Attribute attr;
    const char *name = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_linkage_name, &attr));
    if (name == NULL) name = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_MIPS_linkage_name, &attr));
    if (name == NULL) name = dwarf_diename(die);
    return name;
}

static int hws_is_function_scope(int tag) {
    return tag == DW_TAG_subprogram || tag == DW_TAG_inlined_subroutine || tag == DW_TAG_entry_point;
}

static int hws_compare_cu_ranges(const void *a, const void *b) {
    const struct hws_cu_range *left = a, *right = b;
    return left->low < right->low ? -1 : left->low > right->low;
}

// Every compilation unit's DIE in turn: `*next` starts at 0; returns 0 when no unit is left.
// A unit whose DIE cannot be read is skipped.
static int hws_next_unit(Dwarf *dwarf, Dwarf_Off *next, Dwarf_Die *cudie) {
    Dwarf_Off offset = *next;
    size_t header_size = 0;
    while (dwarf_nextcu(dwarf, offset, next, &header_size, NULL, NULL, NULL) == 0) {
        if (dwarf_offdie(dwarf, offset + header_size, cudie) != NULL) return 1;
        offset = *next;
    }
    return 0;
}

// Every unit's ranges through libdw: dwarf_offdie builds each unit's state (9 µs a unit here).
// 0, or -1 without memory (what was found is kept).
static int hws_unit_ranges_libdw(Dwarf *dwarf, struct hws_cu_range **ranges, size_t *count) {
    size_t capacity = 0;
    Dwarf_Off next = 0;
    Dwarf_Die cudie;
    while (hws_next_unit(dwarf, &next, &cudie)) {
        Dwarf_Addr base = 0, start = 0, end = 0;
        ptrdiff_t cursor = 0;
        while ((cursor = dwarf_ranges(&cudie, cursor, &base, &start, &end)) > 0) {
            if (end <= start) continue;
            if (hws_make_room((void **)ranges, *count, &capacity, sizeof **ranges) != 0) return -1;
            (*ranges)[(*count)++] = (struct hws_cu_range){ .low = start, .high = end, .cu_offset = dwarf_dieoffset(&cudie) };
        }
    }
    return 0;
}

// The unit range index: read from the unit DIEs directly (hw_unit_ranges.c), else through libdw.
static void hws_build_cu_ranges(hws_module *module, Dwarf *dwarf) {
    module->cu_ranges_built = 1;
    if (hwsu_unit_ranges(dwarf, &module->cu_ranges, &module->cu_range_count) != 0)
        (void)hws_unit_ranges_libdw(dwarf, &module->cu_ranges, &module->cu_range_count);
    if (module->cu_range_count > 1)
        qsort(module->cu_ranges, module->cu_range_count, sizeof *module->cu_ranges, hws_compare_cu_ranges);
}

long hws_module_unit_ranges(hws_module *module, int through_libdw, uint64_t *lows, uint64_t *highs, uint64_t *units, size_t capacity) {
    Dwarf_Addr bias = 0;
    Dwarf *dwarf = module ? dwfl_module_getdwarf(module->mod, &bias) : NULL;
    if (dwarf == NULL) return -1;
    struct hws_cu_range *ranges = NULL;
    size_t count = 0;
    int read = through_libdw ? hws_unit_ranges_libdw(dwarf, &ranges, &count) : hwsu_unit_ranges(dwarf, &ranges, &count);
    for (size_t i = 0; read == 0 && i < count && i < capacity; i++) {
        lows[i] = ranges[i].low;
        highs[i] = ranges[i].high;
        units[i] = ranges[i].cu_offset;
    }
    free(ranges);
    return read == 0 ? (long)count : -1;
}

// The unit range holding DWARF address `address` in the module's range index (built on first
// use); NULL when none does.
static const struct hws_cu_range *hws_unit_range_at(hws_module *module, Dwarf *dwarf, Dwarf_Addr address) {
    if (!module->cu_ranges_built) hws_build_cu_ranges(module, dwarf);
    // Last range starting at or below the address; overlapping ranges are rare, so look a
    // few entries further back too.
    size_t low = 0, high = module->cu_range_count;
    while (low < high) {
        size_t middle = low + (high - low) / 2;
        if (module->cu_ranges[middle].low <= address) low = middle + 1; else high = middle;
    }
    for (size_t back = 0; back < 8 && back < low; back++) {
        const struct hws_cu_range *range = &module->cu_ranges[low - 1 - back];
        if (range->low <= address && address < range->high) return range;
    }
    return NULL;
}

// The CU containing `dwfl_address`: through aranges when the file has them, else through
// the CU range index. `bias` receives the DWARF bias (dwfl address - DWARF address).
static int hws_find_cu(hws_module *module, Dwarf_Addr dwfl_address, Dwarf_Die *cudie, Dwarf_Addr *bias) {
    Dwarf_Die *found = dwfl_module_addrdie(module->mod, dwfl_address, bias);
    if (found != NULL) {
        *cudie = *found;
        return 1;
    }
    Dwarf *dwarf = dwfl_module_getdwarf(module->mod, bias);
    if (dwarf == NULL) return 0;
    const struct hws_cu_range *range = hws_unit_range_at(module, dwarf, dwfl_address - *bias);
    return range != NULL && dwarf_offdie(dwarf, range->cu_offset, cudie) != NULL;
}

// Writes the frames of a physical scope chain (`scopes`, innermost first, as
// dwarf_getscopes_die gives it): each function scope from the innermost up to the real
// function, an inlined one's caller location from its DW_AT_call_*. Returns how many.
static int hws_frames_from_scopes(Dwarf_Die *cudie, Dwarf_Die *scopes, int chain_count,
                                  const char *file, int line, int column, hws_frame *frames, int capacity) {
    Dwarf_Files *files = NULL;
    if (dwarf_getsrcfiles(cudie, &files, NULL) != 0) files = NULL;

    int written = 0;
    for (int i = 0; i < chain_count && written < capacity; i++) {
        int tag = dwarf_tag(&scopes[i]);
        if (!hws_is_function_scope(tag)) continue;
        hws_frame *frame = &frames[written++];
        memset(frame, 0, sizeof *frame);
        frame->function = hws_die_function_name(&scopes[i]);
        frame->file = file;
        frame->line = line;
        frame->column = column;
        if (tag != DW_TAG_inlined_subroutine) break;  // the real function: outermost frame

        frame->inlined = 1;
        // The caller's location is where this instance was inlined.
        Dwarf_Attribute attr;
        Dwarf_Word value;
        file = NULL;
        line = 0;
        column = 0;
        if (files != NULL && dwarf_formudata(dwarf_attr(&scopes[i], DW_AT_call_file, &attr), &value) == 0)
            file = dwarf_filesrc(files, value, NULL, NULL);
        if (dwarf_formudata(dwarf_attr(&scopes[i], DW_AT_call_line, &attr), &value) == 0) line = (int)value;
        if (dwarf_formudata(dwarf_attr(&scopes[i], DW_AT_call_column, &attr), &value) == 0) column = (int)value;
    }
    return written;
}

// libdw's own way (for tests, and for a unit whose functions could not be indexed): the scopes
// containing the address, then, as dwarf_getscopes may mix in the abstract definition's scopes,
// the physical nesting re-walked from the innermost concrete DIE. Each call walks the unit's
// DIEs twice. Returns how many frames, 0 when the address has no DWARF function scope.
static int hws_inline_chain_libdw(Dwarf_Die *cudie, Dwarf_Addr cu_bias, Dwarf_Addr dwfl_address,
                                  const char *file, int line, int column, hws_frame *frames, int capacity) {
    Dwarf_Die *scopes = NULL;
    int scope_count = dwarf_getscopes(cudie, dwfl_address - cu_bias, &scopes);
    if (scope_count <= 0) {
        free(scopes);
        return 0;
    }
    Dwarf_Die innermost = scopes[0];
    free(scopes);
    scopes = NULL;
    int chain_count = dwarf_getscopes_die(&innermost, &scopes);
    int written = chain_count > 0 ? hws_frames_from_scopes(cudie, scopes, chain_count, file, line, column, frames, capacity) : 0;
    free(scopes);
    return written;
}

// Every DW_TAG_subprogram with code under `die`, not looking inside functions (what nests in
// one is found from it by address, hws_scope_path); also inside namespaces, types and modules.
static int hws_collect_functions(struct hws_unit_functions *unit, size_t *capacity, Dwarf_Die *die, int depth) {
    // Real DWARF nests a few dozen levels; a crafted file must not exhaust the stack.
    if (depth > 256) return 0;
    Dwarf_Die child;
    if (dwarf_child(die, &child) != 0) return 0;
    do {
        if (dwarf_tag(&child) != DW_TAG_subprogram) {
            if (hws_collect_functions(unit, capacity, &child, depth + 1) != 0) return -1;
            continue;
        }
        Dwarf_Addr base = 0, start = 0, end = 0;
        ptrdiff_t cursor = 0;
        while ((cursor = dwarf_ranges(&child, cursor, &base, &start, &end)) > 0) {
            if (end <= start) continue;
            if (hws_make_room((void **)&unit->ranges, unit->count, capacity, sizeof *unit->ranges) != 0) return -1;
            unit->ranges[unit->count++] = (struct hws_function_range){ .low = start, .high = end, .die = dwarf_dieoffset(&child) };
        }
    } while (dwarf_siblingof(&child, &child) == 0);
    return 0;
}

// The functions of the unit `cudie`, indexed on its first lookup.
static struct hws_unit_functions *hws_unit_functions(hws_module *module, Dwarf_Die *cudie) {
    Dwarf_Off offset = dwarf_dieoffset(cudie);
    for (size_t i = 0; i < module->unit_count; i++)
        if (module->units[i].cu_offset == offset) return &module->units[i];
    if (hws_make_room((void **)&module->units, module->unit_count, &module->unit_capacity, sizeof *module->units) != 0) return NULL;
    struct hws_unit_functions *unit = &module->units[module->unit_count++];
    *unit = (struct hws_unit_functions){ .cu_offset = offset };
    size_t capacity = 0;
    unit->complete = hws_collect_functions(unit, &capacity, cudie, 0) == 0;
    hws_sort_function_ranges(unit->ranges, unit->count);
    return unit;
}

#define HWS_MAX_SCOPES 64

// The physical scope chain at `pc` (a DWARF address) inside the unit's function holding it,
// innermost first, as dwarf_getscopes_die gives it for the innermost scope: the function the
// first in DIE order among those holding it, then at each level the first child holding it.
// Returns how many scopes, 0 when no function holds it.
static int hws_scope_path(Dwarf *dwarf, const struct hws_unit_functions *unit, Dwarf_Addr pc, Dwarf_Die *scopes, int capacity) {
    const struct hws_function_range *holder = hws_function_holder(unit->ranges, unit->count, pc);
    Dwarf_Die path[HWS_MAX_SCOPES];
    if (holder == NULL || dwarf_offdie(dwarf, holder->die, &path[0]) == NULL) return 0;
    int depth = 1;
    while (depth < HWS_MAX_SCOPES && depth < capacity) {
        Dwarf_Die child;
        if (dwarf_child(&path[depth - 1], &child) != 0) break;
        int found = 0;
        do {
            if (dwarf_haspc(&child, pc) == 1) {
                path[depth++] = child;
                found = 1;
                break;
            }
        } while (dwarf_siblingof(&child, &child) == 0);
        if (!found) break;
    }
    for (int i = 0; i < depth; i++) scopes[i] = path[depth - 1 - i];
    return depth;
}

// Fills frames from the DWARF scopes around `dwfl_address`; returns how many, 0 when the
// address has no DWARF function scope.
static int hws_inline_chain(hws_module *module, Dwarf_Die *cudie, Dwarf_Addr cu_bias, Dwarf_Addr dwfl_address,
                            const char *file, int line, int column, hws_frame *frames, int capacity) {
    struct hws_unit_functions *unit = hws_unit_functions(module, cudie);
    Dwarf *dwarf = dwarf_cu_getdwarf(cudie->cu);
    if (unit == NULL || !unit->complete || dwarf == NULL)
        return hws_inline_chain_libdw(cudie, cu_bias, dwfl_address, file, line, column, frames, capacity);
    Dwarf_Die scopes[HWS_MAX_SCOPES];
    int count = hws_scope_path(dwarf, unit, dwfl_address - cu_bias, scopes, HWS_MAX_SCOPES);
    return count > 0 ? hws_frames_from_scopes(cudie, scopes, count, file, line, column, frames, capacity) : 0;
}

// MARK: - The symbol at an address
//
// dwfl_module_addrinfo (elfutils' libdwfl/dwfl_module_addrsym.c) reads the whole symbol table on
// every call: most of a report's time for a large binary. From a module's first lookup on, its
// sized symbols are kept sorted here, and a lookup makes libdwfl's choice among the few that hold
// the address, in its order:
// - the global symbols first (from dwfl_module_getsymtab_first_global on), the local ones only
//   when no global one holds the address;
// - among them, in table order, one replaces the choice so far when it starts closer to the
//   address or binds more strongly (global 3 > weak 2 > local 1), or starts at the same address
//   and is smaller at no weaker binding, or as small at a stronger one.
// Where libdwfl would look further — no sized symbol holds the address (its sizeless-label
// fallback), a global sizeless symbol at exactly the address, more holders than
// HWS_MAX_HOLDERS — the lookup is libdwfl's own. SymbolicatorTests compares the two over whole
// modules. (Function descriptors, whose symbols libdwfl tries at two addresses, are a ppc64
// matter: not on the architectures hangwatch builds for.)

#define HWS_MAX_HOLDERS 64

static uint32_t hws_binding_value(const GElf_Sym *symbol) {
    switch (GELF_ST_BIND(symbol->st_info)) {
    case STB_GLOBAL: return 3;
    case STB_WEAK: return 2;
    case STB_LOCAL: return 1;
    default: return 0;
    }
}

static int hws_compare_address(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

// Sorted by address, equal addresses in table order: a stable radix sort, a byte a pass over
// as many bytes as the highest address has (the symbols were added in table order). Its counts
// are on the stack: 16-bit digits needed 512 KiB of fresh zeroed memory per part, whose page
// faults cost a cold report more than the sort. 0, or -1 without memory for its buffer.
static int hws_part_sort(struct hws_symbol_part *part) {
    if (part->count == 0) return 0;
    uint64_t highest = 0;
    for (size_t i = 0; i < part->count; i++)
        if (part->symbols[i].value > highest) highest = part->symbols[i].value;
    struct hws_sized_symbol *other = malloc(part->count * sizeof *other);
    if (other == NULL) return -1;
    size_t counts[256];
    struct hws_sized_symbol *from = part->symbols, *to = other;
    for (unsigned shift = 0; shift < 64 && (highest >> shift) != 0; shift += 8) {
        memset(counts, 0, sizeof counts);
        for (size_t i = 0; i < part->count; i++) counts[(from[i].value >> shift) & 0xff]++;
        size_t position = 0;
        for (size_t digit = 0; digit < 256; digit++) {
            size_t here = counts[digit];
            counts[digit] = position;
            position += here;
        }
        for (size_t i = 0; i < part->count; i++) to[counts[(from[i].value >> shift) & 0xff]++] = from[i];
        struct hws_sized_symbol *swap = from;
        from = to;
        to = swap;
    }
    if (from != part->symbols) memcpy(part->symbols, from, part->count * sizeof *from);
    free(other);
    uint64_t reach = 0;
    for (size_t i = 0; i < part->count; i++) {
        if (part->symbols[i].end > reach) reach = part->symbols[i].end;
        part->symbols[i].reach = reach;
    }
    return 0;
}

// Symbol `index` of the module's table when it is one libdwfl's address lookup may choose
// (named, defined, not a section, file or TLS symbol): its name, with the symbol, its address
// and section; NULL otherwise.
static const char *hws_choosable_symbol(hws_module *module, int index, GElf_Sym *symbol, GElf_Addr *value, GElf_Word *section) {
    const char *name = dwfl_module_getsym_info(module->mod, index, symbol, value, section, NULL, NULL);
    if (name == NULL || name[0] == '\0' || symbol->st_shndx == SHN_UNDEF) return NULL;
    int type = GELF_ST_TYPE(symbol->st_info);
    return type == STT_SECTION || type == STT_FILE || type == STT_TLS ? NULL : name;
}

// The main file's .symtab as raw entries, when reading them is what dwfl_module_getsym_info
// gives without its section lookups per symbol (a third of a cold report's symbol time): the
// table libdwfl numbers is that one (it prefers the main file's .symtab; no auxiliary table,
// so the counts agree), its values need no adjustment (not relocatable, placed at bias 0), and
// there are no extended section indices. 64-bit little-endian files only. NULL otherwise.
static const Elf64_Sym *hws_raw_symtab(hws_module *module, int count, const char **strings, size_t *strings_size) {
    GElf_Addr bias = 0;
    Elf *elf = dwfl_module_getelf(module->mod, &bias);
    GElf_Ehdr header;
    if (elf == NULL || bias != 0 || module->dwfl_bias != 0 || gelf_getehdr(elf, &header) == NULL
        || header.e_ident[EI_CLASS] != ELFCLASS64 || header.e_ident[EI_DATA] != ELFDATA2LSB || header.e_type == ET_REL
        || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__)
        return NULL;
    Elf_Scn *section = NULL, *symtab = NULL;
    GElf_Shdr symtab_header = { 0 };
    while ((section = elf_nextscn(elf, section)) != NULL) {
        GElf_Shdr sh;
        if (gelf_getshdr(section, &sh) == NULL || sh.sh_type == SHT_SYMTAB_SHNDX) return NULL;
        if (sh.sh_type == SHT_SYMTAB && symtab == NULL) {
            symtab = section;
            symtab_header = sh;
        }
    }
    if (symtab == NULL || symtab_header.sh_entsize != sizeof(Elf64_Sym) || symtab_header.sh_size / sizeof(Elf64_Sym) != (uint64_t)count)
        return NULL;
    Elf_Data *symbols = elf_getdata(symtab, NULL);
    Elf_Data *names = elf_getdata(elf_getscn(elf, symtab_header.sh_link), NULL);
    if (symbols == NULL || names == NULL || symbols->d_buf == NULL || names->d_buf == NULL
        || symbols->d_size < (size_t)count * sizeof(Elf64_Sym))
        return NULL;
    *strings = names->d_buf;
    *strings_size = names->d_size;
    return symbols->d_buf;
}

// Symbol `index` as hws_choosable_symbol sees it, from the raw table: its name, with the
// symbol and its address; NULL when libdwfl's lookup may not choose it.
static const char *hws_raw_choosable(const Elf64_Sym *table, int index, const char *strings, size_t strings_size,
                                     GElf_Sym *symbol, GElf_Addr *value) {
    const Elf64_Sym *raw = &table[index];
    if (raw->st_name >= strings_size || strings[raw->st_name] == '\0' || raw->st_shndx == SHN_UNDEF) return NULL;
    int type = ELF64_ST_TYPE(raw->st_info);
    if (type == STT_SECTION || type == STT_FILE || type == STT_TLS) return NULL;
    *symbol = (GElf_Sym){ .st_name = raw->st_name, .st_info = raw->st_info, .st_other = raw->st_other,
                          .st_shndx = raw->st_shndx, .st_value = raw->st_value, .st_size = raw->st_size };
    *value = raw->st_value;
    return strings + raw->st_name;
}

// The symbols libdwfl's address lookup may choose, in its own numbering and table order (read
// raw where that is the same, hws_raw_symtab): what the sorted table and the primed lookups
// are made of.
struct hws_symbol_reader {
    hws_module *module;
    const Elf64_Sym *raw;
    const char *strings;
    size_t strings_size;
    int count, globals_from, next;
};

struct hws_choosable {
    uint64_t value, size;
    uint32_t index, binding_value;
    int global;
};

static int hws_symbol_reader_start(hws_module *module, struct hws_symbol_reader *reader) {
    int count = dwfl_module_getsymtab(module->mod);
    int first_global = dwfl_module_getsymtab_first_global(module->mod);
    if (count < 0 || first_global < 0) return -1;
    *reader = (struct hws_symbol_reader){ .module = module, .count = count, .next = 1,
                                          .globals_from = first_global == 0 ? 1 : first_global };
    reader->raw = hws_raw_symtab(module, count, &reader->strings, &reader->strings_size);
    return 0;
}

// The next choosable symbol; 0 when there is none left.
static int hws_symbol_reader_next(struct hws_symbol_reader *reader, struct hws_choosable *out) {
    while (reader->next < reader->count) {
        int i = reader->next++;
        GElf_Sym symbol;
        GElf_Addr value = 0;
        const char *name = reader->raw ? hws_raw_choosable(reader->raw, i, reader->strings, reader->strings_size, &symbol, &value)
                                       : hws_choosable_symbol(reader->module, i, &symbol, &value, NULL);
        if (name == NULL) continue;
        *out = (struct hws_choosable){ .value = value, .size = symbol.st_size, .index = (uint32_t)i,
                                       .binding_value = hws_binding_value(&symbol), .global = i >= reader->globals_from };
        return 1;
    }
    return 0;
}

// The sorted table; 0, or -1 when the module's lookups are to stay libdwfl's.
static int hws_build_symbol_table(hws_module *module) {
    struct hws_symbol_reader reader;
    if (hws_symbol_reader_start(module, &reader) != 0) return -1;
    size_t global_capacity = 0, local_capacity = 0, sizeless_capacity = 0;
    struct hws_choosable symbol;
    while (hws_symbol_reader_next(&reader, &symbol)) {
        if (symbol.size == 0) {
            if (!symbol.global) continue;
            if (hws_make_room((void **)&module->global_sizeless, module->global_sizeless_count, &sizeless_capacity,
                              sizeof *module->global_sizeless) != 0)
                return -1;
            module->global_sizeless[module->global_sizeless_count++] = symbol.value;
            continue;
        }
        if (symbol.value + symbol.size < symbol.value) return -1;  // wraps: libdwfl's own arithmetic, then
        struct hws_symbol_part *part = symbol.global ? &module->globals : &module->locals;
        if (hws_make_room((void **)&part->symbols, part->count, symbol.global ? &global_capacity : &local_capacity,
                          sizeof *part->symbols) != 0)
            return -1;
        part->symbols[part->count++] = (struct hws_sized_symbol){
            .value = symbol.value, .end = symbol.value + symbol.size, .index = symbol.index, .binding_value = symbol.binding_value,
        };
    }
    if (hws_part_sort(&module->globals) != 0 || hws_part_sort(&module->locals) != 0) return -1;
    if (module->global_sizeless_count > 1)
        qsort(module->global_sizeless, module->global_sizeless_count, sizeof *module->global_sizeless, hws_compare_address);
    return 0;
}

// The symbols of `part` that hold `address`, in table order; how many, or -1 for more than
// `capacity`.
static int hws_part_holders(const struct hws_symbol_part *part, uint64_t address, const struct hws_sized_symbol **holders,
                            int capacity) {
    size_t low = 0, high = part->count;  // the first symbol starting above the address
    while (low < high) {
        size_t middle = low + (high - low) / 2;
        if (part->symbols[middle].value <= address) low = middle + 1; else high = middle;
    }
    int found = 0;
    for (size_t i = low; i-- > 0 && part->symbols[i].reach > address;) {
        if (part->symbols[i].end <= address) continue;
        if (found == capacity) return -1;
        // Insertion by table order (there are a few at most).
        int at = found++;
        while (at > 0 && holders[at - 1]->index > part->symbols[i].index) { holders[at] = holders[at - 1]; at--; }
        holders[at] = &part->symbols[i];
    }
    return found;
}

// libdwfl's choice among holders in table order (try_sym_value, sized symbols): whether
// `candidate`, the next holder, replaces `closest`, the choice so far (NULL: none yet).
static int hws_prefer(const struct hws_sized_symbol *closest, const struct hws_sized_symbol *candidate) {
    if (closest == NULL || closest->value < candidate->value || closest->binding_value < candidate->binding_value) return 1;
    if (closest->value != candidate->value) return 0;
    uint64_t size = candidate->end - candidate->value, closest_size = closest->end - closest->value;
    return (closest_size > size && closest->binding_value <= candidate->binding_value)
        || (closest_size >= size && closest->binding_value < candidate->binding_value);
}

static const struct hws_sized_symbol *hws_choose(const struct hws_sized_symbol **holders, int count) {
    const struct hws_sized_symbol *closest = NULL;
    for (int i = 0; i < count; i++)
        if (hws_prefer(closest, holders[i])) closest = holders[i];
    return closest;
}

static int hws_has_global_sizeless_at(const hws_module *module, uint64_t address) {
    return module->global_sizeless_count > 0
        && bsearch(&address, module->global_sizeless, module->global_sizeless_count, sizeof address, hws_compare_address) != NULL;
}

// libdwfl's own lookup: the symbol holding the dwfl address `address` and the offset into it.
static const char *hws_libdwfl_symbol(hws_module *module, uint64_t address, GElf_Off *offset) {
    GElf_Sym symbol;
    return dwfl_module_addrinfo(module->mod, address, offset, &symbol, NULL, NULL, NULL);
}

// MARK: - Primed lookups: a report's addresses, one pass over the table

static int hws_compare_primed(const void *a, const void *b) {
    uint64_t x = ((const struct hws_primed_symbol *)a)->address, y = ((const struct hws_primed_symbol *)b)->address;
    return x < y ? -1 : x > y;
}

static const struct hws_primed_symbol *hws_primed(const hws_module *module, uint64_t address) {
    if (module->primed_count == 0) return NULL;
    struct hws_primed_symbol key = { .address = address };
    return bsearch(&key, module->primed, module->primed_count, sizeof key, hws_compare_primed);
}

// Per primed address while the pass runs: the choice so far among its global and its local
// holders (libdwfl looks at locals only when no global holds the address), how many each.
struct hws_prime_state {
    struct hws_sized_symbol global, local;
    uint32_t global_count, local_count;
    int global_sizeless_here;
};

// Fold steps a pass may take per symbol and address before it gives up (the lookups then build
// the sorted table): symbols that each hold many of the addresses are a crafted file's.
#define HWS_PRIME_STEPS_PER_ITEM 64

// The first of the sorted `addresses` at or above `value`.
static size_t hws_lower_bound(const struct hws_primed_symbol *addresses, size_t count, uint64_t value) {
    size_t low = 0, high = count;
    while (low < high) {
        size_t middle = low + (high - low) / 2;
        if (addresses[middle].address < value) low = middle + 1; else high = middle;
    }
    return low;
}

// Folds `symbol` into the choice of every primed address it holds (in table order, as
// hws_choose folds holders): 1, 0 when the pass is over its bound, -1 when the symbol makes the
// table unusable (as hws_build_symbol_table).
static int hws_prime_fold(hws_module *module, struct hws_prime_state *states, const struct hws_choosable *symbol,
                          size_t *steps, size_t budget) {
    size_t count = module->primed_count, at = hws_lower_bound(module->primed, count, symbol->value);
    if (symbol->size == 0) {
        if (symbol->global && at < count && module->primed[at].address == symbol->value) states[at].global_sizeless_here = 1;
        return 1;
    }
    if (symbol->value + symbol->size < symbol->value) return -1;
    struct hws_sized_symbol candidate = { .value = symbol->value, .end = symbol->value + symbol->size,
                                          .index = symbol->index, .binding_value = symbol->binding_value };
    for (; at < count && module->primed[at].address < candidate.end; at++) {
        if (++*steps > budget) return 0;
        struct hws_prime_state *state = &states[at];
        struct hws_sized_symbol *closest = symbol->global ? &state->global : &state->local;
        uint32_t *holders = symbol->global ? &state->global_count : &state->local_count;
        if (hws_prefer(*holders == 0 ? NULL : closest, &candidate)) *closest = candidate;
        (*holders)++;
    }
    return 1;
}

// Whether a symbol at `value` of `size` bytes can matter to the primed addresses: it holds one,
// or (without a size) sits at one, or its end wraps (which makes the table unusable).
static int hws_prime_may_matter(const hws_module *module, uint64_t value, uint64_t size) {
    if (value + size < value) return 1;
    size_t at = hws_lower_bound(module->primed, module->primed_count, value);
    return at < module->primed_count && (size == 0 ? module->primed[at].address == value : module->primed[at].address < value + size);
}

// Symbols passed between two drops of their pages (1.5 MiB of a 64-bit table).
#define HWS_SYMBOLS_PER_DROP 65536

// One pass over the table: 1 done, 0 given up (over its bound: the lookups build the sorted
// table), -1 the table is unusable (every lookup goes to libdwfl). A raw table is read entry
// by entry, and only the entries that matter are looked at further (their names are not read).
static int hws_prime_pass(hws_module *module, struct hws_prime_state *states) {
    struct hws_symbol_reader reader;
    if (hws_symbol_reader_start(module, &reader) != 0) return -1;
    size_t budget = HWS_PRIME_STEPS_PER_ITEM * (module->primed_count + (size_t)reader.count), steps = 0;
    struct hws_choosable symbol;
    // A big binary's table is tens of megabytes: the pages passed are let go of as the pass goes.
    GElf_Addr bias = 0;
    int mapped = reader.raw != NULL && hws_elf_is_droppable(dwfl_module_getelf(module->mod, &bias));
    for (;;) {
        if (reader.raw != NULL) {
            while (reader.next < reader.count
                   && !hws_prime_may_matter(module, reader.raw[reader.next].st_value, reader.raw[reader.next].st_size)) {
                reader.next++;
                if (mapped && reader.next % HWS_SYMBOLS_PER_DROP == 0)
                    hws_drop_pages(&reader.raw[reader.next - HWS_SYMBOLS_PER_DROP], HWS_SYMBOLS_PER_DROP * sizeof *reader.raw);
            }
        }
        if (!hws_symbol_reader_next(&reader, &symbol)) return 1;
        int folded = hws_prime_fold(module, states, &symbol, &steps, budget);
        if (folded != 1) return folded;
    }
}

int hws_module_prime_symbols(hws_module *module, const uint64_t *link_addresses, size_t count) {
    if (module == NULL || (count > 0 && link_addresses == NULL)) return -1;
    // The direct reader is told too, however the symbols are chosen (hws_direct_frames).
    uint64_t *expected = count > 0 ? malloc(count * sizeof *expected) : NULL;
    if (count > 0 && expected == NULL) return -1;
    if (count > 0) memcpy(expected, link_addresses, count * sizeof *expected);
    free(module->expected);
    module->expected = expected;
    module->expected_count = count;
    module->expected_given = 0;
    // Built (or unusable) already, or primed before: lookups need nothing more.
    if (module->symbols_state != 0 || module->primed != NULL || count == 0) return 0;
    struct hws_primed_symbol *primed = calloc(count, sizeof *primed);
    struct hws_prime_state *states = calloc(count, sizeof *states);
    if (primed == NULL || states == NULL) {
        free(primed);
        free(states);
        return -1;
    }
    for (size_t i = 0; i < count; i++) primed[i] = (struct hws_primed_symbol){ .address = link_addresses[i] + module->dwfl_bias };
    qsort(primed, count, sizeof *primed, hws_compare_primed);
    size_t unique = 0;
    for (size_t i = 0; i < count; i++)
        if (unique == 0 || primed[unique - 1].address != primed[i].address) primed[unique++] = primed[i];
    module->primed = primed;
    module->primed_count = unique;
    int passed = hws_prime_pass(module, states);
    if (passed == 1) {
        // hws_symbol_at's choice: a global holder, else (no global sizeless symbol there) a local
        // one, else libdwfl's; more holders than it looks at are libdwfl's too.
        for (size_t i = 0; i < unique; i++) {
            const struct hws_prime_state *state = &states[i];
            if (state->global_count > 0)
                primed[i].chosen = state->global_count <= HWS_MAX_HOLDERS ? (int32_t)state->global.index : -1;
            else if (!state->global_sizeless_here && state->local_count > 0 && state->local_count <= HWS_MAX_HOLDERS)
                primed[i].chosen = (int32_t)state->local.index;
            else
                primed[i].chosen = -1;
        }
    } else {
        free(primed);
        module->primed = NULL;
        module->primed_count = 0;
        if (passed < 0) module->symbols_state = -1;
    }
    free(states);
    return 0;
}

// The symbol libdwfl's dwfl_module_addrinfo gives for the dwfl address `address`, and the
// address's offset into it; NULL when none.
static const char *hws_symbol_at(hws_module *module, uint64_t address, GElf_Off *offset) {
    int chosen = -1;
    const struct hws_primed_symbol *primed = module->symbols_state == 0 ? hws_primed(module, address) : NULL;
    if (primed != NULL) {
        chosen = primed->chosen;
    } else {
        if (module->symbols_state == 0)
            module->symbols_state = hws_build_symbol_table(module) == 0 ? 1 : -1;
        if (module->symbols_state != 1) return hws_libdwfl_symbol(module, address, offset);
        const struct hws_sized_symbol *holders[HWS_MAX_HOLDERS];
        int count = hws_part_holders(&module->globals, address, holders, HWS_MAX_HOLDERS);
        if (count == 0 && !hws_has_global_sizeless_at(module, address))
            count = hws_part_holders(&module->locals, address, holders, HWS_MAX_HOLDERS);
        const struct hws_sized_symbol *holder = count > 0 ? hws_choose(holders, count) : NULL;
        if (holder != NULL) chosen = (int)holder->index;
    }
    GElf_Sym symbol;
    GElf_Addr value = 0;
    const char *name = chosen >= 0 ? dwfl_module_getsym_info(module->mod, chosen, &symbol, &value, NULL, NULL, NULL) : NULL;
    if (name == NULL) return hws_libdwfl_symbol(module, address, offset);
    if (primed != NULL) module->primed_answers++; else module->table_answers++;
    *offset = address - value;
    return name;
}

uint32_t hws_module_primed_answers(const hws_module *module) { return module ? module->primed_answers : 0; }

uint32_t hws_module_symbol_table_answers(const hws_module *module) { return module ? module->table_answers : 0; }

uint32_t hws_module_direct_answers(const hws_module *module) { return module ? module->direct_answers : 0; }

uint32_t hws_module_units_over_bounds(const hws_module *module) { return module ? hwsr_module_units_over_bounds(module->direct) : 0; }

void hws_module_set_unit_row_bound(hws_module *module, size_t rows) {
    if (module != NULL) module->unit_row_bound = rows;
}

const char *hws_module_symbol(hws_module *module, uint64_t link_address, uint64_t *offset, int through_libdwfl) {
    if (module == NULL || offset == NULL) return NULL;
    Dwarf_Addr address = link_address + module->dwfl_bias;
    GElf_Off found = 0;
    const char *name = through_libdwfl ? hws_libdwfl_symbol(module, address, &found) : hws_symbol_at(module, address, &found);
    *offset = name ? found : 0;
    return name;
}

int hws_module_symbolicate(hws_module *module, uint64_t link_address, hws_frame *frames, int capacity) {
    return hws_module_symbolicate_scopes(module, link_address, frames, capacity, HWS_DIRECTLY_OR_INDEX);
}

// The DWARF part of a lookup read straight from the file (hw_unit_reader.h), where libdwfl has
// no .debug_aranges entry to find the unit and line by: the frames, with the line in `*file`, `*line`
// and `*column`; -1 to ask libdw.
static int hws_direct_frames(hws_module *module, Dwarf_Addr address, hws_frame *frames, int capacity,
                             const char **file, int *line, int *column) {
    Dwarf_Addr bias = 0;
    Dwarf *dwarf = dwfl_module_getdwarf(module->mod, &bias);  // libdwfl keeps it: a lookup, not a read
    if (module->direct_state == 0) {
        module->direct = hwsr_module_make(dwarf);
        if (module->unit_row_bound > 0) hwsr_module_set_row_bound(module->direct, module->unit_row_bound);
        module->direct_state = module->direct != NULL ? 1 : -1;
    }
    if (module->direct_state != 1) return -1;
    if (!module->expected_given) {
        // As DWARF addresses: what a unit whose line table is not kept reads in one run for them all.
        for (size_t i = 0; i < module->expected_count; i++) module->expected[i] += module->dwfl_bias - bias;
        hwsr_module_expect(module->direct, module->expected, module->expected_count);
        module->expected_given = 1;
    }
    // A unit .debug_aranges names (C beside Swift) is found, and its line read, by libdwfl: libdw's.
    Dwarf_Addr unit_bias = 0;
    if (hwsr_module_has_aranges(module->direct) && dwfl_module_addrdie(module->mod, address, &unit_bias) != NULL) return -1;
    Dwarf_Addr pc = address - bias;
    const struct hws_cu_range *range = hws_unit_range_at(module, dwarf, pc);
    // In no unit: no line, no scopes (libdw finds none either: no aranges, no range).
    int count = range == NULL ? (*file = NULL, *line = 0, *column = 0, 0)
        : hwsr_symbolicate(module->direct, range->cu_offset, pc, frames, capacity, file, line, column);
    if (count >= 0) module->direct_answers++;
    return count;
}

// The DWARF part of a lookup through libdw: the line from libdwfl (through aranges) or the
// unit's line table, the inline chain from the unit's function index over libdw's DIEs, or from
// libdw's own dwarf_getscopes for HWS_THROUGH_LIBDW.
static int hws_libdw_frames(hws_module *module, Dwarf_Addr address, hws_frame *frames, int capacity, int way,
                            const char **file, int *line, int *column) {
    Dwarf_Die cudie;
    Dwarf_Addr cu_bias = 0;
    int has_cu = hws_find_cu(module, address, &cudie, &cu_bias);
    *file = NULL, *line = 0, *column = 0;
    Dwfl_Line *line_info = dwfl_module_getsrc(module->mod, address);
    if (line_info != NULL) {
        *file = dwfl_lineinfo(line_info, NULL, line, column, NULL, NULL);
    } else if (has_cu) {
        Dwarf_Line *dwarf_line = dwarf_getsrc_die(&cudie, address - cu_bias);
        if (dwarf_line != NULL) {
            *file = dwarf_linesrc(dwarf_line, NULL, NULL);
            dwarf_lineno(dwarf_line, line);
            dwarf_linecol(dwarf_line, column);
        }
    }
    return !has_cu ? 0
        : way == HWS_THROUGH_LIBDW ? hws_inline_chain_libdw(&cudie, cu_bias, address, *file, *line, *column, frames, capacity)
        : hws_inline_chain(module, &cudie, cu_bias, address, *file, *line, *column, frames, capacity);
}

int hws_module_symbolicate_scopes(hws_module *module, uint64_t link_address, hws_frame *frames, int capacity, int way) {
    if (module == NULL || frames == NULL || capacity <= 0) return 0;
    Dwarf_Addr address = link_address + module->dwfl_bias;

    GElf_Off symbol_offset = 0;
    const char *symbol_name = hws_symbol_at(module, address, &symbol_offset);

    const char *file = NULL;
    int line = 0, column = 0;
    int count = way == HWS_DIRECTLY_OR_INDEX ? hws_direct_frames(module, address, frames, capacity, &file, &line, &column) : -1;
    if (count < 0) count = hws_libdw_frames(module, address, frames, capacity, way, &file, &line, &column);
    if (count == 0) {
        if (symbol_name == NULL && file == NULL) return 0;
        memset(&frames[0], 0, sizeof frames[0]);
        frames[0].file = file;
        frames[0].line = line;
        frames[0].column = column;
        count = 1;
    }
    hws_frame *outermost = &frames[count - 1];
    if (symbol_name != NULL) {
        if (outermost->function == NULL) outermost->function = symbol_name;
        outermost->function_offset = symbol_offset;
        outermost->has_function_offset = 1;
    }
    return count;
}

// libstdc++ is in every Swift process on Linux; weak so this shim never requires it.
extern char *__cxa_demangle(const char *mangled, char *buffer, size_t *length, int *status)
    __attribute__((weak));

char *hws_cxx_demangle(const char *name) {
    if (name == NULL || __cxa_demangle == NULL) return NULL;
    int status = 0;
    char *result = __cxa_demangle(name, NULL, NULL, &status);
    if (status != 0) {
        free(result);
        return NULL;
    }
    return result;
}

// MARK: - Whole-module walks for the symbol index

int hws_module_each_symbol(hws_module *module, hws_symbol_visitor visitor, void *context) {
    if (module == NULL || visitor == NULL) return -1;
    int count = dwfl_module_getsymtab(module->mod);
    if (count < 0) return -1;
    for (int i = 1; i < count; i++) {
        GElf_Sym symbol;
        GElf_Addr address = 0;
        GElf_Word section = 0;
        const char *name = hws_choosable_symbol(module, i, &symbol, &address, &section);
        if (name == NULL) continue;
        hws_symbol_entry entry = {
            .start = address - module->dwfl_bias,
            .size = symbol.st_size,
            .name = name,
            .binding = GELF_ST_BIND(symbol.st_info),
            .type = GELF_ST_TYPE(symbol.st_info),
            .section = section,
        };
        if (visitor(context, &entry) != 0) return 1;
    }
    return 0;
}

int hws_module_each_section(hws_module *module, hws_section_visitor visitor, void *context) {
    if (module == NULL || visitor == NULL) return -1;
    GElf_Addr bias = 0;
    Elf *elf = dwfl_module_getelf(module->mod, &bias);
    if (elf == NULL) return -1;
    Elf_Scn *section = NULL;
    while ((section = elf_nextscn(elf, section)) != NULL) {
        GElf_Shdr header;
        if (gelf_getshdr(section, &header) == NULL || (header.sh_flags & SHF_ALLOC) == 0 || header.sh_size == 0) continue;
        uint64_t start = header.sh_addr + bias - module->dwfl_bias;
        if (visitor(context, (uint32_t)elf_ndxscn(section), start, start + header.sh_size) != 0) return 1;
    }
    return 0;
}

int hws_module_each_line(hws_module *module, hws_line_visitor visitor, void *context) {
    if (module == NULL || visitor == NULL) return -1;
    Dwarf_Addr bias = 0;
    Dwarf *dwarf = dwfl_module_getdwarf(module->mod, &bias);
    if (dwarf == NULL) return 0;  // no DWARF: no lines
    Dwarf_Off next = 0;
    Dwarf_Die cudie;
    while (hws_next_unit(dwarf, &next, &cudie)) {
        Dwarf_Lines *lines = NULL;
        size_t count = 0;
        if (dwarf_getsrclines(&cudie, &lines, &count) == 0) {
            for (size_t i = 0; i < count; i++) {
                Dwarf_Line *row = dwarf_onesrcline(lines, i);
                Dwarf_Addr address = 0;
                bool end = false;
                if (row == NULL || dwarf_lineaddr(row, &address) != 0) continue;
                dwarf_lineendsequence(row, &end);
                hws_line_entry entry = { .address = address + bias - module->dwfl_bias, .end_sequence = end ? 1 : 0 };
                entry.file = dwarf_linesrc(row, NULL, NULL);
                dwarf_lineno(row, &entry.line);
                dwarf_linecol(row, &entry.column);
                if (visitor(context, &entry) != 0) return 1;
            }
            hws_line_entry unit_end = { .end_sequence = 2 };
            if (visitor(context, &unit_end) != 0) return 1;
        }
    }
    return 0;
}

// Depth-first over one unit's DIEs; `parent` is the nearest enclosing function scope's id.
struct hws_scope_walk {
    hws_scope_visitor visitor;
    void *context;
    Dwarf_Addr to_link;  // DWARF address + to_link = link-time address
    Dwarf_Files *files;
    uint64_t *ranges;
    size_t range_capacity;
    int stopped;
};

static void hws_walk_scopes(struct hws_scope_walk *walk, Dwarf_Die *die, uint64_t parent, int depth) {
    // Real DWARF nests a few dozen levels; a crafted file must not exhaust the stack.
    if (depth > 256) return;
    Dwarf_Die child;
    if (dwarf_child(die, &child) != 0) return;
    do {
        if (walk->stopped) return;
        int tag = dwarf_tag(&child);
        uint64_t enclosing = parent;
        if (hws_is_function_scope(tag)) {
            size_t range_count = 0;
            Dwarf_Addr base = 0, start = 0, end = 0;
            ptrdiff_t cursor = 0;
            while ((cursor = dwarf_ranges(&child, cursor, &base, &start, &end)) > 0) {
                if (end <= start) continue;
                if (range_count + 2 > walk->range_capacity) {
                    size_t grown = walk->range_capacity ? walk->range_capacity * 2 : 64;
                    uint64_t *bigger = realloc(walk->ranges, grown * sizeof *bigger);
                    if (bigger == NULL) break;
                    walk->ranges = bigger;
                    walk->range_capacity = grown;
                }
                walk->ranges[range_count++] = start + walk->to_link;
                walk->ranges[range_count++] = end + walk->to_link;
            }
            // Declarations and abstract instances have no code: they name no frame.
            if (range_count > 0) {
                hws_scope_entry entry = {
                    .id = dwarf_dieoffset(&child),
                    .parent = parent,
                    .function = hws_die_function_name(&child),
                    .inlined = tag == DW_TAG_inlined_subroutine,
                    .ranges = walk->ranges,
                    .range_count = range_count / 2,
                };
                if (entry.inlined) {
                    Dwarf_Attribute attr;
                    Dwarf_Word value;
                    if (walk->files != NULL && dwarf_formudata(dwarf_attr(&child, DW_AT_call_file, &attr), &value) == 0)
                        entry.call_file = dwarf_filesrc(walk->files, value, NULL, NULL);
                    if (dwarf_formudata(dwarf_attr(&child, DW_AT_call_line, &attr), &value) == 0) entry.call_line = (int32_t)value;
                    if (dwarf_formudata(dwarf_attr(&child, DW_AT_call_column, &attr), &value) == 0) entry.call_column = (int32_t)value;
                }
                if (walk->visitor(walk->context, &entry) != 0) {
                    walk->stopped = 1;
                    return;
                }
                enclosing = entry.id;
            }
        }
        hws_walk_scopes(walk, &child, enclosing, depth + 1);
    } while (dwarf_siblingof(&child, &child) == 0);
}

int hws_module_each_scope(hws_module *module, hws_scope_visitor visitor, void *context) {
    if (module == NULL || visitor == NULL) return -1;
    Dwarf_Addr bias = 0;
    Dwarf *dwarf = dwfl_module_getdwarf(module->mod, &bias);
    if (dwarf == NULL) return 0;
    struct hws_scope_walk walk = { .visitor = visitor, .context = context, .to_link = bias - module->dwfl_bias };
    Dwarf_Off next = 0;
    Dwarf_Die cudie;
    while (!walk.stopped && hws_next_unit(dwarf, &next, &cudie)) {
        if (dwarf_getsrcfiles(&cudie, &walk.files, NULL) != 0) walk.files = NULL;
        hws_walk_scopes(&walk, &cudie, UINT64_MAX, 0);
    }
    free(walk.ranges);
    return walk.stopped ? 1 : 0;
}
