// The kernel's part of a quiet capture, and nothing else of it: the floor under the bench's
// quiet rows (docs/performance.md, "3. In-process capture"). For the bench only (scripts/bench),
// never for the product.
#ifndef HW_BENCH_FLOOR_H
#define HW_BENCH_FLOOR_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/// One round over threads `tids` of this process (none of them the caller): a helper process
/// sharing this one's memory, started as the quiet capture starts its own (clone with
/// CLONE_VM, Sources/CHangwatchCapture/hw_quiet.c), does for each thread only PTRACE_SEIZE,
/// PTRACE_INTERRUPT, the wait for the stop, PTRACE_GETREGSET, a copy of up to `stack_bytes`
/// (at most 16384, cut by hwd_stack_window_bytes) from its stack pointer and PTRACE_DETACH, with
/// up to 8 threads asked ahead as the quiet helper asks them; no /proc read, name, clock,
/// unwinding or snapshot. `*elapsed_ns`: from the helper's start to its exit. 0, or -1
/// (the helper failed: a thread gone, ptrace refused).
int hwb_floor_round(const int32_t *tids, int count, uint32_t stack_bytes, uint64_t *elapsed_ns);

#ifdef __cplusplus
}
#endif

#endif
