// The CFI stepper of hw_cfi.h. Formats: the .eh_frame_hdr table and .eh_frame CIE/FDE records
// of the LSB (Linux Standard Base Core, "Exception Frames"), the call-frame instructions of
// DWARF 4 section 6.4.2. Everything is read through the caller's reader and bounded: a record
// longer than its buffer, a remember stack deeper than 8, an encoding it does not know, are all
// HW_CFI_UNSUPPORTED (libunwind then unwinds the thread), never a guess.
#include "hw_cfi.h"

#include <string.h>

// DWARF columns tracked: x86-64's 0–16 (rip is 16), aarch64's x0–x30 and sp. Rules for other
// columns (vector registers) are not needed to find a caller and are skipped.
#define COLUMNS 33
#define MAX_REMEMBERED 8
#define CIE_BYTES 512
#define FDE_BYTES 1024

enum { SAME = 0, UNDEFINED, OFFSET, OTHER };

struct column_rule {
    uint8_t kind;
    int32_t offset;
};

struct frame_state {
    struct column_rule columns[COLUMNS];
    int cfa_column;  // -1: an expression (unsupported)
    int64_t cfa_offset;
};

struct cursor {
    const uint8_t *bytes;
    size_t at, end;
    uint64_t base;  // the runtime address of bytes[0] (for pc-relative pointers)
    int failed;
};

static uint8_t next_byte(struct cursor *c) {
    if (c->at >= c->end) { c->failed = 1; return 0; }
    return c->bytes[c->at++];
}

static uint64_t next_fixed(struct cursor *c, int size) {
    uint64_t value = 0;
    for (int i = 0; i < size; i++) value |= (uint64_t)next_byte(c) << (8 * i);
    return value;
}

static void skip(struct cursor *c, uint64_t count) {
    if (count > c->end - c->at) { c->failed = 1; c->at = c->end; return; }
    c->at += (size_t)count;
}

static uint64_t next_uleb(struct cursor *c) {
    uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        uint8_t byte = next_byte(c);
        value |= (uint64_t)(byte & 0x7f) << shift;
        if (!(byte & 0x80)) return value;
    }
    c->failed = 1;
    return 0;
}

static int64_t next_sleb(struct cursor *c) {
    uint64_t value = 0;
    int shift = 0;
    uint8_t byte;
    do {
        byte = next_byte(c);
        if (shift < 64) value |= (uint64_t)(byte & 0x7f) << shift;
        shift += 7;
    } while ((byte & 0x80) && !c->failed && shift < 70);
    if (shift < 64 && (byte & 0x40)) value |= ~(uint64_t)0 << shift;
    return (int64_t)value;
}

// A pointer in `encoding` (DW_EH_PE_*): absolute or pc-relative, no indirection. `value_only`
// reads the value format alone (an FDE's address range).
static uint64_t next_pointer(struct cursor *c, uint8_t encoding, int value_only) {
    uint64_t field = c->base + c->at, value;
    switch (encoding & 0x0f) {
    case 0x00: value = next_fixed(c, 8); break;
    case 0x01: value = next_uleb(c); break;
    case 0x02: value = next_fixed(c, 2); break;
    case 0x03: value = next_fixed(c, 4); break;
    case 0x04: value = next_fixed(c, 8); break;
    case 0x09: value = (uint64_t)next_sleb(c); break;
    case 0x0a: value = (uint64_t)(int64_t)(int16_t)next_fixed(c, 2); break;
    case 0x0b: value = (uint64_t)(int64_t)(int32_t)next_fixed(c, 4); break;
    case 0x0c: value = next_fixed(c, 8); break;
    default: c->failed = 1; return 0;
    }
    if (value_only) return value;
    switch (encoding & 0xf0) {
    case 0x00: return value;
    case 0x10: return field + value;
    default: c->failed = 1; return 0;  // datarel, textrel, funcrel, indirect: not in FDEs we read
    }
}

// The FDE address for `address` from the search table (0 if none covers it).
static uint64_t find_fde(const hw_cfi_table *table, uint64_t address, hw_cfi_read_fn read, void *context) {
    uint32_t low = 0, high = table->count;
    int32_t entry[2];
    while (high - low > 1) {
        uint32_t middle = low + (high - low) / 2;
        if (read(context, table->table + (uint64_t)middle * 8, entry, 4) != 4) return 0;
        if (table->header + (uint64_t)(int64_t)entry[0] <= address) low = middle; else high = middle;
    }
    if (table->count == 0 || read(context, table->table + (uint64_t)low * 8, entry, 8) != 8) return 0;
    if (table->header + (uint64_t)(int64_t)entry[0] > address) return 0;
    return table->header + (uint64_t)(int64_t)entry[1];
}

// A whole record (its 4-byte length, then that many bytes) into `buffer`; its length, 0 when
// it does not fit or cannot be read (64-bit records included).
static size_t read_record(uint64_t at, uint8_t *buffer, size_t capacity, hw_cfi_read_fn read, void *context) {
    uint32_t length;
    if (read(context, at, &length, 4) != 4 || length == 0 || length == 0xffffffffu || length > capacity) return 0;
    return read(context, at + 4, buffer, length) == length ? length : 0;
}

struct cie {
    uint64_t code_align;
    int64_t data_align;
    uint64_t ra_column;
    uint8_t fde_encoding;
    int augmented;  // 'z': FDEs carry augmentation data
    struct cursor instructions;
};

static int parse_cie(const uint8_t *bytes, size_t length, uint64_t base, struct cie *cie) {
    struct cursor c = {bytes, 0, length, base, 0};
    if (next_fixed(&c, 4) != 0) return -1;  // CIE id
    uint8_t version = next_byte(&c);
    if (version != 1 && version != 3 && version != 4) return -1;
    const char *augmentation = (const char *)bytes + c.at;
    size_t augmentation_length = strnlen(augmentation, length - c.at);
    if (augmentation_length == length - c.at) return -1;
    c.at += augmentation_length + 1;
    if (version == 4 && (next_byte(&c) != 8 || next_byte(&c) != 0)) return -1;  // address and segment sizes
    cie->code_align = next_uleb(&c);
    cie->data_align = next_sleb(&c);
    cie->ra_column = version == 1 ? next_byte(&c) : next_uleb(&c);
    cie->fde_encoding = 0;
    cie->augmented = augmentation[0] == 'z';
    if (augmentation[0] != 0 && !cie->augmented) return -1;
    if (cie->augmented) {
        uint64_t data = next_uleb(&c);
        size_t data_end = c.at + data;
        if (data > length || data_end > length) return -1;
        for (const char *p = augmentation + 1; *p; p++) {
            switch (*p) {
            case 'R': cie->fde_encoding = next_byte(&c); break;
            case 'L': next_byte(&c); break;
            case 'P': {
                uint8_t encoding = next_byte(&c);
                (void)next_pointer(&c, (uint8_t)(encoding & 0x7f), 1);  // the personality routine: skipped
                break;
            }
            case 'B': break;   // aarch64 branch-target marking: nothing to read
            default: return -1;  // 'S' (a signal frame) and whatever else: libunwind's
            }
        }
        c.at = data_end;
    }
    if (c.failed) return -1;
    cie->instructions = (struct cursor){bytes, c.at, length, base, 0};
    return 0;
}

static void set_column(struct frame_state *state, uint64_t column, uint8_t kind, int64_t offset) {
    if (column >= COLUMNS) return;
    state->columns[column].kind = kind;
    state->columns[column].offset = (int32_t)offset;
    if ((int64_t)(int32_t)offset != offset) state->columns[column].kind = OTHER;
}

// Runs `c` from `*location` while the rows start at or before `address`. 0, or -1 for an
// instruction it does not handle (or damage).
static int execute(struct cursor *c, const struct cie *cie, const struct frame_state *initial, struct frame_state *state,
                   uint64_t *location, uint64_t address) {
    struct frame_state remembered[MAX_REMEMBERED];
    int depth = 0;
    while (c->at < c->end && !c->failed) {
        uint8_t op = next_byte(c);
        uint64_t advance = 0, column;
        switch (op >> 6) {
        case 1: advance = op & 0x3f; break;
        case 2: set_column(state, op & 0x3f, OFFSET, (int64_t)next_uleb(c) * cie->data_align); continue;
        case 3:
            column = op & 0x3f;
            if (column < COLUMNS) state->columns[column] = initial->columns[column];
            continue;
        default: break;
        }
        if (op >> 6 == 0) {
            switch (op) {
            case 0x00: continue;  // nop
            case 0x01: {          // set_loc
                uint64_t to = next_pointer(c, cie->fde_encoding, 0);
                if (to > address) return 0;
                *location = to;
                continue;
            }
            case 0x02: advance = next_fixed(c, 1); break;
            case 0x03: advance = next_fixed(c, 2); break;
            case 0x04: advance = next_fixed(c, 4); break;
            case 0x05: column = next_uleb(c); set_column(state, column, OFFSET, (int64_t)next_uleb(c) * cie->data_align); continue;
            case 0x06: column = next_uleb(c); if (column < COLUMNS) state->columns[column] = initial->columns[column]; continue;
            case 0x07: set_column(state, next_uleb(c), UNDEFINED, 0); continue;
            case 0x08: set_column(state, next_uleb(c), SAME, 0); continue;
            case 0x09: column = next_uleb(c); next_uleb(c); set_column(state, column, OTHER, 0); continue;  // register
            case 0x0a:
                if (depth == MAX_REMEMBERED) return -1;
                remembered[depth++] = *state;
                continue;
            case 0x0b:
                // The CFA comes back with the rest, as in libgcc and libunwind (an epilogue's
                // `remember; def_cfa_offset 8; ret; restore` relies on it).
                if (depth == 0) return -1;
                *state = remembered[--depth];
                continue;
            case 0x0c: state->cfa_column = (int)next_uleb(c); state->cfa_offset = (int64_t)next_uleb(c); continue;
            case 0x0d: state->cfa_column = (int)next_uleb(c); continue;
            case 0x0e: state->cfa_offset = (int64_t)next_uleb(c); continue;
            case 0x0f: skip(c, next_uleb(c)); state->cfa_column = -1; continue;  // def_cfa_expression
            case 0x10: case 0x16:  // expression, val_expression
                column = next_uleb(c);
                skip(c, next_uleb(c));
                set_column(state, column, OTHER, 0);
                continue;
            case 0x11: column = next_uleb(c); set_column(state, column, OFFSET, next_sleb(c) * cie->data_align); continue;
            case 0x12: state->cfa_column = (int)next_uleb(c); state->cfa_offset = next_sleb(c) * cie->data_align; continue;
            case 0x13: state->cfa_offset = next_sleb(c) * cie->data_align; continue;
            case 0x14: case 0x15:  // val_offset(_sf)
                column = next_uleb(c);
                if (op == 0x14) next_uleb(c); else next_sleb(c);
                set_column(state, column, OTHER, 0);
                continue;
            case 0x2e: next_uleb(c); continue;  // GNU_args_size
            case 0x2f: column = next_uleb(c); set_column(state, column, OFFSET, -(int64_t)next_uleb(c) * cie->data_align); continue;
            default: return -1;  // aarch64's negate_ra_state (signed return addresses) and the rest
            }
        }
        uint64_t next = *location + advance * cie->code_align;
        if (next > address) return 0;
        *location = next;
    }
    return c->failed ? -1 : 0;
}

// The rule at `address`, worked out from its FDE: 0, or -1 when it is not one this stepper applies.
static int work_out(const hw_cfi_table *table, uint64_t address, hw_cfi_read_fn read, void *context, hw_cfi_rule *rule) {
    uint64_t fde = find_fde(table, address, read, context);
    uint8_t fde_bytes[FDE_BYTES], cie_bytes[CIE_BYTES];
    size_t fde_length = fde ? read_record(fde, fde_bytes, sizeof fde_bytes, read, context) : 0;
    if (fde_length < 8) return -1;
    struct cursor f = {fde_bytes, 0, fde_length, fde + 4, 0};
    uint32_t cie_pointer = (uint32_t)next_fixed(&f, 4);
    if (cie_pointer == 0) return -1;  // a CIE where an FDE was expected
    uint64_t cie_at = fde + 4 - cie_pointer;
    size_t cie_length = read_record(cie_at, cie_bytes, sizeof cie_bytes, read, context);
    struct cie cie;
    if (cie_length == 0 || parse_cie(cie_bytes, cie_length, cie_at + 4, &cie) != 0 || cie.ra_column >= COLUMNS) return -1;
    uint64_t begin = next_pointer(&f, cie.fde_encoding, 0);
    uint64_t range = next_pointer(&f, cie.fde_encoding, 1);
    if (cie.augmented) skip(&f, next_uleb(&f));
    if (f.failed || address < begin || address - begin >= range) return -1;

    struct frame_state initial;
    memset(&initial, 0, sizeof initial);
    initial.cfa_column = -1;
    uint64_t location = begin;
    if (execute(&cie.instructions, &cie, &initial, &initial, &location, UINT64_MAX) != 0) return -1;
    struct frame_state state = initial;
    location = begin;
    if (execute(&f, &cie, &initial, &state, &location, address) != 0) return -1;

    if (state.cfa_column < 0 || state.cfa_column >= COLUMNS || state.cfa_offset != (int64_t)(int32_t)state.cfa_offset) return -1;
    rule->cfa_column = (uint8_t)state.cfa_column;
    rule->cfa_offset = (int32_t)state.cfa_offset;
    rule->ra_column = (uint8_t)cie.ra_column;
    rule->saved_count = 0;
    for (int column = 0; column < COLUMNS; column++) {
        const struct column_rule *c = &state.columns[column];
        if (c->kind == OTHER) return -1;
        if (c->kind != OFFSET) continue;
        if (rule->saved_count == HW_CFI_MAX_SAVED) return -1;
        rule->saved_column[rule->saved_count] = (uint8_t)column;
        rule->saved_offset[rule->saved_count++] = c->offset;
    }
    uint8_t ra = state.columns[cie.ra_column].kind;
    if (ra == UNDEFINED) {
        rule->status = HW_CFI_END;
    } else {
        // A return address in its own register (aarch64's leaf functions keep it in x30) is
        // only a rule where that register is one of ours other than pc.
        int index = hwd_register_index_of_unwind_number((int)cie.ra_column);
        if (ra == SAME && (index < 0 || index == HW_REGISTER_PC)) return -1;
        rule->status = HW_CFI_OK;
    }
    return 0;
}

int hw_cfi_table_at(uint64_t eh_frame_hdr, hw_cfi_read_fn read, void *context, hw_cfi_table *table) {
    uint8_t encoding[4];
    if (eh_frame_hdr == 0 || read(context, eh_frame_hdr, encoding, sizeof encoding) != sizeof encoding) return -1;
    int low = encoding[1] & 0x0f;
    int pointer_size = low == 0x03 || low == 0x0b ? 4 : low == 0x00 || low == 0x04 || low == 0x0c ? 8 : 0;
    if (encoding[0] != 1 || pointer_size == 0 || (encoding[2] != 0x03 && encoding[2] != 0x0b) || encoding[3] != 0x3b) return -1;
    uint32_t fde_count = 0;
    if (read(context, eh_frame_hdr + 4 + (uint64_t)pointer_size, &fde_count, sizeof fde_count) != sizeof fde_count || fde_count == 0)
        return -1;
    *table = (hw_cfi_table){eh_frame_hdr, eh_frame_hdr + 4 + (uint64_t)pointer_size + 4, fde_count};
    return 0;
}

const hw_cfi_rule *hw_cfi_rule_at(hw_cfi_cache *cache, const hw_cfi_table *table, uint64_t address, hw_cfi_read_fn read,
                                  void *context) {
    hw_cfi_rule *slot = &cache->rules[(address * 0x9E3779B97F4A7C15ull) >> 54];
    _Static_assert(HW_CFI_CACHE_SIZE == 1 << 10, "the hash keeps 10 bits");
    if (slot->address == address && address != 0) return slot;
    hw_cfi_rule rule;
    memset(&rule, 0, sizeof rule);
    if (work_out(table, address, read, context, &rule) != 0) rule.status = HW_CFI_UNSUPPORTED;
    rule.address = address;
    *slot = rule;
    return slot;
}

int hw_cfi_apply(const hw_cfi_rule *rule, uint64_t *registers, hw_cfi_read_fn read, void *context) {
    if (rule->status != HW_CFI_OK) return rule->status;
    int cfa_index = hwd_register_index_of_unwind_number(rule->cfa_column);
    int ra_index = hwd_register_index_of_unwind_number(rule->ra_column);
    if (cfa_index < 0 || ra_index < 0) return HW_CFI_UNSUPPORTED;
    uint64_t cfa = registers[cfa_index] + (uint64_t)(int64_t)rule->cfa_offset;
    uint64_t caller[HW_REGISTER_COUNT];
    memcpy(caller, registers, sizeof caller);
    for (int i = 0; i < rule->saved_count; i++) {
        uint64_t value;
        if (read(context, cfa + (uint64_t)(int64_t)rule->saved_offset[i], &value, 8) != 8) return HW_CFI_END;
        int index = hwd_register_index_of_unwind_number(rule->saved_column[i]);
        if (index >= 0) caller[index] = value;
    }
    // Saved: just read into its column; the same value (aarch64's x30): the register as it was.
    uint64_t return_address = caller[ra_index];
    if (return_address == 0) return HW_CFI_END;
    caller[HW_REGISTER_SP] = cfa;
    caller[HW_REGISTER_PC] = return_address;
    memcpy(registers, caller, sizeof caller);
    return HW_CFI_OK;
}
