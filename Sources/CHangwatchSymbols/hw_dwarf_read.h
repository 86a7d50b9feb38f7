// Internal to CHangwatchSymbols: bounds-checked reading of DWARF section bytes, shared by the
// readers that go around libdw's per-unit state (hw_unit_ranges.c: every unit's code ranges;
// hw_unit_reader.c: one unit's lines, functions and scopes). Every read is checked against the
// end of its section: the file is untrusted. Little-endian files on a little-endian machine
// only (hwsd_find_sections refuses others).
#ifndef HW_DWARF_READ_H
#define HW_DWARF_READ_H

#include <dwarf.h>
#include <stdint.h>
#include <string.h>

#ifndef DW_FORM_GNU_addr_index
#define DW_FORM_GNU_addr_index 0x1f01
#define DW_FORM_GNU_str_index 0x1f02
#define DW_FORM_GNU_ref_alt 0x1f20
#define DW_FORM_GNU_strp_alt 0x1f21
#endif

struct hwsd_bytes {
    const uint8_t *start;
    size_t size;
};

// The sections the direct readers use (absent ones are empty).
struct hwsd_sections {
    struct hwsd_bytes info, abbrev, ranges, rnglists, addr, line, str, line_str, str_offsets, aranges;
    // 1 when the bytes are a mapping of the file (hws_drop_pages may let go of them).
    int mapped;
};

// A cursor over bytes; `failed` once a read went past the end (every later read gives 0).
struct hwsd_reader {
    const uint8_t *at, *end;
    int failed;
};

static inline struct hwsd_reader hwsd_reader_at(struct hwsd_bytes bytes, uint64_t offset) {
    if (bytes.start == NULL || offset > bytes.size) return (struct hwsd_reader){ NULL, NULL, 1 };
    return (struct hwsd_reader){ bytes.start + offset, bytes.start + bytes.size, 0 };
}

static inline int hwsd_skip(struct hwsd_reader *r, uint64_t count) {
    if (r->failed || count > (uint64_t)(r->end - r->at)) {
        r->failed = 1;
        return -1;
    }
    r->at += count;
    return 0;
}

static inline uint64_t hwsd_fixed(struct hwsd_reader *r, unsigned size) {
    const uint8_t *from = r->at;
    if (hwsd_skip(r, size) != 0) return 0;
    uint64_t value = 0;
    if (size == 8 || size == 4 || size == 2 || size == 1) memcpy(&value, from, size);
    else for (unsigned i = 0; i < size; i++) value |= (uint64_t)from[i] << (8 * i);
    return value;
}

static inline uint64_t hwsd_uleb(struct hwsd_reader *r) {
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

static inline int64_t hwsd_sleb(struct hwsd_reader *r) {
    uint64_t value = 0;
    unsigned shift = 0;
    for (; !r->failed; shift += 7) {
        if (r->at >= r->end || shift > 63) {
            r->failed = 1;
            return 0;
        }
        uint8_t byte = *r->at++;
        value |= (uint64_t)(byte & 0x7f) << shift;
        if ((byte & 0x80) == 0) {
            if (shift + 7 < 64 && (byte & 0x40)) value |= ~(uint64_t)0 << (shift + 7);
            return (int64_t)value;
        }
    }
    return 0;
}

// The NUL-terminated string at the cursor (moved past it); NULL if it runs off the end.
static inline const char *hwsd_string(struct hwsd_reader *r) {
    if (r->failed) return NULL;
    const uint8_t *nul = memchr(r->at, 0, (size_t)(r->end - r->at));
    if (nul == NULL) {
        r->failed = 1;
        return NULL;
    }
    const char *string = (const char *)r->at;
    r->at = nul + 1;
    return string;
}

// The NUL-terminated string at `offset` of a string section; NULL if out of it.
static inline const char *hwsd_string_at(struct hwsd_bytes section, uint64_t offset) {
    struct hwsd_reader r = hwsd_reader_at(section, offset);
    return hwsd_string(&r);
}

// Sections packed into one buffer for the fuzzer: `count` little-endian u32 sizes, those
// sections in turn, and `rest` all the bytes after them. 0, or -1 when the sizes do not fit.
static inline int hwsd_unpack(const uint8_t *bytes, size_t size, struct hwsd_bytes **parts, int count, struct hwsd_bytes *rest) {
    size_t at = 4 * (size_t)count;
    if (bytes == NULL || size < at || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__) return -1;
    for (int i = 0; i < count; i++) {
        uint32_t length;
        memcpy(&length, bytes + 4 * i, 4);
        if (length > size - at) return -1;
        *parts[i] = (struct hwsd_bytes){ bytes + at, length };
        at += length;
    }
    *rest = (struct hwsd_bytes){ bytes + at, size - at };
    return 0;
}

// What an attribute's form holds (hwsd_form_value).
enum hwsd_class {
    HWSD_CONSTANT,      // data1/2/4/8, udata, implicit_const, flag, flag_present
    HWSD_SIGNED,        // sdata (value as two's complement)
    HWSD_ADDRESS,       // addr
    HWSD_ADDRESS_INDEX, // addrx*: an index into .debug_addr from the unit's base
    HWSD_REFERENCE,     // ref1/2/4/8/udata: an offset from the unit's start
    HWSD_REFERENCE_ADDR,// ref_addr: an offset into .debug_info
    HWSD_STRING,        // string: in the DIE (`string`)
    HWSD_STRP,          // strp: an offset into .debug_str
    HWSD_LINE_STRP,     // line_strp: an offset into .debug_line_str
    HWSD_STRX,          // strx*: an index into the unit's string offsets
    HWSD_SECTION_OFFSET,// sec_offset
    HWSD_RNGLISTX,      // rnglistx: an index into the unit's range list offsets
    HWSD_OTHER,         // read, and nothing these readers use (blocks, exprloc, data16, loclistx,
                       // supplementary and alternate files, type signatures, GNU split forms)
};

struct hwsd_value {
    enum hwsd_class kind;
    uint64_t value;
    const char *string;  // HWSD_STRING
    uint64_t form;
};

// Reads one attribute value of `form` (`implicit`: its DW_FORM_implicit_const value). 0, or -1
// for a form not known here or bytes that run out.
static inline int hwsd_form_value(struct hwsd_reader *r, unsigned version, unsigned address_size, unsigned offset_size,
                                 uint64_t form, int64_t implicit, struct hwsd_value *v) {
    for (int depth = 0; depth < 4; depth++) {
        v->kind = HWSD_CONSTANT;
        v->value = 0;
        v->string = NULL;
        v->form = form;
        switch (form) {
        case DW_FORM_addr: v->kind = HWSD_ADDRESS; v->value = hwsd_fixed(r, address_size); break;
        case DW_FORM_data1: case DW_FORM_flag: v->value = hwsd_fixed(r, 1); break;
        case DW_FORM_data2: v->value = hwsd_fixed(r, 2); break;
        case DW_FORM_data4: v->value = hwsd_fixed(r, 4); break;
        case DW_FORM_data8: v->value = hwsd_fixed(r, 8); break;
        case DW_FORM_udata: v->value = hwsd_uleb(r); break;
        case DW_FORM_sdata: v->kind = HWSD_SIGNED; v->value = (uint64_t)hwsd_sleb(r); break;
        case DW_FORM_implicit_const: v->value = (uint64_t)implicit; break;
        case DW_FORM_flag_present: v->value = 1; break;
        case DW_FORM_ref1: v->kind = HWSD_REFERENCE; v->value = hwsd_fixed(r, 1); break;
        case DW_FORM_ref2: v->kind = HWSD_REFERENCE; v->value = hwsd_fixed(r, 2); break;
        case DW_FORM_ref4: v->kind = HWSD_REFERENCE; v->value = hwsd_fixed(r, 4); break;
        case DW_FORM_ref8: v->kind = HWSD_REFERENCE; v->value = hwsd_fixed(r, 8); break;
        case DW_FORM_ref_udata: v->kind = HWSD_REFERENCE; v->value = hwsd_uleb(r); break;
        case DW_FORM_ref_addr:
            v->kind = HWSD_REFERENCE_ADDR;
            v->value = hwsd_fixed(r, version < 3 ? address_size : offset_size);
            break;
        case DW_FORM_addrx1: v->kind = HWSD_ADDRESS_INDEX; v->value = hwsd_fixed(r, 1); break;
        case DW_FORM_addrx2: v->kind = HWSD_ADDRESS_INDEX; v->value = hwsd_fixed(r, 2); break;
        case DW_FORM_addrx3: v->kind = HWSD_ADDRESS_INDEX; v->value = hwsd_fixed(r, 3); break;
        case DW_FORM_addrx4: v->kind = HWSD_ADDRESS_INDEX; v->value = hwsd_fixed(r, 4); break;
        case DW_FORM_addrx: case DW_FORM_GNU_addr_index: v->kind = HWSD_ADDRESS_INDEX; v->value = hwsd_uleb(r); break;
        case DW_FORM_string: v->kind = HWSD_STRING; v->string = hwsd_string(r); break;
        case DW_FORM_strp: v->kind = HWSD_STRP; v->value = hwsd_fixed(r, offset_size); break;
        case DW_FORM_line_strp: v->kind = HWSD_LINE_STRP; v->value = hwsd_fixed(r, offset_size); break;
        case DW_FORM_strx1: v->kind = HWSD_STRX; v->value = hwsd_fixed(r, 1); break;
        case DW_FORM_strx2: v->kind = HWSD_STRX; v->value = hwsd_fixed(r, 2); break;
        case DW_FORM_strx3: v->kind = HWSD_STRX; v->value = hwsd_fixed(r, 3); break;
        case DW_FORM_strx4: v->kind = HWSD_STRX; v->value = hwsd_fixed(r, 4); break;
        case DW_FORM_strx: v->kind = HWSD_STRX; v->value = hwsd_uleb(r); break;
        case DW_FORM_sec_offset: v->kind = HWSD_SECTION_OFFSET; v->value = hwsd_fixed(r, offset_size); break;
        case DW_FORM_rnglistx: v->kind = HWSD_RNGLISTX; v->value = hwsd_uleb(r); break;
        // Read, not used here.
        case DW_FORM_ref_sig8: case DW_FORM_ref_sup8: v->kind = HWSD_OTHER; hwsd_skip(r, 8); break;
        case DW_FORM_ref_sup4: v->kind = HWSD_OTHER; hwsd_skip(r, 4); break;
        case DW_FORM_strp_sup: case DW_FORM_GNU_ref_alt: case DW_FORM_GNU_strp_alt: v->kind = HWSD_OTHER; hwsd_skip(r, offset_size); break;
        case DW_FORM_loclistx: case DW_FORM_GNU_str_index: v->kind = HWSD_OTHER; (void)hwsd_uleb(r); break;
        case DW_FORM_data16: v->kind = HWSD_OTHER; hwsd_skip(r, 16); break;
        case DW_FORM_block1: v->kind = HWSD_OTHER; hwsd_skip(r, hwsd_fixed(r, 1)); break;
        case DW_FORM_block2: v->kind = HWSD_OTHER; hwsd_skip(r, hwsd_fixed(r, 2)); break;
        case DW_FORM_block4: v->kind = HWSD_OTHER; hwsd_skip(r, hwsd_fixed(r, 4)); break;
        case DW_FORM_block: case DW_FORM_exprloc: v->kind = HWSD_OTHER; hwsd_skip(r, hwsd_uleb(r)); break;
        case DW_FORM_indirect:
            form = hwsd_uleb(r);
            if (r->failed || form == DW_FORM_implicit_const) return -1;
            continue;
        default: return -1;
        }
        return r->failed ? -1 : 0;
    }
    return -1;
}

// Whether a constant-class value (what dwarf_formudata reads for a line or file number).
static inline int hwsd_is_unsigned_constant(const struct hwsd_value *v) {
    return v->kind == HWSD_CONSTANT && v->form != DW_FORM_flag && v->form != DW_FORM_flag_present;
}

#endif
