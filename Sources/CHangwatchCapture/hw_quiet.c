// Quiet capture (hw_capture.h: hwc_quiet_init, hwc_capture_quiet): threads are stopped by
// ptrace, not interrupted by a signal, so no handler runs in them and the kernel restarts
// whatever blocking call they were in.
//
// The tracer is a helper process that shares this process's memory: clone(CLONE_VM) without
// CLONE_THREAD makes a process of its own (ptrace refuses to trace one's own thread group) that
// writes straight into the capture slots. It runs with this process's TLS pointer, so it calls
// nothing of libc: raw system calls only (hwq_syscall), no errno, no lock, no allocation. It
// seizes and interrupts every asked thread, and as each one stops copies its registers, its
// thread pointer and a stack window, then detaches it at once (a thread is paused for its own
// copy only), and exits; leaving detaches any thread that had not stopped yet (D sleep). It
// sleeps until a thread stops (SIGCHLD, helper_hear_stops), instead of polling for it.
// Every wait on it has a deadline: a helper stopped (SIGSTOP) or starved past it is killed
// through its pidfd, and its death lets every thread it held go. One killed by something else
// (a seccomp filter that kills ptrace) dumps no core and is told apart (hwc_capture_quiet).
// The requesting thread reads each thread's syscall line before the helper may stop it (the
// survey: the helper waits for it thread by thread), then unwinds each thread from the copies
// as soon as the helper has let it go, over this process's own memory: with the CFI stepper
// (hw_cfi.c, rules cached by address across captures) where it applies, else with libunwind's
// remote interface (hwq accessors below), whose every step takes a lock behind two sigprocmask
// calls. What it needs (a lock, malloc) may be held by one of the few threads stopped at that
// moment; the helper lets them go without waiting for it.
#define _GNU_SOURCE
#include "hw_capture.h"
#include "hw_capture_internal.h"
#include "hw_cfi.h"
#include "hw_procfs.h"
#include "hw_process.h"

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

// Types and constants only: every libunwind function is reached through dlsym'ed pointers.
#include <libunwind.h>

HW_UNWIND_CHECKS;

#ifndef PTRACE_EVENT_STOP
#define PTRACE_EVENT_STOP 128
#endif
#ifndef CLONE_PIDFD
#define CLONE_PIDFD 0x00001000
#endif
#ifndef P_PIDFD
#define P_PIDFD 3
#endif

// ---- raw system calls (the helper may not touch libc's per-thread state) -------------------

// Every call passes all six argument registers (a call that takes fewer ignores the rest):
// process_vm_readv's sixth, its flags, must be 0.
static inline long hwq_syscall(long number, long a, long b, long c, long d, long e) {
#if defined(__x86_64__)
    long result;
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    register long r9 __asm__("r9") = 0;
    __asm__ volatile("syscall" : "=a"(result) : "a"(number), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return result;
#elif defined(__aarch64__)
    register long x8 __asm__("x8") = number;
    register long x0 __asm__("x0") = a;
    register long x1 __asm__("x1") = b;
    register long x2 __asm__("x2") = c;
    register long x3 __asm__("x3") = d;
    register long x4 __asm__("x4") = e;
    register long x5 __asm__("x5") = 0;
    __asm__ volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5) : "memory");
    return x0;
#else
#error "hangwatch: hw_quiet.c needs a raw system call for this architecture"
#endif
}

static inline uint64_t hwq_now_ns(void) {
    struct timespec t = {0, 0};
    hwq_syscall(SYS_clock_gettime, CLOCK_MONOTONIC, (long)&t, 0, 0, 0);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

// ---- the helper -------------------------------------------------------------------------------

// Per listed thread, while the helper works (then the HWC_RESULT_* it came to).
enum { QUIET_ASK = -1, QUIET_STOPPING = -2 };

struct quiet_job {
    pid_t pid;                 // this process
    const int32_t *tids;
    const int32_t *slots;
    int32_t *results;
    uint64_t *thread_pointers; // per listed thread: its TLS pointer when stopped
    uint64_t *interrupted_at;  // per listed thread: when the helper asked it to stop (ns)
    uint32_t count;
    uint32_t stack_bytes;
    uint64_t deadline_ns;
    hwc_slot *slot_base;
    uint8_t *stack_base;
    uint32_t stack_stride;
    int32_t go;                // futex word: 1 go (a helper that waits 1 s without it exits)
    // Futex word: the threads the requester has surveyed (their syscall lines read, whether to
    // ask them decided); the helper stops thread i only once i < surveyed.
    int32_t surveyed;
    int32_t helper_waiting;    // 1 while the helper sleeps on `surveyed`
    int32_t seized;            // threads PTRACE_SEIZE took
    int32_t refused_eperm;     // threads it refused with EPERM (Yama, a tracer already there…)
    int32_t finished;          // 1 once the helper has done its work (its last store)
};

static int find_listed(const struct quiet_job *job, long tid) {
    for (uint32_t i = 0; i < job->count; i++)
        if (job->tids[i] == tid && job->results[i] == QUIET_STOPPING) return (int)i;
    return -1;
}

// process_vm_readv stops at the first unmapped page (a stack window may run past the stack's end).
static uint32_t helper_copy(pid_t pid, uint8_t *destination, uint64_t from, uint32_t wanted) {
    struct iovec local = {destination, wanted};
    struct iovec remote[HWC_WINDOW_PIECES];
    unsigned long pieces = hwc_window_pieces(remote, from, wanted);
    long copied = hwq_syscall(SYS_process_vm_readv, pid, (long)&local, 1, (long)remote, (long)pieces);
    return copied > 0 ? (uint32_t)copied : 0;
}

// The stopped thread's registers, thread pointer and stack window into its slot.
static void helper_copy_thread(struct quiet_job *job, uint32_t index, long tid) {
    hwc_slot *slot = &job->slot_base[job->slots[index]];
    hwd_ptrace_registers registers;
    struct iovec io = {&registers, sizeof registers};
    if (hwq_syscall(SYS_ptrace, PTRACE_GETREGSET, tid, NT_PRSTATUS, (long)&io, 0) != 0) {
        slot->flags |= HWC_SLOT_FLAG_UNWIND_FAILED;
        return;
    }
    hwd_registers_from_ptrace(&registers, slot->registers);
    if (HW_SYSCALL_FROM_REGISTERS) {
        slot->syscall = hwd_interrupted_syscall(&registers, slot->syscall_arguments);
        slot->flags |= HWC_SLOT_FLAG_SYSCALL;
    }
#if defined(__x86_64__)
    job->thread_pointers[index] = registers.fs_base;
#else
    uint64_t tls = 0;
    struct iovec tls_io = {&tls, sizeof tls};
    if (hwq_syscall(SYS_ptrace, PTRACE_GETREGSET, tid, NT_ARM_TLS, (long)&tls_io, 0) == 0) job->thread_pointers[index] = tls;
#endif
    slot->stack_start = slot->registers[HW_REGISTER_SP];
    uint32_t wanted = hwd_stack_window_bytes(slot->stack_start, job->thread_pointers[index], job->stack_bytes);
    slot->stack_size = wanted == 0 ? 0
        : helper_copy(job->pid, job->stack_base + (size_t)job->slots[index] * job->stack_stride, slot->stack_start, wanted);
}

static void helper_wait_for_go(struct quiet_job *job) {
    struct timespec second = {1, 0};
    uint64_t deadline = hwq_now_ns() + 1000000000u;
    while (__atomic_load_n(&job->go, __ATOMIC_ACQUIRE) == 0 && hwq_now_ns() < deadline)
        hwq_syscall(SYS_futex, (long)&job->go, FUTEX_WAIT, 0, (long)&second, 0);
}

// Threads stopped and not yet let go at once, at most: a thread waits for the copies of the
// ones stopped before it, so this bounds its pause (HWQ_WINDOW × one copy, ~25 µs each)
// whatever the number of threads, at the price of a capture a few ms wide for hundreds.
#define HWQ_WINDOW 8
// A sleeping thread stops within microseconds of its interrupt, a running one within a
// scheduler tick. One that has not stopped after this and is in uninterruptible sleep (D:
// disk I/O, an fsync, vfork) is left (timed out, its /proc data reported) instead of holding
// the whole capture — and the monitor — until the capture's timeout; one that is only waiting
// for a CPU (a loaded machine) is waited for.
#define HWQ_STOP_PATIENCE_NS 50000000u

// The next surveyed thread to ask from `*next` on (below `limit`), seized and interrupted
// (QUIET_STOPPING); 0 when none is left below `limit`. A refusal or a gone thread is its result.
static int helper_interrupt_next(struct quiet_job *job, uint32_t *next, uint32_t limit) {
    for (; *next < limit; (*next)++) {
        if (job->results[*next] != QUIET_ASK) continue;
        long tid = job->tids[*next];
        long failed = hwq_syscall(SYS_ptrace, PTRACE_SEIZE, tid, 0, 0, 0);
        if (failed != 0) {
            __atomic_store_n(&job->results[*next], failed == -ESRCH ? HWC_RESULT_EXITED : HWC_RESULT_REFUSED, __ATOMIC_RELEASE);
            if (failed == -EPERM) job->refused_eperm++;
            continue;
        }
        job->seized++;
        failed = hwq_syscall(SYS_ptrace, PTRACE_INTERRUPT, tid, 0, 0, 0);
        job->results[*next] = failed == 0 ? QUIET_STOPPING : HWC_RESULT_EXITED;
        job->interrupted_at[*next] = hwq_now_ns();
        (*next)++;
        if (failed == 0) return 1;
    }
    return 0;
}

// The stop of the thread asked longest ago that has not been taken yet, if it has stopped: its
// tid (and `*status`), else 0. wait4(-1) alone reports the newest tracee first (the kernel
// keeps a tracer's tracees newest first), so a thread slow to stop — a running one, such as
// the hung thread, which stops only when its CPU enters the kernel — would stay stopped
// behind every sleeping thread asked after it, for the rest of the capture.
static long helper_wait_oldest(struct quiet_job *job, uint32_t *oldest, uint32_t next, int *status) {
    while (*oldest < next && job->results[*oldest] != QUIET_STOPPING) (*oldest)++;
    if (*oldest >= next) return 0;
    return hwq_syscall(SYS_wait4, job->tids[*oldest], (long)status, __WALL | WNOHANG, 0, 0);
}

// Until the requester has surveyed more than `seen` threads, or 1 ms.
static void helper_wait_for_survey(struct quiet_job *job, int32_t seen) {
    struct timespec millisecond = {0, 1000000};
    __atomic_store_n(&job->helper_waiting, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&job->surveyed, __ATOMIC_SEQ_CST) == seen)
        hwq_syscall(SYS_futex, (long)&job->surveyed, FUTEX_WAIT, seen, (long)&millisecond, 0);
    __atomic_store_n(&job->helper_waiting, 0, __ATOMIC_SEQ_CST);
}

// One stop reported by wait4: copied and let go (a signal that stopped it goes on with it).
// `known` is its index when the wait named it (-1: looked up, a scan of the list). Returns
// whether it was a thread still awaited (not one given up on, which is only let go).
static int helper_take(struct quiet_job *job, long tid, int status, int known) {
    int index = known >= 0 && job->tids[known] == tid && job->results[known] == QUIET_STOPPING ? known : find_listed(job, tid);
    // Our interrupt (or a group stop) stops with PTRACE_EVENT_STOP; any other stop is a signal
    // on its way to the thread: it goes on with the detach.
    long passed = WIFSTOPPED(status) && (status >> 16) != PTRACE_EVENT_STOP ? WSTOPSIG(status) : 0;
    if (index < 0) {
        if (WIFSTOPPED(status)) hwq_syscall(SYS_ptrace, PTRACE_DETACH, tid, 0, passed, 0);
        return 0;
    }
    if (WIFSTOPPED(status)) {
        helper_copy_thread(job, (uint32_t)index, tid);
        hwq_syscall(SYS_ptrace, PTRACE_DETACH, tid, 0, passed, 0);
        // Its slot is whole: the requester may unwind it now (release, with finish_ready's acquire).
        __atomic_store_n(&job->results[index], HWC_RESULT_ANSWERED, __ATOMIC_RELEASE);
    } else {
        __atomic_store_n(&job->results[index], HWC_RESULT_EXITED, __ATOMIC_RELEASE);
    }
    return 1;
}

// Field 3 of /proc/PID/task/TID/stat (the state letter), with raw system calls; 0 if unreadable.
static char helper_thread_state(pid_t pid, long tid) {
    char path[64] = "/proc/";
    int at = 6;
    long numbers[2] = {pid, tid};
    for (int n = 0; n < 2; n++) {
        char digits[24];
        int count = 0;
        for (long value = numbers[n]; count == 0 || value > 0; value /= 10) digits[count++] = (char)('0' + value % 10);
        while (count > 0) path[at++] = digits[--count];
        const char *next = n == 0 ? "/task/" : "/stat";
        while (*next) path[at++] = *next++;
    }
    path[at] = 0;
    long fd = hwq_syscall(SYS_openat, AT_FDCWD, (long)path, O_RDONLY | O_CLOEXEC, 0, 0);
    if (fd < 0) return 0;
    char text[512];
    long length = hwq_syscall(SYS_read, fd, (long)text, sizeof text, 0, 0);
    hwq_syscall(SYS_close, fd, 0, 0, 0, 0);
    hw_proc_stat stat;  // the parser calls nothing: safe in this helper
    return length > 0 && hw_proc_parse_stat(text, (size_t)length, &stat) == 0 ? stat.state : 0;
}

// Threads asked to stop longer ago than HWQ_STOP_PATIENCE_NS that are in uninterruptible sleep
// are given up (timed out); how many. The threads still stopping are among those asked from
// the oldest one not taken (`from`) to the next to ask (`to`): the rest are not looked at.
static uint32_t helper_give_up_slow(struct quiet_job *job, uint64_t now, uint32_t from, uint32_t to) {
    uint32_t given_up = 0;
    for (uint32_t i = from; i < to && i < job->count; i++) {
        if (job->results[i] != QUIET_STOPPING || now - job->interrupted_at[i] < HWQ_STOP_PATIENCE_NS) continue;
        if (helper_thread_state(job->pid, job->tids[i]) != 'D') {
            job->interrupted_at[i] = now - HWQ_STOP_PATIENCE_NS + 10000000u;  // look again in 10 ms
            continue;
        }
        job->results[i] = HWC_RESULT_TIMED_OUT;  // still seized: let go when it stops, or when we exit
        given_up++;
    }
    return given_up;
}

// The kernel sends a tracer SIGCHLD at each stop and end of a tracee, unless the tracer ignores
// SIGCHLD or set SA_NOCLDSTOP (do_notify_parent_cldstop): the helper's actions are its own copy of
// the program's (clone without CLONE_SIGHAND), set back to SIG_DFL here, for the helper only.
// Blocked (every signal is, in the helper), SIGCHLD stays pending for rt_sigtimedwait, so the
// helper sleeps until a thread stops instead of polling for it (each poll is two wait4 calls
// and a context switch, on the CPU the requester unwinds on).
static void helper_hear_stops(void) {
    struct { uint64_t handler, flags, restorer, mask; } default_action = {0, 0, 0, 0};  // SIG_DFL, the kernel's layout
    hwq_syscall(SYS_rt_sigaction, SIGCHLD, (long)&default_action, 0, 8, 0);
}

// Until a tracee stops or ends (SIGCHLD, helper_hear_stops), 1 ms at most (threads slow to
// stop are looked at between) and not past the deadline. A stop that came before the call left
// SIGCHLD pending: the call returns at once.
static void helper_sleep_until_stop(uint64_t now, uint64_t deadline_ns) {
    if (now >= deadline_ns) return;
    uint64_t wait_ns = deadline_ns - now < 1000000u ? deadline_ns - now : 1000000u;
    struct timespec wait = {0, (long)wait_ns};
    uint64_t sigchld = 1ull << (SIGCHLD - 1);
    hwq_syscall(SYS_rt_sigtimedwait, (long)&sigchld, 0, (long)&wait, 8, 0);
}

// No core file if the helper is killed (a seccomp filter that kills ptrace, systemd's
// SystemCallFilter= default): its dump would be the whole program's memory. RLIMIT_CORE is the
// helper's own (a process of its own: clone without CLONE_THREAD), the program's is untouched;
// 1 and not 0, because the kernel writes no file under one page and also aborts a dump to a
// core_pattern pipe for 1, which it would feed for 0 (docs/platform-facts.md fact 10). A hard
// limit of 0 leaves 0. Its first system call, so that any later one that kills it dumps nothing.
static void helper_forbid_core(void) {
    struct { uint64_t current, maximum; } core;
    if (hwq_syscall(SYS_prlimit64, 0, RLIMIT_CORE, 0, (long)&core, 0) != 0) return;
    core.current = core.maximum < 1 ? core.maximum : 1;
    hwq_syscall(SYS_prlimit64, 0, RLIMIT_CORE, (long)&core, 0, 0);
}

static int helper_main(void *argument) {
    struct quiet_job *job = argument;
    helper_forbid_core();
    // Its own name (its comm only, not the program's): what a walk of /proc tells it by
    // (ProcFS.descendants: `hangwatch run` lists no helper as a process of its job).
    hwq_syscall(SYS_prctl, PR_SET_NAME, (long)HW_QUIET_HELPER_NAME, 0, 0, 0);
    // Killed with the thread that made it, so it never outlives a capture it serves.
    hwq_syscall(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    if (hwq_syscall(SYS_getppid, 0, 0, 0, 0, 0) != job->pid) return 0;
    // Its waits for a stop are microseconds: no 50 µs of timer slack on each.
    hwq_syscall(SYS_prctl, PR_SET_TIMERSLACK, 1000, 0, 0, 0);
    helper_hear_stops();
    helper_wait_for_go(job);
    if (__atomic_load_n(&job->go, __ATOMIC_ACQUIRE) != 1) return 0;
    uint32_t next = 0, stopping = 0, oldest = 0;
    for (;;) {
        int32_t surveyed = __atomic_load_n(&job->surveyed, __ATOMIC_ACQUIRE);
        while (stopping < HWQ_WINDOW && helper_interrupt_next(job, &next, (uint32_t)surveyed)) stopping++;
        if (stopping == 0) {
            if (next >= job->count || hwq_now_ns() >= job->deadline_ns) break;
            helper_wait_for_survey(job, surveyed);  // the requester is still reading syscall lines
            continue;
        }
        int status = 0, known = -1;
        long tid = helper_wait_oldest(job, &oldest, next, &status);
        if (tid > 0) known = (int)oldest;
        else tid = hwq_syscall(SYS_wait4, -1, (long)&status, __WALL | WNOHANG, 0, 0);
        if (tid > 0) {
            if (helper_take(job, tid, status, known)) stopping--;
        } else if (tid == -ECHILD || hwq_now_ns() >= job->deadline_ns) {
            break;
        } else if (tid == 0) {
            uint64_t now = hwq_now_ns();
            stopping -= helper_give_up_slow(job, now, oldest, next);
            helper_sleep_until_stop(now, job->deadline_ns);
        }
    }
    // Not stopped in time (D sleep), or never reached before the deadline: exiting detaches
    // them, and the kernel drops the interrupt.
    for (uint32_t i = 0; i < job->count; i++)
        if (job->results[i] == QUIET_STOPPING || job->results[i] == QUIET_ASK) job->results[i] = HWC_RESULT_TIMED_OUT;
    __atomic_store_n(&job->finished, 1, __ATOMIC_RELEASE);
    return 0;
}

// ---- the copy unwinder ------------------------------------------------------------------------

typedef unw_addr_space_t (*create_addr_space_fn)(unw_accessors_t *, int);
typedef int (*set_caching_policy_fn)(unw_addr_space_t, unw_caching_policy_t);
typedef void (*flush_cache_fn)(unw_addr_space_t, unw_word_t, unw_word_t);
typedef int (*init_remote_fn)(unw_cursor_t *, unw_addr_space_t, void *);
typedef int (*step_fn)(unw_cursor_t *);
typedef int (*get_reg_fn)(unw_cursor_t *, unw_regnum_t, unw_word_t *);
typedef int (*search_unwind_table_fn)(unw_addr_space_t, unw_word_t, unw_dyn_info_t *, unw_proc_info_t *, int, void *);

#define HWQ_PAGE 4096
#define HWQ_CACHED_PAGES 16

// One executable segment of a loaded object, with its object's .eh_frame_hdr search table.
struct quiet_segment {
    uint64_t start, end;
    uint64_t eh_frame_hdr;  // 0: none
    int state;              // 0 not parsed yet, 1 table found, -1 none usable
    unw_dyn_info_t info;
    hw_cfi_table cfi;       // the same table, for the CFI stepper
};

// What one unwind reads: the thread's copied registers and stack window, our own memory for
// everything else (read with process_vm_readv, so a stale pointer is an error, not a fault).
struct quiet_unwind {
    const uint64_t *registers;
    const uint8_t *window;
    uint64_t window_address;
    size_t window_size;
    int page_count, next_victim;
    uint64_t page_address[HWQ_CACHED_PAGES];
    uint8_t pages[HWQ_CACHED_PAGES][HWQ_PAGE];
};

static struct {
    int initialised;  // 1 ok, -1 failed
    char error[256];
    create_addr_space_fn create_addr_space;
    set_caching_policy_fn set_caching_policy;
    flush_cache_fn flush_cache;
    init_remote_fn init_remote;
    step_fn step;
    get_reg_fn get_reg;
    search_unwind_table_fn search_unwind_table;
    unw_accessors_t accessors;
    unw_addr_space_t space;
    int64_t tsd_offset;    // libdispatch's per-thread data from the thread pointer
    int have_tsd;
    void *helper_stack;
    size_t helper_stack_size;
    // A helper that outlived even its kill (never seen): no other is started, and nothing it
    // may still write to (its job, its stack) is reused.
    int helper_unconfirmed;
    // Used under the slots lock (which serialises captures); rebuilt when an object was loaded
    // or unloaded since the last capture (refresh_segments).
    struct quiet_segment *segments;
    int segment_count;
    int last_segment;  // the segment segment_with_table found last (an index into `segments`)
    unsigned long long loads, unloads;  // glibc's object counts when `segments` was made
    struct quiet_unwind *current;
    pid_t own_pid;  // this process, set by each capture: getpid is a system call, and reads are many
} q;

// Up to `size` bytes from `address`, stopping at the first unmapped page; how many were read.
static size_t read_own_partial(uint64_t address, void *buffer, size_t size) {
    size_t done = 0;
    while (done < size) {
        uint64_t at = address + done;
        size_t piece = HWQ_PAGE - (size_t)(at & (HWQ_PAGE - 1));
        if (piece > size - done) piece = size - done;
        struct iovec local = {(uint8_t *)buffer + done, piece};
        struct iovec remote = {(void *)(uintptr_t)at, piece};
        if (process_vm_readv(q.own_pid, &local, 1, &remote, 1, 0) != (ssize_t)piece) break;
        done += piece;
    }
    return done;
}

static int read_own(uint64_t address, void *buffer, size_t size) {
    struct iovec local = {buffer, size};
    struct iovec remote = {(void *)(uintptr_t)address, size};
    return process_vm_readv(q.own_pid, &local, 1, &remote, 1, 0) == (ssize_t)size ? 0 : -1;
}

// Whether [address, address + length) lies in a copied stack window of `size` bytes from
// `start` (`window` NULL: none was copied).
static int window_holds(const uint8_t *window, uint64_t start, size_t size, uint64_t address, size_t length) {
    return window && size >= length && address >= start && address - start <= size - length;
}

// Whether [address, address + length) lies in the thread's copied stack window.
static int in_window(const struct quiet_unwind *unwind, uint64_t address, size_t length) {
    return window_holds(unwind->window, unwind->window_address, unwind->window_size, address, length);
}

// Our own memory's page at `page`, from the capture's page cache (read on a miss); NULL when unmapped.
static const uint8_t *cached_page(struct quiet_unwind *unwind, uint64_t page) {
    for (int i = 0; i < unwind->page_count; i++)
        if (unwind->page_address[i] == page) return unwind->pages[i];
    int slot = unwind->page_count < HWQ_CACHED_PAGES ? unwind->page_count++ : unwind->next_victim;
    if (slot == unwind->next_victim && unwind->page_count == HWQ_CACHED_PAGES) unwind->next_victim = (slot + 1) % HWQ_CACHED_PAGES;
    if (read_own(page, unwind->pages[slot], HWQ_PAGE) != 0) {
        unwind->page_address[slot] = UINT64_MAX;  // never matches a page address
        return NULL;
    }
    unwind->page_address[slot] = page;
    return unwind->pages[slot];
}

static int cached_word(struct quiet_unwind *unwind, unw_word_t address, unw_word_t *value) {
    if (in_window(unwind, address, sizeof *value)) {
        memcpy(value, unwind->window + (address - unwind->window_address), sizeof *value);
        return 0;
    }
    uint64_t page = address & ~(uint64_t)(HWQ_PAGE - 1), offset = address - page;
    if (offset + sizeof *value > HWQ_PAGE) return read_own(address, value, sizeof *value);
    const uint8_t *cached = cached_page(unwind, page);
    if (cached == NULL) return read_own(address, value, sizeof *value);
    memcpy(value, cached + offset, sizeof *value);
    return 0;
}

// The CFI stepper's reader (hw_cfi_read_fn): the stack window first, else our own memory.
static size_t hwq_read(void *context, uint64_t address, void *buffer, size_t length) {
    struct quiet_unwind *unwind = context;
    // Most reads are one saved word in the window: a fixed-size copy the compiler inlines.
    if (length == 8 && in_window(unwind, address, 8)) {
        memcpy(buffer, unwind->window + (address - unwind->window_address), 8);
        return 8;
    }
    if (in_window(unwind, address, length)) {
        memcpy(buffer, unwind->window + (address - unwind->window_address), length);
        return length;
    }
    size_t done = 0;
    while (done < length) {
        uint64_t at = address + done, page = at & ~(uint64_t)(HWQ_PAGE - 1);
        size_t piece = HWQ_PAGE - (size_t)(at - page);
        if (piece > length - done) piece = length - done;
        const uint8_t *cached = cached_page(unwind, page);
        if (cached == NULL) break;
        memcpy((uint8_t *)buffer + done, cached + (at - page), piece);
        done += piece;
    }
    return done;
}

static int hwq_access_mem(unw_addr_space_t as, unw_word_t address, unw_word_t *value, int write, void *arg) {
    (void)as;
    struct quiet_unwind *unwind = arg;
    if (write || unwind == NULL) return -UNW_EINVAL;
    return cached_word(unwind, address, value) == 0 ? 0 : -UNW_EINVAL;
}

static int hwq_access_reg(unw_addr_space_t as, unw_regnum_t reg, unw_word_t *value, int write, void *arg) {
    (void)as;
    struct quiet_unwind *unwind = arg;
    int index = hwd_register_index_of_unwind_number(reg);
    if (write || unwind == NULL || index < 0) return -UNW_EBADREG;
    *value = unwind->registers[index];
    return 0;
}

static int hwq_access_fpreg(unw_addr_space_t as, unw_regnum_t reg, unw_fpreg_t *value, int write, void *arg) {
    (void)as, (void)reg, (void)value, (void)write, (void)arg;
    return -UNW_EBADREG;
}

static int hwq_resume(unw_addr_space_t as, unw_cursor_t *cursor, void *arg) {
    (void)as, (void)cursor, (void)arg;
    return -UNW_EINVAL;
}

static int hwq_get_proc_name(unw_addr_space_t as, unw_word_t address, char *buffer, size_t length, unw_word_t *offset, void *arg) {
    (void)as, (void)address, (void)buffer, (void)length, (void)offset, (void)arg;
    return -UNW_ENOINFO;
}

static int hwq_get_dyn_info_list_addr(unw_addr_space_t as, unw_word_t *address, void *arg) {
    (void)as, (void)address, (void)arg;
    return -UNW_ENOINFO;
}

// Only dynamic (JIT-registered) unwind info reaches this; we give none.
static void hwq_put_unwind_info(unw_addr_space_t as, unw_proc_info_t *info, void *arg) { (void)as, (void)info, (void)arg; }

// The .eh_frame_hdr binary-search table (hw_cfi_table_at), for the CFI stepper and as a remote
// table libunwind searches.
static size_t hwq_read_own(void *context, uint64_t address, void *buffer, size_t length) {
    (void)context;
    return read_own_partial(address, buffer, length);
}

static int parse_search_table(struct quiet_segment *segment) {
    if (hw_cfi_table_at(segment->eh_frame_hdr, hwq_read_own, NULL, &segment->cfi) != 0) return -1;
    memset(&segment->info, 0, sizeof segment->info);
    segment->info.format = UNW_INFO_FORMAT_REMOTE_TABLE;
    segment->info.start_ip = segment->start;
    segment->info.end_ip = segment->end;
    segment->info.u.rti.segbase = segment->cfi.header;
    segment->info.u.rti.table_data = segment->cfi.table;
    segment->info.u.rti.table_len = (unw_word_t)segment->cfi.count * 8 / sizeof(unw_word_t);  // two int32 per entry
    return 1;
}

// The segment holding `ip`, with its search table parsed; NULL when none has a usable one.
// Consecutive frames are mostly in one object: the last segment found is looked at first
// (one unwind at a time, under the slots lock).
static struct quiet_segment *segment_with_table(uint64_t ip) {
    int last = q.last_segment, found = -1;
    if (last < q.segment_count && ip >= q.segments[last].start && ip < q.segments[last].end) found = last;
    for (int i = 0; i < q.segment_count && found < 0; i++)
        if (ip >= q.segments[i].start && ip < q.segments[i].end) found = i;
    if (found < 0) return NULL;
    q.last_segment = found;
    struct quiet_segment *segment = &q.segments[found];
    if (segment->state == 0) segment->state = parse_search_table(segment);
    return segment->state == 1 ? segment : NULL;
}

static int hwq_find_proc_info(unw_addr_space_t as, unw_word_t ip, unw_proc_info_t *info, int need_unwind_info, void *arg) {
    struct quiet_segment *segment = segment_with_table(ip);
    if (segment == NULL) return -UNW_ENOINFO;
    return q.search_unwind_table(as, ip, &segment->info, info, need_unwind_info, arg);
}

static int add_segments(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    int *capacity = data;
    uint64_t eh_frame_hdr = 0;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_GNU_EH_FRAME) eh_frame_hdr = info->dlpi_addr + info->dlpi_phdr[i].p_vaddr;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *header = &info->dlpi_phdr[i];
        if (header->p_type != PT_LOAD || !(header->p_flags & PF_X)) continue;
        if (q.segment_count == *capacity) {
            int grown = *capacity ? *capacity * 2 : 64;
            struct quiet_segment *larger = realloc(q.segments, (size_t)grown * sizeof *larger);
            if (larger == NULL) return 1;
            q.segments = larger;
            *capacity = grown;
        }
        struct quiet_segment *segment = &q.segments[q.segment_count++];
        memset(segment, 0, sizeof *segment);
        segment->start = info->dlpi_addr + header->p_vaddr;
        segment->end = segment->start + header->p_memsz;
        segment->eh_frame_hdr = eh_frame_hdr;
    }
    return 0;
}

// glibc's counts of objects loaded and unloaded so far (the same in every callback).
static int read_load_counts(struct dl_phdr_info *info, size_t size, void *data) {
    unsigned long long *counts = data;
    if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs) {
        counts[0] = info->dlpi_adds;
        counts[1] = info->dlpi_subs;
        counts[2] = 1;
    }
    return 1;
}

// The CFI stepper's rules by address, kept while no object is loaded or unloaded.
static hw_cfi_cache *rule_cache;
// Off: every thread is unwound with libunwind (hwc_quiet_set_cfi_stepper, for tests).
static int cfi_stepper_on = 1;

void hwc_quiet_set_cfi_stepper(int on) { __atomic_store_n(&cfi_stepper_on, on != 0, __ATOMIC_RELAXED); }

// Threads of the last capture the stepper unwound to the end (the rest went to libunwind).
static uint32_t stepped_threads;

uint32_t hwc_quiet_stepped_threads(void) { return __atomic_load_n(&stepped_threads, __ATOMIC_RELAXED); }

// The loaded objects as they are now: libraries loaded or unloaded since the last capture
// count, and nothing cached (by libunwind, or rules) from an object that is gone survives.
static void refresh_segments(void) {
    unsigned long long counts[3] = {0, 0, 0};
    dl_iterate_phdr(read_load_counts, counts);
    if (counts[2] && q.segments && counts[0] == q.loads && counts[1] == q.unloads) return;
    q.loads = counts[0];
    q.unloads = counts[1];
    free(q.segments);
    q.segments = NULL;
    q.segment_count = q.last_segment = 0;
    int capacity = 0;
    dl_iterate_phdr(add_segments, &capacity);
    q.flush_cache(q.space, 0, 0);
    if (rule_cache) memset(rule_cache, 0, sizeof *rule_cache);
}

// One unwind at a time (the slots lock). Its page cache of our own memory lives for a whole
// capture (reset_page_cache): unwind tables and code do not change between two threads' unwinds.
static struct quiet_unwind unwind;

static void reset_page_cache(void) { memset(&unwind, 0, offsetof(struct quiet_unwind, pages)); }

// The frames after the first, with the CFI stepper: how many in all, or 0 when a frame needs
// what it does not do (then libunwind unwinds the whole thread, as it would have).
static uint32_t unwind_with_rules(const hwc_slot *slot, uint64_t *frames, uint32_t wanted) {
    uint64_t registers[HW_REGISTER_COUNT];
    memcpy(registers, slot->registers, sizeof registers);
    uint32_t count = 1;
    while (count < wanted) {
        // A return address is looked up inside its call (libunwind's use_prev_instr).
        uint64_t pc = registers[HW_REGISTER_PC], lookup = count == 1 ? pc : pc - 1;
        struct quiet_segment *segment = segment_with_table(lookup);
        if (segment == NULL) return 0;  // no table: libunwind's frame-pointer guess
        const hw_cfi_rule *rule = hw_cfi_rule_at(rule_cache, &segment->cfi, lookup, hwq_read, &unwind);
        switch (hw_cfi_apply(rule, registers, hwq_read, &unwind)) {
        case HW_CFI_OK: frames[count++] = registers[HW_REGISTER_PC]; break;
        case HW_CFI_END: return count;
        default: return 0;
        }
    }
    return count;
}

static uint32_t unwind_copy(const hwc_slot *slot, const uint8_t *stack, uint64_t *frames, uint32_t wanted) {
    unwind.registers = slot->registers;
    unwind.window = slot->stack_size ? stack : NULL;
    unwind.window_address = slot->stack_start;
    unwind.window_size = slot->stack_size;
    uint32_t count = 0;
    if (wanted == 0) return 0;
    frames[count++] = slot->registers[HW_REGISTER_PC];
    if (rule_cache && __atomic_load_n(&cfi_stepper_on, __ATOMIC_RELAXED)) {
        uint32_t stepped = unwind_with_rules(slot, frames, wanted);
        if (stepped > 0) {
            __atomic_store_n(&stepped_threads, stepped_threads + 1, __ATOMIC_RELAXED);  // one capture at a time
            return stepped;
        }
    }
    unw_cursor_t cursor;
    if (q.init_remote(&cursor, q.space, &unwind) < 0) return count;
    while (count < wanted && q.step(&cursor) > 0) {
        unw_word_t ip = 0;
        if (q.get_reg(&cursor, UNW_REG_IP, &ip) < 0 || ip == 0) break;
        frames[count++] = ip;
    }
    return count;
}

// ---- libdispatch's current queue, read from the thread's TLS ------------------------------

// libdispatch keeps its per-thread data in static TLS (`__dispatch_tsd`: the thread's tid, then
// the queue it is draining). Its distance from the thread pointer is the same in every thread;
// found here from our own thread and checked on a queue we drain ourselves.
struct tls_search {
    uint64_t block;
};

static int find_dispatch_tls(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    const char *name = info->dlpi_name ? strrchr(info->dlpi_name, '/') : NULL;
    if (name && strcmp(name, "/libdispatch.so") == 0 && info->dlpi_tls_data) {
        ((struct tls_search *)data)->block = (uint64_t)(uintptr_t)info->dlpi_tls_data;
        return 1;
    }
    return 0;
}

struct tsd_check {
    int64_t offset;
    void *queue;
    int ok;
};

static void check_tsd(void *context) {
    struct tsd_check *check = context;
    const uint8_t *tsd = (const uint8_t *)(uintptr_t)(hwd_own_thread_pointer() + (uint64_t)check->offset);
    int32_t tid = 0;
    void *queue = NULL;
    memcpy(&tid, tsd, sizeof tid);
    memcpy(&queue, tsd + 8, sizeof queue);
    check->ok = tid == (int32_t)syscall(SYS_gettid) && queue == check->queue;
}

static void find_dispatch_tsd(void) {
    struct tls_search search = {0};
    dl_iterate_phdr(find_dispatch_tls, &search);
    void *(*create)(const char *, void *) = (void *(*)(const char *, void *))dlsym(RTLD_DEFAULT, "dispatch_queue_create");
    void (*sync_f)(void *, void *, void (*)(void *)) = (void (*)(void *, void *, void (*)(void *)))dlsym(RTLD_DEFAULT, "dispatch_sync_f");
    void (*release)(void *) = (void (*)(void *))dlsym(RTLD_DEFAULT, "dispatch_release");
    if (search.block == 0 || !create || !sync_f || !release) return;
    struct tsd_check check = {(int64_t)(search.block - hwd_own_thread_pointer()), NULL, 0};
    check.queue = create("hangwatch.tsd-check", NULL);
    if (check.queue == NULL) return;
    sync_f(check.queue, &check, check_tsd);
    release(check.queue);
    q.tsd_offset = check.offset;
    q.have_tsd = check.ok;
}

// The queue `tid` was draining when stopped: its TLS as the stop's copy of the stack window
// holds it (static TLS lies just below the thread pointer, where a window that reaches the
// thread's descriptor ends), else read now, safely (the thread runs again).
static void fill_queue(hwc_slot *slot, const uint8_t *stack, int32_t tid, uint64_t thread_pointer, const hwc_shared *shared) {
    slot->queue = 0;
    slot->queue_label[0] = 0;
    slot->flags &= ~HWC_SLOT_FLAG_MAIN_QUEUE;
    if (!q.have_tsd || thread_pointer == 0) return;
    struct { int32_t tid; int32_t padding; uint64_t queue; } tsd;
    uint64_t at = thread_pointer + (uint64_t)q.tsd_offset;
    if (window_holds(stack, slot->stack_start, slot->stack_size, at, sizeof tsd))
        memcpy(&tsd, stack + (at - slot->stack_start), sizeof tsd);
    else if (read_own(at, &tsd, sizeof tsd) != 0) return;
    if (tsd.tid != tid) return;
    if (tsd.queue == 0 || tsd.queue == shared->no_queue) return;
    slot->queue = tsd.queue;
    if (tsd.queue == shared->main_queue && shared->main_queue != 0) slot->flags |= HWC_SLOT_FLAG_MAIN_QUEUE;
    // The thread may have left the queue since: the label is asked for only while the queue's
    // memory is readable, and copied with bounded, fault-free reads.
    uint8_t probe[64];
    if (read_own(tsd.queue, probe, sizeof probe) != 0 || shared->queue_label == NULL) return;
    const char *text = shared->queue_label((void *)(uintptr_t)tsd.queue);
    char copy[HWC_QUEUE_LABEL_BYTES] = {0};
    if (text == NULL || read_own_partial((uint64_t)(uintptr_t)text, copy, sizeof copy - 1) == 0) return;
    memcpy(slot->queue_label, copy, sizeof copy);
    slot->queue_label[HWC_QUEUE_LABEL_BYTES - 1] = 0;
}

// ---- initialisation ----------------------------------------------------------------------------

static int quiet_fail(char *error, size_t length, const char *message, const char *detail) {
    snprintf(q.error, sizeof q.error, "%s%s%s", message, detail ? ": " : "", detail ? detail : "");
    q.initialised = -1;
    if (error && length) snprintf(error, length, "%s", q.error);
    return -1;
}

static void *resolve(void *library, const char *name, int *missing) {
    void *symbol = dlsym(library, name);
    if (symbol == NULL) *missing = 1;
    return symbol;
}

static int read_yama_scope(void) {
    FILE *file = fopen("/proc/sys/kernel/yama/ptrace_scope", "re");
    if (file == NULL) return -1;
    int scope = -1;
    if (fscanf(file, "%d", &scope) != 1) scope = -1;
    fclose(file);
    return scope;
}

int hwc_quiet_init(char *error, size_t error_length) {
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&lock);
    int result = q.initialised;
    if (result == 0) {
        if (hwc_shared_state() == NULL) {
            result = quiet_fail(error, error_length, "signal capture is not initialised", NULL);
        } else {
            void *library = dlopen(HW_UNWIND_REMOTE_LIBRARY, RTLD_NOW | RTLD_LOCAL);
            int missing = library == NULL;
            if (library) {
                q.create_addr_space = (create_addr_space_fn)resolve(library, HW_UNWIND_REMOTE_PREFIX "create_addr_space", &missing);
                q.set_caching_policy = (set_caching_policy_fn)resolve(library, HW_UNWIND_REMOTE_PREFIX "set_caching_policy", &missing);
                q.flush_cache = (flush_cache_fn)resolve(library, HW_UNWIND_REMOTE_PREFIX "flush_cache", &missing);
                q.init_remote = (init_remote_fn)resolve(library, HW_UNWIND_REMOTE_PREFIX "init_remote", &missing);
                q.step = (step_fn)resolve(library, HW_UNWIND_REMOTE_PREFIX "step", &missing);
                q.get_reg = (get_reg_fn)resolve(library, HW_UNWIND_REMOTE_PREFIX "get_reg", &missing);
                q.search_unwind_table =
                    (search_unwind_table_fn)resolve(library, HW_UNWIND_REMOTE_PREFIX "dwarf_search_unwind_table", &missing);
            }
            q.helper_stack_size = 64 * 1024;
            q.helper_stack = mmap(NULL, q.helper_stack_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
            if (missing) {
                result = quiet_fail(error, error_length, "cannot load " HW_UNWIND_REMOTE_LIBRARY, library ? "a symbol is missing" : dlerror());
            } else if (q.helper_stack == MAP_FAILED) {
                result = quiet_fail(error, error_length, "cannot reserve the helper's stack", strerror(errno));
            } else {
                memset(&q.accessors, 0, sizeof q.accessors);
                q.accessors.find_proc_info = hwq_find_proc_info;
                q.accessors.put_unwind_info = hwq_put_unwind_info;
                q.accessors.get_dyn_info_list_addr = hwq_get_dyn_info_list_addr;
                q.accessors.access_mem = hwq_access_mem;
                q.accessors.access_reg = hwq_access_reg;
                q.accessors.access_fpreg = hwq_access_fpreg;
                q.accessors.resume = hwq_resume;
                q.accessors.get_proc_name = hwq_get_proc_name;
                q.space = q.create_addr_space(&q.accessors, 0);
                if (q.space == NULL) {
                    result = quiet_fail(error, error_length, "libunwind could not create an address space", NULL);
                } else {
                    q.set_caching_policy(q.space, UNW_CACHE_GLOBAL);
                    rule_cache = calloc(1, sizeof *rule_cache);  // none: libunwind for every thread
                    find_dispatch_tsd();
                    q.initialised = result = 1;
                }
            }
        }
    } else if (result == -1 && error && error_length) {
        snprintf(error, error_length, "%s", q.error);
    }
    pthread_mutex_unlock(&lock);
    return result == 1 ? 0 : -1;
}

// ---- capture -----------------------------------------------------------------------------------

static uint64_t monotonic_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

// Slots for the listed threads, held (WRITING) so that no late answer to a signal capture
// writes into them; -1 and HWC_RESULT_NO_SLOT past the reserved count.
static void assign_slots(const hwc_shared *shared, const int32_t *tids, uint32_t count, uint64_t seq, int32_t *results,
                         int32_t *slots) {
    uint32_t next = 0;
    for (uint32_t i = 0; i < count; i++) {
        slots[i] = -1;
        results[i] = HWC_RESULT_NO_SLOT;
        while (next < shared->config.max_threads &&
               (__atomic_load_n(&shared->slots[next].ticket, __ATOMIC_ACQUIRE) & 3) == HWC_SLOT_WRITING)
            next++;
        if (next >= shared->config.max_threads) continue;
        slots[i] = (int32_t)next++;
        hwc_slot *slot = &shared->slots[slots[i]];
        __atomic_store_n(&slot->ticket, hwc_ticket(seq, HWC_SLOT_WRITING), __ATOMIC_RELEASE);
        slot->tid = tids[i];
        slot->frame_count = 0;
        slot->stack_size = 0;
        slot->flags = 0;
        slot->blocked = 0;
        results[i] = QUIET_ASK;
    }
}

// Starts the helper with every signal blocked (a handler of the program must never run in it);
// `*pidfd` is its pidfd (CLONE_PIDFD, Linux 5.2: it cannot come to name another process), -1
// on a kernel without them.
static pid_t start_helper(struct quiet_job *job, int *pidfd) {
    sigset_t all, previous;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &previous);
    int flags = CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_UNTRACED;
    *pidfd = -1;
    pid_t helper = clone(helper_main, (char *)q.helper_stack + q.helper_stack_size, flags | CLONE_PIDFD, job, pidfd);
    if (helper < 0 && errno == EINVAL) {
        *pidfd = -1;
        helper = clone(helper_main, (char *)q.helper_stack + q.helper_stack_size, flags, job);
    }
    int code = errno;
    pthread_sigmask(SIG_SETMASK, &previous, NULL);
    errno = code;
    return helper;
}

// ---- the helpers of this process, for the hang monitor's TracerPid check -------------------

// The last helpers' pids: a TracerPid read while one traced our main thread names it, maybe
// after it has exited and the next one started.
#define HWQ_RECENT_HELPERS 16
static int32_t recent_helpers[HWQ_RECENT_HELPERS];
static uint32_t recent_next;

static void publish_helper(pid_t helper) {
    uint32_t at = __atomic_fetch_add(&recent_next, 1, __ATOMIC_RELAXED) % HWQ_RECENT_HELPERS;
    __atomic_store_n(&recent_helpers[at], (int32_t)helper, __ATOMIC_RELEASE);
}

int hwc_quiet_is_own_helper(int32_t pid) {
    if (pid <= 0) return 0;
    int listed = 0;
    for (int i = 0; i < HWQ_RECENT_HELPERS && !listed; i++) listed = __atomic_load_n(&recent_helpers[i], __ATOMIC_ACQUIRE) == pid;
    if (!listed) return 0;
    // A pid recycled to another process since (a debugger) does not share our memory. Gone,
    // or kcmp missing: the list stands.
    return hw_proc_shares_memory(getpid(), pid) != 0;
}

// ---- waiting for the helper, within a deadline ----------------------------------------------

// After the deadline, once the helper has been sent SIGKILL: how long its exit may take (a
// killed process runs no more of its code; this only waits for the kernel to finish a call).
#define HWQ_KILL_PATIENCE_NS 1000000000u

enum { HELPER_FINISHED, HELPER_DIED, HELPER_ENDED, HELPER_UNCONFIRMED };

struct helper_fate {
    int kind;
    int signal;       // HELPER_DIED: what killed it (0 unknown: someone else reaped it)
    int core_dumped;  // HELPER_DIED: the kernel says it dumped core
};

// What the requesting thread does while the helper works: it reads each thread's syscall line
// and decides whether to ask it (the survey, which the helper waits for thread by thread), then
// unwinds each thread as soon as the helper has let it go, instead of after the last one.
// Safe: what the unwinding needs (malloc, a lock) may be held by one of the few threads stopped
// at that moment, which the helper lets go without waiting for the requester.
struct requester_work {
    const hwc_shared *shared;
    const int32_t *tids;
    const int32_t *slots;
    int32_t *results;
    const uint64_t *thread_pointers;
    uint8_t *finished;  // per thread: unwound already
    uint32_t count, frames;
    int32_t self;
};

static void finish_ready(struct requester_work *work);

// Waits for the helper's exit until `until_ns` (CLOCK_MONOTONIC); 1 once it has exited (not yet
// reaped through the pidfd; reaped here, with its status in `*status`, without one), 0 at
// the deadline. Meanwhile `work`'s threads that are ready are unwound (looked at every ms).
static int helper_exited(pid_t helper, int pidfd, uint64_t until_ns, int *status, int *reaped, struct requester_work *work) {
    uint64_t pause_ns = 20000;
    for (;;) {
        if (work) finish_ready(work);
        uint64_t now = monotonic_ns();
        if (pidfd >= 0) {
            struct pollfd watch = {pidfd, POLLIN, 0};
            int wait_ms = now >= until_ns ? 0 : (int)((until_ns - now + 999999) / 1000000);
            if (work && wait_ms > 1) wait_ms = 1;
            int ready = poll(&watch, 1, wait_ms);
            if (ready > 0) return 1;
            if (ready == 0 && monotonic_ns() >= until_ns) return 0;
            if (ready < 0 && errno != EINTR) return 0;
        } else {
            // No pidfd (Linux < 5.2): our unreaped child, looked at until the deadline.
            pid_t got = waitpid(helper, status, __WCLONE | WNOHANG);
            if (got == helper) { *reaped = 1; return 1; }
            if (got < 0 && errno == ECHILD) { *reaped = 1; *status = -1; return 1; }  // someone else reaped it
            if (now >= until_ns) return 0;
            struct timespec pause = {0, (long)pause_ns};
            nanosleep(&pause, NULL);
            if (pause_ns < 1000000 && !work) pause_ns *= 2;
        }
    }
}

// Waits for the helper within `deadline_ns`; past it, SIGKILL (through its pidfd) and a last
// bounded wait. Its death detaches every thread it held. Reaps it and says how it ended.
static void await_helper(struct quiet_job *job, pid_t helper, int pidfd, uint64_t deadline_ns, struct helper_fate *fate,
                         struct requester_work *work) {
    int status = -1, reaped = 0, killed = 0;
    int exited = helper_exited(helper, pidfd, deadline_ns, &status, &reaped, work);
    if (!exited) {
        killed = 1;
        if (pidfd >= 0) syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0);
        else kill(helper, SIGKILL);  // still our unreaped child (the wait above would have reaped it)
        exited = helper_exited(helper, pidfd, monotonic_ns() + HWQ_KILL_PATIENCE_NS, &status, &reaped, NULL);
    }
    if (!exited) {
        fate->kind = HELPER_UNCONFIRMED;
        return;
    }
    if (!reaped) {
        siginfo_t info;
        memset(&info, 0, sizeof info);
        if (syscall(SYS_waitid, P_PIDFD, pidfd, &info, WEXITED | __WCLONE, NULL) == 0) {
            status = info.si_code == CLD_EXITED ? (info.si_status & 0xff) << 8
                   : (info.si_status & 0x7f) | (info.si_code == CLD_DUMPED ? 0x80 : 0);
        } else if (errno != ECHILD) {
            // waitid on a pidfd needs Linux 5.4: a zombie keeps its pid until reaped, so the
            // pid still names it here (unless the program reaped it: then ECHILD).
            if (waitpid(helper, &status, __WCLONE | WNOHANG) != helper) status = -1;
        }
    }
    if (__atomic_load_n(&job->finished, __ATOMIC_ACQUIRE)) {
        fate->kind = HELPER_FINISHED;  // its work was done (stopped on its way out, perhaps)
    } else if (killed || status == -1 || !WIFSIGNALED(status)) {
        // Ended by us at the deadline; or it left early (no go within its second: a starved
        // machine); or the program reaped it (waitpid(-1, __WALL)) and how it ended is unknown.
        fate->kind = HELPER_ENDED;
    } else {
        fate->kind = HELPER_DIED;
        fate->signal = WTERMSIG(status);
        fate->core_dumped = WCOREDUMP(status) != 0;
    }
}

// The survey: each thread's syscall line read (by the hooks' `choose`) while it still sleeps,
// before the helper may stop it, published thread by thread through `job->surveyed`.
static void survey(struct quiet_job *job, struct requester_work *work, const hwc_capture_hooks *hooks) {
    for (uint32_t i = 0; i < work->count; i++) {
        if (work->results[i] == QUIET_ASK) {
            if (work->tids[i] == work->self) work->results[i] = HWC_RESULT_ANSWERED;  // recorded directly, afterwards
            else if (hooks && hooks->choose && hooks->choose(hooks->context, i) == 0) work->results[i] = HWC_RESULT_NOT_SIGNALLED;
        }
        __atomic_store_n(&job->surveyed, (int32_t)(i + 1), __ATOMIC_SEQ_CST);
        if (__atomic_load_n(&job->helper_waiting, __ATOMIC_SEQ_CST))
            syscall(SYS_futex, &job->surveyed, FUTEX_WAKE, 1, NULL, NULL, 0);
    }
}

// One run of a helper over `job`: started, named our tracer under Yama 1 when `declare`, told
// to go, the threads surveyed (`hooks`, on the first run) and unwound as they are let go, and
// waited for within `deadline_ns`. 0, or -errno when none could be started.
static int run_helper(struct quiet_job *job, int declare, uint64_t deadline_ns, struct helper_fate *fate,
                      struct requester_work *work, const hwc_capture_hooks *hooks) {
    memset(fate, 0, sizeof *fate);
    job->go = 0;
    job->seized = job->refused_eperm = job->finished = 0;
    int pidfd = -1;
    pid_t helper = start_helper(job, &pidfd);
    if (helper < 0) return -errno;
    publish_helper(helper);
    // Under Yama's ptrace_scope 1 only a declared tracer may trace us (the helper is our child,
    // not our parent): declared for this helper only, undeclared when it is gone.
    if (declare) prctl(PR_SET_PTRACER, helper, 0, 0, 0);
    __atomic_store_n(&job->go, 1, __ATOMIC_RELEASE);
    syscall(SYS_futex, &job->go, FUTEX_WAKE, 1, NULL, NULL, 0);
    if (hooks) survey(job, work, hooks);
    await_helper(job, helper, pidfd, deadline_ns, fate, work);
    if (declare) prctl(PR_SET_PTRACER, 0, 0, 0, 0);
    if (pidfd >= 0) close(pidfd);
    return 0;
}

static void finish_thread(const hwc_shared *shared, uint32_t index, const int32_t *tids, const int32_t *slots,
                          const uint64_t *thread_pointers, uint32_t frames) {
    hwc_slot *slot = &shared->slots[slots[index]];
    uint64_t *out = shared->frames + (size_t)slots[index] * shared->config.max_frames;
    const uint8_t *stack = shared->stack ? shared->stack + (size_t)slots[index] * shared->config.max_stack_bytes : NULL;
    if (!(slot->flags & HWC_SLOT_FLAG_UNWIND_FAILED)) {
        slot->frame_count = unwind_copy(slot, stack, out, frames);
        if (frames > 1 && slot->frame_count <= 1) slot->flags |= HWC_SLOT_FLAG_UNWIND_FAILED;
    }
    fill_queue(slot, stack, tids[index], thread_pointers[index], shared);
    hwc_fill_name_and_clocks(slot, tids[index], q.own_pid);
}

// Unwinds the threads the helper has let go since the last call (their slots are whole).
static void finish_ready(struct requester_work *work) {
    for (uint32_t i = 0; i < work->count; i++) {
        if (work->finished[i] || work->slots[i] < 0 || work->tids[i] == work->self) continue;
        if (__atomic_load_n(&work->results[i], __ATOMIC_ACQUIRE) != HWC_RESULT_ANSWERED) continue;
        finish_thread(work->shared, i, work->tids, work->slots, work->thread_pointers, work->frames);
        work->finished[i] = 1;
    }
}

// The helper's own deadline is the capture's; the requester gives it this much more before it
// ends it (a helper starved of CPU on a loaded machine still finishes, a stopped one does not).
#define HWQ_HELPER_GRACE_NS 500000000u

// The job of the helper, not on the requester's stack: a helper that could not be confirmed
// gone may still be written to (the slots lock serialises captures).
static struct quiet_job current_job;

int hwc_capture_quiet(const int32_t *tids, uint32_t count, uint32_t frames, uint32_t stack_bytes, uint64_t timeout_ns,
                      const hwc_capture_hooks *hooks, int32_t *results, int32_t *slots, uint64_t *elapsed_ns,
                      int32_t *failure) {
    const hwc_shared *shared = hwc_shared_state();
    if (shared == NULL || q.initialised != 1) return -1;
    if (frames > shared->config.max_frames) frames = shared->config.max_frames;
    if (stack_bytes > shared->config.max_stack_bytes) stack_bytes = shared->config.max_stack_bytes;
    hwc_lock_slots();
    if (q.helper_unconfirmed) {
        *failure = EBUSY;
        hwc_unlock_slots();
        return -2;
    }
    uint64_t started = monotonic_ns(), seq = hwc_next_sequence();
    q.own_pid = getpid();  // a forked child's own
    int32_t self = (int32_t)syscall(SYS_gettid);
    assign_slots(shared, tids, count, seq, results, slots);
    uint64_t *thread_pointers = calloc(count ? count : 1, sizeof *thread_pointers);
    uint64_t *interrupted_at = calloc(count ? count : 1, sizeof *interrupted_at);
    uint8_t *finished = calloc(count ? count : 1, 1);
    struct quiet_job *job = &current_job;
    *job = (struct quiet_job){
        .pid = q.own_pid, .tids = tids, .slots = slots, .results = results, .thread_pointers = thread_pointers,
        .interrupted_at = interrupted_at,
        .count = count, .stack_bytes = stack_bytes, .deadline_ns = started + timeout_ns, .slot_base = shared->slots,
        .stack_base = shared->stack, .stack_stride = shared->config.max_stack_bytes, .go = 0, .surveyed = 0,
    };
    struct requester_work work = {shared, tids, slots, results, thread_pointers, finished, count, frames, self};
    // Ready before any thread is stopped: the loaded objects (dl_iterate_phdr takes the loader's lock).
    refresh_segments();
    reset_page_cache();
    __atomic_store_n(&stepped_threads, 0, __ATOMIC_RELAXED);
    uint64_t helper_deadline = started + timeout_ns + HWQ_HELPER_GRACE_NS;
    struct helper_fate fate;
    int started_helper = thread_pointers && interrupted_at && finished
        ? run_helper(job, 0, helper_deadline, &fate, &work, hooks ? hooks : &(hwc_capture_hooks){0}) : -ENOMEM;
    // The program's own PR_SET_PTRACER is left as it was: the helper is declared only when it was
    // refused without (Yama 1 and nothing the program declared lets a child of it trace it; there
    // is no PR_GET_PTRACER to read and restore a declaration, docs/platform-facts.md fact 11).
    if (started_helper == 0 && fate.kind == HELPER_FINISHED && job->seized == 0 && job->refused_eperm > 0 &&
        read_yama_scope() == 1) {
        for (uint32_t i = 0; i < count; i++)
            if (results[i] == HWC_RESULT_REFUSED) results[i] = QUIET_ASK;
        started_helper = run_helper(job, 1, helper_deadline, &fate, &work, NULL);
    }
    if (started_helper != 0) {
        *failure = -started_helper;
        free(interrupted_at);
        free(finished);
        for (uint32_t i = 0; i < count; i++)
            if (slots[i] >= 0) __atomic_store_n(&shared->slots[slots[i]].ticket, hwc_ticket(seq, HWC_SLOT_IDLE), __ATOMIC_RELEASE);
        free(thread_pointers);
        hwc_unlock_slots();
        return -2;
    }
    for (uint32_t i = 0; i < count; i++)
        if (tids[i] == self && slots[i] >= 0) hwc_record_self(slots[i], frames, stack_bytes);
    finish_ready(&work);  // those let go since the requester last looked

    for (uint32_t i = 0; i < count; i++) {
        if (slots[i] < 0) continue;
        // Not reached: the helper is gone without finishing (killed, ended at its deadline); the
        // caller asks these with signals.
        if (results[i] == QUIET_ASK || results[i] == QUIET_STOPPING) results[i] = fate.kind == HELPER_FINISHED ? HWC_RESULT_TIMED_OUT : HWC_RESULT_HELPER_LOST;
        __atomic_store_n(&shared->slots[slots[i]].ticket,
                         hwc_ticket(seq, results[i] == HWC_RESULT_ANSWERED ? HWC_SLOT_DONE : HWC_SLOT_IDLE), __ATOMIC_RELEASE);
    }
    free(finished);
    if (fate.kind == HELPER_UNCONFIRMED) {
        q.helper_unconfirmed = 1;  // its arrays stay allocated: it may still write to them
    } else {
        free(thread_pointers);
        free(interrupted_at);
    }
    if (elapsed_ns) *elapsed_ns = monotonic_ns() - started;
    hwc_unlock_slots();
    switch (fate.kind) {
    case HELPER_DIED: *failure = fate.signal | (fate.core_dumped ? HWC_HELPER_CORE_DUMPED : 0); return -3;
    case HELPER_UNCONFIRMED: *failure = SIGKILL | HWC_HELPER_NOT_GONE; return -3;
    case HELPER_ENDED: *failure = 0; return -4;
    default: return 0;
    }
}
