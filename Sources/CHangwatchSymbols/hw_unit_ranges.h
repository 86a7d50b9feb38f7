// Internal to CHangwatchSymbols: the code ranges of every compilation unit of a module, read
// from the unit DIEs' own attributes (hw_unit_ranges.c) instead of through libdw's per-unit
// state; and the growing of arrays both of its files use.
#ifndef HW_UNIT_RANGES_H
#define HW_UNIT_RANGES_H

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

struct hws_cu_range {
    Dwarf_Addr low, high;  // DWARF addresses (before the dwfl bias)
    Dwarf_Off cu_offset;   // of the unit's DIE in .debug_info
};

// Every range of every unit of `dwarf`'s .debug_info, in unit order, each unit's in its
// DW_AT_ranges order (empty ones left out): what dwarf_ranges gives for each unit DIE. 0 with
// `*ranges` (malloc'ed; the caller frees it) and `*count`; -1 when something in the file is not
// what this reader knows (a compressed section, split DWARF, a form it does not read, a value
// out of bounds): the caller then asks libdw unit by unit.
int hwu_unit_ranges(Dwarf *dwarf, struct hws_cu_range **ranges, size_t *count);

#endif
