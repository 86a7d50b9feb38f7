// Out-of-process capture primitives: stop threads of another process with ptrace
// (PTRACE_SEIZE + PTRACE_INTERRUPT, no signal the target can see), read their registers
// and stack bytes, unwind them with libunwind-ptrace, and let them go.
// libunwind is dlopen'ed RTLD_LOCAL (never linked): see docs/platform-facts.md fact 3.
// The orchestration (which threads, /proc parsing, errors) lives in Swift.
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "hw_registers.h"  // CHangwatchDump's include directory

#ifdef __cplusplus
extern "C" {
#endif

/// Number of registers `hwp_get_registers` fills, in the architecture's hw_registers.h order
/// (as Registers.names).
#define HWP_REGISTER_COUNT HW_REGISTER_COUNT

/// Loads libunwind-ptrace and the architecture's remote libunwind (HW_UNWIND_REMOTE_LIBRARY,
/// e.g. libunwind-x86_64.so.8) once (thread-safe). Returns 0, or -1 with a one-line reason in
/// `error` (dlerror text or the missing symbol).
int hwp_load_unwinder(char *error, size_t error_size);

/// Each returns 0 or an errno value (never sets errno for the caller to read).
int hwp_seize(pid_t tid);
int hwp_interrupt(pid_t tid);
/// `signal` is re-injected on detach (a signal whose delivery the stop intercepted), or 0.
int hwp_detach(pid_t tid, int signal);
/// The calling thread's kernel id (gettid): what a tracee's TracerPid names when this thread
/// traces it.
pid_t hwp_current_tid(void);

/// Result of waiting for a seized thread to stop.
typedef enum {
    HWP_WAIT_STOPPED = 0,
    /// The thread exited (or was reaped elsewhere) before it stopped.
    HWP_WAIT_EXITED = 1,
    /// Still not stopped when the deadline passed (e.g. stuck in uninterruptible sleep).
    HWP_WAIT_TIMED_OUT = 2,
} hwp_wait_result;

/// Waits up to `timeout_ms` for `tid` to enter a ptrace stop. On a signal-delivery stop,
/// `*pending_signal` receives the signal, which must be passed back to `hwp_detach`.
hwp_wait_result hwp_wait_stopped(pid_t tid, int timeout_ms, int *pending_signal);

/// The stopped thread's registers into `values` (HWP_REGISTER_COUNT entries; PTRACE_GETREGS,
/// or PTRACE_GETREGSET where there is none: hwd_ptrace_read_registers). With `syscall` and
/// `arguments` (6 entries): the system call the stop interrupted, as its /proc syscall line
/// showed it before (hwd_interrupted_syscall; -1 for none), where HWP_SYSCALL_FROM_REGISTERS
/// says registers tell it. With `thread_pointer`: the thread's (hwd_ptrace_thread_pointer; 0 when
/// unknown), where its stack window ends (hwd_stack_window_bytes). 0 or errno.
int hwp_get_registers(pid_t tid, uint64_t *values, int64_t *syscall, uint64_t *arguments, uint64_t *thread_pointer);

/// Whether a stop's registers tell the system call it interrupted (x86-64; not arm64, whose
/// x0 holds the error at the stop): hw_registers.h's HW_SYSCALL_FROM_REGISTERS.
#define HWP_SYSCALL_FROM_REGISTERS HW_SYSCALL_FROM_REGISTERS

/// process_vm_readv of up to `size` bytes at `address`; returns bytes read (possibly fewer
/// when the range runs off a mapping), or -errno.
long hwp_read_memory(pid_t pid, uint64_t address, void *buffer, size_t size);

/// One libunwind address space with global caching, reused for every thread of a capture
/// (and across samples of one process). Opaque.
typedef struct hwp_unwinder hwp_unwinder;

/// NULL when the libraries are not loaded or allocation failed.
hwp_unwinder *hwp_unwinder_create(void);
void hwp_unwinder_destroy(hwp_unwinder *unwinder);

/// Forgets the target's modules (its executable mappings and their unwind tables, read on the
/// first unwind after this): call it before each capture, since the target may have loaded,
/// unloaded or exec'ed since.
void hwp_unwinder_forget_modules(hwp_unwinder *unwinder);

/// Unwinds the stopped thread `tid`: frames[0] is the program counter, the rest return
/// addresses. Returns the frame count (>= 0; 0 when not even the first frame could be read)
/// or a negative libunwind error when the cursor could not be initialised.
int hwp_unwind(hwp_unwinder *unwinder, pid_t tid, uint64_t *frames, int max_frames);

/// Unwinds thread `tid` of a running process from what was copied while it was stopped:
/// `registers` (HWP_REGISTER_COUNT entries) and `stack_size` bytes of its stack at
/// `stack_address`. Reads inside that window come from the copy; anything else (a stack
/// deeper than the window) is read from the live process with process_vm_readv, which may
/// have moved on. Unwind tables come from the modules' `.eh_frame_hdr` in the live process, as for `hwp_unwind`.
int hwp_unwind_copied(hwp_unwinder *unwinder, pid_t tid, const uint64_t *registers, const void *stack,
                      uint64_t stack_address, size_t stack_size, uint64_t *frames, int max_frames);

/// Whether `hwp_unwind_copied` tries the CFI stepper (Sources/CHangwatchCFI/hw_cfi.c) before
/// libunwind (on by default; off for tests that compare the two).
void hwp_set_cfi_stepper(int on);

/// How many threads this process has unwound with the CFI stepper alone (for tests).
uint32_t hwp_stepped_threads(void);

/// Runs `body(context)` on a fresh thread and joins it. Ptrace tracer links belong to the
/// thread that made them and the kernel drops them when that thread exits, so capturing on a
/// short-lived thread guarantees nothing stays traced even if a thread never stopped.
/// Returns 0 or the pthread_create error.
int hwp_run_on_tracer_thread(void (*body)(void *), void *context);

// ---- staying attached (`hangwatch run --catch-crashes`) -----------------------------------
// One long-lived tracer thread owns the child: it seizes it with these options, follows its
// threads, and answers every ptrace-stop. All calls below must come from that thread.

/// PTRACE_O_TRACECLONE | PTRACE_O_TRACEEXEC | PTRACE_O_EXITKILL: follow new threads (not
/// forked processes), see exec, and never let the child outlive its tracer.
#define HWP_FOLLOW_OPTIONS 0x100018UL
/// PTRACE_EVENT_* numbers as found in `status >> 16` of a ptrace-stop.
#define HWP_EVENT_CLONE 3
#define HWP_EVENT_EXEC 4
#define HWP_EVENT_STOP 128

/// PTRACE_SEIZE with `options`. 0 or errno.
int hwp_seize_with_options(pid_t tid, unsigned long options);
/// PTRACE_CONT, delivering `signal` (0 for none). 0 or errno.
int hwp_continue(pid_t tid, int signal);
/// PTRACE_LISTEN: leave a group-stopped tracee stopped, but let SIGCONT wake it. 0 or errno.
int hwp_listen(pid_t tid);
/// PTRACE_GETSIGINFO of a signal-delivery-stop: number, si_code, si_addr. 0 or errno.
int hwp_get_signal_info(pid_t tid, int *number, int *code, uint64_t *address);
/// PTRACE_GETEVENTMSG (the new thread's tid after PTRACE_EVENT_CLONE). 0 or errno.
int hwp_get_event_message(pid_t tid, unsigned long *message);
/// waitpid(-1, __WALL | WNOHANG): the tid with a status, 0 when none is pending, or -errno.
pid_t hwp_wait_any(int *status);
/// Waits up to `timeout_ms` for a status of `tid` (waitpid(tid, __WALL)): 0 with `*status`
/// set, 1 when none came in time, 2 when `tid` is not (or no longer) waitable.
int hwp_wait_thread(pid_t tid, int timeout_ms, int *status);

#ifdef __cplusplus
}
#endif
