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
#include <stdlib.h>
#include <string.h>

#ifndef DW_FORM_GNU_addr_index
#define DW_FORM_GNU_addr_index 0x1f01
#define DW_FORM_GNU_str_index 0x1f02
#define DW_FORM_GNU_ref_alt 0x1f20
#define DW_FORM_GNU_strp_alt 0x1f21
#endif

struct hwu_bytes {
    const uint8_t *start;
    size_t size;
};

struct hwu_sections {
    struct hwu_bytes info, abbrev, ranges, rnglists, addr;
};

// A cursor over bytes; `failed` once a read went past the end (every later read gives 0).
struct hwu_reader {
    const uint8_t *at, *end;
    int failed;
};

static struct hwu_reader hwu_reader_at(struct hwu_bytes bytes, uint64_t offset) {
    if (bytes.start == NULL || offset > bytes.size) return (struct hwu_reader){ NULL, NULL, 1 };
    return (struct hwu_reader){ bytes.start + offset, bytes.start + bytes.size, 0 };
}

static int hwu_skip(struct hwu_reader *r, uint64_t count) {
    if (r->failed || count > (uint64_t)(r->end - r->at)) {
        r->failed = 1;
        return -1;
    }
    r->at += count;
    return 0;
}

static uint64_t hwu_fixed(struct hwu_reader *r, unsigned size) {
    const uint8_t *from = r->at;
    if (hwu_skip(r, size) != 0) return 0;
    // The file and this machine are little-endian (hwu_find_sections).
    uint64_t value = 0;
    if (size == 8 || size == 4 || size == 2 || size == 1) memcpy(&value, from, size);
    else for (unsigned i = 0; i < size; i++) value |= (uint64_t)from[i] << (8 * i);
    return value;
}

static uint64_t hwu_uleb(struct hwu_reader *r) {
    uint64_t value = 0;
    for (unsigned shift = 0; !r->failed; shift += 7) {
        if (r->at >= r->end || shift > 63) {
            r->failed = 1;
            return 0;
        }
        uint8_t byte = *r->at++;
        value |= (uint64_t)(byte & 0x7f) << shift;
        if ((byte & 0x80) == 0) return value;
    }
    return 0;
}

static void hwu_sleb_skip(struct hwu_reader *r) { (void)hwu_uleb(r); }

static int hwu_skip_string(struct hwu_reader *r) {
    if (r->failed) return -1;
    const uint8_t *nul = memchr(r->at, 0, (size_t)(r->end - r->at));
    if (nul == NULL) {
        r->failed = 1;
        return -1;
    }
    r->at = nul + 1;
    return 0;
}

// The unit being read: what its header says, and what its DIE gave so far.
struct hwu_unit {
    unsigned version, address_size, offset_size;
    int has_low, has_high, high_is_offset, has_ranges, ranges_is_index, has_addr_base, has_rnglists_base;
    int low_is_index;
    int split;  // names a split DWARF file (a .dwo, or a Clang module's .pcm for Swift)
    uint64_t low, high, ranges, addr_base, rnglists_base;
};

// Reads (or skips) one attribute value of `form`; the ones hwu_unit_ranges needs are kept in
// `unit`. -1 for a form not known here.
static int hwu_attribute(struct hwu_reader *r, struct hwu_unit *unit, uint64_t name, uint64_t form, int depth) {
    uint64_t value = 0;
    int index = 0;  // the value is an index into .debug_addr
    switch (form) {
    case DW_FORM_addr: value = hwu_fixed(r, unit->address_size); break;
    case DW_FORM_data1: case DW_FORM_ref1: case DW_FORM_flag: case DW_FORM_strx1: value = hwu_fixed(r, 1); break;
    case DW_FORM_addrx1: value = hwu_fixed(r, 1); index = 1; break;
    case DW_FORM_data2: case DW_FORM_ref2: case DW_FORM_strx2: value = hwu_fixed(r, 2); break;
    case DW_FORM_addrx2: value = hwu_fixed(r, 2); index = 1; break;
    case DW_FORM_strx3: value = hwu_fixed(r, 3); break;
    case DW_FORM_addrx3: value = hwu_fixed(r, 3); index = 1; break;
    case DW_FORM_data4: case DW_FORM_ref4: case DW_FORM_ref_sup4: case DW_FORM_strx4: value = hwu_fixed(r, 4); break;
    case DW_FORM_addrx4: value = hwu_fixed(r, 4); index = 1; break;
    case DW_FORM_data8: case DW_FORM_ref8: case DW_FORM_ref_sig8: case DW_FORM_ref_sup8: value = hwu_fixed(r, 8); break;
    case DW_FORM_data16: hwu_skip(r, 16); break;
    case DW_FORM_strp: case DW_FORM_sec_offset: case DW_FORM_line_strp: case DW_FORM_strp_sup:
    case DW_FORM_GNU_ref_alt: case DW_FORM_GNU_strp_alt:
        value = hwu_fixed(r, unit->offset_size);
        break;
    case DW_FORM_ref_addr: value = hwu_fixed(r, unit->version < 3 ? unit->address_size : unit->offset_size); break;
    case DW_FORM_udata: case DW_FORM_ref_udata: case DW_FORM_strx: case DW_FORM_loclistx: case DW_FORM_GNU_str_index:
        value = hwu_uleb(r);
        break;
    case DW_FORM_addrx: case DW_FORM_GNU_addr_index: value = hwu_uleb(r); index = 1; break;
    case DW_FORM_rnglistx: value = hwu_uleb(r); break;
    case DW_FORM_sdata: hwu_sleb_skip(r); break;
    case DW_FORM_string: hwu_skip_string(r); break;
    case DW_FORM_block1: hwu_skip(r, hwu_fixed(r, 1)); break;
    case DW_FORM_block2: hwu_skip(r, hwu_fixed(r, 2)); break;
    case DW_FORM_block4: hwu_skip(r, hwu_fixed(r, 4)); break;
    case DW_FORM_block: case DW_FORM_exprloc: hwu_skip(r, hwu_uleb(r)); break;
    case DW_FORM_flag_present: case DW_FORM_implicit_const: break;
    case DW_FORM_indirect: {
        uint64_t actual = hwu_uleb(r);
        if (depth > 4 || actual == DW_FORM_implicit_const) return -1;
        return hwu_attribute(r, unit, name, actual, depth + 1);
    }
    default: return -1;
    }
    if (r->failed) return -1;
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
static int hwu_address(const struct hwu_sections *s, const struct hwu_unit *unit, uint64_t index, uint64_t *address) {
    if (!unit->has_addr_base || unit->addr_base > s->addr.size || index > s->addr.size / unit->address_size) return -1;
    struct hwu_reader r = hwu_reader_at(s->addr, unit->addr_base + index * unit->address_size);
    *address = hwu_fixed(&r, unit->address_size);
    return r.failed ? -1 : 0;
}

// Appends one range; -1 without memory or past HWS_MAX_UNIT_RANGES (hw_symbols.h).
static int hwu_add(struct hws_cu_range **ranges, size_t *count, size_t *capacity, uint64_t low, uint64_t high, Dwarf_Off die) {
    if (high <= low) return 0;
    if (*count >= HWS_MAX_UNIT_RANGES || hws_make_room((void **)ranges, *count, capacity, sizeof **ranges) != 0) return -1;
    (*ranges)[(*count)++] = (struct hws_cu_range){ .low = low, .high = high, .cu_offset = die };
    return 0;
}

// A range list may not run on forever in a crafted file: it ends with its section anyway,
// and this bounds the entries of one unit's list.
#define HWU_MAX_LIST_ENTRIES (1u << 22)

// DWARF 2–4: .debug_ranges pairs after `base`, a base-address entry (begin all ones) moving it.
static int hwu_ranges_v4(const struct hwu_sections *s, const struct hwu_unit *unit, uint64_t base, Dwarf_Off die,
                         struct hws_cu_range **ranges, size_t *count, size_t *capacity) {
    struct hwu_reader r = hwu_reader_at(s->ranges, unit->ranges);
    uint64_t all_ones = unit->address_size == 8 ? UINT64_MAX : UINT32_MAX;
    for (unsigned entries = 0; entries < HWU_MAX_LIST_ENTRIES; entries++) {
        uint64_t begin = hwu_fixed(&r, unit->address_size), end = hwu_fixed(&r, unit->address_size);
        if (r.failed) return -1;
        if (begin == 0 && end == 0) return 0;
        if (begin == all_ones) {
            base = end;
            continue;
        }
        if (hwu_add(ranges, count, capacity, base + begin, base + end, die) != 0) return -1;
    }
    return -1;
}

// DWARF 5: the DW_RLE_* entries of .debug_rnglists.
static int hwu_ranges_v5(const struct hwu_sections *s, const struct hwu_unit *unit, uint64_t base, Dwarf_Off die,
                         struct hws_cu_range **ranges, size_t *count, size_t *capacity) {
    uint64_t offset = unit->ranges;
    if (unit->ranges_is_index) {
        // An index into the offsets after the unit's rnglists header, relative to them.
        if (!unit->has_rnglists_base || unit->rnglists_base > s->rnglists.size || offset > s->rnglists.size / unit->offset_size)
            return -1;
        struct hwu_reader table = hwu_reader_at(s->rnglists, unit->rnglists_base + offset * unit->offset_size);
        uint64_t relative = hwu_fixed(&table, unit->offset_size);
        if (table.failed || relative > s->rnglists.size) return -1;
        offset = unit->rnglists_base + relative;
    }
    struct hwu_reader r = hwu_reader_at(s->rnglists, offset);
    for (unsigned entries = 0; entries < HWU_MAX_LIST_ENTRIES; entries++) {
        uint8_t kind = (uint8_t)hwu_fixed(&r, 1);
        uint64_t a = 0, b = 0, start = 0, end = 0;
        if (r.failed) return -1;
        switch (kind) {
        case DW_RLE_end_of_list: return 0;
        case DW_RLE_base_addressx:
            if (hwu_address(s, unit, hwu_uleb(&r), &base) != 0) return -1;
            continue;
        case DW_RLE_startx_endx:
            a = hwu_uleb(&r), b = hwu_uleb(&r);
            if (hwu_address(s, unit, a, &start) != 0 || hwu_address(s, unit, b, &end) != 0) return -1;
            break;
        case DW_RLE_startx_length:
            a = hwu_uleb(&r), b = hwu_uleb(&r);
            if (hwu_address(s, unit, a, &start) != 0) return -1;
            end = start + b;
            break;
        case DW_RLE_offset_pair:
            a = hwu_uleb(&r), b = hwu_uleb(&r);
            start = base + a, end = base + b;
            break;
        case DW_RLE_base_address:
            base = hwu_fixed(&r, unit->address_size);
            continue;
        case DW_RLE_start_end:
            start = hwu_fixed(&r, unit->address_size), end = hwu_fixed(&r, unit->address_size);
            break;
        case DW_RLE_start_length:
            start = hwu_fixed(&r, unit->address_size), end = start + hwu_uleb(&r);
            break;
        default: return -1;
        }
        if (r.failed || hwu_add(ranges, count, capacity, start, end, die) != 0) return -1;
    }
    return -1;
}

// Where the attribute specifications of abbreviation `code` of the table at `table` start, for
// tables read before: the units of one object file share its table, their DIEs' codes far into
// it (Swift's references to Clang modules), and scanning to them for each unit cost more than
// the rest of this reader.
struct hwu_abbrev_cache {
    struct { Dwarf_Off table; uint64_t code; const uint8_t *specs; } entries[64];
    unsigned count, next;
};

// The attribute specifications of abbreviation `code` in the table at `table`; NULL if absent.
static const uint8_t *hwu_abbrev_specs(const struct hwu_sections *s, struct hwu_abbrev_cache *cache, Dwarf_Off table, uint64_t code) {
    for (unsigned i = 0; i < cache->count; i++)
        if (cache->entries[i].table == table && cache->entries[i].code == code) return cache->entries[i].specs;
    struct hwu_reader a = hwu_reader_at(s->abbrev, table);
    for (;;) {  // each entry: code, tag, children flag, (name, form[, implicit value]) pairs up to (0, 0)
        uint64_t entry = hwu_uleb(&a);
        if (a.failed || entry == 0) return NULL;
        (void)hwu_uleb(&a);
        (void)hwu_fixed(&a, 1);
        if (a.failed) return NULL;
        if (entry == code) break;
        for (;;) {
            uint64_t name = hwu_uleb(&a), form = hwu_uleb(&a);
            if (a.failed) return NULL;
            if (form == DW_FORM_implicit_const) hwu_sleb_skip(&a);
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
static int hwu_read_unit_die(const struct hwu_sections *s, struct hwu_abbrev_cache *cache, struct hwu_unit *unit, Dwarf_Off die,
                             Dwarf_Off abbrev_offset) {
    struct hwu_reader r = hwu_reader_at(s->info, die);
    uint64_t code = hwu_uleb(&r);
    if (r.failed || code == 0) return -1;
    const uint8_t *specs = hwu_abbrev_specs(s, cache, abbrev_offset, code);
    if (specs == NULL) return -1;
    struct hwu_reader a = { specs, s->abbrev.start + s->abbrev.size, 0 };
    for (;;) {
        uint64_t name = hwu_uleb(&a), form = hwu_uleb(&a);
        if (a.failed) return -1;
        if (name == 0 && form == 0) return 0;
        if (form == DW_FORM_implicit_const) hwu_sleb_skip(&a);
        if (hwu_attribute(&r, unit, name, form, 0) != 0) return -1;
    }
}

static int hwu_find_sections(Dwarf *dwarf, struct hwu_sections *s) {
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
        struct hwu_bytes *into = strcmp(name, ".debug_info") == 0 ? &s->info
            : strcmp(name, ".debug_abbrev") == 0 ? &s->abbrev
            : strcmp(name, ".debug_ranges") == 0 ? &s->ranges
            : strcmp(name, ".debug_rnglists") == 0 ? &s->rnglists
            : strcmp(name, ".debug_addr") == 0 ? &s->addr : NULL;
        if (strncmp(name, ".zdebug", 7) == 0) return -1;
        if (into == NULL) continue;
        if ((sh.sh_flags & SHF_COMPRESSED) != 0 || sh.sh_type == SHT_NOBITS) return -1;
        Elf_Data *data = elf_getdata(section, NULL);  // bytes (ELF_T_BYTE): the file's own
        if (data == NULL || data->d_buf == NULL) return -1;
        *into = (struct hwu_bytes){ data->d_buf, data->d_size };
    }
    return s->info.start != NULL && s->abbrev.start != NULL ? 0 : -1;
}

// A unit header of .debug_info (DWARF 2–5, 32- or 64-bit): where the next unit starts, where
// its DIE starts, and what reading it needs. -1 when the bytes at `offset` are not one.
struct hwu_header {
    uint64_t next, die, abbrev_offset;
    unsigned version, address_size, offset_size, type;
};

static int hwu_unit_header(struct hwu_bytes info, uint64_t offset, struct hwu_header *h) {
    struct hwu_reader r = hwu_reader_at(info, offset);
    uint64_t length = hwu_fixed(&r, 4);
    h->offset_size = 4;
    if (length == 0xffffffffu) {
        length = hwu_fixed(&r, 8);
        h->offset_size = 8;
    } else if (length >= 0xfffffff0u) {
        return -1;  // reserved
    }
    const uint8_t *body = r.at;
    if (r.failed || length > (uint64_t)(r.end - body)) return -1;
    h->next = (uint64_t)(body - info.start) + length;
    h->version = (unsigned)hwu_fixed(&r, 2);
    h->type = DW_UT_compile;
    if (h->version == 5) {
        h->type = (unsigned)hwu_fixed(&r, 1);
        h->address_size = (unsigned)hwu_fixed(&r, 1);
        h->abbrev_offset = hwu_fixed(&r, h->offset_size);
        if (h->type == DW_UT_skeleton || h->type == DW_UT_split_compile) hwu_skip(&r, 8);  // dwo id
        if (h->type == DW_UT_type || h->type == DW_UT_split_type) hwu_skip(&r, 8 + h->offset_size);
    } else {
        h->abbrev_offset = hwu_fixed(&r, h->offset_size);
        h->address_size = (unsigned)hwu_fixed(&r, 1);
    }
    h->die = (uint64_t)(r.at - info.start);
    return r.failed || h->die > h->next ? -1 : 0;
}

// Every unit's ranges from the sections' bytes (what hwu_unit_ranges does once it has them).
static int hwu_ranges_of_sections(const struct hwu_sections *s, struct hws_cu_range **ranges, size_t *count) {
    *ranges = NULL;
    *count = 0;
    size_t capacity = 0;
    struct hwu_abbrev_cache cache = { .count = 0 };
    struct hwu_header header;
    for (uint64_t offset = 0; offset < s->info.size; offset = header.next) {
        if (hwu_unit_header(s->info, offset, &header) != 0) goto fail;
        struct hwu_unit unit = { .version = header.version, .address_size = header.address_size, .offset_size = header.offset_size };
        if ((header.address_size != 4 && header.address_size != 8) || header.version < 2 || header.version > 5) goto fail;
        if (header.type == DW_UT_type) continue;  // no code
        if (header.type != DW_UT_compile && header.type != DW_UT_partial) goto fail;  // skeleton or split: not here
        if (hwu_read_unit_die(s, &cache, &unit, header.die, header.abbrev_offset) != 0) goto fail;
        // A skeleton of split DWARF: Swift's references to Clang modules have no code and give
        // nothing, as in libdw; one with code may have more in its split file: libdw's to read.
        if (unit.split && (unit.has_low || unit.has_ranges)) goto fail;
        uint64_t low = 0;
        if (unit.has_low && unit.low_is_index) {
            if (hwu_address(s, &unit, unit.low, &low) != 0) goto fail;
        } else if (unit.has_low) {
            low = unit.low;
        }
        // As dwarf_ranges: low and high make the one range, before any DW_AT_ranges.
        if (unit.has_low && unit.has_high) {
            uint64_t high = unit.high_is_offset ? low + unit.high : unit.high;
            if (hwu_add(ranges, count, &capacity, low, high, header.die) != 0) goto fail;
        } else if (unit.has_ranges) {
            // The list's base: the unit's low_pc (0 without one).
            int read = header.version >= 5 ? hwu_ranges_v5(s, &unit, low, header.die, ranges, count, &capacity)
                                           : hwu_ranges_v4(s, &unit, low, header.die, ranges, count, &capacity);
            if (read != 0) goto fail;
        }
    }
    return 0;
fail:
    free(*ranges);
    *ranges = NULL;
    *count = 0;
    return -1;
}

int hwu_unit_ranges(Dwarf *dwarf, struct hws_cu_range **ranges, size_t *count) {
    *ranges = NULL;
    *count = 0;
    struct hwu_sections s;
    if (dwarf == NULL || hwu_find_sections(dwarf, &s) != 0) return -1;
    return hwu_ranges_of_sections(&s, ranges, count);
}

long hws_unit_ranges_packed(const uint8_t *bytes, size_t size) {
    // Four little-endian u32 sizes (info, abbrev, ranges, rnglists), those sections in turn,
    // and .debug_addr the rest.
    if (bytes == NULL || size < 16 || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__) return -1;
    struct hwu_bytes *parts[4];
    struct hwu_sections s;
    memset(&s, 0, sizeof s);
    parts[0] = &s.info, parts[1] = &s.abbrev, parts[2] = &s.ranges, parts[3] = &s.rnglists;
    size_t at = 16;
    for (int i = 0; i < 4; i++) {
        uint32_t length;
        memcpy(&length, bytes + 4 * i, 4);
        if (length > size - at) return -1;
        *parts[i] = (struct hwu_bytes){ bytes + at, length };
        at += length;
    }
    s.addr = (struct hwu_bytes){ bytes + at, size - at };
    if (s.info.size == 0 || s.abbrev.size == 0) return -1;
    struct hws_cu_range *ranges = NULL;
    size_t count = 0;
    int read = hwu_ranges_of_sections(&s, &ranges, &count);
    free(ranges);
    return read == 0 ? (long)count : -1;
}
