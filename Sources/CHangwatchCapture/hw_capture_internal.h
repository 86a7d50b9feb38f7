// What the quiet capture (hw_quiet.c) shares with the signal capture (hw_capture.c): the same
// slots, filled the same way, and one capture at a time. Not part of the target's interface.
#pragma once
#include <sys/uio.h>

#include "hw_capture.h"

/// A stack window as process_vm_readv's remote pieces, one per page, so the copy stops exactly
/// at the first unmapped page (the end of the thread's stack) instead of failing or faulting.
/// Pure computation: the signal handler and the quiet capture's helper both use it.
enum { HWC_PAGE = 4096, HWC_WINDOW_PIECES = HWC_MAX_STACK_BYTES_LIMIT / HWC_PAGE + 1 };
static inline unsigned long hwc_window_pieces(struct iovec remote[HWC_WINDOW_PIECES], uint64_t from, uint32_t wanted) {
    unsigned long pieces = 0;
    uint64_t at = from, end = from + wanted;
    while (at < end && pieces < HWC_WINDOW_PIECES) {
        uint64_t page_end = (at & ~(uint64_t)(HWC_PAGE - 1)) + HWC_PAGE;
        uint64_t piece_end = page_end < end ? page_end : end;
        remote[pieces].iov_base = (void *)(uintptr_t)at;
        remote[pieces].iov_len = piece_end - at;
        pieces++;
        at = piece_end;
    }
    return pieces;
}

/// The capture state hw_capture.c owns (valid after hwc_init succeeded).
typedef struct hwc_shared {
    hwc_config config;
    hwc_slot *slots;
    uint64_t *frames;
    uint8_t *stack;
    uint64_t main_queue;
    uint64_t no_queue;
    const char *(*queue_label)(void *);
} hwc_shared;

/// NULL before hwc_init succeeded.
const hwc_shared *hwc_shared_state(void);

/// Takes the slots for the calling thread (waits for another capture to finish).
void hwc_lock_slots(void);
void hwc_unlock_slots(void);

/// A new capture sequence number, never 0.
uint64_t hwc_next_sequence(void);

/// Slot states, the low two bits of a ticket (hw_capture.c): a handler writes a slot only after
/// moving its ticket from (seq, ARMED) to (seq, WRITING).
enum { HWC_SLOT_IDLE = 0, HWC_SLOT_ARMED = 1, HWC_SLOT_WRITING = 2, HWC_SLOT_DONE = 3 };
static inline uint64_t hwc_ticket(uint64_t seq, uint64_t state) { return (seq << 2) | state; }

/// Records the calling thread into `slot` from its own context (frames and stack bytes as asked).
void hwc_record_self(int32_t slot, uint32_t frames, uint32_t stack_bytes);

/// The thread's name (/proc) and CPU clocks (PROF, VIRT, SCHED) into its slot (under the slots
/// lock); `self` is this process's pid (getpid: a system call a capture makes once).
void hwc_fill_name_and_clocks(hwc_slot *slot, int32_t tid, pid_t self);
