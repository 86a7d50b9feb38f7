// Internal to CHangwatchSymbols: one compilation unit's line table, functions and inline scopes
// read straight from the section bytes (hw_unit_reader.c), for the units .debug_aranges does not
// name (all of Swift's and LLVM's output; in a file that mixes them with C, the Swift ones). Asking libdw for any DIE of a unit first builds libdw's state of
// every unit before it in the file (dwarf_offdie interns them in order, each re-reading its
// abbreviations): 20 M instructions of a 60 M cold report of the bench's binary, whose Swift
// modules each come with a few hundred units naming Clang modules.
#ifndef HW_UNIT_READER_H
#define HW_UNIT_READER_H

#include "hw_symbols.h"
#include "hw_unit_ranges.h"

#include <stdint.h>

struct hwsr_module;

// The reader of `dwarf`'s file, or NULL where hwsd_find_sections cannot read it.
struct hwsr_module *hwsr_module_make(Dwarf *dwarf);
void hwsr_module_free(struct hwsr_module *module);

// Whether the file has .debug_aranges: libdwfl finds the units they name, and their lines,
// through them, and those are libdw's to read (hws_direct_frames).
int hwsr_module_has_aranges(const struct hwsr_module *module);

// How many units had more functions than the reader keeps for one (their frames have no inline
// frames): hws_module_units_over_bounds.
uint32_t hwsr_module_units_over_bounds(const struct hwsr_module *module);

// The rows a unit's line table keeps before its lookups run the program again (HWSR_MAX_ROWS by
// default): hws_module_set_unit_row_bound, for tests.
void hwsr_module_set_row_bound(struct hwsr_module *module, size_t rows);

// The DWARF addresses a report will ask (a copy is kept): a unit whose line table is not kept
// finds all their rows in one run of its program.
void hwsr_module_expect(struct hwsr_module *module, const uint64_t *pcs, size_t count);

// What hws_module_symbolicate_scopes gives through libdw for DWARF address `pc` in the unit whose
// DIE is at `unit_die` (found by hw_unit_ranges.c's ranges): the line of `pc` (`*file`, `*line`,
// `*column`: NULL and 0 when none) and the inline chain, innermost first, each inlined frame at
// its call site in the next. Returns how many frames (0: no function scope holds `pc`), or -1
// when the unit holds something this reader does not follow exactly as libdw does (a reference
// into another unit, a form it does not read, a line table libdw would refuse, split DWARF…):
// the caller then asks libdw. Strings point into the file's bytes or into the module, which
// keeps them until hwsr_module_free.
int hwsr_symbolicate(struct hwsr_module *module, uint64_t unit_die, uint64_t pc, hws_frame *frames, int capacity,
                    const char **file, int *line, int *column);

#endif
