// The code ranges of every compilation unit, for finding the unit of an address in a module
// without .debug_aranges (Swift's and LLVM's output): libdw 0.188 finds units only through
// aranges, and asking it for each unit DIE's ranges builds its whole per-unit state first
// (dwarf_offdie: 4–5 ms for the 521 units of a release build of this package, most of a cold
// report). This reads just each unit's header and DIE: its abbreviation, its attributes up to
// DW_AT_low_pc, DW_AT_high_pc, DW_AT_ranges and the bases they need, and the range list (DWARF
// 2–5, 32- and 64-bit), from the sections' bytes alone. Everything is bounds-checked: the file
// is untrusted (`scripts/fuzz unit-ranges`). Anything it does not know makes it give up, and
// the caller asks libdw (hws_build_cu_ranges in hw_symbols.c); SymbolicatorTests compares the
// two over real modules.
#define _GNU_SOURCE
#include "hw_libdw.h"
#include "hw_unit_ranges.h"
#include "hw_symbols.h"

#include <dwarf.h>
#include <gelf.h>
#include <libelf.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

// Files smaller than this keep their pages (hws_is_file_mapping).
#define HWS_DROP_MINIMUM_BYTES (16u << 20)

// Units, or ranges, read between two hwsd_drop_section_pages: a unit header and its DIE are a page
// or two, a range 16 bytes of .debug_ranges; either bound stays within a few MiB.
#define HWSU_UNITS_PER_DROP 64
#define HWSU_RANGES_PER_DROP 65536

// Reads (or skips) one attribute value of `form`; the ones hwsu_unit_ranges needs are kept in
// `unit`. -1 for a form not known here.
static int hwsu_attribute(struct hwsd_reader *r, struct hwsu_unit *unit, uint64_t name, uint64_t form, int64_t implicit) {
    struct hwsd_value v;
    if (hwsd_form_value(r, unit->version, unit->address_size, unit->offset_size, form, implicit, &v) != 0) return -1;
    form = v.form;  // the actual one behind DW_FORM_indirect
    uint64_t value = v.value;
    int index = v.kind == HWSD_ADDRESS_INDEX;
    int constant = form == DW_FORM_data1 || form == DW_FORM_data2 || form == DW_FORM_data4 || form == DW_FORM_data8
        || form == DW_FORM_udata;
    switch (name) {
    case DW_AT_low_pc:
        if (form != DW_FORM_addr && !index) return -1;
        unit->has_low = 1, unit->low = value, unit->low_is_index = index;
        break;
    case DW_AT_high_pc:
        if (form != DW_FORM_addr && !constant) return -1;
        unit->has_high = 1, unit->high = value, unit->high_is_offset = constant;
        break;
    case DW_AT_ranges:
        if (form != DW_FORM_sec_offset && form != DW_FORM_rnglistx && form != DW_FORM_data4 && form != DW_FORM_data8) return -1;
        unit->has_ranges = 1, unit->ranges = value, unit->ranges_is_index = form == DW_FORM_rnglistx;
        break;
    case DW_AT_addr_base: case DW_AT_GNU_addr_base:
        unit->has_addr_base = 1, unit->addr_base = value;
        break;
    case DW_AT_rnglists_base:
        unit->has_rnglists_base = 1, unit->rnglists_base = value;
        break;
    case DW_AT_GNU_ranges_base: case DW_AT_GNU_dwo_name: case DW_AT_dwo_name:
        unit->split = 1;
        break;
    default: break;
    }
    return 0;
}

// Entry `index` of .debug_addr for the unit; -1 when out of bounds.
int hwsu_address(const struct hwsd_sections *s, const struct hwsu_unit *unit, uint64_t index, uint64_t *address) {
    if (!unit->has_addr_base || unit->addr_base > s->addr.size || index > s->addr.size / unit->address_size) return -1;
    struct hwsd_reader r = hwsd_reader_at(s->addr, unit->addr_base + index * unit->address_size);
    *address = hwsd_fixed(&r, unit->address_size);
    return r.failed ? -1 : 0;
}

// Appends one range; -1 without memory or past HWS_MAX_UNIT_RANGES (hw_symbols.h).
static int hwsu_add(struct hws_cu_range **ranges, size_t *count, size_t *capacity, uint64_t low, uint64_t high, Dwarf_Off die) {
    if (high <= low) return 0;
    if (*count >= HWS_MAX_UNIT_RANGES || hws_make_room((void **)ranges, *count, capacity, sizeof **ranges) != 0) return -1;
    (*ranges)[(*count)++] = (struct hws_cu_range){ .low = low, .high = high, .cu_offset = die };
    return 0;
}

// A range list may not run on forever in a crafted file: it ends with its section anyway,
// and this bounds the entries of one unit's list.
#define HWSU_MAX_LIST_ENTRIES (1u << 22)

// DWARF 2–4: .debug_ranges pairs after `base`, a base-address entry (begin all ones) moving it.
static int hwsu_ranges_v4(const struct hwsd_sections *s, const struct hwsu_unit *unit, uint64_t base, Dwarf_Off die,
                         struct hws_cu_range **ranges, size_t *count, size_t *capacity) {
    struct hwsd_reader r = hwsd_reader_at(s->ranges, unit->ranges);
    uint64_t all_ones = unit->address_size == 8 ? UINT64_MAX : UINT32_MAX;
    for (unsigned entries = 0; entries < HWSU_MAX_LIST_ENTRIES; entries++) {
        uint64_t begin = hwsd_fixed(&r, unit->address_size), end = hwsd_fixed(&r, unit->address_size);
        if (r.failed) return -1;
        if (begin == 0 && end == 0) return 0;
        if (begin == all_ones) {
            base = end;
            continue;
        }
        if (hwsu_add(ranges, count, capacity, base + begin, base + end, die) != 0) return -1;
    }
    return -1;
}

// DWARF 5: the DW_RLE_* entries of .debug_rnglists.
static int hwsu_ranges_v5(const struct hwsd_sections *s, const struct hwsu_unit *unit, uint64_t base, Dwarf_Off die,
                         struct hws_cu_range **ranges, size_t *count, size_t *capacity) {
    uint64_t offset = unit->ranges;
    if (unit->ranges_is_index) {
        // An index into the offsets after the unit's rnglists header, relative to them.
        if (!unit->has_rnglists_base || unit->rnglists_base > s->rnglists.size || offset > s->rnglists.size / unit->offset_size)
            return -1;
        struct hwsd_reader table = hwsd_reader_at(s->rnglists, unit->rnglists_base + offset * unit->offset_size);
        uint64_t relative = hwsd_fixed(&table, unit->offset_size);
        if (table.failed || relative > s->rnglists.size) return -1;
        offset = unit->rnglists_base + relative;
    }
    struct hwsd_reader r = hwsd_reader_at(s->rnglists, offset);
    for (unsigned entries = 0; entries < HWSU_MAX_LIST_ENTRIES; entries++) {
        uint8_t kind = (uint8_t)hwsd_fixed(&r, 1);
        uint64_t a = 0, b = 0, start = 0, end = 0;
        if (r.failed) return -1;
        switch (kind) {
        case DW_RLE_end_of_list: return 0;
        case DW_RLE_base_addressx:
            if (hwsu_address(s, unit, hwsd_uleb(&r), &base) != 0) return -1;
            continue;
        case DW_RLE_startx_endx:
            a = hwsd_uleb(&r), b = hwsd_uleb(&r);
            if (hwsu_address(s, unit, a, &start) != 0 || hwsu_address(s, unit, b, &end) != 0) return -1;
            break;
        case DW_RLE_startx_length:
            a = hwsd_uleb(&r), b = hwsd_uleb(&r);
            if (hwsu_address(s, unit, a, &start) != 0) return -1;
            end = start + b;
            break;
        case DW_RLE_offset_pair:
            a = hwsd_uleb(&r), b = hwsd_uleb(&r);
            start = base + a, end = base + b;
            break;
        case DW_RLE_base_address:
            base = hwsd_fixed(&r, unit->address_size);
            continue;
        case DW_RLE_start_end:
            start = hwsd_fixed(&r, unit->address_size), end = hwsd_fixed(&r, unit->address_size);
            break;
        case DW_RLE_start_length:
            start = hwsd_fixed(&r, unit->address_size), end = start + hwsd_uleb(&r);
            break;
        default: return -1;
        }
        if (r.failed || hwsu_add(ranges, count, capacity, start, end, die) != 0) return -1;
    }
    return -1;
}

int hwsu_die_ranges(const struct hwsd_sections *s, const struct hwsu_unit *unit, uint64_t base, Dwarf_Off die,
                   struct hws_cu_range **ranges, size_t *count, size_t *capacity) {
    return unit->version >= 5 ? hwsu_ranges_v5(s, unit, base, die, ranges, count, capacity)
                              : hwsu_ranges_v4(s, unit, base, die, ranges, count, capacity);
}

// Where the attribute specifications of abbreviation `code` of the table at `table` start, for
// tables read before: the units of one object file share its table, their DIEs' codes far into
// it (Swift's references to Clang modules), and scanning to them for each unit cost more than
// the rest of this reader.
struct hwsu_abbrev_cache {
    struct { Dwarf_Off table; uint64_t code; const uint8_t *specs; } entries[64];
    unsigned count, next;
};

// The attribute specifications of abbreviation `code` in the table at `table`; NULL if absent.
static const uint8_t *hwsu_abbrev_specs(const struct hwsd_sections *s, struct hwsu_abbrev_cache *cache, Dwarf_Off table, uint64_t code) {
    for (unsigned i = 0; i < cache->count; i++)
        if (cache->entries[i].table == table && cache->entries[i].code == code) return cache->entries[i].specs;
    struct hwsd_reader a = hwsd_reader_at(s->abbrev, table);
    for (;;) {  // each entry: code, tag, children flag, (name, form[, implicit value]) pairs up to (0, 0)
        uint64_t entry = hwsd_uleb(&a);
        if (a.failed || entry == 0) return NULL;
        (void)hwsd_uleb(&a);
        (void)hwsd_fixed(&a, 1);
        if (a.failed) return NULL;
        if (entry == code) break;
        for (;;) {
            uint64_t name = hwsd_uleb(&a), form = hwsd_uleb(&a);
            if (a.failed) return NULL;
            if (form == DW_FORM_implicit_const) (void)hwsd_sleb(&a);
            if (name == 0 && form == 0) break;
        }
    }
    unsigned slot = cache->count < 64 ? cache->count++ : cache->next++ % 64;
    cache->entries[slot].table = table;
    cache->entries[slot].code = code;
    cache->entries[slot].specs = a.at;
    return a.at;
}

// The attributes of the unit DIE at `die` (its abbreviation found in the unit's table).
static int hwsu_read_unit_die(const struct hwsd_sections *s, struct hwsu_abbrev_cache *cache, struct hwsu_unit *unit, Dwarf_Off die,
                             Dwarf_Off abbrev_offset) {
    struct hwsd_reader r = hwsd_reader_at(s->info, die);
    uint64_t code = hwsd_uleb(&r);
    if (r.failed || code == 0) return -1;
    const uint8_t *specs = hwsu_abbrev_specs(s, cache, abbrev_offset, code);
    if (specs == NULL) return -1;
    struct hwsd_reader a = { specs, s->abbrev.start + s->abbrev.size, 0 };
    for (;;) {
        uint64_t name = hwsd_uleb(&a), form = hwsd_uleb(&a);
        if (a.failed) return -1;
        if (name == 0 && form == 0) return 0;
        int64_t implicit = form == DW_FORM_implicit_const ? hwsd_sleb(&a) : 0;
        if (hwsu_attribute(&r, unit, name, form, implicit) != 0) return -1;
    }
}

int hwsd_find_sections(Dwarf *dwarf, struct hwsd_sections *s) {
    Elf *elf = dwarf_getelf(dwarf);
    size_t names = 0;
    GElf_Ehdr header;
    if (elf == NULL || gelf_getehdr(elf, &header) == NULL || header.e_ident[EI_DATA] != ELFDATA2LSB
        || header.e_type == ET_REL || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__ || elf_getshdrstrndx(elf, &names) != 0)
        return -1;
    memset(s, 0, sizeof *s);
    Elf_Scn *section = NULL;
    while ((section = elf_nextscn(elf, section)) != NULL) {
        GElf_Shdr sh;
        if (gelf_getshdr(section, &sh) == NULL) return -1;
        const char *name = elf_strptr(elf, names, sh.sh_name);
        if (name == NULL) continue;
        struct hwsd_bytes *into = strcmp(name, ".debug_info") == 0 ? &s->info
            : strcmp(name, ".debug_abbrev") == 0 ? &s->abbrev
            : strcmp(name, ".debug_ranges") == 0 ? &s->ranges
            : strcmp(name, ".debug_rnglists") == 0 ? &s->rnglists
            : strcmp(name, ".debug_addr") == 0 ? &s->addr
            : strcmp(name, ".debug_line") == 0 ? &s->line
            : strcmp(name, ".debug_str") == 0 ? &s->str
            : strcmp(name, ".debug_line_str") == 0 ? &s->line_str
            : strcmp(name, ".debug_str_offsets") == 0 ? &s->str_offsets
            : strcmp(name, ".debug_aranges") == 0 ? &s->aranges : NULL;
        if (strncmp(name, ".zdebug", 7) == 0) return -1;
        if (into == NULL) continue;
        if ((sh.sh_flags & SHF_COMPRESSED) != 0 || sh.sh_type == SHT_NOBITS) return -1;
        Elf_Data *data = elf_getdata(section, NULL);  // bytes (ELF_T_BYTE): the file's own
        if (data == NULL || data->d_buf == NULL) return -1;
        *into = (struct hwsd_bytes){ data->d_buf, data->d_size };
    }
    if (s->info.start == NULL || s->abbrev.start == NULL) return -1;
    size_t size = 0;
    const char *file = elf_rawfile(elf, &size);
    s->mapped = file != NULL && hws_is_file_mapping(file, size);
    return 0;
}

int hws_is_file_mapping(const void *start, size_t size) {
    // Small files are left alone: what they can add is small, and reading smaps is not free.
    if (size < HWS_DROP_MINIMUM_BYTES) return 0;
    FILE *maps = fopen("/proc/self/smaps", "re");
    if (maps == NULL) return 0;
    char line[512];
    int state = 0;  // 0 looking, 1 in the mapping that holds the range, 2 found safe, 3 not
    uintptr_t first = (uintptr_t)start;
    while (state < 2 && fgets(line, sizeof line, maps) != NULL) {
        unsigned long low = 0, high = 0, offset = 0, inode = 0, kilobytes = 0;
        unsigned major = 0, minor = 0;
        char permissions[8];
        if (sscanf(line, "%lx-%lx %7s %lx %x:%x %lu", &low, &high, permissions, &offset, &major, &minor, &inode) == 7) {
            if (state == 1) state = 3;  // the mapping ended without saying
            else if (low <= first && first + size <= high) state = inode != 0 ? 1 : 3;
        } else if (state == 1 && sscanf(line, "Anonymous: %lu kB", &kilobytes) == 1) {
            // A private mapping's page that was written is this process's own copy: letting go of
            // it would lose the write. libelf writes none for an executable or shared object.
            state = kilobytes == 0 ? 2 : 3;
        }
    }
    fclose(maps);
    return state == 2;
}

void hws_drop_pages(const void *start, size_t size) {
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), low = ((uintptr_t)start + page - 1) & ~(page - 1);
    uintptr_t high = ((uintptr_t)start + size) & ~(page - 1);
    if (low < high) madvise((void *)low, high - low, MADV_DONTNEED);
}

void hwsd_drop_section_pages(const struct hwsd_sections *s) {
    if (!s->mapped) return;
    const struct hwsd_bytes *all[] = { &s->info, &s->abbrev, &s->ranges, &s->rnglists, &s->addr, &s->line,
                                      &s->str, &s->line_str, &s->str_offsets, &s->aranges };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i]->start != NULL) hws_drop_pages(all[i]->start, all[i]->size);
}

int hwsu_unit_header(struct hwsd_bytes info, uint64_t offset, struct hwsu_header *h) {
    struct hwsd_reader r = hwsd_reader_at(info, offset);
    uint64_t length = hwsd_fixed(&r, 4);
    h->offset_size = 4;
    if (length == 0xffffffffu) {
        length = hwsd_fixed(&r, 8);
        h->offset_size = 8;
    } else if (length >= 0xfffffff0u) {
        return -1;  // reserved
    }
    const uint8_t *body = r.at;
    if (r.failed || length > (uint64_t)(r.end - body)) return -1;
    h->next = (uint64_t)(body - info.start) + length;
    h->version = (unsigned)hwsd_fixed(&r, 2);
    h->type = DW_UT_compile;
    if (h->version == 5) {
        h->type = (unsigned)hwsd_fixed(&r, 1);
        h->address_size = (unsigned)hwsd_fixed(&r, 1);
        h->abbrev_offset = hwsd_fixed(&r, h->offset_size);
        if (h->type == DW_UT_skeleton || h->type == DW_UT_split_compile) hwsd_skip(&r, 8);  // dwo id
        if (h->type == DW_UT_type || h->type == DW_UT_split_type) hwsd_skip(&r, 8 + h->offset_size);
    } else {
        h->abbrev_offset = hwsd_fixed(&r, h->offset_size);
        h->address_size = (unsigned)hwsd_fixed(&r, 1);
    }
    h->die = (uint64_t)(r.at - info.start);
    return r.failed || h->die > h->next ? -1 : 0;
}

// Every unit's ranges from the sections' bytes (what hwsu_unit_ranges does once it has them).
int hwsu_ranges_in_sections(const struct hwsd_sections *s, struct hws_cu_range **ranges, size_t *count) {
    *ranges = NULL;
    *count = 0;
    size_t capacity = 0;
    struct hwsu_abbrev_cache cache = { .count = 0 };
    struct hwsu_header header;
    uint64_t read = 0, dropped_at = 0;
    for (uint64_t offset = 0; offset < s->info.size; offset = header.next) {
        // A big module's units touch tens of megabytes of .debug_info and .debug_ranges (a Swift
        // unit lists every function's range): the pages read so far are let go of as the pass
        // goes, every few units or every few thousand ranges, so peak memory stays fixed.
        if (++read % HWSU_UNITS_PER_DROP == 0 || *count - dropped_at >= HWSU_RANGES_PER_DROP) {
            hwsd_drop_section_pages(s);
            dropped_at = *count;
        }
        if (hwsu_unit_header(s->info, offset, &header) != 0) goto fail;
        struct hwsu_unit unit = { .version = header.version, .address_size = header.address_size, .offset_size = header.offset_size };
        if ((header.address_size != 4 && header.address_size != 8) || header.version < 2 || header.version > 5) goto fail;
        if (header.type == DW_UT_type) continue;  // no code
        if (header.type != DW_UT_compile && header.type != DW_UT_partial) goto fail;  // skeleton or split: not here
        if (hwsu_read_unit_die(s, &cache, &unit, header.die, header.abbrev_offset) != 0) goto fail;
        // A skeleton of split DWARF: Swift's references to Clang modules have no code and give
        // nothing, as in libdw; one with code may have more in its split file: libdw's to read.
        if (unit.split && (unit.has_low || unit.has_ranges)) goto fail;
        uint64_t low = 0;
        if (unit.has_low && unit.low_is_index) {
            if (hwsu_address(s, &unit, unit.low, &low) != 0) goto fail;
        } else if (unit.has_low) {
            low = unit.low;
        }
        // As dwarf_ranges: low and high make the one range, before any DW_AT_ranges.
        if (unit.has_low && unit.has_high) {
            uint64_t high = unit.high_is_offset ? low + unit.high : unit.high;
            if (hwsu_add(ranges, count, &capacity, low, high, header.die) != 0) goto fail;
        } else if (unit.has_ranges) {
            // The list's base: the unit's low_pc (0 without one).
            if (hwsu_die_ranges(s, &unit, low, header.die, ranges, count, &capacity) != 0) goto fail;
        }
    }
    return 0;
fail:
    free(*ranges);
    *ranges = NULL;
    *count = 0;
    return -1;
}

int hwsu_unit_ranges(Dwarf *dwarf, struct hws_cu_range **ranges, size_t *count) {
    *ranges = NULL;
    *count = 0;
    struct hwsd_sections s;
    if (dwarf == NULL || hwsd_find_sections(dwarf, &s) != 0) return -1;
    return hwsu_ranges_in_sections(&s, ranges, count);
}

long hws_unit_ranges_packed(const uint8_t *bytes, size_t size) {
    struct hwsd_sections s;
    memset(&s, 0, sizeof s);
    struct hwsd_bytes *parts[4] = { &s.info, &s.abbrev, &s.ranges, &s.rnglists };
    if (hwsd_unpack(bytes, size, parts, 4, &s.addr) != 0 || s.info.size == 0 || s.abbrev.size == 0) return -1;
    struct hws_cu_range *ranges = NULL;
    size_t count = 0;
    int read = hwsu_ranges_in_sections(&s, &ranges, &count);
    free(ranges);
    return read == 0 ? (long)count : -1;
}

static int hws_compare_function_ranges(const void *a, const void *b) {
    const struct hws_function_range *left = a, *right = b;
    if (left->low != right->low) return left->low < right->low ? -1 : 1;
    return left->die < right->die ? -1 : left->die > right->die;
}

void hws_sort_function_ranges(struct hws_function_range *ranges, size_t count) {
    if (count > 1) qsort(ranges, count, sizeof *ranges, hws_compare_function_ranges);
    Dwarf_Addr reach = 0;
    for (size_t i = 0; i < count; i++) {
        if (ranges[i].high > reach) reach = ranges[i].high;
        ranges[i].reach = reach;
    }
}

const struct hws_function_range *hws_function_holder(const struct hws_function_range *ranges, size_t count, Dwarf_Addr pc) {
    size_t low = 0, high = count;  // the first range starting above pc
    while (low < high) {
        size_t middle = low + (high - low) / 2;
        if (ranges[middle].low <= pc) low = middle + 1; else high = middle;
    }
    const struct hws_function_range *holder = NULL;
    for (size_t i = low; i-- > 0 && ranges[i].reach > pc;) {
        if (ranges[i].high <= pc) continue;
        if (holder == NULL || ranges[i].die < holder->die) holder = &ranges[i];
    }
    return holder;
}
