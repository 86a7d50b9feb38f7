// See hw_capture.h. The handler uses only raw syscalls, atomics, preallocated memory and
// libgcc's _Unwind_Backtrace (lock-free; libunwind's unw_init_local2/unw_step/unw_get_reg where
// libgcc_s lacks it), both signal-safe once warmed up (docs/platform-facts.md fact 4).
#define _GNU_SOURCE
#include "hw_capture.h"
#include "hw_capture_internal.h"

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <linux/futex.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

// Types and constants only: libunwind is never linked (docs/platform-facts.md fact 3), and
// libgcc's unwinder is looked up in libgcc_s by name (a libunwind linked by the program may
// export _Unwind_Backtrace too).
#include <libunwind.h>
#include <unwind.h>

_Static_assert(sizeof(hwc_slot) == 8 + 4 + 4 + 8 * HWC_REGISTER_COUNT + 8 + 8 + 4 + 4 + 8 + 24 + 16 + HWC_QUEUE_LABEL_BYTES + 8 + 48,
               "hwc_slot has no padding; Swift reads it field by field");
_Static_assert(offsetof(hwc_slot, registers) == 16, "registers follow ticket, tid, frame_count");
_Static_assert(sizeof(hwc_slot) % 8 == 0, "slots stay 8-byte aligned in the slot array");
HW_UNWIND_CHECKS;  // the ucontext passed to unw_init_local2 as its unw_context_t (hw_registers.h)

// Slot states, the low two bits of a ticket. A handler only writes a slot after moving its
// ticket from (seq, ARMED) to (seq, WRITING), so a late answer to an old request never
// touches a slot that has been re-armed or abandoned.
enum { SLOT_IDLE = HWC_SLOT_IDLE, SLOT_ARMED = HWC_SLOT_ARMED, SLOT_WRITING = HWC_SLOT_WRITING, SLOT_DONE = HWC_SLOT_DONE };
static inline uint64_t make_ticket(uint64_t seq, uint64_t state) { return (seq << 2) | state; }
static inline uint64_t ticket_state(uint64_t t) { return t & 3; }

typedef int (*unw_init_local2_fn)(unw_cursor_t *, unw_context_t *, int);
typedef int (*unw_step_fn)(unw_cursor_t *);
typedef int (*unw_get_reg_fn)(unw_cursor_t *, unw_regnum_t, unw_word_t *);
typedef _Unwind_Reason_Code (*gcc_backtrace_fn)(_Unwind_Trace_Fn, void *);
typedef _Unwind_Ptr (*gcc_get_ip_info_fn)(struct _Unwind_Context *, int *);
typedef void *(*get_current_queue_fn)(void);
typedef const char *(*get_label_fn)(void *);

static struct {
    int initialised;      // 1 ok, -1 failed
    char error[256];
    hwc_config config;
    unw_init_local2_fn init_local2;
    unw_step_fn step;
    unw_get_reg_fn get_reg;
    gcc_backtrace_fn gcc_backtrace;      // NULL: libgcc_s without _dl_find_object, handlers use libunwind
    gcc_get_ip_info_fn gcc_get_ip_info;
    get_current_queue_fn current_queue;
    get_label_fn queue_label;
    uint64_t main_queue;
    uint64_t no_queue;               // what dispatch_get_current_queue() says on a thread draining nothing
    hwc_slot *slots;
    int32_t *sent;                   // per slot: the signal a capture asked with; negative: both (HWC_SIGNAL_EITHER) or rechecked already
    uint64_t *frames;
    uint8_t *stack;
    struct sigaction previous[_NSIG];
} g;

// Shared with handlers while a capture runs.
static uint64_t g_sequence;          // current request sequence (written by the requester)
static uint32_t g_frames_wanted;
static uint32_t g_stack_wanted;
static int32_t g_answers;            // futex word: bumped by every answer
static int32_t g_in_handler;         // handlers running now (their threads block our signals meanwhile)
static int32_t g_expected;           // answers that complete the capture: only the last one wakes the requester
static int32_t g_capture_busy;       // tid of the thread whose capture uses the slots, 0 if none
static void (*g_answer_hook)(void *);  // run by every thread answering one of our requests (hw_crash.c: alt stacks)

static long raw_gettid(void) { return syscall(SYS_gettid); }
static long raw_getpid(void) { return syscall(SYS_getpid); }

// The caller's thread id, read once per thread: a watched operation and every ping ask for it,
// and a system call costs more than the rest of either on a virtual machine. A fork's child is one
// thread, the forking one, whose cached id is the parent's: the atfork handler forgets it there.
// (A raw clone(2) bypasses the handler; none of hangwatch's clones call this.)
static __thread int32_t g_cached_tid;
static pthread_once_t g_tid_atfork_once = PTHREAD_ONCE_INIT;
static void hwc_forget_cached_tid(void) { g_cached_tid = 0; }
static void hwc_register_tid_atfork(void) { pthread_atfork(NULL, NULL, hwc_forget_cached_tid); }

int32_t hwc_gettid(void) {
    if (g_cached_tid == 0) {
        pthread_once(&g_tid_atfork_once, hwc_register_tid_atfork);
        g_cached_tid = (int32_t)raw_gettid();
    }
    return g_cached_tid;
}
int32_t hwc_ordinary_signal(void) { return g.initialised == 1 ? g.config.ordinary_signal : 0; }
uint64_t hwc_main_queue_address(void) { return g.main_queue; }
const char *hwc_handler_unwinder(void) { return g.initialised != 1 ? "" : g.gcc_backtrace ? "libgcc" : "libunwind"; }

const hwc_slot *hwc_slot_at(int32_t index) {
    if (g.initialised != 1 || index < 0 || (uint32_t)index >= g.config.max_threads) return NULL;
    return &g.slots[index];
}
const uint64_t *hwc_slot_frames(int32_t index) {
    if (hwc_slot_at(index) == NULL) return NULL;
    return g.frames + (size_t)index * g.config.max_frames;
}
const uint8_t *hwc_slot_stack(int32_t index) {
    if (hwc_slot_at(index) == NULL || g.stack == NULL) return NULL;
    return g.stack + (size_t)index * g.config.max_stack_bytes;
}

// ---- recording (runs in the handler, or on the requester for itself) -------------------------

// process_vm_readv on ourselves stops at the first unmapped page instead of faulting, so the
// copy can never run past the end of the thread's stack (hwc_window_pieces).
static uint32_t copy_stack(uint8_t *destination, uint64_t sp, uint32_t wanted) {
    struct iovec local = {destination, wanted};
    struct iovec remote[HWC_WINDOW_PIECES];
    unsigned long pieces = hwc_window_pieces(remote, sp, wanted);
    long copied = syscall(SYS_process_vm_readv, raw_getpid(), &local, 1UL, remote, pieces, 0UL);
    return copied > 0 ? (uint32_t)copied : 0;
}

// Unwinding inside the capture handler. libunwind's local cache takes a global lock with every
// signal masked around each step — two rt_sigprocmask calls a frame, and the handlers of all
// threads queue on one lock (Debian builds it without the per-thread cache). libgcc's unwinder
// keeps no cache and takes no lock: libgcc_s 12 finds each frame's FDE with glibc's
// _dl_find_object (async-signal-safe, glibc 2.35). It starts in the handler: frames are skipped
// up to the signal frame's interrupted one (ip == the ucontext's pc, ip_before_insn set).
struct gcc_walk {
    uint64_t *frames;
    uint32_t count, wanted;
    uint64_t pc;
    int reached;
};

static _Unwind_Reason_Code gcc_walk_frame(struct _Unwind_Context *context, void *argument) {
    struct gcc_walk *walk = argument;
    int before_instruction = 0;
    uint64_t ip = g.gcc_get_ip_info(context, &before_instruction);
    if (!walk->reached) {
        walk->reached = before_instruction && ip == walk->pc;  // frames[0] is that pc already
        return _URC_NO_REASON;
    }
    if (ip == 0 || walk->count >= walk->wanted) return _URC_END_OF_STACK;
    walk->frames[walk->count++] = ip;
    return _URC_NO_REASON;
}

static void record(int32_t index, ucontext_t *uc, int signal_frame) {
    hwc_slot *slot = &g.slots[index];
    uint64_t *frames = g.frames + (size_t)index * g.config.max_frames;
    hwd_registers_from_ucontext(uc, slot->registers);
    // The mask the thread had when the signal came (the handler's own additions are not in it):
    // what the next capture can ask it with, without reading /proc status.
    memcpy(&slot->blocked, &uc->uc_sigmask, sizeof slot->blocked);
    // Name and CPU times from the thread itself, in parallel on whatever CPU it answers on,
    // instead of a /proc read per thread on the requester.
    memset(slot->name, 0, sizeof slot->name);
    syscall(SYS_prctl, PR_GET_NAME, slot->name, 0, 0, 0);
    slot->name[sizeof slot->name - 1] = 0;
    clockid_t own = (clockid_t)((~(uint32_t)raw_gettid()) << 3 | 4);  // what pthread_getcpuclockid builds
    for (int kind = 0; kind < 3; kind++) {
        struct timespec time = {0, 0};
        slot->cpu_ns[kind] = clock_gettime(own | kind, &time) == 0 ? (uint64_t)time.tv_sec * 1000000000u + (uint64_t)time.tv_nsec : 0;
    }
    slot->flags = 0;
    slot->queue = 0;
    slot->queue_label[0] = 0;
    if (g.current_queue) {
        void *queue = g.current_queue();
        if ((uint64_t)(uintptr_t)queue == g.no_queue) queue = NULL;
        // Note: after dispatch_main() the parked main thread still names the main queue (set
        // when libdispatch started); LiveCapture prefers the pool thread that drains it.
        if ((uint64_t)(uintptr_t)queue == g.main_queue && g.main_queue != 0) slot->flags |= HWC_SLOT_FLAG_MAIN_QUEUE;
        slot->queue = (uint64_t)(uintptr_t)queue;
        // The thread is draining this queue right now, so the queue (and its label) is alive.
        const char *label = queue && g.queue_label ? g.queue_label(queue) : NULL;
        if (label) {
            size_t i = 0;
            for (; i + 1 < HWC_QUEUE_LABEL_BYTES && label[i]; i++) slot->queue_label[i] = label[i];
            slot->queue_label[i] = 0;
        }
    }
    uint32_t wanted = __atomic_load_n(&g_frames_wanted, __ATOMIC_RELAXED);
    uint32_t count = 0;
    if (wanted > 0) {
        frames[count++] = slot->registers[HW_REGISTER_PC];
        unw_cursor_t cursor;
        if (signal_frame && g.gcc_backtrace) {
            struct gcc_walk walk = {frames, count, wanted, slot->registers[HW_REGISTER_PC], 0};
            g.gcc_backtrace(gcc_walk_frame, &walk);
            count = walk.count;
            if (!walk.reached) slot->flags |= HWC_SLOT_FLAG_UNWIND_FAILED;
        } else if (g.init_local2(&cursor, (unw_context_t *)uc, signal_frame ? UNW_INIT_SIGNAL_FRAME : 0) == 0) {
            if (!signal_frame) count = 0;  // the cursor's first frame is the getcontext caller itself
            while (count < wanted && g.step(&cursor) > 0) {
                unw_word_t ip = 0;
                if (g.get_reg(&cursor, UNW_REG_IP, &ip) != 0 || ip == 0) break;
                frames[count++] = ip;
            }
        } else {
            slot->flags |= HWC_SLOT_FLAG_UNWIND_FAILED;
        }
    }
    slot->frame_count = count;
    uint32_t stack_wanted = __atomic_load_n(&g_stack_wanted, __ATOMIC_RELAXED);
    slot->stack_start = slot->registers[HW_REGISTER_SP];
    slot->stack_size = stack_wanted && g.stack
        ? copy_stack(g.stack + (size_t)index * g.config.max_stack_bytes, slot->stack_start,
                     hwd_stack_window_bytes(slot->stack_start, hwd_own_thread_pointer(), stack_wanted)) : 0;
}

// ---- the handler --------------------------------------------------------------------------------

static void chain(int sig, siginfo_t *info, void *uc) {
    const struct sigaction *previous = &g.previous[sig];
    if (previous->sa_flags & SA_SIGINFO) {
        if (previous->sa_sigaction) previous->sa_sigaction(sig, info, uc);
        return;
    }
    if (previous->sa_handler == SIG_IGN) return;
    if (previous->sa_handler == SIG_DFL) {
        // Default for SIGPROF and real-time signals is to terminate: do what would have happened.
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        sigaction(sig, &dfl, NULL);
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, sig);
        sigprocmask(SIG_UNBLOCK, &set, NULL);
        syscall(SYS_tgkill, raw_getpid(), raw_gettid(), sig);
        return;
    }
    previous->sa_handler(sig);
}

static void answer(int sig, siginfo_t *info, void *ucv);

static void handler(int sig, siginfo_t *info, void *ucv) {
    int saved_errno = errno;
    __atomic_add_fetch(&g_in_handler, 1, __ATOMIC_ACQ_REL);
    answer(sig, info, ucv);
    __atomic_sub_fetch(&g_in_handler, 1, __ATOMIC_ACQ_REL);
    errno = saved_errno;
}

static void answer(int sig, siginfo_t *info, void *ucv) {
    uint64_t value = (uint64_t)(uintptr_t)info->si_value.sival_ptr;
    uint64_t seq = value >> 32;
    uint32_t index = (uint32_t)value;
    int ours = info->si_code == SI_QUEUE && info->si_pid == raw_getpid() && seq != 0 &&
               index < g.config.max_threads;
    if (!ours) {
        chain(sig, info, ucv);
        return;
    }
    hwc_slot *slot = &g.slots[index];
    uint64_t expected = make_ticket(seq & 0xffffffffu, SLOT_ARMED);
    // A stale request (its capture gave up on this slot) fails here and writes nothing.
    if (__atomic_compare_exchange_n(&slot->ticket, &expected, make_ticket(seq & 0xffffffffu, SLOT_WRITING), 0,
                                    __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
        if (slot->tid == (int32_t)raw_gettid()) record((int32_t)index, (ucontext_t *)ucv, 1);
        else slot->frame_count = 0;
        __atomic_store_n(&slot->ticket, make_ticket(seq & 0xffffffffu, SLOT_DONE), __ATOMIC_RELEASE);
        void (*hook)(void *) = __atomic_load_n(&g_answer_hook, __ATOMIC_ACQUIRE);
        if (hook) hook(ucv);
        // Waking the requester on every answer would make it race the answering threads for the
        // CPU; it wakes on the last one (or on its own every few ms to look for exited threads).
        if (__atomic_add_fetch(&g_answers, 1, __ATOMIC_RELEASE) >= __atomic_load_n(&g_expected, __ATOMIC_RELAXED))
            syscall(SYS_futex, &g_answers, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
    }
}

// ---- initialisation -----------------------------------------------------------------------------

static int fail(char *error, size_t length, const char *message, const char *detail) {
    snprintf(g.error, sizeof g.error, "%s%s%s", message, detail ? ": " : "", detail ? detail : "");
    g.initialised = -1;
    if (error && length) snprintf(error, length, "%s", g.error);
    return -1;
}

static void *reserve(size_t bytes) {
    if (bytes == 0) return NULL;
    void *memory = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return memory == MAP_FAILED ? NULL : memory;
}

static int install(int sig, char *error, size_t length) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = handler;
    action.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
    // Block both capture signals while answering so a handler never interrupts itself.
    sigemptyset(&action.sa_mask);
    sigaddset(&action.sa_mask, SIGPROF);
    if (g.config.ordinary_signal) sigaddset(&action.sa_mask, g.config.ordinary_signal);
    if (sigaction(sig, &action, &g.previous[sig]) != 0) return fail(error, length, "sigaction failed", strerror(errno));
    return 0;
}

// libgcc_s imports _dl_find_object, the one GLIBC_2.35 symbol it uses, exactly when it was
// built to find FDEs with it: look for that version among what it needs from libc (DT_VERNEED).
static int needs_glibc_2_35(struct dl_phdr_info *info, size_t size, void *found) {
    (void)size;
    const char *name = info->dlpi_name ? strrchr(info->dlpi_name, '/') : NULL;
    if (!name || strcmp(name, "/libgcc_s.so.1") != 0) return 0;
    // Link-time addresses of a shared object start near 0; ld.so rebases some .dynamic
    // entries in place (DT_STRTAB) and not others (DT_VERNEED).
    #define HWC_RUNTIME(address) ((address) < info->dlpi_addr ? info->dlpi_addr + (address) : (address))
    for (int i = 0; i < info->dlpi_phnum; i++) {
        if (info->dlpi_phdr[i].p_type != PT_DYNAMIC) continue;
        const ElfW(Dyn) *dynamic = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
        const char *strings = NULL;
        const ElfW(Verneed) *needed = NULL;
        size_t needed_count = 0;
        for (; dynamic->d_tag != DT_NULL; dynamic++) {
            if (dynamic->d_tag == DT_STRTAB) strings = (const char *)HWC_RUNTIME(dynamic->d_un.d_ptr);
            if (dynamic->d_tag == DT_VERNEED) needed = (const ElfW(Verneed) *)HWC_RUNTIME(dynamic->d_un.d_ptr);
            if (dynamic->d_tag == DT_VERNEEDNUM) needed_count = dynamic->d_un.d_val;
        }
        for (size_t n = 0; strings && needed && n < needed_count && n < 64; n++) {
            const ElfW(Vernaux) *version = (const ElfW(Vernaux) *)((const char *)needed + needed->vn_aux);
            for (unsigned k = 0; k < needed->vn_cnt && k < 64; k++) {
                if (strcmp(strings + version->vna_name, "GLIBC_2.35") == 0) *(int *)found = 1;
                if (version->vna_next == 0) break;
                version = (const ElfW(Vernaux) *)((const char *)version + version->vna_next);
            }
            if (needed->vn_next == 0) break;
            needed = (const ElfW(Verneed) *)((const char *)needed + needed->vn_next);
        }
    }
    #undef HWC_RUNTIME
    return 1;
}

static int gcc_finds_fdes_lock_free(void) {
    int found = 0;
    dl_iterate_phdr(needs_glibc_2_35, &found);
    return found;
}

static void *ask_current_queue(void *unused) {
    (void)unused;
    g.no_queue = (uint64_t)(uintptr_t)g.current_queue();
    return NULL;
}

int hwc_init(const hwc_config *config, char *error, size_t error_length) {
    if (g.initialised == 1) return 0;
    if (g.initialised == -1) {
        if (error && error_length) snprintf(error, error_length, "%s", g.error);
        return -1;
    }
    hwc_config c = *config;
    if (c.max_threads == 0 || c.max_threads > HWC_MAX_THREADS_LIMIT) return fail(error, error_length, "max_threads out of range", NULL);
    if (c.max_frames == 0 || c.max_frames > HWC_MAX_FRAMES_LIMIT) return fail(error, error_length, "max_frames out of range", NULL);
    if (c.max_stack_bytes > HWC_MAX_STACK_BYTES_LIMIT) return fail(error, error_length, "max_stack_bytes out of range", NULL);
    if (c.ordinary_signal != 0 && (c.ordinary_signal <= 0 || c.ordinary_signal >= _NSIG || c.ordinary_signal == SIGPROF ||
                                   c.ordinary_signal == SIGKILL || c.ordinary_signal == SIGSTOP))
        return fail(error, error_length, "ordinary_signal is not usable", NULL);
    g.config = c;

    // RTLD_LOCAL keeps libunwind's _Unwind_* out of the global scope (docs/platform-facts.md fact 3).
    const char *soname = c.unwind_library ? c.unwind_library : HW_UNWIND_LOCAL_LIBRARY;
    void *library = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (!library) return fail(error, error_length, "cannot load libunwind", dlerror());
    g.config.unwind_library = NULL;  // the caller's string need not outlive this call
    g.init_local2 = (unw_init_local2_fn)dlsym(library, HW_UNWIND_LOCAL_PREFIX "init_local2");
    g.step = (unw_step_fn)dlsym(library, HW_UNWIND_LOCAL_PREFIX "step");
    g.get_reg = (unw_get_reg_fn)dlsym(library, HW_UNWIND_LOCAL_PREFIX "get_reg");
    if (!g.init_local2 || !g.step || !g.get_reg)
        return fail(error, error_length, "libunwind lacks " HW_UNWIND_LOCAL_PREFIX "init_local2/_step/_get_reg", soname);

    // Only a libgcc_s that finds FDEs with _dl_find_object: an older one walks dl_iterate_phdr
    // under the loader lock, which a handler must not take.
    void *libgcc = dlopen("libgcc_s.so.1", RTLD_NOW | RTLD_LOCAL);
    if (libgcc && gcc_finds_fdes_lock_free()) {
        g.gcc_backtrace = (gcc_backtrace_fn)dlsym(libgcc, "_Unwind_Backtrace");
        g.gcc_get_ip_info = (gcc_get_ip_info_fn)dlsym(libgcc, "_Unwind_GetIPInfo");
        if (!g.gcc_backtrace || !g.gcc_get_ip_info) g.gcc_backtrace = NULL;
    }

    // libdispatch is optional: without it threads simply have no queue.
    g.current_queue = (get_current_queue_fn)dlsym(RTLD_DEFAULT, "dispatch_get_current_queue");
    g.queue_label = (get_label_fn)dlsym(RTLD_DEFAULT, "dispatch_queue_get_label");
    g.main_queue = (uint64_t)(uintptr_t)dlsym(RTLD_DEFAULT, "_dispatch_main_q");
    if (g.current_queue) {
        // A fresh thread drains no queue: learn the default answer that means "none".
        pthread_t thread;
        if (pthread_create(&thread, NULL, ask_current_queue, NULL) == 0) pthread_join(thread, NULL);
    }

    g.slots = reserve(sizeof(hwc_slot) * c.max_threads);
    g.sent = reserve(sizeof(int32_t) * c.max_threads);
    g.frames = reserve(sizeof(uint64_t) * c.max_frames * c.max_threads);
    g.stack = reserve((size_t)c.max_stack_bytes * c.max_threads);
    if (!g.slots || !g.sent || !g.frames || (c.max_stack_bytes && !g.stack))
        return fail(error, error_length, "cannot reserve capture slots", strerror(errno));

    // Warm-up unwind outside any handler: libunwind's first use initialises global state
    // (tdep_init) racily (docs/platform-facts.md fact 4). Slot 0 is idle and free to scribble on.
    __atomic_store_n(&g_frames_wanted, c.max_frames, __ATOMIC_RELAXED);
    ucontext_t context;
    getcontext(&context);
    record(0, &context, 0);
    memset(&g.slots[0], 0, sizeof(hwc_slot));
    // libgcc's first unwind initialises its register-size table (pthread_once): not in a handler.
    if (g.gcc_backtrace) {
        uint64_t scratch[4];
        struct gcc_walk walk = {scratch, 0, 4, 0, 1};
        g.gcc_backtrace(gcc_walk_frame, &walk);
    }

    if (install(SIGPROF, error, error_length) != 0) return -1;
    if (c.ordinary_signal && install(c.ordinary_signal, error, error_length) != 0) return -1;
    g.initialised = 1;
    return 0;
}

// ---- capture ------------------------------------------------------------------------------------

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static uint32_t count_done(const int32_t *slots, const int32_t *results, uint32_t count, uint64_t seq) {
    uint32_t done = 0;
    for (uint32_t i = 0; i < count; i++) {
        if (results[i] != HWC_RESULT_TIMED_OUT) { done++; continue; }  // still pending = provisional TIMED_OUT
        if (__atomic_load_n(&g.slots[slots[i]].ticket, __ATOMIC_ACQUIRE) == make_ticket(seq, SLOT_DONE)) done++;
    }
    return done;
}

int hwc_wait_for_handlers(uint64_t timeout_ns) {
    uint64_t deadline = now_ns() + timeout_ns;
    while (__atomic_load_n(&g_in_handler, __ATOMIC_ACQUIRE) != 0) {
        if (now_ns() >= deadline) return -1;
        sched_yield();
    }
    return 0;
}

static void forget_exited(const int32_t *tids, const int32_t *slots, int32_t *results, uint32_t count, uint64_t seq,
                          pid_t pid) {
    for (uint32_t i = 0; i < count; i++) {
        if (results[i] != HWC_RESULT_TIMED_OUT) continue;
        if (syscall(SYS_tgkill, pid, tids[i], 0) == 0 || errno != ESRCH) continue;
        uint64_t expected = make_ticket(seq, SLOT_ARMED);
        if (__atomic_compare_exchange_n(&g.slots[slots[i]].ticket, &expected, make_ticket(seq, SLOT_IDLE), 0,
                                        __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            results[i] = HWC_RESULT_EXITED;
    }
}

static int capture_exclusive(const int32_t *tids, const int32_t *signals, uint32_t count, uint32_t frames,
                             uint32_t stack_bytes, uint64_t timeout_ns, const hwc_capture_hooks *hooks,
                             int32_t *results, int32_t *slots, uint64_t *elapsed_ns);

int hwc_capture(const int32_t *tids, const int32_t *signals, uint32_t count, uint32_t frames,
                uint32_t stack_bytes, uint64_t timeout_ns, const hwc_capture_hooks *hooks, int32_t *results,
                int32_t *slots, uint64_t *elapsed_ns) {
    if (g.initialised != 1) return -1;
    // Callers serialise among themselves; only a crash handler can hold the slots meanwhile,
    // and then the process is about to die: wait for it.
    int32_t holder = 0, self = (int32_t)raw_gettid();
    while (!__atomic_compare_exchange_n(&g_capture_busy, &holder, self, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
        holder = 0;
        sched_yield();
    }
    int result = capture_exclusive(tids, signals, count, frames, stack_bytes, timeout_ns, hooks, results, slots, elapsed_ns);
    __atomic_store_n(&g_capture_busy, 0, __ATOMIC_RELEASE);
    return result;
}

int hwc_capture_if_idle(const int32_t *tids, const int32_t *signals, uint32_t count, uint32_t frames,
                        uint64_t wait_ns, uint64_t timeout_ns, int32_t *results, int32_t *slots, uint64_t *elapsed_ns) {
    if (g.initialised != 1) return -1;
    int32_t self = (int32_t)raw_gettid();
    uint64_t deadline = now_ns() + wait_ns;
    for (;;) {
        int32_t holder = 0;
        if (__atomic_compare_exchange_n(&g_capture_busy, &holder, self, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) break;
        // Never wait for ourselves (a crash inside our own capture); another holder finishes
        // within its own timeout (the caller keeps answering its signal meanwhile).
        if (holder == self || now_ns() >= deadline) return -2;
        struct timespec pause = {0, 1000000};
        nanosleep(&pause, NULL);
    }
    int result = capture_exclusive(tids, signals, count, frames, 0, timeout_ns, NULL, results, slots, elapsed_ns);
    __atomic_store_n(&g_capture_busy, 0, __ATOMIC_RELEASE);
    return result;
}

void hwc_set_answer_hook(void (*hook)(void *ucontext)) { __atomic_store_n(&g_answer_hook, hook, __ATOMIC_RELEASE); }

uint32_t hwc_unwind_signal_context(void *ucontext, uint64_t *frames, uint32_t max_frames) {
    if (g.initialised != 1 || max_frames == 0) return 0;
    ucontext_t *uc = ucontext;
    uint64_t registers[HW_REGISTER_COUNT];
    hwd_registers_from_ucontext(uc, registers);
    uint32_t count = 0;
    frames[count++] = registers[HW_REGISTER_PC];
    unw_cursor_t cursor;
    if (g.init_local2(&cursor, (unw_context_t *)uc, UNW_INIT_SIGNAL_FRAME) != 0) return count;
    while (count < max_frames && g.step(&cursor) > 0) {
        unw_word_t ip = 0;
        if (g.get_reg(&cursor, UNW_REG_IP, &ip) != 0 || ip == 0) break;
        frames[count++] = ip;
    }
    return count;
}

// Asks one thread: `signal` (HWC_SIGNAL_EITHER: both) with (seq, slot) as the value. Returns 0
// when at least one went out, else the errno of the failure.
static int ask(pid_t pid, int32_t tid, int32_t signal, uint64_t seq, int32_t slot) {
    // HWC_SIGNAL_EITHER: both signals, the first one the thread unblocks answers; the other
    // finds the ticket DONE (or re-armed) and writes nothing.
    int32_t asks[2] = {signal, 0};
    if (signal == HWC_SIGNAL_EITHER) {
        asks[0] = SIGPROF;
        asks[1] = g.config.ordinary_signal;
    }
    int sent = 0, failure = 0;
    for (int k = 0; k < 2 && asks[k]; k++) {
        siginfo_t info;
        memset(&info, 0, sizeof info);
        info.si_signo = asks[k];
        info.si_code = SI_QUEUE;
        info.si_pid = pid;
        info.si_uid = getuid();
        info.si_value.sival_ptr = (void *)(uintptr_t)((seq << 32) | (uint32_t)slot);
        if (syscall(SYS_rt_tgsigqueueinfo, pid, tid, asks[k], &info) == 0) sent++;
        else failure = errno;
    }
    return sent ? 0 : failure;
}

// Gives up an armed slot (a late answer then writes nothing); false if it was answered meanwhile.
static int abandon(int32_t slot, uint64_t seq) {
    uint64_t expected = make_ticket(seq, SLOT_ARMED);
    if (!__atomic_compare_exchange_n(&g.slots[slot].ticket, &expected, make_ticket(seq, SLOT_IDLE), 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE))
        return 0;
    __atomic_sub_fetch(&g_expected, 1, __ATOMIC_RELEASE);
    return 1;
}

// Answers stopped coming: each thread still unanswered goes once through the caller's recheck.
static void recheck_unanswered(const int32_t *tids, const int32_t *slots, int32_t *results, uint32_t count,
                               uint64_t seq, pid_t pid, const hwc_capture_hooks *hooks) {
    for (uint32_t i = 0; i < count; i++) {
        if (results[i] != HWC_RESULT_TIMED_OUT || g.sent[slots[i]] < 0) continue;
        if (__atomic_load_n(&g.slots[slots[i]].ticket, __ATOMIC_ACQUIRE) != make_ticket(seq, SLOT_ARMED)) continue;
        int32_t sent = g.sent[slots[i]];
        g.sent[slots[i]] = -1;
        int32_t again = hooks->recheck(hooks->context, i, sent);
        if (again == 0) {
            if (abandon(slots[i], seq)) results[i] = HWC_RESULT_NOT_SIGNALLED;
        } else if (again != sent && ask(pid, tids[i], again, seq, slots[i]) == ESRCH && abandon(slots[i], seq)) {
            results[i] = HWC_RESULT_EXITED;
        }
    }
}

static int capture_exclusive(const int32_t *tids, const int32_t *signals, uint32_t count, uint32_t frames,
                             uint32_t stack_bytes, uint64_t timeout_ns, const hwc_capture_hooks *hooks,
                             int32_t *results, int32_t *slots, uint64_t *elapsed_ns) {
    uint64_t started = now_ns();
    uint64_t seq = (__atomic_add_fetch(&g_sequence, 1, __ATOMIC_RELAXED)) & 0xffffffffu;
    if (seq == 0) seq = __atomic_add_fetch(&g_sequence, 1, __ATOMIC_RELAXED) & 0xffffffffu;
    __atomic_store_n(&g_frames_wanted, frames < g.config.max_frames ? frames : g.config.max_frames, __ATOMIC_RELAXED);
    __atomic_store_n(&g_stack_wanted, stack_bytes < g.config.max_stack_bytes ? stack_bytes : g.config.max_stack_bytes,
                     __ATOMIC_RELAXED);
    int32_t self = (int32_t)raw_gettid();
    pid_t pid = (pid_t)raw_getpid();
    int choosing = hooks && hooks->choose;

    // Assign slots, skipping any still being written by a late answer to an earlier capture.
    uint32_t next_slot = 0;
    for (uint32_t i = 0; i < count; i++) {
        slots[i] = -1;
        results[i] = HWC_RESULT_NO_SLOT;
        if (signals[i] == 0 && tids[i] != self && !choosing) { results[i] = HWC_RESULT_NOT_SIGNALLED; continue; }
        while (next_slot < g.config.max_threads &&
               ticket_state(__atomic_load_n(&g.slots[next_slot].ticket, __ATOMIC_ACQUIRE)) == SLOT_WRITING)
            next_slot++;
        if (next_slot >= g.config.max_threads) continue;
        int32_t index = (int32_t)next_slot++;
        slots[i] = index;
        g.slots[index].tid = tids[i];
        g.slots[index].frame_count = 0;
        g.slots[index].stack_size = 0;
        __atomic_store_n(&g.slots[index].ticket, make_ticket(seq, SLOT_ARMED), __ATOMIC_RELEASE);
        results[i] = HWC_RESULT_TIMED_OUT;  // provisional until answered
    }

    int32_t expected = 0;
    for (uint32_t i = 0; i < count; i++) expected += slots[i] >= 0 && tids[i] != self;
    __atomic_store_n(&g_answers, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&g_expected, expected, __ATOMIC_RELEASE);

    // Choose every signal, then ask everyone back-to-back, then wait: the threads answer in
    // parallel. (Asking each right after reading its /proc files was slower: every woken
    // thread preempted the requester before it could read the next one.)
    for (uint32_t i = 0; i < count; i++)
        if (slots[i] >= 0 && tids[i] != self) g.sent[slots[i]] = choosing ? hooks->choose(hooks->context, i) : signals[i];
    for (uint32_t i = 0; i < count; i++) {
        if (slots[i] < 0 || tids[i] == self) continue;
        int32_t signal = g.sent[slots[i]];
        int failure = signal == 0 ? -1 : ask(pid, tids[i], signal, seq, slots[i]);
        if (failure != 0 && abandon(slots[i], seq))
            results[i] = failure == -1 ? HWC_RESULT_NOT_SIGNALLED : failure == ESRCH ? HWC_RESULT_EXITED : HWC_RESULT_SEND_FAILED;
    }
    // Our own stack, recorded directly while the others answer.
    for (uint32_t i = 0; i < count; i++) {
        if (slots[i] < 0 || tids[i] != self) continue;
        ucontext_t context;
        getcontext(&context);
        record(slots[i], &context, 0);
        __atomic_store_n(&g.slots[slots[i]].ticket, make_ticket(seq, SLOT_DONE), __ATOMIC_RELEASE);
    }

    uint64_t deadline = started + timeout_ns;
    int rechecking = hooks && hooks->recheck && hooks->stall_ns > 0;
    int32_t last_seen = -1;
    uint64_t last_progress = now_ns();
    for (;;) {
        int32_t seen = __atomic_load_n(&g_answers, __ATOMIC_ACQUIRE);
        if (count_done(slots, results, count, seq) == count) break;
        uint64_t now = now_ns();
        if (now >= deadline) break;
        if (seen != last_seen) {
            last_seen = seen;
            last_progress = now;
        } else if (rechecking && now - last_progress >= hooks->stall_ns) {
            recheck_unanswered(tids, slots, results, count, seq, pid, hooks);
            rechecking = 0;
            continue;
        }
        uint64_t left = deadline - now;
        // Wake up now and then to notice threads that exited with our signal still pending
        // (and, with a recheck hook, answers that stopped coming).
        if (left > 5000000u) left = 5000000u;
        if (rechecking && left > hooks->stall_ns) left = hooks->stall_ns;
        if (now - started > 5000000u) forget_exited(tids, slots, results, count, seq, pid);
        struct timespec wait = {(time_t)(left / 1000000000u), (long)(left % 1000000000u)};
        syscall(SYS_futex, &g_answers, FUTEX_WAIT_PRIVATE, seen, &wait, NULL, 0);
    }

    // Settle every pending slot: answered, or abandoned so a late answer cannot write into it.
    for (uint32_t i = 0; i < count; i++) {
        if (results[i] != HWC_RESULT_TIMED_OUT) continue;
        hwc_slot *slot = &g.slots[slots[i]];
        uint64_t expected = make_ticket(seq, SLOT_ARMED);
        if (__atomic_compare_exchange_n(&slot->ticket, &expected, make_ticket(seq, SLOT_IDLE), 0,
                                        __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            continue;  // never answered: stays TIMED_OUT
        // Answering right now: an unwind is short, give it a brief grace period.
        uint64_t grace_end = now_ns() + 2000000u;
        while (ticket_state(__atomic_load_n(&slot->ticket, __ATOMIC_ACQUIRE)) == SLOT_WRITING && now_ns() < grace_end)
            sched_yield();
        if (__atomic_load_n(&slot->ticket, __ATOMIC_ACQUIRE) == make_ticket(seq, SLOT_DONE)) results[i] = HWC_RESULT_ANSWERED;
    }
    if (elapsed_ns) *elapsed_ns = now_ns() - started;
    return 0;
}

// ---- what hw_quiet.c shares (not signal context) -------------------------------------------------

static hwc_shared g_shared;

const hwc_shared *hwc_shared_state(void) {
    if (g.initialised != 1) return NULL;
    g_shared = (hwc_shared){g.config, g.slots, g.frames, g.stack, g.main_queue, g.no_queue, g.queue_label};
    return &g_shared;
}

void hwc_lock_slots(void) {
    int32_t holder = 0, self = (int32_t)raw_gettid();
    while (!__atomic_compare_exchange_n(&g_capture_busy, &holder, self, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
        holder = 0;
        sched_yield();
    }
}

void hwc_unlock_slots(void) { __atomic_store_n(&g_capture_busy, 0, __ATOMIC_RELEASE); }

uint64_t hwc_next_sequence(void) {
    uint64_t seq = __atomic_add_fetch(&g_sequence, 1, __ATOMIC_RELAXED) & 0xffffffffu;
    return seq != 0 ? seq : __atomic_add_fetch(&g_sequence, 1, __ATOMIC_RELAXED) & 0xffffffffu;
}

void hwc_record_self(int32_t slot, uint32_t frames, uint32_t stack_bytes) {
    __atomic_store_n(&g_frames_wanted, frames < g.config.max_frames ? frames : g.config.max_frames, __ATOMIC_RELAXED);
    __atomic_store_n(&g_stack_wanted, stack_bytes < g.config.max_stack_bytes ? stack_bytes : g.config.max_stack_bytes,
                     __ATOMIC_RELAXED);
    ucontext_t context;
    getcontext(&context);
    record(slot, &context, 0);
}

// /proc/PID/task of this process, opened once (again after a fork): a name is then read with a
// two-component lookup instead of resolving /proc/self for each thread.
static int task_directory(pid_t pid) {
    static int directory = -1;
    static pid_t owner = 0;
    if (directory >= 0 && owner == pid) return directory;
    char path[48];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    int opened = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (opened < 0) return -1;
    if (directory >= 0) close(directory);
    directory = opened;
    owner = pid;
    return directory;
}

void hwc_fill_name_and_clocks(hwc_slot *slot, int32_t tid, pid_t self) {
    memset(slot->name, 0, sizeof slot->name);
    char path[32];
    snprintf(path, sizeof path, "%d/comm", (int)tid);
    int directory = task_directory(self);
    int fd = directory >= 0 ? openat(directory, path, O_RDONLY | O_CLOEXEC) : -1;
    if (fd >= 0) {
        ssize_t got = read(fd, slot->name, sizeof slot->name - 1);
        if (got > 0 && slot->name[got - 1] == '\n') slot->name[got - 1] = 0;
        close(fd);
    }
    clockid_t clock = (clockid_t)((~(uint32_t)tid) << 3 | 4);  // what pthread_getcpuclockid builds
    for (int kind = 0; kind < 3; kind++) {
        struct timespec time = {0, 0};
        slot->cpu_ns[kind] = clock_gettime(clock | kind, &time) == 0 ? (uint64_t)time.tv_sec * 1000000000u + (uint64_t)time.tv_nsec : 0;
    }
}

// ---- modules (not signal context) ---------------------------------------------------------------

struct module_visit {
    void (*visit)(const hwc_module *, void *);
    void *context;
};

static int visit_module(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    struct module_visit *visit = data;
    hwc_module module;
    memset(&module, 0, sizeof module);
    module.name = info->dlpi_name ? info->dlpi_name : "";
    module.bias = info->dlpi_addr;
    module.start = UINT64_MAX;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *header = &info->dlpi_phdr[i];
        uint64_t low = info->dlpi_addr + header->p_vaddr;
        if (header->p_type == PT_LOAD) {
            if (low < module.start) module.start = low;
            if (low + header->p_memsz > module.end) module.end = low + header->p_memsz;
        } else if (header->p_type == PT_NOTE && module.note_count < HWC_MODULE_MAX_NOTES) {
            module.note_address[module.note_count] = low;
            module.note_size[module.note_count] = header->p_memsz;
            module.note_alignment[module.note_count] = (uint32_t)header->p_align;
            module.note_count++;
        }
    }
    if (module.start == UINT64_MAX) module.start = 0;
    visit->visit(&module, visit->context);
    return 0;
}

void hwc_for_each_module(void (*visit)(const hwc_module *module, void *context), void *context) {
    struct module_visit data = {visit, context};
    dl_iterate_phdr(visit_module, &data);
}
