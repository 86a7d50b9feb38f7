// See hw_unit_reader.h. A unit is read once, on its first lookup: its DIE's attributes, its
// abbreviation table (shared by the units of one object file: read once per table), its line
// program decoded as libdw's read_srclines decodes it (rows sorted by address, an end of
// sequence before a row at the same address, else program order; the last row marked as an
// end), and its functions indexed as hws_unit_functions (hw_symbols.c) indexes them through
// libdw. A lookup then makes libdw's choices: the row dwarf_getsrc_die picks, the scope path
// hws_scope_path walks (the first function in DIE order holding the address, then at each
// level the first child holding it, as dwarf_haspc says), and the names and call sites
// hws_frames_from_scopes reads (dwarf_attr_integrate through DW_AT_abstract_origin, then
// DW_AT_specification). Wherever libdw could answer differently — a reference into another
// unit, a form or line opcode not read here, a value libdw would refuse — the unit (or the
// lookup) is given up and the caller asks libdw. Every read is bounded (hw_dwarf_read.h) and
// every walk is bounded by its unit's bytes; SymbolicatorTests compare both ways over whole
// modules, `scripts/fuzz unit-reader` feeds it crafted units.
#define _GNU_SOURCE
#include "hw_libdw.h"
#include "hw_unit_reader.h"

#include <stdlib.h>
#include <string.h>

// Bounds on what one unit may make this reader hold (a crafted file's sizes are not trusted).
#define HWSR_MAX_ABBREV_CODE 65536
#define HWSR_MAX_ROWS (1u << 19)   // 16 MiB of rows kept; past it a lookup runs the program again
#define HWSR_MAX_FUNCTIONS (1u << 19)  // 16 MiB of one unit's function ranges; past it no inline frames
#define HWSR_MAX_FILES (1u << 20)
#define HWSR_MAX_DEPTH 256     // hws_collect_functions' bound
#define HWSR_MAX_CHAIN 16      // dwarf_attr_integrate's
#define HWSR_MAX_SCOPES 64     // hws_scope_path's
#define HWSR_MAX_UNITS 4096    // units kept read per module (more: the oldest is dropped)
#define HWSR_STEPS_PER_DROP (1u << 18)  // DIEs or line opcodes read between two drops of their pages
#define HWSR_HEADERS_PER_DROP 256       // unit headers (a page each) walked between two drops
#define HWSR_KEPT_BYTES (16u << 20)     // rows and ranges of units kept read, past which they are let go of

struct hwsr_abbrev {
    uint64_t tag;
    int children;
    const uint8_t *specs;  // (name, form[, implicit]) pairs up to (0, 0); NULL: no such code
};

struct hwsr_table {
    uint64_t offset;
    struct hwsr_abbrev *by_code;
    size_t count;  // codes 0 … count - 1
};

struct hwsr_row {
    uint64_t address, sequence;
    uint32_t file;
    int32_t line;
    uint32_t column;
    int end;
};

struct hwsr_line_header {
    unsigned version, offset_size, min_length, max_ops, opcode_base;
    int default_is_stmt, line_base, line_range;
    const uint8_t *opcode_lengths;  // [1 … opcode_base - 1]
    uint64_t files_end, program_end;
};

struct hwsr_unit {
    uint64_t start, die, end;
    struct hwsu_unit header;  // version, sizes, bases for ranges and .debug_addr
    uint64_t base;           // the unit's base address (DW_AT_low_pc, else 0)
    int has_str_offsets_base, has_stmt_list, split;
    uint64_t str_offsets_base, stmt_list;
    const char *comp_dir;
    const struct hwsr_table *abbrevs;
    int state;  // 1 read, -1 given up
    struct hwsr_row *rows;
    size_t row_count;
    // Past HWSR_MAX_ROWS rows the table is not kept: a lookup runs the unit's line program again
    // and keeps only the rows of the addresses asked (hwsr_stream_row): its own and those the
    // report named ahead (hwsr_module_expect), so that one run answers them all.
    int lines_streamed;
    size_t max_rows;  // HWSR_MAX_ROWS, or a test's bound (hws_module_set_unit_row_bound)
    struct hwsr_line_header header_of_lines;
    uint64_t stream_sequence;
    uint64_t *stream_pcs;         // the addresses of the last run, ascending
    struct hwsr_row *stream_best;  // per address: the last row at or below it, in the table's order
    unsigned char *stream_has;
    size_t stream_count;
    struct hwsr_row last;  // the table's last row, in its order
    int has_last;
    char **files;  // composed names (NULL entries: none); malloc'ed
    size_t file_count;
    struct hws_function_range *functions;  // hws_sort_function_ranges' order
    size_t function_count;
};

struct hwsr_module {
    struct hwsd_sections s;
    struct hwsr_table **tables;  // each its own allocation: units point at them
    size_t table_count, table_capacity;
    struct hwsr_unit *units;
    size_t unit_count, unit_capacity;
    struct hws_cu_range *scratch;  // one DIE's ranges, reused
    size_t scratch_capacity;
    size_t kept_bytes;  // rows and function ranges of the units read (HWSR_KEPT_BYTES)
    uint32_t units_over_bounds;  // units whose functions were past HWSR_MAX_FUNCTIONS
    size_t max_rows;             // rows a unit's table keeps (HWSR_MAX_ROWS unless a test set it)
    uint64_t *expected;          // the addresses a report will ask (hwsr_module_expect)
    size_t expected_count;
};

// ---- abbreviations -----------------------------------------------------------------------------

static const struct hwsr_table *hwsr_table(struct hwsr_module *m, uint64_t offset) {
    for (size_t i = 0; i < m->table_count; i++)
        if (m->tables[i]->offset == offset) return m->tables[i];
    struct hwsr_table table = { .offset = offset };
    size_t capacity = 0;
    struct hwsd_reader a = hwsd_reader_at(m->s.abbrev, offset);
    for (;;) {
        uint64_t code = hwsd_uleb(&a);
        if (a.failed) goto fail;
        if (code == 0) break;
        uint64_t tag = hwsd_uleb(&a);
        int children = (int)hwsd_fixed(&a, 1);
        const uint8_t *specs = a.at;
        for (;;) {
            uint64_t name = hwsd_uleb(&a), form = hwsd_uleb(&a);
            if (form == DW_FORM_implicit_const) (void)hwsd_sleb(&a);
            if (a.failed) goto fail;
            if (name == 0 && form == 0) break;
        }
        if (code >= HWSR_MAX_ABBREV_CODE) goto fail;
        if (code >= table.count) {
            size_t wanted = (size_t)code + 1;
            if (wanted > capacity) {
                size_t grown = capacity ? capacity : 64;
                while (grown < wanted) grown *= 2;
                struct hwsr_abbrev *larger = realloc(table.by_code, grown * sizeof *larger);
                if (larger == NULL) goto fail;
                memset(larger + capacity, 0, (grown - capacity) * sizeof *larger);
                table.by_code = larger;
                capacity = grown;
            }
            table.count = wanted;
        }
        // The first entry of a code counts, as libdw's lookup finds it first.
        if (table.by_code[code].specs == NULL) table.by_code[code] = (struct hwsr_abbrev){ tag, children == DW_CHILDREN_yes, specs };
    }
    struct hwsr_table *kept = malloc(sizeof *kept);
    if (kept == NULL || hws_make_room((void **)&m->tables, m->table_count, &m->table_capacity, sizeof *m->tables) != 0) {
        free(kept);
        goto fail;
    }
    *kept = table;
    m->tables[m->table_count++] = kept;
    return kept;
fail:
    free(table.by_code);
    return NULL;
}

// ---- DIEs --------------------------------------------------------------------------------------

// One DIE: what the lookups use of it. A value's `form` is 0 when the DIE does not have it.
struct hwsr_die {
    uint64_t offset, next, sibling;  // next: its first child, else what follows it
    uint64_t tag;                    // 0: a null entry (the end of its siblings)
    int children;
    struct hwsd_value low, high, ranges, linkage_name, mips_linkage_name, name, origin, specification;
    struct hwsd_value call_file, call_line, call_column;
};

static void hwsr_keep(struct hwsd_value *slot, const struct hwsd_value *value) {
    if (slot->form == 0) *slot = *value;  // dwarf_attr gives the first
}

// The DIE at `offset` of `unit`: its abbreviation (NULL for a null entry) and each attribute's
// value handed to `visit`, in order; where the DIE ends in `*next`. 0, or -1 when it cannot be
// read or `visit` refuses a value.
typedef int (*hwsr_visitor)(void *context, const struct hwsr_unit *unit, uint64_t name, const struct hwsd_value *value);

static int hwsr_attributes(const struct hwsr_module *m, const struct hwsr_unit *unit, uint64_t offset,
                          const struct hwsr_abbrev **abbrev, hwsr_visitor visit, void *context, uint64_t *next) {
    *abbrev = NULL;
    if (offset < unit->die || offset >= unit->end) return -1;
    struct hwsd_reader r = hwsd_reader_at(m->s.info, offset);
    r.end = m->s.info.start + unit->end;
    uint64_t code = hwsd_uleb(&r);
    if (r.failed) return -1;
    if (code != 0) {
        if (code >= unit->abbrevs->count || unit->abbrevs->by_code[code].specs == NULL) return -1;
        *abbrev = &unit->abbrevs->by_code[code];
        struct hwsd_reader a = { (*abbrev)->specs, m->s.abbrev.start + m->s.abbrev.size, 0 };
        const struct hwsu_unit *h = &unit->header;
        for (;;) {
            uint64_t name = hwsd_uleb(&a), form = hwsd_uleb(&a);
            int64_t implicit = form == DW_FORM_implicit_const ? hwsd_sleb(&a) : 0;
            if (a.failed) return -1;
            if (name == 0 && form == 0) break;
            struct hwsd_value v;
            if (hwsd_form_value(&r, h->version, h->address_size, h->offset_size, form, implicit, &v) != 0) return -1;
            if (visit(context, unit, name, &v) != 0) return -1;
        }
    }
    *next = (uint64_t)(r.at - m->s.info.start);
    return 0;
}

static int hwsr_keep_die_attribute(void *context, const struct hwsr_unit *unit, uint64_t name, const struct hwsd_value *v) {
    struct hwsr_die *die = context;
    switch (name) {
    case DW_AT_sibling:
        if (v->kind == HWSD_REFERENCE && die->sibling == 0) die->sibling = unit->start + v->value;
        break;
    case DW_AT_low_pc: hwsr_keep(&die->low, v); break;
    case DW_AT_high_pc: hwsr_keep(&die->high, v); break;
    case DW_AT_ranges: hwsr_keep(&die->ranges, v); break;
    case DW_AT_linkage_name: hwsr_keep(&die->linkage_name, v); break;
    case DW_AT_MIPS_linkage_name: hwsr_keep(&die->mips_linkage_name, v); break;
    case DW_AT_name: hwsr_keep(&die->name, v); break;
    case DW_AT_abstract_origin: hwsr_keep(&die->origin, v); break;
    case DW_AT_specification: hwsr_keep(&die->specification, v); break;
    case DW_AT_call_file: hwsr_keep(&die->call_file, v); break;
    case DW_AT_call_line: hwsr_keep(&die->call_line, v); break;
    case DW_AT_call_column: hwsr_keep(&die->call_column, v); break;
    default: break;
    }
    return 0;
}

// The DIE at `offset` of `unit` (tag 0: a null entry); -1 when it cannot be read.
static int hwsr_read_die(const struct hwsr_module *m, const struct hwsr_unit *unit, uint64_t offset, struct hwsr_die *die) {
    memset(die, 0, sizeof *die);
    die->offset = offset;
    const struct hwsr_abbrev *abbrev;
    if (hwsr_attributes(m, unit, offset, &abbrev, hwsr_keep_die_attribute, die, &die->next) != 0) return -1;
    if (abbrev != NULL) die->tag = abbrev->tag, die->children = abbrev->children;
    return 0;
}

// Where the DIE after `die`'s subtree starts (its DW_AT_sibling when it has one, as
// dwarf_siblingof); -1 when the subtree cannot be read.
static int hwsr_after_subtree(const struct hwsr_module *m, const struct hwsr_unit *unit, const struct hwsr_die *die, uint64_t *after) {
    if (!die->children) {
        *after = die->next;
        return 0;
    }
    if (die->sibling != 0) {
        if (die->sibling <= die->offset || die->sibling > unit->end) return -1;
        *after = die->sibling;
        return 0;
    }
    uint64_t offset = die->next;
    for (unsigned depth = 1; depth > 0;) {
        struct hwsr_die child;
        if (hwsr_read_die(m, unit, offset, &child) != 0) return -1;
        if (child.tag == 0) depth--;
        else if (child.children && child.sibling != 0) {
            if (child.sibling <= child.offset || child.sibling > unit->end) return -1;
            offset = child.sibling;
            continue;
        } else if (child.children) depth++;
        offset = child.next;
    }
    *after = offset;
    return 0;
}

// What dwarf_ranges gives for the DIE, into m->scratch: its low and high pc as the one range,
// else its DW_AT_ranges from the unit's base. Returns how many, or -1 for forms or lists this
// reader does not follow.
static long hwsr_die_ranges(struct hwsr_module *m, const struct hwsr_unit *unit, const struct hwsr_die *die) {
    size_t count = 0;
    struct hwsu_unit u = unit->header;
    uint64_t low = 0;
    if (die->low.form != 0) {
        if (die->low.kind == HWSD_ADDRESS) low = die->low.value;
        else if (die->low.kind != HWSD_ADDRESS_INDEX || hwsu_address(&m->s, &u, die->low.value, &low) != 0) return -1;
    }
    if (die->low.form != 0 && die->high.form != 0) {
        uint64_t high;
        if (die->high.kind == HWSD_ADDRESS) high = die->high.value;
        else if (hwsd_is_unsigned_constant(&die->high)) high = low + die->high.value;
        else if (die->high.kind == HWSD_ADDRESS_INDEX) {
            if (hwsu_address(&m->s, &u, die->high.value, &high) != 0) return -1;
        } else return -1;
        if (high <= low) return 0;
        if (hws_make_room((void **)&m->scratch, 0, &m->scratch_capacity, sizeof *m->scratch) != 0) return -1;
        m->scratch[0] = (struct hws_cu_range){ .low = low, .high = high, .cu_offset = die->offset };
        return 1;
    }
    if (die->ranges.form == 0) return 0;
    if (die->ranges.kind == HWSD_RNGLISTX) u.ranges_is_index = 1;
    else if (die->ranges.kind == HWSD_SECTION_OFFSET
             || (unit->header.version < 4 && (die->ranges.form == DW_FORM_data4 || die->ranges.form == DW_FORM_data8)))
        u.ranges_is_index = 0;
    else return -1;
    u.ranges = die->ranges.value;
    if (hwsu_die_ranges(&m->s, &u, unit->base, die->offset, &m->scratch, &count, &m->scratch_capacity) != 0) return -1;
    return (long)count;
}

// dwarf_haspc: 1 when one of the DIE's ranges holds `pc`, 0 when none does, -1 unreadable.
static int hwsr_has_pc(struct hwsr_module *m, const struct hwsr_unit *unit, const struct hwsr_die *die, uint64_t pc) {
    long count = hwsr_die_ranges(m, unit, die);
    for (long i = 0; i < count; i++)
        if (m->scratch[i].low <= pc && pc < m->scratch[i].high) return 1;
    return count < 0 ? -1 : 0;
}

// dwarf_formstring: 0 with `*string` (NULL when the value is no string: an absent attribute),
// -1 where libdw could read what this reader does not.
static int hwsr_string(const struct hwsr_module *m, const struct hwsr_unit *unit, const struct hwsd_value *v, const char **string) {
    *string = NULL;
    switch (v->form == 0 ? HWSD_OTHER : v->kind) {
    case HWSD_OTHER: return v->form == 0 ? 0 : -1;
    case HWSD_STRING: *string = v->string; break;
    case HWSD_STRP: *string = hwsd_string_at(m->s.str, v->value); break;
    case HWSD_LINE_STRP: *string = hwsd_string_at(m->s.line_str, v->value); break;
    case HWSD_STRX: {
        unsigned size = unit->header.offset_size;
        if (!unit->has_str_offsets_base || v->value > (m->s.str_offsets.size / size)) return -1;
        struct hwsd_reader r = hwsd_reader_at(m->s.str_offsets, unit->str_offsets_base + v->value * size);
        uint64_t offset = hwsd_fixed(&r, size);
        if (r.failed) return -1;
        *string = hwsd_string_at(m->s.str, offset);
        break;
    }
    default: return -1;
    }
    return *string == NULL ? -1 : 0;
}

// dwarf_attr_integrate(die, which) then dwarf_formstring: `which` picks the value of a DIE.
typedef const struct hwsd_value *(*hwsr_pick)(const struct hwsr_die *);
static const struct hwsd_value *hwsr_pick_linkage(const struct hwsr_die *d) { return &d->linkage_name; }
static const struct hwsd_value *hwsr_pick_mips(const struct hwsr_die *d) { return &d->mips_linkage_name; }
static const struct hwsd_value *hwsr_pick_name(const struct hwsr_die *d) { return &d->name; }

static int hwsr_integrated_string(const struct hwsr_module *m, const struct hwsr_unit *unit, const struct hwsr_die *die,
                                 hwsr_pick pick, const char **string) {
    struct hwsr_die current = *die;
    for (int chain = 0; chain <= HWSR_MAX_CHAIN; chain++) {
        if (pick(&current)->form != 0) return hwsr_string(m, unit, pick(&current), string);
        const struct hwsd_value *reference = current.origin.form != 0 ? &current.origin : &current.specification;
        if (reference->form == 0) {
            *string = NULL;
            return 0;
        }
        // Only within the unit: a DIE of another one has that unit's forms and bases.
        if (reference->kind != HWSD_REFERENCE || reference->value > unit->end - unit->start) return -1;
        if (hwsr_read_die(m, unit, unit->start + reference->value, &current) != 0 || current.tag == 0) return -1;
    }
    return -1;  // past libdw's chain: let libdw say what it does there
}

// hws_die_function_name: the linkage name, else the MIPS one, else the plain name.
static int hwsr_function_name(const struct hwsr_module *m, const struct hwsr_unit *unit, const struct hwsr_die *die, const char **name) {
    hwsr_pick picks[3] = { hwsr_pick_linkage, hwsr_pick_mips, hwsr_pick_name };
    for (int i = 0; i < 3; i++) {
        if (hwsr_integrated_string(m, unit, die, picks[i], name) != 0) return -1;
        if (*name != NULL) return 0;
    }
    return 0;
}

// dwarf_formudata of an attribute that may be absent: 1 with the value, 0 absent, -1 a form this
// reader does not read as libdw does.
static int hwsr_unsigned(const struct hwsd_value *v, uint64_t *value) {
    if (v->form == 0) return 0;
    if (!hwsd_is_unsigned_constant(v)) return -1;
    *value = v->value;
    return 1;
}

// ---- the line table ------------------------------------------------------------------------------

static int hwsr_add_file(struct hwsr_unit *unit, size_t *capacity, char *name) {
    if (unit->file_count >= HWSR_MAX_FILES || hws_make_room((void **)&unit->files, unit->file_count, capacity, sizeof *unit->files) != 0) {
        free(name);
        return -1;
    }
    unit->files[unit->file_count++] = name;
    return 0;
}

// read_srcfiles' name: absolute as it is, else "dir/name" (the name alone without a directory).
static char *hwsr_compose(const char *directory, const char *name) {
    if (name[0] == '/' || directory == NULL) return strdup(name);
    size_t d = strlen(directory), n = strlen(name);
    char *joined = malloc(d + 1 + n + 1);
    if (joined == NULL) return NULL;
    memcpy(joined, directory, d);
    joined[d] = '/';
    memcpy(joined + d + 1, name, n + 1);
    return joined;
}

// A string of a DWARF 5 directory or file entry (what libdw's fake unit reads: no string offsets).
static int hwsr_entry_string(const struct hwsr_module *m, const struct hwsd_value *v, const char **string) {
    *string = v->kind == HWSD_STRING ? v->string
        : v->kind == HWSD_STRP ? hwsd_string_at(m->s.str, v->value)
        : v->kind == HWSD_LINE_STRP ? hwsd_string_at(m->s.line_str, v->value) : NULL;
    return *string == NULL ? -1 : 0;
}

// The directory and file tables; `r` at their start, left at their end.
static int hwsr_read_files(struct hwsr_module *m, struct hwsr_unit *unit, const struct hwsr_line_header *lh, struct hwsd_reader *r) {
    size_t capacity = 0;
    const char **dirs = NULL;
    size_t dir_count = 0, dir_capacity = 0;
    int result = -1;
    if (lh->version < 5) {
        // Directory 0 is the unit's comp_dir; file 0 is libdw's "???".
        if (hws_make_room((void **)&dirs, dir_count, &dir_capacity, sizeof *dirs) != 0) goto out;
        dirs[dir_count++] = unit->comp_dir;
        for (;;) {
            const char *dir = hwsd_string(r);
            if (dir == NULL) goto out;
            if (dir[0] == 0) break;
            if (dir_count >= HWSR_MAX_FILES || hws_make_room((void **)&dirs, dir_count, &dir_capacity, sizeof *dirs) != 0) goto out;
            dirs[dir_count++] = dir;
        }
        if (hwsr_add_file(unit, &capacity, strdup("???")) != 0) goto out;
        for (;;) {
            const char *name = hwsd_string(r);
            if (name == NULL) goto out;
            if (name[0] == 0) break;
            uint64_t dir = hwsd_uleb(r);
            (void)hwsd_uleb(r), (void)hwsd_uleb(r);  // mtime, length
            if (r->failed || dir >= dir_count) goto out;
            char *composed = hwsr_compose(dirs[dir], name);
            if (composed == NULL || hwsr_add_file(unit, &capacity, composed) != 0) goto out;
        }
    } else {
        for (int table = 0; table < 2; table++) {  // directories, then files
            unsigned format_count = (unsigned)hwsd_fixed(r, 1);
            uint64_t contents[256], forms[256];
            int path = -1, index = -1;
            for (unsigned i = 0; i < format_count; i++) {
                contents[i] = hwsd_uleb(r), forms[i] = hwsd_uleb(r);
                if (contents[i] == DW_LNCT_path) path = (int)i;
                else if (contents[i] == DW_LNCT_directory_index) index = (int)i;
            }
            uint64_t count = hwsd_uleb(r);
            if (r->failed || (format_count == 0 && count != 0) || path < 0 || (table == 1 && index < 0) || count > HWSR_MAX_FILES) goto out;
            for (uint64_t n = 0; n < count; n++) {
                const char *name = NULL;
                uint64_t dir = UINT64_MAX;
                for (unsigned i = 0; i < format_count; i++) {
                    struct hwsd_value v;
                    if (forms[i] == DW_FORM_implicit_const || forms[i] == DW_FORM_indirect
                        || hwsd_form_value(r, 5, unit->header.address_size, lh->offset_size, forms[i], 0, &v) != 0) goto out;
                    if ((int)i == path && hwsr_entry_string(m, &v, &name) != 0) goto out;
                    if ((int)i == index && table == 1) {
                        if (!hwsd_is_unsigned_constant(&v)) goto out;
                        dir = v.value;
                    }
                }
                if (table == 0) {
                    if (hws_make_room((void **)&dirs, dir_count, &dir_capacity, sizeof *dirs) != 0) goto out;
                    dirs[dir_count++] = name;
                } else {
                    if (dir >= dir_count) goto out;
                    char *composed = hwsr_compose(dirs[dir], name);
                    if (composed == NULL || hwsr_add_file(unit, &capacity, composed) != 0) goto out;
                }
            }
        }
        // read_srcfiles puts file 0 where its "???" would be: no entry, no "???" either.
        if (unit->file_count == 0 && hwsr_add_file(unit, &capacity, strdup("???")) != 0) goto out;
    }
    result = (uint64_t)(r->at - m->s.line.start) == lh->files_end ? 0 : -1;
out:
    free(dirs);
    return result;
}

static int hwsr_header(const struct hwsr_module *m, const struct hwsr_unit *unit, struct hwsd_reader *r, struct hwsr_line_header *lh) {
    uint64_t length = hwsd_fixed(r, 4);
    lh->offset_size = 4;
    if (length == 0xffffffffu) length = hwsd_fixed(r, 8), lh->offset_size = 8;
    else if (length >= 0xfffffff0u) return -1;
    if (r->failed || length > (uint64_t)(r->end - r->at)) return -1;
    lh->program_end = (uint64_t)(r->at - m->s.line.start) + length;
    r->end = r->at + length;
    lh->version = (unsigned)hwsd_fixed(r, 2);
    if (lh->version < 2 || lh->version > 5) return -1;
    if (lh->version >= 5 && (hwsd_fixed(r, 1) != unit->header.address_size || hwsd_fixed(r, 1) != 0)) return -1;
    uint64_t header_length = hwsd_fixed(r, lh->offset_size);
    if (r->failed || header_length > (uint64_t)(r->end - r->at)) return -1;
    lh->files_end = (uint64_t)(r->at - m->s.line.start) + header_length;
    lh->min_length = (unsigned)hwsd_fixed(r, 1);
    lh->max_ops = lh->version >= 4 ? (unsigned)hwsd_fixed(r, 1) : 1;
    lh->default_is_stmt = (int)hwsd_fixed(r, 1);
    lh->line_base = (int8_t)hwsd_fixed(r, 1);
    lh->line_range = (int)hwsd_fixed(r, 1);
    lh->opcode_base = (unsigned)hwsd_fixed(r, 1);
    lh->opcode_lengths = r->at - 1;
    if (r->failed || lh->max_ops == 0 || lh->opcode_base == 0 || hwsd_skip(r, lh->opcode_base - 1) != 0) return -1;
    return 0;
}


struct hwsr_state {
    uint64_t address, op_index, file, column;
    int64_t line;
};

static int hwsr_compare_rows(const void *a, const void *b) {
    const struct hwsr_row *left = a, *right = b;
    if (left->address != right->address) return left->address < right->address ? -1 : 1;
    if (left->end != right->end) return right->end - left->end;
    return left->sequence < right->sequence ? -1 : left->sequence > right->sequence;
}

// A row of a streamed table (hwsr_stream_row): noted at the first address asked at or above it
// (spread to the addresses above once the run is over).
static void hwsr_fold_row(struct hwsr_unit *unit, const struct hwsr_row *row) {
    if (!unit->has_last || hwsr_compare_rows(&unit->last, row) < 0) unit->last = *row, unit->has_last = 1;
    size_t low = 0, high = unit->stream_count;
    while (low < high) {
        size_t middle = low + (high - low) / 2;
        if (unit->stream_pcs[middle] < row->address) low = middle + 1; else high = middle;
    }
    if (low < unit->stream_count && (!unit->stream_has[low] || hwsr_compare_rows(&unit->stream_best[low], row) < 0))
        unit->stream_best[low] = *row, unit->stream_has[low] = 1;
}

static void hwsr_stream_clear(struct hwsr_unit *unit) {
    free(unit->stream_pcs);
    free(unit->stream_best);
    free(unit->stream_has);
    unit->stream_pcs = NULL, unit->stream_best = NULL, unit->stream_has = NULL, unit->stream_count = 0;
}

// 0, -1 when libdw would refuse the table, 1 when the table is past HWSR_MAX_ROWS (not kept).
static int hwsr_add_row(struct hwsr_unit *unit, size_t *capacity, const struct hwsr_state *s, int end) {
    // What libdw 0.188's Dwarf_Line cannot hold makes it refuse the table: let it.
    if (s->file > UINT32_MAX || s->line < INT32_MIN || s->line > INT32_MAX || s->column > UINT16_MAX || s->op_index > 255) return -1;
    if (unit->lines_streamed) {
        hwsr_fold_row(unit, &(struct hwsr_row){ s->address, unit->stream_sequence++, (uint32_t)s->file, (int32_t)s->line, (uint32_t)s->column, end });
        return 0;
    }
    if (unit->row_count >= unit->max_rows) return 1;
    if (hws_make_room((void **)&unit->rows, unit->row_count, capacity, sizeof *unit->rows) != 0) return -1;
    unit->rows[unit->row_count] = (struct hwsr_row){ s->address, unit->row_count, (uint32_t)s->file, (int32_t)s->line, (uint32_t)s->column, end };
    unit->row_count++;
    return 0;
}

static void hwsr_advance(struct hwsr_state *s, const struct hwsr_line_header *lh, uint64_t advance) {
    s->address += lh->min_length * ((s->op_index + advance) / lh->max_ops);
    s->op_index = (s->op_index + advance) % lh->max_ops;
}

// The line program's rows, in program order.
static int hwsr_run_program(const struct hwsr_module *m, struct hwsr_unit *unit, const struct hwsr_line_header *lh, struct hwsd_reader *r) {
    size_t capacity = 0;
    struct hwsr_state s = { .file = 1, .line = 1 };
    for (uint64_t steps = 1; r->at < r->end; steps++) {
        // A unit's line program may be megabytes: its pages are let go of as it runs.
        if (steps % HWSR_STEPS_PER_DROP == 0) hwsd_drop_section_pages(&m->s);
        unsigned opcode = (unsigned)hwsd_fixed(r, 1);
        if (opcode >= lh->opcode_base) {
            if (lh->line_range == 0) return -1;
            s.line += lh->line_base + (int)((opcode - lh->opcode_base) % (unsigned)lh->line_range);
            hwsr_advance(&s, lh, (opcode - lh->opcode_base) / (unsigned)lh->line_range);
            int added = hwsr_add_row(unit, &capacity, &s, 0);
            if (added != 0) return added;
        } else if (opcode == 0) {
            // libdw reads the length as one byte (a ULEB128 of one byte), then the sub-opcode.
            uint64_t length = hwsd_fixed(r, 1);
            const uint8_t *after = r->at + length;
            if (r->failed || length == 0 || (length & 0x80) != 0 || length > (uint64_t)(r->end - r->at)) return -1;
            unsigned sub = (unsigned)hwsd_fixed(r, 1);
            if (sub == DW_LNE_end_sequence) {
                int added = hwsr_add_row(unit, &capacity, &s, 1);
                if (added != 0) return added;
                s = (struct hwsr_state){ .file = 1, .line = 1 };
            } else if (sub == DW_LNE_set_address) {
                s.address = hwsd_fixed(r, unit->header.address_size);
                s.op_index = 0;
            } else if (sub == DW_LNE_set_discriminator) {
                if (lh->opcode_base <= DW_LNE_set_discriminator || lh->opcode_lengths[DW_LNE_set_discriminator] != 1) return -1;
                if (hwsd_uleb(r) >= (1u << 24)) return -1;
            } else if (sub == DW_LNE_define_file) {
                return -1;  // libdw adds a file to the table: not followed here
            } else {
                r->at = after;  // unknown: skipped by its length, as libdw does
            }
            // The known ones go on where their operands end, whatever the length said: where
            // the two disagree, libdw's reading is not followed here.
            if (r->failed || r->at != after) return -1;
        } else {
            // Standard opcodes with the argument counts libdw insists on.
            unsigned declared = lh->opcode_lengths[opcode];
            uint64_t value;
            switch (opcode) {
            case DW_LNS_copy: {
                if (declared != 0) return -1;
                int added = hwsr_add_row(unit, &capacity, &s, 0);
                if (added != 0) return added;
                break;
            }
            case DW_LNS_advance_pc:
                value = hwsd_uleb(r);
                if (declared != 1 || value > UINT32_MAX) return -1;
                hwsr_advance(&s, lh, value);
                break;
            case DW_LNS_advance_line: {
                int64_t delta = hwsd_sleb(r);
                if (declared != 1 || delta < INT32_MIN || delta > INT32_MAX) return -1;
                s.line += delta;
                break;
            }
            case DW_LNS_set_file:
                value = hwsd_uleb(r);
                if (declared != 1 || value > UINT32_MAX) return -1;
                s.file = value;
                break;
            case DW_LNS_set_column:
                value = hwsd_uleb(r);
                if (declared != 1 || value > UINT32_MAX) return -1;
                s.column = value;
                break;
            case DW_LNS_negate_stmt: case DW_LNS_set_basic_block: case DW_LNS_set_prologue_end: case DW_LNS_set_epilogue_begin:
                if (declared != 0) return -1;
                break;
            case DW_LNS_const_add_pc:
                if (declared != 0 || lh->line_range == 0) return -1;
                hwsr_advance(&s, lh, (255u - lh->opcode_base) / (unsigned)lh->line_range);
                break;
            case DW_LNS_fixed_advance_pc:
                if (declared != 1) return -1;
                s.address += hwsd_fixed(r, 2);
                s.op_index = 0;
                break;
            case DW_LNS_set_isa:
                if (declared != 1 || hwsd_uleb(r) > 255) return -1;
                break;
            default:  // an opcode newer than these: its arguments skipped
                for (unsigned n = 0; n < declared; n++) (void)hwsd_uleb(r);
                break;
            }
            if (r->failed) return -1;
        }
        if (r->failed) return -1;
    }
    return 0;
}

// The unit's line table (none without DW_AT_stmt_list: no rows, no files).
static int hwsr_read_lines(struct hwsr_module *m, struct hwsr_unit *unit) {
    if (!unit->has_stmt_list) return 0;
    struct hwsd_reader r = hwsd_reader_at(m->s.line, unit->stmt_list);
    struct hwsr_line_header lh;
    if (hwsr_header(m, unit, &r, &lh) != 0) return -1;
    struct hwsd_reader files = r;
    files.end = m->s.line.start + lh.files_end;
    if (hwsr_read_files(m, unit, &lh, &files) != 0) return -1;
    struct hwsd_reader program = hwsd_reader_at(m->s.line, lh.files_end);
    program.end = m->s.line.start + lh.program_end;
    int ran = hwsr_run_program(m, unit, &lh, &program);
    if (ran == 1) {
        // Too many rows to keep: looked up by running the program again for each lookup.
        free(unit->rows);
        unit->rows = NULL;
        unit->row_count = 0;
        unit->lines_streamed = 1;
        unit->header_of_lines = lh;
        return 0;
    }
    if (ran != 0) return -1;
    if (unit->row_count > 1) qsort(unit->rows, unit->row_count, sizeof *unit->rows, hwsr_compare_rows);
    if (unit->row_count > 0) unit->rows[unit->row_count - 1].end = 1;
    return 0;
}

// dwarf_getsrc_die: the last row at or below `pc`, unless it ends a sequence.
static const struct hwsr_row *hwsr_row_at(const struct hwsr_unit *unit, uint64_t pc) {
    if (unit->row_count == 0) return NULL;
    size_t low = 0, high = unit->row_count - 1;
    while (low < high) {
        size_t middle = high - (high - low) / 2;
        if (pc < unit->rows[middle].address) high = middle - 1; else low = middle;
    }
    const struct hwsr_row *row = &unit->rows[low];
    return !row->end && row->address <= pc ? row : NULL;
}

static int hwsr_compare_addresses(const void *a, const void *b) {
    uint64_t left = *(const uint64_t *)a, right = *(const uint64_t *)b;
    return left < right ? -1 : left > right;
}

// The index of `pc` among the unit's streamed addresses, or `stream_count` when it is not one.
static size_t hwsr_streamed(const struct hwsr_unit *unit, uint64_t pc) {
    const uint64_t *found = unit->stream_pcs ? bsearch(&pc, unit->stream_pcs, unit->stream_count, sizeof pc, hwsr_compare_addresses) : NULL;
    return found ? (size_t)(found - unit->stream_pcs) : unit->stream_count;
}

// One run of a streamed unit's line program for `pc` and the addresses the report named ahead
// (m->expected): each one's row, as the sorted table would give it. 0, or -1 without memory or
// when the program now stops short (libdw would refuse the table: no rows).
static int hwsr_stream_run(const struct hwsr_module *m, struct hwsr_unit *unit, uint64_t pc) {
    hwsr_stream_clear(unit);
    size_t count = m->expected_count + 1;
    unit->stream_pcs = malloc(count * sizeof *unit->stream_pcs);
    unit->stream_best = malloc(count * sizeof *unit->stream_best);
    unit->stream_has = calloc(count, 1);
    if (unit->stream_pcs == NULL || unit->stream_best == NULL || unit->stream_has == NULL) {
        hwsr_stream_clear(unit);
        return -1;
    }
    if (m->expected_count > 0) memcpy(unit->stream_pcs, m->expected, m->expected_count * sizeof *m->expected);
    unit->stream_pcs[m->expected_count] = pc;
    qsort(unit->stream_pcs, count, sizeof *unit->stream_pcs, hwsr_compare_addresses);
    size_t unique = 0;
    for (size_t i = 0; i < count; i++)
        if (unique == 0 || unit->stream_pcs[unique - 1] != unit->stream_pcs[i]) unit->stream_pcs[unique++] = unit->stream_pcs[i];
    unit->stream_count = unique;
    const struct hwsr_line_header *lh = &unit->header_of_lines;
    struct hwsd_reader program = hwsd_reader_at(m->s.line, lh->files_end);
    program.end = m->s.line.start + lh->program_end;
    unit->stream_sequence = 0;
    unit->has_last = 0;
    if (hwsr_run_program(m, unit, lh, &program) != 0) {
        memset(unit->stream_has, 0, unit->stream_count);
        return -1;
    }
    // The last row at or below an address is also the last at or below the next one, unless
    // a later row is.
    for (size_t i = 1; i < unit->stream_count; i++) {
        if (unit->stream_has[i - 1] && (!unit->stream_has[i] || hwsr_compare_rows(&unit->stream_best[i], &unit->stream_best[i - 1]) < 0))
            unit->stream_best[i] = unit->stream_best[i - 1], unit->stream_has[i] = 1;
    }
    return 0;
}

// hwsr_row_at for a table not kept (`lines_streamed`): from the last run when it was for `pc`,
// else from a new one (hwsr_stream_run). The row the sorted table would give (the last at or
// below `pc` in its order, unless it ends a sequence or is the table's last): 1 with `*row`, 0
// when none.
static int hwsr_stream_row(const struct hwsr_module *m, struct hwsr_unit *unit, uint64_t pc, struct hwsr_row *row) {
    size_t at = hwsr_streamed(unit, pc);
    if (at == unit->stream_count) {
        if (hwsr_stream_run(m, unit, pc) != 0) return 0;
        at = hwsr_streamed(unit, pc);
    }
    if (at == unit->stream_count || !unit->stream_has[at] || unit->stream_best[at].end
        || hwsr_compare_rows(&unit->stream_best[at], &unit->last) == 0) return 0;
    *row = unit->stream_best[at];
    return 1;
}

// ---- functions ------------------------------------------------------------------------------

// hws_collect_functions: every DW_TAG_subprogram with code, not looking inside functions.
static int hwsr_index_functions(struct hwsr_module *m, struct hwsr_unit *unit) {
    struct hwsr_die die;
    if (hwsr_read_die(m, unit, unit->die, &die) != 0) return -1;
    if (!die.children) return 0;
    size_t capacity = 0;
    uint64_t offset = die.next;
    unsigned depth = 1;
    for (uint64_t read = 1; depth > 0; read++) {
        // A unit's DIEs may be tens of megabytes (a whole Swift module): let go of them as they are passed.
        if (read % HWSR_STEPS_PER_DROP == 0) hwsd_drop_section_pages(&m->s);
        if (hwsr_read_die(m, unit, offset, &die) != 0) return -1;
        if (die.tag == 0) {
            depth--;
            offset = die.next;
            continue;
        }
        if (die.tag != DW_TAG_subprogram) {
            if (die.children && ++depth > HWSR_MAX_DEPTH) return -1;
            offset = die.next;
            continue;
        }
        long count = hwsr_die_ranges(m, unit, &die);
        if (count < 0) return -1;
        if (unit->function_count + (size_t)count > HWSR_MAX_FUNCTIONS) {
            // A unit this large (crafted, or a billion-byte module) is not indexed: its frames
            // keep their symbol and line, without inline frames, and the module says so.
            free(unit->functions);
            unit->functions = NULL;
            unit->function_count = 0;
            m->units_over_bounds++;
            return 0;
        }
        for (long i = 0; i < count; i++) {
            if (hws_make_room((void **)&unit->functions, unit->function_count, &capacity, sizeof *unit->functions) != 0) return -1;
            unit->functions[unit->function_count++] = (struct hws_function_range){ m->scratch[i].low, m->scratch[i].high, 0, die.offset };
        }
        if (hwsr_after_subtree(m, unit, &die, &offset) != 0) return -1;
    }
    hws_sort_function_ranges(unit->functions, unit->function_count);
    return 0;
}

// hws_scope_path: the scopes holding `pc` inside the first function (in DIE order) that holds
// it, innermost first. How many, 0 when no function holds it, -1 unreadable.
static int hwsr_scope_path(struct hwsr_module *m, const struct hwsr_unit *unit, uint64_t pc, struct hwsr_die *scopes) {
    const struct hws_function_range *holder = hws_function_holder(unit->functions, unit->function_count, pc);
    struct hwsr_die path[HWSR_MAX_SCOPES];
    if (holder == NULL) return 0;
    if (hwsr_read_die(m, unit, holder->die, &path[0]) != 0) return -1;
    int depth = 1;
    while (depth < HWSR_MAX_SCOPES && path[depth - 1].children) {
        uint64_t offset = path[depth - 1].next;
        int found = 0;
        for (;;) {
            struct hwsr_die child;
            if (hwsr_read_die(m, unit, offset, &child) != 0) return -1;
            if (child.tag == 0) break;
            int has = hwsr_has_pc(m, unit, &child, pc);
            if (has < 0) return -1;
            if (has) {
                path[depth++] = child;
                found = 1;
                break;
            }
            if (hwsr_after_subtree(m, unit, &child, &offset) != 0) return -1;
        }
        if (!found) break;
    }
    for (int i = 0; i < depth; i++) scopes[i] = path[depth - 1 - i];
    return depth;
}

// hws_frames_from_scopes over this reader's DIEs.
static int hwsr_frames(struct hwsr_module *m, const struct hwsr_unit *unit, const struct hwsr_die *scopes, int chain_count,
                      const char *file, int line, int column, hws_frame *frames, int capacity) {
    int written = 0;
    for (int i = 0; i < chain_count && written < capacity; i++) {
        uint64_t tag = scopes[i].tag;
        if (tag != DW_TAG_subprogram && tag != DW_TAG_inlined_subroutine && tag != DW_TAG_entry_point) continue;
        hws_frame *frame = &frames[written++];
        memset(frame, 0, sizeof *frame);
        if (hwsr_function_name(m, unit, &scopes[i], &frame->function) != 0) return -1;
        frame->file = file;
        frame->line = line;
        frame->column = column;
        if (tag != DW_TAG_inlined_subroutine) break;
        frame->inlined = 1;
        uint64_t value = 0;
        int got;
        file = NULL, line = 0, column = 0;
        if ((got = hwsr_unsigned(&scopes[i].call_file, &value)) < 0) return -1;
        if (got && unit->has_stmt_list && value < unit->file_count) file = unit->files[value];
        if ((got = hwsr_unsigned(&scopes[i].call_line, &value)) < 0) return -1;
        if (got) line = (int)value;
        if ((got = hwsr_unsigned(&scopes[i].call_column, &value)) < 0) return -1;
        if (got) column = (int)value;
    }
    return written;
}

// ---- units ----------------------------------------------------------------------------------

// What the unit DIE gives, as its attributes are read (hwsr_read_unit_die).
struct hwsr_unit_attributes {
    struct hwsr_unit *unit;
    struct hwsd_value low, comp_dir, entry;
};

static int hwsr_keep_unit_attribute(void *context, const struct hwsr_unit *read, uint64_t name, const struct hwsd_value *v) {
    struct hwsr_unit_attributes *kept = context;
    struct hwsr_unit *unit = kept->unit;
    struct hwsu_unit *h = &unit->header;
    (void)read;
    switch (name) {
    case DW_AT_low_pc: hwsr_keep(&kept->low, v); break;
    case DW_AT_entry_pc: hwsr_keep(&kept->entry, v); break;
    case DW_AT_comp_dir: hwsr_keep(&kept->comp_dir, v); break;
    case DW_AT_addr_base: case DW_AT_GNU_addr_base:
        if (!h->has_addr_base) h->has_addr_base = 1, h->addr_base = v->value;
        break;
    case DW_AT_rnglists_base:
        if (!h->has_rnglists_base) h->has_rnglists_base = 1, h->rnglists_base = v->value;
        break;
    case DW_AT_str_offsets_base:
        if (!unit->has_str_offsets_base) unit->has_str_offsets_base = 1, unit->str_offsets_base = v->value;
        break;
    case DW_AT_stmt_list:
        if (unit->has_stmt_list) break;
        if (v->kind != HWSD_SECTION_OFFSET && v->form != DW_FORM_data4 && v->form != DW_FORM_data8) return -1;
        unit->has_stmt_list = 1, unit->stmt_list = v->value;
        break;
    case DW_AT_GNU_dwo_name: case DW_AT_dwo_name: case DW_AT_GNU_dwo_id: case DW_AT_GNU_ranges_base:
        unit->split = 1;
        break;
    default: break;
    }
    return 0;
}

// The unit DIE's attributes that reading the unit needs (its base address and directory are
// resolved once all are read: an index or a string offset needs a base that may come later).
static int hwsr_read_unit_die(struct hwsr_module *m, struct hwsr_unit *unit) {
    struct hwsr_unit_attributes kept = { .unit = unit };
    const struct hwsr_abbrev *abbrev;
    uint64_t next;
    if (hwsr_attributes(m, unit, unit->die, &abbrev, hwsr_keep_unit_attribute, &kept, &next) != 0 || abbrev == NULL
        || (abbrev->tag != DW_TAG_compile_unit && abbrev->tag != DW_TAG_partial_unit)) return -1;
    // libdw's base address: DW_AT_low_pc, else DW_AT_entry_pc (not followed here), else 0.
    if (kept.low.form == 0 && kept.entry.form != 0) return -1;
    if (kept.low.form != 0 && kept.low.kind == HWSD_ADDRESS_INDEX) {
        if (hwsu_address(&m->s, &unit->header, kept.low.value, &unit->base) != 0) return -1;
    } else if (kept.low.form != 0) {
        if (kept.low.kind != HWSD_ADDRESS) return -1;
        unit->base = kept.low.value;
    }
    return hwsr_string(m, unit, &kept.comp_dir, &unit->comp_dir);
}

static void hwsr_unit_clear(struct hwsr_unit *unit) {
    hwsr_stream_clear(unit);
    free(unit->rows);
    for (size_t i = 0; i < unit->file_count; i++) free(unit->files[i]);
    free(unit->files);
    free(unit->functions);
    memset(unit, 0, sizeof *unit);
}

// The unit whose DIE is at `die`, read on its first lookup; NULL when it was given up.
// Where the unit whose DIE is at `die` starts (its header in `*header`), or past .debug_info's end.
// A header is a few bytes before its DIE, as many as its form takes (DWARF 2–4 or 5, 32- or
// 64-bit): each candidate is read and kept only if its DIE is this one. Only where none is does
// this walk every header from the start, a page of .debug_info a unit (a big Swift binary: tens
// of megabytes), letting go of the pages as it goes.
static uint64_t hwsr_unit_start(struct hwsr_module *m, uint64_t die, struct hwsu_header *header) {
    static const uint64_t header_sizes[] = { 11, 12, 23, 24 };
    for (size_t i = 0; i < sizeof header_sizes / sizeof header_sizes[0]; i++)
        if (die >= header_sizes[i] && hwsu_unit_header(m->s.info, die - header_sizes[i], header) == 0 && header->die == die)
            return die - header_sizes[i];
    uint64_t offset = 0;
    for (uint64_t read = 1; offset < m->s.info.size; offset = header->next, read++) {
        if (read % HWSR_HEADERS_PER_DROP == 0) hwsd_drop_section_pages(&m->s);
        if (hwsu_unit_header(m->s.info, offset, header) != 0 || header->die >= die) break;
    }
    return offset;
}

static struct hwsr_unit *hwsr_unit(struct hwsr_module *m, uint64_t die) {
    for (size_t i = 0; i < m->unit_count; i++)
        if (m->units[i].die == die) return m->units[i].state == 1 ? &m->units[i] : NULL;
    // What the units read so far hold has a bound, whatever the module: past it they are all let
    // go of before this one is read (a report asks a module's addresses in order, unit by unit).
    if (m->unit_count >= HWSR_MAX_UNITS || m->kept_bytes > HWSR_KEPT_BYTES) {
        for (size_t i = 0; i < m->unit_count; i++) hwsr_unit_clear(&m->units[i]);
        m->unit_count = 0;
        m->kept_bytes = 0;
    }
    if (hws_make_room((void **)&m->units, m->unit_count, &m->unit_capacity, sizeof *m->units) != 0) return NULL;
    struct hwsr_unit *unit = &m->units[m->unit_count++];
    memset(unit, 0, sizeof *unit);
    unit->die = die;
    unit->max_rows = m->max_rows;
    unit->state = -1;
    // The unit's header: the one whose DIE this is.
    struct hwsu_header header;
    uint64_t offset = hwsr_unit_start(m, die, &header);
    if (offset >= m->s.info.size || header.die != die) return NULL;
    if (header.version < 2 || header.version > 5 || (header.address_size != 4 && header.address_size != 8)
        || (header.type != DW_UT_compile && header.type != DW_UT_partial)) return NULL;
    unit->start = offset, unit->end = header.next;
    unit->header = (struct hwsu_unit){ .version = header.version, .address_size = header.address_size, .offset_size = header.offset_size };
    if ((unit->abbrevs = hwsr_table(m, header.abbrev_offset)) == NULL || hwsr_read_unit_die(m, unit) != 0 || unit->split
        || hwsr_read_lines(m, unit) != 0 || hwsr_index_functions(m, unit) != 0) {
        struct hwsr_unit given_up = { .die = die, .state = -1 };
        hwsr_unit_clear(unit);
        *unit = given_up;
        return NULL;
    }
    unit->state = 1;
    m->kept_bytes += unit->row_count * sizeof *unit->rows + unit->function_count * sizeof *unit->functions;
    return unit;
}

struct hwsr_module *hwsr_module_make(Dwarf *dwarf) {
    struct hwsd_sections s;
    if (dwarf == NULL || hwsd_find_sections(dwarf, &s) != 0) return NULL;
    struct hwsr_module *m = calloc(1, sizeof *m);
    if (m != NULL) m->s = s, m->max_rows = HWSR_MAX_ROWS;
    return m;
}

int hwsr_module_has_aranges(const struct hwsr_module *m) { return m != NULL && m->s.aranges.start != NULL; }

uint32_t hwsr_module_units_over_bounds(const struct hwsr_module *m) { return m != NULL ? m->units_over_bounds : 0; }

void hwsr_module_expect(struct hwsr_module *m, const uint64_t *pcs, size_t count) {
    if (m == NULL) return;
    uint64_t *copy = count > 0 ? malloc(count * sizeof *copy) : NULL;
    if (count > 0 && copy == NULL) return;
    if (count > 0) memcpy(copy, pcs, count * sizeof *copy);
    free(m->expected);
    m->expected = copy;
    m->expected_count = count;
}

void hwsr_module_set_row_bound(struct hwsr_module *m, size_t rows) {
    if (m != NULL && rows > 0) m->max_rows = rows;
}

void hwsr_module_free(struct hwsr_module *m) {
    if (m == NULL) return;
    for (size_t i = 0; i < m->table_count; i++) {
        free(m->tables[i]->by_code);
        free(m->tables[i]);
    }
    free(m->tables);
    for (size_t i = 0; i < m->unit_count; i++) hwsr_unit_clear(&m->units[i]);
    free(m->units);
    free(m->scratch);
    free(m->expected);
    free(m);
}

int hwsr_symbolicate(struct hwsr_module *m, uint64_t unit_die, uint64_t pc, hws_frame *frames, int capacity,
                    const char **file, int *line, int *column) {
    *file = NULL, *line = 0, *column = 0;
    struct hwsr_unit *unit = m ? hwsr_unit(m, unit_die) : NULL;
    if (unit == NULL) return -1;
    struct hwsr_row streamed;
    const struct hwsr_row *row = !unit->lines_streamed ? hwsr_row_at(unit, pc) : hwsr_stream_row(m, unit, pc, &streamed) ? &streamed : NULL;
    if (row != NULL) {
        *file = row->file < unit->file_count ? unit->files[row->file] : NULL;
        *line = row->line;
        *column = (int)row->column;
    }
    struct hwsr_die scopes[HWSR_MAX_SCOPES];
    int count = hwsr_scope_path(m, unit, pc, scopes);
    if (count <= 0) return count;
    return hwsr_frames(m, unit, scopes, count, *file, *line, *column, frames, capacity);
}

long hws_unit_reader_packed(const uint8_t *bytes, size_t size) {
    struct hwsr_module *m = calloc(1, sizeof *m);
    if (m == NULL) return -1;
    struct hwsd_sections *s = &m->s;
    struct hwsd_bytes *parts[8] = { &s->info, &s->abbrev, &s->ranges, &s->rnglists, &s->addr, &s->line, &s->str, &s->line_str };
    struct hws_cu_range *ranges = NULL;
    size_t count = 0;
    long frames = -1;
    if (hwsd_unpack(bytes, size, parts, 8, &s->str_offsets) == 0 && s->info.size > 0 && s->abbrev.size > 0
        && hwsu_ranges_in_sections(s, &ranges, &count) == 0) {
        frames = 0;
        hws_frame out[HWSR_MAX_SCOPES];
        for (size_t i = 0; i < count && i < 256; i++) {
            uint64_t pcs[3] = { ranges[i].low, ranges[i].low + (ranges[i].high - ranges[i].low) / 2, ranges[i].high - 1 };
            for (int p = 0; p < 3; p++) {
                const char *file;
                int line, column;
                int got = hwsr_symbolicate(m, ranges[i].cu_offset, pcs[p], out, HWSR_MAX_SCOPES, &file, &line, &column);
                for (int f = 0; f < got; f++)  // every string it gives is whole
                    if ((out[f].function && strlen(out[f].function) > size) || (out[f].file && strlen(out[f].file) > 2 * size + 2)) abort();
                if (got > 0) frames += got;
            }
        }
    }
    free(ranges);
    hwsr_module_free(m);
    return frames;
}
