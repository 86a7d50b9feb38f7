// See hw_crash.h. Inside crash_handler only raw syscalls (and their thin glibc wrappers on the
// POSIX async-signal-safe list), atomics, static or pre-mmap'ed memory, the hwd_ writer and
// libunwind's init_local2/step/get_reg (through hw_capture.c) are used. No malloc, no locks,
// no stdio, no Swift.
#define _GNU_SOURCE
#include "hw_crash.h"
#include "hw_capture.h"
#include "hw_dump.h"
#include "hw_procfs.h"
#include "hw_process.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

static const int k_signals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGTRAP};
enum { SIGNAL_COUNT = sizeof k_signals / sizeof k_signals[0] };
// ThreadRoles / ThreadCaptureStatus raw values (ProcessSnapshot.swift).
enum { ROLE_MAIN_THREAD = 1, ROLE_MAIN_QUEUE = 2, ROLE_CRASHED = 8 };
enum { STATUS_CAPTURED = 0, STATUS_UNREACHABLE = 1, STATUS_TIMED_OUT = 2, STATUS_EXITED = 3 };

static long raw_gettid(void) { return syscall(SYS_gettid); }
static long raw_getpid(void) { return syscall(SYS_getpid); }

// ---- state prepared outside the handler ---------------------------------------------------------

typedef struct armed_file {
    int fd;
    char locked[HWC_CRASH_PATH_BYTES];
    char finished[HWC_CRASH_PATH_BYTES];
} armed_file;

typedef struct prepared_sections {
    uint64_t mapped_bytes;
    uint64_t process_length;
    uint64_t tail_length;
    uint8_t bytes[];  // process, then tail
} prepared_sections;

static struct {
    int installed;
    hwc_crash_config config;
    struct sigaction previous[_NSIG];
    armed_file files[2];                 // double buffer: the handler reads the published one
    armed_file *armed;
    prepared_sections *prepared;
    hwc_crash_callback callback;
    const char *const volatile *fatal_message;  // the Swift runtime's fatal error message slot
} g;

// Alternate stacks, reserved on demand and reused once their thread is gone.
typedef struct alternate_stack {
    int32_t owner;
    uint32_t unused;
    uint8_t *base;  // guard page, then the stack
} alternate_stack;
static alternate_stack *g_stacks;
static uint32_t g_stack_count;
static uint32_t g_stack_bytes;

// ---- state of a crash in progress -----------------------------------------------------------------

static int32_t g_crashing_tid;  // first crash wins
static int32_t g_first_signal;
/// tid of the first crashing thread while it runs our part of the handler, else 0. A malloc
/// interposer (tests) may export `hwc_crash_probe_slot`; install points it here, so the probe
/// can tell the handler's allocations from those of threads that simply keep running.
static int32_t g_active;
static hwd_writer g_writer;
static uint64_t g_frames[HWC_CRASH_MAX_FRAMES];
static int32_t g_tids[HWC_CRASH_MAX_THREADS];
static int32_t g_thread_signals[HWC_CRASH_MAX_THREADS];
static int32_t g_results[HWC_CRASH_MAX_THREADS];
static int32_t g_slots[HWC_CRASH_MAX_THREADS];
typedef struct thread_facts {
    char name[32];
    char state[4];
    int have_status;
} thread_facts;
static thread_facts g_facts[HWC_CRASH_MAX_THREADS];
static thread_facts g_self_facts;
static char g_text[4096];
static char g_message[HWC_CRASH_MESSAGE_BYTES];
static uint8_t g_dirents[4096] __attribute__((aligned(8)));

int32_t hwc_crash_thread(void) { return __atomic_load_n(&g_crashing_tid, __ATOMIC_ACQUIRE); }

int32_t hwc_crash_handler_active(void) { return __atomic_load_n(&g_active, __ATOMIC_ACQUIRE); }

uint32_t hwc_crash_alternate_stacks_in_use(void) {
    uint32_t used = 0;
    pid_t pid = (pid_t)raw_getpid();
    for (uint32_t i = 0; i < g_stack_count; i++) {
        int32_t owner = __atomic_load_n(&g_stacks[i].owner, __ATOMIC_ACQUIRE);
        if (owner != 0 && syscall(SYS_tgkill, pid, owner, 0) == 0) used++;
    }
    return used;
}

// ---- small signal-safe helpers --------------------------------------------------------------------

static size_t text_length(const char *s) {
    size_t n = 0;
    while (s[n]) n++;
    return n;
}

static int copy_text(char *destination, size_t capacity, const char *source) {
    size_t n = text_length(source);
    if (n + 1 > capacity) return -2;
    memcpy(destination, source, n + 1);
    return 0;
}

static char *append_decimal(char *at, uint64_t value) {
    char digits[24];
    int n = 0;
    do { digits[n++] = (char)('0' + value % 10); value /= 10; } while (value);
    while (n) *at++ = digits[--n];
    return at;
}

/// Name, state letter and blocked-signal mask from /proc/self/task/TID/status.
static uint64_t read_thread_status(int32_t tid, thread_facts *facts) {
    memset(facts, 0, sizeof *facts);
    char path[64] = "/proc/self/task/";
    char *end = append_decimal(path + text_length(path), (uint64_t)tid);
    memcpy(end, "/status", 8);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, g_text, sizeof g_text - 1);
    close(fd);
    if (n <= 0) return 0;
    g_text[n] = 0;
    facts->have_status = 1;
    size_t at, length;
    if (hw_proc_status_field(g_text, (size_t)n, "Name", &at, &length)) {
        size_t i = 0;
        for (; i < length && i + 1 < sizeof facts->name; i++) facts->name[i] = g_text[at + i];
    }
    if (hw_proc_status_field(g_text, (size_t)n, "State", &at, &length) && length > 0) facts->state[0] = g_text[at];
    return hw_proc_status_field(g_text, (size_t)n, "SigBlk", &at, &length) ? hw_proc_hex(g_text + at, length) : 0;
}

/// Thread ids from /proc/self/task, with getdents64 into a static buffer (opendir would allocate).
static uint32_t list_threads(int32_t *tids, uint32_t capacity, int32_t skip) {
    int fd = open("/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return 0;
    int truncated = 0;  // more threads than the handler's slots: it captures those it has
    int count = hw_proc_list_threads(fd, (pid_t)raw_getpid(), skip, tids, capacity, &truncated, g_dirents, sizeof g_dirents);
    close(fd);
    return count > 0 ? (uint32_t)count : 0;
}

size_t hwc_copy_string(const char *text, char *out, size_t size) {
    if (out == NULL || size == 0) return 0;
    size_t have = 0;
    while (text != NULL && have + 1 < size) {
        uint64_t at = (uint64_t)(uintptr_t)text + have;
        size_t chunk = 4096 - (at & 4095);  // to the end of the page: the next may be unmapped
        if (chunk > size - 1 - have) chunk = size - 1 - have;
        struct iovec local = {out + have, chunk};
        struct iovec remote = {(void *)(uintptr_t)at, chunk};
        long got = syscall(SYS_process_vm_readv, raw_getpid(), &local, 1UL, &remote, 1UL, 0UL);
        if (got <= 0) break;
        size_t read_to = have + (size_t)got, end = have;
        while (end < read_to && out[end]) end++;
        have = end;
        if (end < read_to || (size_t)got < chunk) break;  // its end found, or the memory's
    }
    out[have] = 0;
    return have;
}

/// The Swift runtime keeps the last fatal error message in an atomic slot (non-Apple builds).
static const char *fatal_message(void) {
    if (!g.fatal_message) return NULL;
    const char *text = __atomic_load_n((const char *const *)g.fatal_message, __ATOMIC_ACQUIRE);
    if (!text) return NULL;
    size_t have = hwc_copy_string(text, g_message, sizeof g_message);
    // The runtime's message ends with a newline; the report adds its own.
    while (have > 0 && (g_message[have - 1] == '\n' || g_message[have - 1] == ' ')) g_message[--have] = 0;
    return have ? g_message : NULL;
}

static double seconds(clockid_t clock) {
    struct timespec t;
    clock_gettime(clock, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void write_raw(hwd_writer *w, const uint8_t *bytes, uint64_t length) {
    if (length == 0 || hwd_flush(w) != 0) return;
    while (length > 0) {
        ssize_t n = write(w->fd, bytes, length);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) { w->error = errno ? errno : HWD_ERROR_SHORT_WRITE; return; }
        bytes += n;
        length -= (uint64_t)n;
    }
}

static void write_thread_header(hwd_writer *w, int32_t tid, uint32_t status, uint32_t roles, const thread_facts *f) {
    hwd_start_map(w, HWD_KEY_ARRAY_ITEM);
    hwd_write_i64(w, HWD_KEY_THREAD_TID, tid);
    hwd_write_u64(w, HWD_KEY_THREAD_CAPTURE_STATUS, status);
    hwd_write_u64(w, HWD_KEY_THREAD_ROLES, roles);
    hwd_write_string(w, HWD_KEY_THREAD_NAME, f->name);
    hwd_write_string(w, HWD_KEY_THREAD_STATE, f->state[0] ? f->state : "?");
}

static int blocks_both(uint64_t blocked, int32_t ordinary) {
    int ordinary_blocked = !ordinary || (blocked & (1ull << (ordinary - 1)));
    return ordinary_blocked && (blocked & (1ull << (SIGPROF - 1)));
}

static void write_other_threads(hwd_writer *w, int32_t self, double *elapsed) {
    pid_t pid = (pid_t)raw_getpid();
    uint32_t count = list_threads(g_tids, HWC_CRASH_MAX_THREADS, self);
    int32_t ordinary = hwc_ordinary_signal();
    for (uint32_t i = 0; i < count; i++) {
        uint64_t blocked = read_thread_status(g_tids[i], &g_facts[i]);
        // A thread blocking both may do so for a moment only (inside pthread_create, or just
        // started): ask with both and let the signal wait pending. Measured: under load the
        // main thread was seen runnable inside pthread_create with every signal blocked.
        int32_t signal = HWC_SIGNAL_EITHER;
        if (ordinary && !(blocked & (1ull << (ordinary - 1)))) signal = ordinary;
        else if (!(blocked & (1ull << (SIGPROF - 1)))) signal = SIGPROF;
        g_thread_signals[i] = g_facts[i].have_status ? signal : 0;
    }
    uint64_t elapsed_ns = 0;
    int captured = g.config.other_thread_frames > 0 &&
                   hwc_capture_if_idle(g_tids, g_thread_signals, count, g.config.other_thread_frames,
                                       g.config.other_threads_timeout_ns, g.config.other_threads_timeout_ns, g_results, g_slots, &elapsed_ns) == 0;
    *elapsed = (double)elapsed_ns / 1e9;
    // A parked main thread keeps naming the main queue; a pool thread draining it wins (LiveCapture does the same).
    int other_claims_main_queue = 0;
    for (uint32_t i = 0; captured && i < count; i++) {
        const hwc_slot *slot = g_results[i] == HWC_RESULT_ANSWERED ? hwc_slot_at(g_slots[i]) : NULL;
        if (slot && (slot->flags & HWC_SLOT_FLAG_MAIN_QUEUE) && g_tids[i] != pid) other_claims_main_queue = 1;
    }
    for (uint32_t i = 0; i < count; i++) {
        uint32_t roles = g_tids[i] == pid ? ROLE_MAIN_THREAD : 0;
        uint32_t status = STATUS_UNREACHABLE;
        const hwc_slot *slot = NULL;
        if (captured) {
            switch (g_results[i]) {
            case HWC_RESULT_ANSWERED: status = STATUS_CAPTURED; slot = hwc_slot_at(g_slots[i]); break;
            case HWC_RESULT_TIMED_OUT:
                status = STATUS_TIMED_OUT;
                // Still blocking both now: it never could answer (unreachable, not slow).
                if (g_thread_signals[i] == HWC_SIGNAL_EITHER && blocks_both(read_thread_status(g_tids[i], &g_facts[i]), ordinary))
                    status = STATUS_UNREACHABLE;
                break;
            case HWC_RESULT_EXITED: status = STATUS_EXITED; break;
            default: break;
            }
        }
        if (!g_facts[i].have_status) status = STATUS_EXITED;
        int main_queue = slot && (slot->flags & HWC_SLOT_FLAG_MAIN_QUEUE) &&
                         !(g_tids[i] == pid && other_claims_main_queue);
        if (main_queue) roles |= ROLE_MAIN_QUEUE;
        write_thread_header(w, g_tids[i], status, roles, &g_facts[i]);
        if (slot) {
            hwd_write_u64_array(w, HWD_KEY_THREAD_REGISTERS, slot->registers, HWC_REGISTER_COUNT);
            hwd_write_u64_array(w, HWD_KEY_THREAD_FRAMES, hwc_slot_frames(g_slots[i]), slot->frame_count);
            int dropped_claim = (slot->flags & HWC_SLOT_FLAG_MAIN_QUEUE) && !main_queue;
            if (slot->queue_label[0] && !dropped_claim) hwd_write_string(w, HWD_KEY_THREAD_QUEUE_LABEL, slot->queue_label);
        }
        hwd_end_map(w);
    }
}

static void write_dump(int sig, siginfo_t *info, ucontext_t *uc, int32_t self) {
    armed_file *file = __atomic_load_n(&g.armed, __ATOMIC_ACQUIRE);
    if (!file || file->fd < 0) return;
    prepared_sections *prepared = __atomic_load_n(&g.prepared, __ATOMIC_ACQUIRE);
    hwd_writer *w = &g_writer;
    hwd_writer_init(w, file->fd);
    hwd_begin_document(w);

    // The reason first: a dump cut short after this still says what happened.
    hwd_start_map(w, HWD_KEY_REASON);
    hwd_write_u64(w, HWD_KEY_REASON_KIND, HWD_REASON_CRASH);
    hwd_write_f64(w, HWD_KEY_REASON_TIMESTAMP, seconds(CLOCK_REALTIME));
    hwd_write_i64(w, HWD_KEY_SIGNAL_NUMBER, sig);
    hwd_write_i64(w, HWD_KEY_SIGNAL_CODE, info->si_code);
    // si_addr means the faulting address only for faults the kernel raised.
    int fault = info->si_code > 0 && sig != SIGABRT;
    hwd_write_u64(w, HWD_KEY_SIGNAL_ADDRESS, fault ? (uint64_t)(uintptr_t)info->si_addr : 0);
    hwd_write_i64(w, HWD_KEY_SIGNAL_TID, self);
    const char *message = fatal_message();
    if (message) hwd_write_string(w, HWD_KEY_SIGNAL_MESSAGE, message);
    hwd_end_map(w);

    if (prepared) write_raw(w, prepared->bytes, prepared->process_length);

    double started = seconds(CLOCK_MONOTONIC);
    hwd_start_array(w, HWD_KEY_THREADS);
    read_thread_status(self, &g_self_facts);
    uint32_t roles = ROLE_CRASHED | (self == raw_getpid() ? ROLE_MAIN_THREAD : 0);
    write_thread_header(w, self, STATUS_CAPTURED, roles, &g_self_facts);
    uint64_t registers[HWC_REGISTER_COUNT];
    hwd_registers_from_ucontext(uc, registers);
    hwd_write_u64_array(w, HWD_KEY_THREAD_REGISTERS, registers, HWC_REGISTER_COUNT);
    uint32_t frames = hwc_unwind_signal_context(uc, g_frames, HWC_CRASH_MAX_FRAMES);
    if (frames == 0) { g_frames[0] = registers[HW_REGISTER_PC]; frames = 1; }
    hwd_write_u64_array(w, HWD_KEY_THREAD_FRAMES, g_frames, frames);
    hwd_end_map(w);
    hwd_flush(w);  // the crashed thread is on disk before the others are asked anything

    double others_elapsed = 0;
    write_other_threads(w, self, &others_elapsed);
    hwd_end_array(w);

    if (prepared) write_raw(w, prepared->bytes + prepared->process_length, prepared->tail_length);
    hwd_write_f64(w, HWD_KEY_CAPTURE_DURATION, seconds(CLOCK_MONOTONIC) - started);
    hwd_end_document(w);
    // Finished (even if a write failed: a partial dump still reads as incomplete-but-usable).
    rename(file->locked, file->finished);
}

// ---- the handler --------------------------------------------------------------------------------

/// Ends the process with `sig` by its default action, whatever is blocked or installed.
static void die_with(int sig) {
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigaction(sig, &dfl, NULL);
    syscall(SYS_tgkill, raw_getpid(), raw_gettid(), sig);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, sig);
    sigprocmask(SIG_UNBLOCK, &set, NULL);  // the pending signal is delivered here
    syscall(SYS_exit_group, 128 + sig);     // unreachable for the six fatal signals
}

static void chain(int sig, siginfo_t *info, void *uc) {
    const struct sigaction *previous = &g.previous[sig];
    // Put it back first: whatever it does next (re-raise, return to re-fault) must not reach us again.
    sigaction(sig, previous, NULL);
    // Call it with the mask the kernel would have given it: the interrupted context's mask, its
    // sa_mask, and the signal itself unless SA_NODEFER. Ours blocks `sig` (no SA_NODEFER); the
    // Swift backtracer's has SA_NODEFER and starts a memory-reader thread that inherits this
    // mask: with SIGBUS still blocked, that thread's own SIGBUS (reading the truncated mapping
    // for swift-backtrace) killed the process before the backtrace was printed.
    sigset_t mask = ((ucontext_t *)uc)->uc_sigmask;
    for (int s = 1; s < _NSIG; s++)
        if (sigismember(&previous->sa_mask, s) == 1) sigaddset(&mask, s);
    if (previous->sa_flags & SA_NODEFER) sigdelset(&mask, sig);
    else sigaddset(&mask, sig);
    sigprocmask(SIG_SETMASK, &mask, NULL);
    if (previous->sa_flags & SA_SIGINFO) {
        if (previous->sa_sigaction) previous->sa_sigaction(sig, info, uc);
    } else if (previous->sa_handler != SIG_DFL && previous->sa_handler != SIG_IGN) {
        previous->sa_handler(sig);
    }
}

static void crash_handler(int sig, siginfo_t *info, void *ucv) {
    int32_t self = (int32_t)raw_gettid();
    int32_t first = 0;
    if (!__atomic_compare_exchange_n(&g_crashing_tid, &first, self, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
        if (first == self) {
            // A fault inside our own handling, the callback or the chained handler: never loop.
            __atomic_store_n(&g_active, 0, __ATOMIC_RELEASE);
            die_with(__atomic_load_n(&g_first_signal, __ATOMIC_ACQUIRE));
        }
        // Another thread crashed first and is reporting; it ends the process. Bounded: if it
        // never does, die with our own signal.
        for (int i = 0; i < 3000; i++) {
            struct timespec pause = {0, 10000000};
            nanosleep(&pause, NULL);
        }
        die_with(sig);
        return;
    }
    __atomic_store_n(&g_first_signal, sig, __ATOMIC_RELEASE);
    __atomic_store_n(&g_active, self, __ATOMIC_SEQ_CST);
    hwc_crash_callback callback = __atomic_load_n(&g.callback, __ATOMIC_ACQUIRE);
    if (callback) callback(sig);
    write_dump(sig, info, (ucontext_t *)ucv, self);
    __atomic_store_n(&g_active, 0, __ATOMIC_SEQ_CST);
    chain(sig, info, ucv);
    die_with(sig);
}

// ---- set-up (normal context) ----------------------------------------------------------------------

/// Claims a stack from the pool for the calling thread (one it already owns, a free one, or
/// one whose owner has exited) and describes it in `out`. Signal-safe. 0, or -1 if none.
static int claim_alternate_stack(stack_t *out) {
    alternate_stack *stacks = __atomic_load_n(&g_stacks, __ATOMIC_ACQUIRE);
    if (!stacks) return -1;
    int32_t self = (int32_t)raw_gettid();
    pid_t pid = (pid_t)raw_getpid();
    for (uint32_t i = 0; i < g_stack_count; i++) {
        alternate_stack *entry = &stacks[i];
        int32_t owner = __atomic_load_n(&entry->owner, __ATOMIC_ACQUIRE);
        int free_slot = owner == 0 || owner == self ||
                        (syscall(SYS_tgkill, pid, owner, 0) != 0 && errno == ESRCH);
        if (!free_slot || !__atomic_compare_exchange_n(&entry->owner, &owner, self, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            continue;
        if (!entry->base) {
            void *memory = mmap(NULL, (size_t)g_stack_bytes + 4096, PROT_READ | PROT_WRITE,
                                MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
            if (memory == MAP_FAILED) { __atomic_store_n(&entry->owner, 0, __ATOMIC_RELEASE); return -1; }
            mprotect(memory, 4096, PROT_NONE);  // an overflow of the alternate stack faults, not corrupts
            entry->base = memory;
        }
        out->ss_sp = entry->base + 4096;
        out->ss_flags = 0;
        out->ss_size = g_stack_bytes;
        return 0;
    }
    return -1;
}

int hwc_crash_ensure_alternate_stack(void) {
    stack_t current;
    if (sigaltstack(NULL, &current) == 0 && !(current.ss_flags & SS_DISABLE)) return 0;
    stack_t stack;
    if (claim_alternate_stack(&stack) != 0) return -1;
    return sigaltstack(&stack, NULL) == 0 ? 0 : -1;
}

/// Runs in the capture handler of every answering thread. sigaltstack() called here would be
/// undone on return: rt_sigreturn re-installs the alternate stack saved in the ucontext
/// (uc_stack) at delivery. So the new stack goes into uc_stack, and sigreturn installs it.
static void answer_hook(void *ucv) {
    ucontext_t *uc = ucv;
    if (!uc || !(uc->uc_stack.ss_flags & SS_DISABLE)) return;  // has one already (or runs on it)
    stack_t stack;
    if (claim_alternate_stack(&stack) == 0) uc->uc_stack = stack;
}

static int fail(char *error, size_t length, const char *message) {
    if (error && length) snprintf(error, length, "%s: %s", message, strerror(errno));
    return -1;
}

int hwc_crash_install(const hwc_crash_config *config, char *error, size_t error_length) {
    g.config.other_thread_frames = config->other_thread_frames;
    g.config.other_threads_timeout_ns = config->other_threads_timeout_ns;
    if (g.installed) return 0;
    if (!hwc_slot_at(0)) {
        if (error && error_length) snprintf(error, error_length, "capture is not initialised (hwc_init first)");
        return -1;
    }
    g.config = *config;
    g_stack_bytes = config->alternate_stack_bytes ? (config->alternate_stack_bytes + 4095u) & ~4095u : 256u * 1024u;
    g_stack_count = config->alternate_stack_count ? config->alternate_stack_count : 256;
    if (!g_stacks) {
        void *table = mmap(NULL, sizeof(alternate_stack) * g_stack_count, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (table == MAP_FAILED) return fail(error, error_length, "cannot reserve the alternate stack table");
        __atomic_store_n(&g_stacks, (alternate_stack *)table, __ATOMIC_RELEASE);
    }
    if (hwc_crash_ensure_alternate_stack() != 0) return fail(error, error_length, "cannot give this thread an alternate stack");
    // Non-Apple Swift runtimes publish the last fatalError message here (absent before Swift 5.9).
    typedef const char *const volatile *(*message_slot_fn)(void);
    message_slot_fn message_slot = (message_slot_fn)dlsym(RTLD_DEFAULT, "swift_getFatalErrorMessageBuffer");
    if (message_slot) g.fatal_message = message_slot();
    // Test hook: a malloc interposer (LD_PRELOAD) exporting this pointer learns when we run.
    int32_t **probe = (int32_t **)dlsym(RTLD_DEFAULT, "hwc_crash_probe_slot");
    if (probe) *probe = &g_active;
    hwc_set_answer_hook(answer_hook);

    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = crash_handler;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    for (int i = 0; i < SIGNAL_COUNT; i++) {
        if (sigaction(k_signals[i], &action, &g.previous[k_signals[i]]) != 0) {
            int saved = errno;
            for (int j = 0; j < i; j++) sigaction(k_signals[j], &g.previous[k_signals[j]], NULL);
            errno = saved;
            return fail(error, error_length, "sigaction failed");
        }
    }
    g.installed = 1;
    return 0;
}

void hwc_crash_uninstall(void) {
    if (!g.installed) return;
    for (int i = 0; i < SIGNAL_COUNT; i++) sigaction(k_signals[i], &g.previous[k_signals[i]], NULL);
    g.installed = 0;
}

int hwc_crash_arm_dump_file(int fd, const char *locked_path, const char *finished_path) {
    armed_file *current = __atomic_load_n(&g.armed, __ATOMIC_ACQUIRE);
    armed_file *next = current == &g.files[0] ? &g.files[1] : &g.files[0];
    if (fd >= 0 && (copy_text(next->locked, sizeof next->locked, locked_path) != 0 ||
                    copy_text(next->finished, sizeof next->finished, finished_path) != 0))
        return -2;
    next->fd = fd;
    __atomic_store_n(&g.armed, fd >= 0 ? next : NULL, __ATOMIC_SEQ_CST);
    return current ? current->fd : -1;
}

int hwc_crash_set_prepared_sections(const uint8_t *process, uint64_t process_length,
                                    const uint8_t *tail, uint64_t tail_length) {
    uint64_t bytes = sizeof(prepared_sections) + process_length + tail_length;
    void *memory = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) return -1;
    prepared_sections *next = memory;
    next->mapped_bytes = bytes;
    next->process_length = process_length;
    next->tail_length = tail_length;
    if (process_length) memcpy(next->bytes, process, process_length);
    if (tail_length) memcpy(next->bytes + process_length, tail, tail_length);
    prepared_sections *old = __atomic_exchange_n(&g.prepared, next, __ATOMIC_SEQ_CST);
    // A handler that started before the exchange may still read the old sections: then the
    // process is dying anyway, so leak them rather than pull them away.
    if (old && __atomic_load_n(&g_crashing_tid, __ATOMIC_SEQ_CST) == 0) munmap(old, old->mapped_bytes);
    return 0;
}

void hwc_crash_set_callback(hwc_crash_callback callback) { __atomic_store_n(&g.callback, callback, __ATOMIC_RELEASE); }
