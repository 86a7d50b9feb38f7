// In-process capture of every thread: each thread is asked with a signal to record its own
// registers, stack (unwound from the signal context with libgcc's lock-free unwinder, or
// libunwind: docs/platform-facts.md fact 4) and Dispatch queue into a preallocated slot. Only
// the signal handler runs in signal context; everything else here runs on the requesting
// thread. libunwind is dlopen'ed RTLD_LOCAL (docs/platform-facts.md fact 3).
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "hw_registers.h"

#ifdef __cplusplus
extern "C" {
#endif

/// The architecture's register layout (hw_registers.h), as `Registers.names` in ProcessSnapshot.swift.
#define HWC_REGISTER_COUNT HW_REGISTER_COUNT
#define HWC_QUEUE_LABEL_BYTES 64
/// Upper bounds accepted by hwc_init (the slots are reserved with mmap up front).
#define HWC_MAX_THREADS_LIMIT 65536
#define HWC_MAX_FRAMES_LIMIT 1024
#define HWC_MAX_STACK_BYTES_LIMIT (64 * 1024)

/// Slot flags.
#define HWC_SLOT_FLAG_MAIN_QUEUE 1u
/// The unwinder could not start from the thread's context (frames holds only the pc).
#define HWC_SLOT_FLAG_UNWIND_FAILED 2u
/// The quiet capture read the thread's system call from its registers at the stop (`syscall`,
/// `syscall_arguments`; hwd_interrupted_syscall): no /proc syscall line was read before it.
#define HWC_SLOT_FLAG_SYSCALL 4u
/// Whether the quiet capture learns each thread's system call from its registers (x86-64), so
/// that nothing is read from /proc before the stop; 0 where the caller must read it then.
#define HWC_SYSCALL_FROM_REGISTERS HW_SYSCALL_FROM_REGISTERS

/// What one thread recorded. Read by Swift only after hwc_capture reported it answered.
typedef struct hwc_slot {
    uint64_t ticket;                         // (sequence << 2) | state; private to the C side
    int32_t tid;
    uint32_t frame_count;
    uint64_t registers[HWC_REGISTER_COUNT];  // in hw_registers.h order (pc HW_REGISTER_PC, sp HW_REGISTER_SP)
    uint64_t queue;                          // queue the thread is draining, 0 if none or unknown
    uint64_t stack_start;                    // address the copied stack bytes start at (the sp)
    uint32_t stack_size;                     // bytes copied into hwc_slot_stack()
    uint32_t flags;                          // HWC_SLOT_FLAG_*
    uint64_t blocked;                        // signals 1-64 the thread blocked when it was interrupted (bit n-1: n)
    uint64_t cpu_ns[3];                      // the thread's CPU clocks when it answered: PROF, VIRT, SCHED (kinds 0-2)
    char name[16];                           // its name then (PR_GET_NAME), NUL-terminated
    char queue_label[HWC_QUEUE_LABEL_BYTES]; // NUL-terminated, truncated copy of the queue's label
    int64_t syscall;                         // HWC_SLOT_FLAG_SYSCALL: the call it was blocked in, -1 none
    uint64_t syscall_arguments[6];
} hwc_slot;

typedef struct hwc_config {
    uint32_t max_threads;      // slots to reserve (threads beyond this are reported HWC_RESULT_NO_SLOT)
    uint32_t max_frames;       // frames per slot
    uint32_t max_stack_bytes;  // stack bytes per slot (0 = never copy stack memory)
    int32_t ordinary_signal;   // signal for threads that accept it (e.g. SIGRTMIN+n); 0 = SIGPROF only
    const char *unwind_library; // soname to dlopen; NULL = HW_UNWIND_LOCAL_LIBRARY ("libunwind.so.8")
} hwc_config;

/// Per-thread outcome of hwc_capture.
enum {
    HWC_RESULT_ANSWERED = 0,       // slot holds the thread's data
    HWC_RESULT_TIMED_OUT = 1,      // signalled, no answer within the timeout
    HWC_RESULT_EXITED = 2,         // the thread no longer exists (ESRCH)
    HWC_RESULT_NOT_SIGNALLED = 3,  // caller passed signal 0: the thread accepts none of ours
    HWC_RESULT_NO_SLOT = 4,        // more threads than reserved slots (or all remaining slots busy)
    HWC_RESULT_SEND_FAILED = 5,    // rt_tgsigqueueinfo failed for another reason
};

/// Loads libunwind (RTLD_LOCAL) and libgcc's unwinder, resolves their entry points, warms them up, reserves the slots and
/// installs the handlers for SIGPROF and `ordinary_signal`. Returns 0, or -1 with a message in
/// `error`. A second call returns the first call's result and ignores the new config.
int hwc_init(const hwc_config *config, char *error, size_t error_length);

/// Which unwinder the capture handlers use: "libgcc" or "libunwind" (docs/platform-facts.md
/// fact 4); "" before hwc_init succeeded.
const char *hwc_handler_unwinder(void);

/// The signal hwc_init installed for ordinary threads (0 if none), and SIGPROF.
int32_t hwc_ordinary_signal(void);

/// Address of the main Dispatch queue (`&_dispatch_main_q`), 0 when libdispatch is not loaded.
uint64_t hwc_main_queue_address(void);

/// A `signals[i]` value: ask with SIGPROF and the ordinary signal both. For a thread whose mask
/// blocks both only for a moment (pthread_create blocks all signals around clone(); a new
/// thread starts with all blocked): the signal stays pending and is answered on unblocking.
#define HWC_SIGNAL_EITHER (-1)

/// What a capture asks of its caller, on the requesting thread (never in signal context).
typedef struct hwc_capture_hooks {
    void *context;
    /// Runs for each thread before any is signalled: the caller reads what must be read while
    /// the thread still sleeps (its /proc syscall line) and returns the signal to ask it with,
    /// overriding `signals[index]`; 0 does not ask it (HWC_RESULT_NOT_SIGNALLED).
    int32_t (*choose)(void *context, uint32_t index);
    /// Runs once for each thread still unanswered when no answer has arrived for `stall_ns`
    /// (a signal chosen from a mask that has changed since stays pending): returns the signal to
    /// ask again with, `sent` to keep waiting, or 0 to give the thread up (NOT_SIGNALLED).
    int32_t (*recheck)(void *context, uint32_t index, int32_t sent);
    uint64_t stall_ns;
} hwc_capture_hooks;

/// A thread ptrace may not stop (EPERM: a tracer is attached already, Yama, a non-dumpable
/// process, seccomp): hwc_capture_quiet's caller asks it with a signal instead.
#define HWC_RESULT_REFUSED 6

/// Quiet capture (docs/hang-monitor.md, "How capture works"): a helper process sharing this
/// process's memory (clone CLONE_VM, raw system calls only) stops the threads with
/// PTRACE_SEIZE + PTRACE_INTERRUPT, copies each one's registers and stack window into its slot
/// and lets it go at once; the threads are unwound afterwards, on the requesting thread, from
/// the copies (libunwind's remote interface over our own memory). A ptrace stop runs no handler
/// in the thread, so the kernel restarts its blocking call (nanosleep, poll, select, futex…):
/// nothing in the program sees the capture, but for the calls the kernel ends with EINTR after
/// any stop (epoll_wait, semop with a timeout, sigtimedwait; signal(7)).
///
/// Loads the copy unwinder (libunwind's remote library, RTLD_LOCAL) and finds where libdispatch
/// keeps each thread's current queue. 0, or -1 with why in `error` (then only signals capture).
/// Once: later calls return the first call's result. Needs hwc_init first.
int hwc_quiet_init(char *error, size_t error_length);

/// What a thread the quiet capture's helper never got to (it was killed, or ended at its
/// deadline) is: hwc_capture_quiet's caller asks it with a signal instead.
#define HWC_RESULT_HELPER_LOST 7

/// Bits of hwc_capture_quiet's `*failure` when it returns -3, beside the signal (low 7 bits).
#define HWC_HELPER_CORE_DUMPED 0x80  /* the kernel says the helper dumped core */
#define HWC_HELPER_NOT_GONE 0x100     /* still there 1 s after SIGKILL: no other helper is started */

/// hwc_capture, quietly. `hooks->choose`, when set, runs for each thread, on the calling thread,
/// before that thread is stopped (the helper waits for it thread by thread): nonzero captures
/// it, 0 leaves it (HWC_RESULT_NOT_SIGNALLED); where HWC_SYSCALL_FROM_REGISTERS the caller
/// needs none (each slot gets the system call from the stop's registers, HWC_SLOT_FLAG_SYSCALL).
/// `hooks->recheck` is not used. Each thread is unwound
/// as soon as the helper has let it go, while it stops the next ones. A thread
/// ptrace refuses is HWC_RESULT_REFUSED. Every wait on the helper has a deadline, `timeout_ns`
/// + 0.5 s: past it the helper is killed (through its pidfd), which lets every thread go.
/// Under Yama ptrace_scope 1 the helper is declared the process's tracer (PR_SET_PTRACER) only
/// when a first helper was refused without: a declaration of the program's own that lets it
/// trace (PR_SET_PTRACER_ANY, its own pid, an ancestor's) is never touched.
/// Returns 0; -1 if not initialised; -2 when no helper could be started (`*failure` holds the
/// errno; nothing was captured); -3 when the helper was killed by a signal it was not sent (a
/// seccomp filter that kills ptrace: `*failure` is the signal | HWC_HELPER_* bits), -4 when it
/// was ended at its deadline (stopped, starved): then the threads it copied are answered and
/// those it never got to are HWC_RESULT_HELPER_LOST.
int hwc_capture_quiet(const int32_t *tids, uint32_t count, uint32_t frames, uint32_t stack_bytes, uint64_t timeout_ns,
                      const hwc_capture_hooks *hooks, int32_t *results, int32_t *slots, uint64_t *elapsed_ns,
                      int32_t *failure);

/// Whether `pid` is one of this process's recent quiet-capture helpers (and, when the kernel can
/// tell, still shares its memory): a tracer that is no debugger (the hang monitor's TracerPid).
int hwc_quiet_is_own_helper(int32_t pid);

/// Whether the quiet capture unwinds with its CFI stepper where it applies (on, the default) or
/// every thread with libunwind (off): tests compare the two on the same stopped threads.
void hwc_quiet_set_cfi_stepper(int on);

/// How many threads of the last quiet capture the CFI stepper unwound (the others: libunwind).
uint32_t hwc_quiet_stepped_threads(void);

/// Captures `count` threads at once. `signals[i]` is the signal to ask `tids[i]` with (0: do not
/// ask; HWC_SIGNAL_EITHER). The calling thread, if listed, is captured directly without a signal. For each thread
/// writes `results[i]` (HWC_RESULT_*) and `slots[i]` (slot index, -1 if none). `frames` and
/// `stack_bytes` are clamped to the configured maxima (0 frames: registers and queue only).
/// `hooks` may be NULL. Returns 0, or -1 if not initialised. Not reentrant: callers serialise.
int hwc_capture(const int32_t *tids, const int32_t *signals, uint32_t count, uint32_t frames,
                uint32_t stack_bytes, uint64_t timeout_ns, const hwc_capture_hooks *hooks, int32_t *results,
                int32_t *slots, uint64_t *elapsed_ns);

/// For the crash handler (signal context): like hwc_capture without stack bytes. When another
/// thread's capture holds the slots, waits for it up to `wait_ns` (nanosleep), then returns -2;
/// returns -2 at once when the caller itself holds them (it crashed inside a capture).
int hwc_capture_if_idle(const int32_t *tids, const int32_t *signals, uint32_t count, uint32_t frames,
                        uint64_t wait_ns, uint64_t timeout_ns, int32_t *results, int32_t *slots, uint64_t *elapsed_ns);

/// Unwinds from a signal handler's ucontext (frames[0] = its pc). Signal-safe once hwc_init
/// succeeded (libunwind warmed up); returns the frame count, 0 if not initialised.
uint32_t hwc_unwind_signal_context(void *ucontext, uint64_t *frames, uint32_t max_frames);

/// A function every thread runs (in signal context) after answering a capture request, with the
/// handler's ucontext: the crash handler gives threads created after install their alternate
/// signal stack this way (through uc_stack, which sigreturn re-installs).
void hwc_set_answer_hook(void (*hook)(void *ucontext));

/// Waits (bounded) until no capture handler is running. A thread still finishing its answer to
/// the previous capture blocks both capture signals meanwhile, and would look unreachable in
/// /proc. Returns 0, or -1 on timeout.
int hwc_wait_for_handlers(uint64_t timeout_ns);

const hwc_slot *hwc_slot_at(int32_t index);
const uint64_t *hwc_slot_frames(int32_t index);
const uint8_t *hwc_slot_stack(int32_t index);

/// One loaded ELF object as dl_iterate_phdr reports it (outside any handler).
#define HWC_MODULE_MAX_NOTES 4
typedef struct hwc_module {
    const char *name;  // "" for the main executable
    uint64_t bias;     // dlpi_addr
    uint64_t start;    // lowest PT_LOAD address
    uint64_t end;      // highest PT_LOAD address + memsz
    uint32_t note_count;
    uint32_t note_alignment[HWC_MODULE_MAX_NOTES];
    uint64_t note_address[HWC_MODULE_MAX_NOTES];  // mapped PT_NOTE segments
    uint64_t note_size[HWC_MODULE_MAX_NOTES];
} hwc_module;

/// Calls `visit` for each loaded object (dl_iterate_phdr, which Swift's Glibc does not export).
void hwc_for_each_module(void (*visit)(const hwc_module *module, void *context), void *context);

/// Kernel thread id of the caller, read once per thread (right in a fork's child too). Not for
/// signal handlers: the first call in a thread may run pthread_once.
int32_t hwc_gettid(void);

#ifdef __cplusplus
}
#endif
