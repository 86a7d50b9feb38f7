// The capture C code (hw_capture.c, hw_crash.c, hw_dump.c) on its own, without Swift: built
// and run by scripts/check-aarch64 natively and, for aarch64, under qemu-aarch64-static.
// Checks the register layout of hw_registers.h against where the threads really were:
//   1. hwc_capture of this thread (getcontext) and of a thread asked with SIGPROF (signal
//      context): pc == frames[0], sp on that thread's stack, the right functions unwound;
//   2. hwc_unwind_signal_context from a handler of our own;
//   3. a crash (SIGSEGV) in a child: the dump's registers (HW_REGISTER_COUNT u64) and frames;
//   4. hw_ptrace.c: libunwind-ptrace and the architecture's remote libunwind load with every
//      symbol, and (where ptrace works: not under qemu-user) a child stopped with ptrace has
//      its registers read and its stack unwound.
// Needs -rdynamic (dladdr names the functions). Prints "capture-selftest: N passed, N failed".
#define _GNU_SOURCE
#include "hw_capture.h"
#include "hw_crash.h"
#include "hw_dump.h"
#include "hw_ptrace.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int passed, failed, verbose;  // verbose: CAPTURE_SELFTEST_VERBOSE=1 prints every stack
#define CHECK(condition, ...)                                                  \
    do {                                                                       \
        if (condition) {                                                       \
            passed++;                                                          \
        } else {                                                               \
            failed++;                                                          \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #condition); \
            fprintf(stderr, __VA_ARGS__);                                      \
            fputc('\n', stderr);                                               \
        }                                                                      \
    } while (0)

static const char *function_at(uint64_t address) {
    Dl_info info;
    if (address == 0 || !dladdr((void *)(uintptr_t)address, &info) || !info.dli_sname) return "?";
    return info.dli_sname;
}

/// Whether one of the first frames (return addresses: address - 1 still lies in the caller) is in `name`.
static int frames_contain(const uint64_t *frames, uint32_t count, const char *name) {
    for (uint32_t i = 0; i < count; i++)
        if (strcmp(function_at(i == 0 ? frames[i] : frames[i] - 1), name) == 0) return 1;
    return 0;
}

static void print_frames(const char *title, const uint64_t *frames, uint32_t count) {
    fprintf(stderr, "  %s:", title);
    for (uint32_t i = 0; i < count && i < 12; i++) fprintf(stderr, " %s", function_at(i == 0 ? frames[i] : frames[i] - 1));
    fputc('\n', stderr);
}

static int near(uint64_t sp, const void *local) {
    uint64_t at = (uint64_t)(uintptr_t)local;
    return sp != 0 && sp <= at + 4096 && at - sp < 256 * 1024;
}

// ---- 1. hwc_capture ---------------------------------------------------------------------------

static volatile int worker_ready, worker_stop;
static int32_t worker_tid;
static void *volatile worker_local;

__attribute__((noinline)) void selftest_worker_wait(void) {
    int local = 0;
    worker_local = &local;
    worker_tid = hwc_gettid();
    __atomic_store_n(&worker_ready, 1, __ATOMIC_RELEASE);
    while (!__atomic_load_n(&worker_stop, __ATOMIC_ACQUIRE)) {
        struct timespec pause = {0, 1000000};
        nanosleep(&pause, NULL);
    }
    __asm__ volatile("" ::"r"(&local) : "memory");
}

static void *worker_main(void *unused) {
    (void)unused;
    selftest_worker_wait();
    return NULL;
}

static void start_worker(pthread_t *thread) {
    pthread_create(thread, NULL, worker_main, NULL);
    while (!__atomic_load_n(&worker_ready, __ATOMIC_ACQUIRE)) sched_yield();
}

static void stop_worker(pthread_t thread) {
    __atomic_store_n(&worker_stop, 1, __ATOMIC_RELEASE);
    pthread_join(thread, NULL);
}

__attribute__((noinline)) int selftest_capture_here(const int32_t *tids, const int32_t *signals, int32_t *results,
                                                    int32_t *slots) {
    int result = hwc_capture(tids, signals, 2, 64, 0, 5000000000ull, NULL, results, slots, NULL);
    __asm__ volatile("" ::: "memory");  // not a tail call: this frame stays on the stack
    return result;
}

/// `signal_context`: the thread answered a signal (frames[0] is its pc); else it captured itself
/// from a getcontext, and the frames start at the caller of the function that called it.
static void check_slot(const char *who, int32_t slot_index, int signal_context, const void *local, const char *function) {
    const hwc_slot *slot = hwc_slot_at(slot_index);
    const uint64_t *frames = hwc_slot_frames(slot_index);
    CHECK(slot && frames, "%s: no slot", who);
    if (!slot || !frames) return;
    CHECK(slot->frame_count >= 2, "%s: %u frames (flags %u)", who, slot->frame_count, slot->flags);
    CHECK(!signal_context || frames[0] == slot->registers[HW_REGISTER_PC], "%s: frames[0] %#llx, pc %#llx", who,
          (unsigned long long)frames[0], (unsigned long long)slot->registers[HW_REGISTER_PC]);
    CHECK(slot->stack_start == slot->registers[HW_REGISTER_SP], "%s: stack_start is not the sp", who);
    CHECK(near(slot->registers[HW_REGISTER_SP], local), "%s: sp %#llx, a local of the thread at %p", who,
          (unsigned long long)slot->registers[HW_REGISTER_SP], local);
    CHECK(frames_contain(frames, slot->frame_count, function), "%s: %s not among the frames", who, function);
    if (verbose || !frames_contain(frames, slot->frame_count, function)) print_frames(who, frames, slot->frame_count);
}

static void test_capture(void) {
    char error[256] = "";
    hwc_config config = {.max_threads = 8, .max_frames = 64, .max_stack_bytes = 0, .ordinary_signal = 0,
                         .unwind_library = NULL};
    int init = hwc_init(&config, error, sizeof error);
    CHECK(init == 0, "hwc_init: %s", error);
    if (init != 0) return;
    // Debian 12's libgcc_s (12.2, built against glibc 2.36) finds FDEs with _dl_find_object on both architectures.
    CHECK(strcmp(hwc_handler_unwinder(), "libgcc") == 0, "capture handlers unwind with %s, not libgcc", hwc_handler_unwinder());
    pthread_t thread;
    start_worker(&thread);
    int32_t tids[2] = {hwc_gettid(), worker_tid};
    int32_t signals[2] = {SIGPROF, SIGPROF};
    int32_t results[2] = {-1, -1}, slots[2] = {-1, -1};
    int local = 0;
    int captured = selftest_capture_here(tids, signals, results, slots);
    CHECK(captured == 0, "hwc_capture returned %d", captured);
    CHECK(results[0] == HWC_RESULT_ANSWERED, "self: result %d", results[0]);
    CHECK(results[1] == HWC_RESULT_ANSWERED, "worker: result %d", results[1]);
    if (results[0] == HWC_RESULT_ANSWERED) check_slot("self", slots[0], 0, &local, "selftest_capture_here");
    if (results[1] == HWC_RESULT_ANSWERED) check_slot("worker", slots[1], 1, worker_local, "selftest_worker_wait");
    stop_worker(thread);
}

// ---- 2. hwc_unwind_signal_context ---------------------------------------------------------------

static uint64_t handler_frames[64];
static uint32_t handler_frame_count;
static uint64_t handler_registers[HW_REGISTER_COUNT];

static void usr1_handler(int sig, siginfo_t *info, void *uc) {
    (void)sig;
    (void)info;
    hwd_registers_from_ucontext(uc, handler_registers);
    handler_frame_count = hwc_unwind_signal_context(uc, handler_frames, 64);
}

__attribute__((noinline)) void selftest_raise_here(void) {
    raise(SIGUSR1);
    __asm__ volatile("" ::: "memory");
}

static void test_unwind_signal_context(void) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = usr1_handler;
    action.sa_flags = SA_SIGINFO;
    sigaction(SIGUSR1, &action, NULL);
    int local = 0;
    selftest_raise_here();
    CHECK(handler_frame_count >= 2, "%u frames", handler_frame_count);
    CHECK(handler_frames[0] == handler_registers[HW_REGISTER_PC], "frames[0] is not the pc");
    CHECK(near(handler_registers[HW_REGISTER_SP], &local), "sp %#llx", (unsigned long long)handler_registers[HW_REGISTER_SP]);
    CHECK(frames_contain(handler_frames, handler_frame_count, "selftest_raise_here"), "selftest_raise_here not unwound");
    if (verbose || !frames_contain(handler_frames, handler_frame_count, "selftest_raise_here"))
        print_frames("signal context", handler_frames, handler_frame_count);
}

// ---- 3. a crash dump --------------------------------------------------------------------------

__attribute__((noinline)) void selftest_crash_here(volatile int *null) {
    *null = 1;
    __asm__ volatile("" ::: "memory");
}

void selftest_crash_child(const char *locked, const char *finished) {
    struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);  // the crash is expected: no core file (qemu-user writes one to the cwd)
    char error[256] = "";
    hwc_config config = {.max_threads = 64, .max_frames = 64, .max_stack_bytes = 0, .ordinary_signal = 0,
                         .unwind_library = NULL};
    hwc_crash_config crash = {.other_thread_frames = 32, .other_threads_timeout_ns = 2000000000ull};
    if (hwc_init(&config, error, sizeof error) != 0 || hwc_crash_install(&crash, error, sizeof error) != 0) {
        fprintf(stderr, "child: %s\n", error);
        _exit(3);
    }
    int fd = open(locked, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || hwc_crash_arm_dump_file(fd, locked, finished) != -1) _exit(4);
    int quiet = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (quiet >= 0) dup2(quiet, STDERR_FILENO);  // qemu-user reports the expected crash there
    pthread_t thread;
    start_worker(&thread);
    selftest_crash_here(NULL);
    _exit(5);
}

typedef struct dump_facts {
    int64_t signal;
    uint32_t register_arrays, frame_arrays;
    uint64_t registers_length;
    uint64_t registers[HW_REGISTER_COUNT];  // the crashed thread's (written first)
    uint64_t frames[64];
    uint32_t frame_count;
    int ended;
} dump_facts;

static int read_dump(const char *path, dump_facts *facts) {
    static uint8_t bytes[1 << 20];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t size = read(fd, bytes, sizeof bytes);
    close(fd);
    if (size < HWD_HEADER_SIZE || memcmp(bytes, HWD_MAGIC, HWD_MAGIC_SIZE) != 0) return -1;
    memset(facts, 0, sizeof *facts);
    for (ssize_t at = HWD_HEADER_SIZE; at < size;) {
        uint8_t type = bytes[at++];
        if (type == HWD_ELEMENT_END_DOCUMENT) { facts->ended = 1; break; }
        if (type == HWD_ELEMENT_END_MAP || type == HWD_ELEMENT_END_ARRAY) continue;
        uint16_t key;
        memcpy(&key, bytes + at, 2);
        at += 2;
        if (type != HWD_ELEMENT_PROPERTY) continue;
        uint32_t length;
        memcpy(&length, bytes + at, 4);
        at += 4;
        if (at + length > size) return -1;
        if (key == HWD_KEY_SIGNAL_NUMBER && length == 8) memcpy(&facts->signal, bytes + at, 8);
        if (key == HWD_KEY_THREAD_REGISTERS && facts->register_arrays++ == 0) {
            facts->registers_length = length;
            if (length == sizeof facts->registers) memcpy(facts->registers, bytes + at, length);
        }
        if (key == HWD_KEY_THREAD_FRAMES && facts->frame_arrays++ == 0) {
            facts->frame_count = length / 8 < 64 ? length / 8 : 64;
            memcpy(facts->frames, bytes + at, facts->frame_count * 8);
        }
        at += length;
    }
    return 0;
}

static void test_crash(void) {
    char directory[] = "/tmp/capture-selftest-XXXXXX";
    if (!mkdtemp(directory)) { CHECK(0, "mkdtemp"); return; }
    char locked[256], finished[256];
    snprintf(locked, sizeof locked, "%s/crash.locked", directory);
    snprintf(finished, sizeof finished, "%s/crash.hwdump", directory);
    fflush(NULL);
    pid_t child = fork();
    if (child == 0) selftest_crash_child(locked, finished);
    int status = 0;
    waitpid(child, &status, 0);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV, "child status %#x", status);
    dump_facts facts;
    int read = read_dump(finished, &facts);
    CHECK(read == 0, "no finished dump at %s", finished);
    if (read == 0) {
        CHECK(facts.ended, "dump not ended");
        CHECK(facts.signal == SIGSEGV, "signal %lld", (long long)facts.signal);
        CHECK(facts.registers_length == HW_REGISTER_COUNT * 8, "registers are %llu bytes",
              (unsigned long long)facts.registers_length);
        CHECK(facts.register_arrays >= 2, "%u threads with registers (the worker answered?)", facts.register_arrays);
        CHECK(facts.frame_count >= 2 && facts.frames[0] == facts.registers[HW_REGISTER_PC], "frames[0] is not the pc");
        CHECK(strcmp(function_at(facts.registers[HW_REGISTER_PC]), "selftest_crash_here") == 0, "pc in %s",
              function_at(facts.registers[HW_REGISTER_PC]));
        CHECK(frames_contain(facts.frames, facts.frame_count, "selftest_crash_child"), "selftest_crash_child not unwound");
        if (verbose || !frames_contain(facts.frames, facts.frame_count, "selftest_crash_child")) print_frames("crash", facts.frames, facts.frame_count);
        unlink(finished);
    }
    unlink(locked);
    rmdir(directory);
}

// ---- 4. ptrace --------------------------------------------------------------------------------

__attribute__((noinline)) void selftest_remote_wait(int report) {
    int local = 0;
    void *address = &local;
    (void)!write(report, &address, sizeof address);
    for (;;) {
        struct timespec pause = {1, 0};
        nanosleep(&pause, NULL);
    }
}

static int ptrace_skipped;

static void test_ptrace(void) {
    char error[256] = "";
    int loaded = hwp_load_unwinder(error, sizeof error);
    CHECK(loaded == 0, "hwp_load_unwinder: %s", error);
    hwp_unwinder *unwinder = loaded == 0 ? hwp_unwinder_create() : NULL;
    CHECK(unwinder != NULL, "hwp_unwinder_create");
    if (!unwinder) return;
    int report[2];
    if (pipe(report) != 0) { CHECK(0, "pipe"); return; }
    fflush(NULL);
    pid_t child = fork();
    if (child == 0) selftest_remote_wait(report[1]);
    void *child_local = NULL;
    (void)!read(report[0], &child_local, sizeof child_local);
    int seized = hwp_seize(child);
    if (seized == ENOSYS || seized == EPERM) {
        ptrace_skipped = seized;  // qemu-user has no ptrace; a container may forbid it
    } else {
        CHECK(seized == 0, "hwp_seize: %s", strerror(seized));
        CHECK(hwp_interrupt(child) == 0, "hwp_interrupt");
        int pending = 0;
        CHECK(hwp_wait_stopped(child, 5000, &pending) == HWP_WAIT_STOPPED, "not stopped");
        uint64_t registers[HWP_REGISTER_COUNT] = {0}, frames[64], arguments[6];
        int64_t call = -2;
        uint64_t thread_pointer = 0;
        CHECK(hwp_get_registers(child, registers, &call, arguments, &thread_pointer) == 0, "hwp_get_registers");
        // fork() copied this thread, thread pointer and all.
        CHECK(thread_pointer == hwd_own_thread_pointer(), "thread pointer %#llx, ours %#llx", (unsigned long long)thread_pointer,
              (unsigned long long)hwd_own_thread_pointer());
        // Asleep in its nanosleep, or (rarely) still on its way there.
        if (HWP_SYSCALL_FROM_REGISTERS)
            CHECK(call == SYS_clock_nanosleep || call == SYS_nanosleep || call == -1, "interrupted call %lld", (long long)call);
        int count = hwp_unwind(unwinder, child, frames, 64);
        CHECK(count >= 2 && frames[0] == registers[HW_REGISTER_PC], "%d frames, frames[0] is not the pc", count);
        CHECK(near(registers[HW_REGISTER_SP], child_local), "sp %#llx, a local at %p",
              (unsigned long long)registers[HW_REGISTER_SP], child_local);
        int found = count > 0 && frames_contain(frames, (uint32_t)count, "selftest_remote_wait");
        CHECK(found, "selftest_remote_wait not unwound");
        if (verbose || !found) print_frames("ptrace", frames, count > 0 ? (uint32_t)count : 0);
        hwp_detach(child, pending);
    }
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    close(report[0]);
    close(report[1]);
    hwp_unwinder_destroy(unwinder);
}

int main(void) {
    verbose = getenv("CAPTURE_SELFTEST_VERBOSE") != NULL;
    test_crash();  // in a child, before this process installs anything
    test_capture();
    test_unwind_signal_context();
    test_ptrace();
    struct utsname machine;
    if (uname(&machine) != 0) strcpy(machine.machine, "?");
    if (ptrace_skipped) printf("capture-selftest on %s: ptrace unavailable (%s): remote capture not run\n", machine.machine, strerror(ptrace_skipped));
    printf("capture-selftest on %s (%zu registers, pc %s, sp %s): %d passed, %d failed\n", machine.machine,
           (size_t)HW_REGISTER_COUNT, hw_register_names[HW_REGISTER_PC], hw_register_names[HW_REGISTER_SP], passed, failed);
    return failed ? 1 : 0;
}
