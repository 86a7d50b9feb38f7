// Internal to CHangwatchSymbols: the code ranges of every compilation unit of a module, read
// from the unit DIEs' own attributes (hw_unit_ranges.c) instead of through libdw's per-unit
// state; and the growing of arrays both of its files use.
#ifndef HW_UNIT_RANGES_H
#define HW_UNIT_RANGES_H

#include "hw_dwarf_read.h"

#include <elfutils/libdw.h>
#include <stddef.h>
#include <stdlib.h>

// Room for one more element in `*array` (`count` of `element` bytes, `*capacity` allocated),
// doubling it when full; 0, or -1 without memory.
static inline int hws_make_room(void **array, size_t count, size_t *capacity, size_t element) {
    if (count < *capacity) return 0;
    size_t grown = *capacity ? *capacity * 2 : 256;
    void *larger = realloc(*array, grown * element);
    if (larger == NULL) return -1;
    *array = larger;
    *capacity = grown;
    return 0;
}

// Whether [start, start + size), of 16 MiB or more, lies in one mapping of a file none of whose
// pages this process wrote (letting go of a written page, or of anonymous memory, would throw
// its contents away): from /proc/self/smaps. 0 for a smaller range.
int hws_is_file_mapping(const void *start, size_t size);

// Lets go of the whole pages inside [start, start + size), which must be a read-only mapping of
// a file (hws_is_file_mapping): they leave this process's resident memory and stay in the
// kernel's page cache, and a later read maps them again. libelf maps a module's file whole, so
// every page a pass over its tables touched would otherwise count until the module is closed.
void hws_drop_pages(const void *start, size_t size);

// hws_drop_pages over every section of `s`, when they are mapped (`s->mapped`): what the long
// passes over a big module's sections call as they go, to keep within a fixed memory budget.
void hwsd_drop_section_pages(const struct hwsd_sections *s);

struct hws_cu_range {
    Dwarf_Addr low, high;  // DWARF addresses (before the dwfl bias)
    Dwarf_Off cu_offset;   // of the unit's DIE in .debug_info
};

// One code range of a function of a unit (both unit readers index a unit's functions so).
struct hws_function_range {
    Dwarf_Addr low, high, reach;  // reach: the highest end of this range and every one before it
    Dwarf_Off die;
};

// Sorts a unit's function ranges by start, then DIE, and sets each one's reach.
void hws_sort_function_ranges(struct hws_function_range *ranges, size_t count);

// Among sorted ranges, the one of the function first in DIE order that holds `pc`; NULL if none.
const struct hws_function_range *hws_function_holder(const struct hws_function_range *ranges, size_t count, Dwarf_Addr pc);

// Every range of every unit of `dwarf`'s .debug_info, in unit order, each unit's in its
// DW_AT_ranges order (empty ones left out): what dwarf_ranges gives for each unit DIE. 0 with
// `*ranges` (malloc'ed; the caller frees it) and `*count`; -1 when something in the file is not
// what this reader knows (a compressed section, split DWARF, a form it does not read, a value
// out of bounds): the caller then asks libdw unit by unit.
int hwsu_unit_ranges(Dwarf *dwarf, struct hws_cu_range **ranges, size_t *count);

// hwsu_unit_ranges over sections already found (in unit order, not sorted).
int hwsu_ranges_in_sections(const struct hwsd_sections *s, struct hws_cu_range **ranges, size_t *count);

// The sections of `dwarf`'s file the direct readers use, as bytes: 0, or -1 where they cannot
// read it (not little-endian, a relocatable object, a compressed section, no .debug_info).
int hwsd_find_sections(Dwarf *dwarf, struct hwsd_sections *s);

// A unit header of .debug_info (DWARF 2–5, 32- or 64-bit): where the next unit starts, where
// its DIE starts, and what reading it needs. -1 when the bytes at `offset` are not one.
struct hwsu_header {
    uint64_t next, die, abbrev_offset;
    unsigned version, address_size, offset_size, type;
};
int hwsu_unit_header(struct hwsd_bytes info, uint64_t offset, struct hwsu_header *h);

// A unit being read: what its header says, and what its DIE (or, for the range readers, any
// DIE) gave so far.
struct hwsu_unit {
    unsigned version, address_size, offset_size;
    int has_low, has_high, high_is_offset, has_ranges, ranges_is_index, has_addr_base, has_rnglists_base;
    int low_is_index;
    int split;  // names a split DWARF file (a .dwo, or a Clang module's .pcm for Swift)
    uint64_t low, high, ranges, addr_base, rnglists_base;
};

// Entry `index` of .debug_addr for the unit; -1 when out of bounds.
int hwsu_address(const struct hwsd_sections *s, const struct hwsu_unit *unit, uint64_t index, uint64_t *address);

// The ranges of the DW_AT_ranges `unit` holds (`unit->ranges`, `ranges_is_index`), from
// `base`, appended as `die`'s; 0, or -1 for a list this reader cannot follow.
int hwsu_die_ranges(const struct hwsd_sections *s, const struct hwsu_unit *unit, uint64_t base, Dwarf_Off die,
                   struct hws_cu_range **ranges, size_t *count, size_t *capacity);

#endif
