// A DWARF call-frame (CFI) stepper for the copies both captures take of a stopped thread (the
// quiet capture's, Sources/CHangwatchCapture/hw_quiet.c; the remote capture's,
// Sources/CHangwatchPtrace/hw_ptrace.c), read through a reader of their own: the rule of an
// address — where the caller's frame starts (the CFA) and where the return address and the
// callee-saved registers were saved — read from the module's .eh_frame through its
// .eh_frame_hdr search table, kept in a small cache by address, and applied to a register
// set. It handles what compilers emit for ordinary functions (offset and register rules, the
// remember/restore stack); anything else (expressions, signal frames, an address without an
// FDE) is `HW_CFI_UNSUPPORTED`, and the caller unwinds that thread with libunwind instead.
// Not for signal handlers: it is called after the threads are let go.
#ifndef HW_CFI_H
#define HW_CFI_H

#include <stddef.h>
#include <stdint.h>

#include "hw_registers.h"

/// Reads `length` bytes of the unwound process's memory at `address` into `buffer`; how many it
/// could (it stops at the first unreadable byte).
typedef size_t (*hw_cfi_read_fn)(void *context, uint64_t address, void *buffer, size_t length);

/// One module's .eh_frame_hdr search table (datarel sdata4 pairs sorted by address).
typedef struct {
    uint64_t header;       // .eh_frame_hdr: base of the table's datarel values
    uint64_t table;        // first entry
    uint32_t count;        // entries
} hw_cfi_table;

/// The search table of the `.eh_frame_hdr` at `eh_frame_hdr`, read with `read`: version 1, an
/// eh_frame_ptr of 4 or 8 bytes, fde_count udata4/sdata4, entries datarel|sdata4 pairs (what
/// the linkers emit, and what libunwind's remote tables take too). 0, or -1 for any other header
/// or none readable.
int hw_cfi_table_at(uint64_t eh_frame_hdr, hw_cfi_read_fn read, void *context, hw_cfi_table *table);

enum { HW_CFI_OK = 1, HW_CFI_END = 2, HW_CFI_UNSUPPORTED = 3 };

#define HW_CFI_MAX_SAVED 14

/// The rule at one address: CFA = column `cfa_column` + `cfa_offset`; column `saved_column[i]`
/// saved at CFA + `saved_offset[i]`; the return address in column `ra_column`.
typedef struct {
    uint64_t address;  // the address looked up (0: an empty cache slot)
    int32_t cfa_offset;
    uint8_t status;    // HW_CFI_*: END when the return address is undefined (the outermost frame)
    uint8_t cfa_column;
    uint8_t ra_column;
    uint8_t saved_count;
    uint8_t saved_column[HW_CFI_MAX_SAVED];
    int32_t saved_offset[HW_CFI_MAX_SAVED];
} hw_cfi_rule;

#define HW_CFI_CACHE_SIZE 1024  /* direct-mapped by address */

typedef struct {
    hw_cfi_rule rules[HW_CFI_CACHE_SIZE];
} hw_cfi_cache;

/// The rule at `address` (a return address already moved back into its call), from `cache` or
/// worked out from `table` and stored there.
const hw_cfi_rule *hw_cfi_rule_at(hw_cfi_cache *cache, const hw_cfi_table *table, uint64_t address, hw_cfi_read_fn read,
                                  void *context);

/// Applies `rule` to `registers` (HW_REGISTER_COUNT values, this architecture's layout): the
/// caller's registers, with its pc and sp. HW_CFI_OK, HW_CFI_END when there is no caller (a read
/// failed, or the return address is undefined or 0), HW_CFI_UNSUPPORTED when the rule needs a
/// register this layout lacks.
int hw_cfi_apply(const hw_cfi_rule *rule, uint64_t *registers, hw_cfi_read_fn read, void *context);

#endif
