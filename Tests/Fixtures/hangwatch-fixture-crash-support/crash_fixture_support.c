#define _GNU_SOURCE
#include "crash_fixture_support.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

__attribute__((noinline)) int hwf_divide(int numerator, int denominator) {
    volatile int d = denominator;
    return numerator / d;
}

#if defined(__x86_64__)
__attribute__((noinline)) void hwf_trap(void) { __builtin_trap(); }
__attribute__((noinline)) void hwf_breakpoint(void) { __asm__ volatile("int3"); }
#elif defined(__aarch64__)
// __builtin_trap is `brk` here (SIGTRAP): `udf` is the permanently undefined instruction.
__attribute__((noinline)) void hwf_trap(void) { __asm__ volatile("udf #0"); }
__attribute__((noinline)) void hwf_breakpoint(void) { __asm__ volatile("brk #0"); }
#else
#error "hangwatch: unsupported architecture: add its trap and breakpoint instructions"
#endif

__attribute__((noinline)) int hwf_touch_truncated_mapping(const char *path) {
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || ftruncate(fd, 8192) != 0) return -1;
    volatile char *memory = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (memory == MAP_FAILED || ftruncate(fd, 0) != 0) return -1;
    return memory[4096];  // the page no longer has file behind it
}

static int critical_fd = -1;
void hwf_set_critical_fd(int fd) { critical_fd = fd; }

void hwf_save_critical_data(int32_t signal) {
    static const char line[] = "critical data saved for signal ";
    char text[sizeof line + 4];
    int n = 0;
    for (; line[n]; n++) text[n] = line[n];
    if (signal >= 10) text[n++] = (char)('0' + signal / 10);
    text[n++] = (char)('0' + signal % 10);
    text[n++] = '\n';
    if (critical_fd >= 0) (void)!write(critical_fd, text, (size_t)n);
}

#include <stdlib.h>
void hwf_allocate_in_callback(int32_t signal) {
    void *volatile memory = malloc(64 + (size_t)signal);
    free(memory);
}

#include <dlfcn.h>
/// The file of the object that `symbol` resolves to in the global scope, NULL if unresolved.
const char *hwf_object_defining(const char *symbol) {
    Dl_info info;
    void *address = dlsym(RTLD_DEFAULT, symbol);
    if (!address || !dladdr(address, &info)) return NULL;
    return info.dli_fname;
}

/// Whether the loader holds `soname` (RTLD_NOLOAD: asks, loads nothing). Exact where reading
/// /proc/self/maps is not: that file is read page by page and can miss a line while other
/// threads map memory.
int hwf_library_loaded(const char *soname) {
    void *handle = dlopen(soname, RTLD_NOW | RTLD_NOLOAD | RTLD_LOCAL);
    if (!handle) return 0;
    dlclose(handle);
    return 1;
}

#include <sys/syscall.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <time.h>
/// Stalls the calling thread in vfork() for `seconds`: the parent waits uninterruptibly (only a
/// fatal signal wakes it), so a capture signal sent to it stays pending and a live capture
/// waits its whole timeout. The child only sleeps and exits (raw syscalls).
void hwf_stall_in_vfork(unsigned seconds) {
    prctl(PR_SET_NAME, "vfork-stalled", 0, 0, 0);
    pid_t child = vfork();
    if (child == 0) {
        struct timespec pause = {(time_t)seconds, 0};
        syscall(SYS_nanosleep, &pause, NULL);
        syscall(SYS_exit, 0);
    }
    if (child > 0) waitpid(child, NULL, 0);
}

#include <sched.h>
#include <signal.h>

struct helper_clone_job {
    const char *name;
    pid_t tid;
    unsigned milliseconds;
    int fd;
    const char *line;
    size_t length;
    volatile int seize_error;
};

// The clone's body: raw system calls only (it runs with the caller's thread pointer).
static int helper_clone_main(void *argument) {
    struct helper_clone_job *job = argument;
    if (job->name) syscall(SYS_prctl, PR_SET_NAME, job->name, 0, 0, 0);
    syscall(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);  // as the helper: ends with the thread that made it
    if (job->tid > 0) {
        long failed = syscall(SYS_ptrace, PTRACE_SEIZE, job->tid, 0, 0);
        if (failed != 0) {
            job->seize_error = EPERM;
            return 0;
        }
    }
    if (job->line) syscall(SYS_write, job->fd, job->line, job->length);
    struct timespec pause = {(time_t)(job->milliseconds / 1000), (long)(job->milliseconds % 1000) * 1000000L};
    syscall(SYS_nanosleep, &pause, NULL);
    return 0;
}

/// A process made as the program's own quiet-capture helper is (Sources/CHangwatchCapture/hw_quiet.c):
/// clone(CLONE_VM) with no exit signal, sharing this process's memory. Named `name` (NULL: it keeps
/// the calling thread's name, as the helper does until it runs to name itself), it PTRACE_SEIZEs
/// `tid` (without stopping it) unless `tid` is 0, writes `line` to `fd` (unless NULL), sleeps
/// `milliseconds` and exits, which lets `tid` go. The caller waits for it. 0, or an errno (clone,
/// or EPERM for a refused seize; then nothing is written).
int hwf_run_helper_clone(const char *name, pid_t tid, unsigned milliseconds, int fd, const char *line, size_t length) {
    prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);  // Yama 1: as the helper declares itself; EINVAL without Yama
    struct helper_clone_job job = {name, tid, milliseconds, fd, line, length, 0};
    size_t stack_size = 256 * 1024;
    char *stack = malloc(stack_size);
    if (!stack) return ENOMEM;
    pid_t child = clone(helper_clone_main, stack + stack_size, CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_UNTRACED, &job);
    if (child < 0) {
        int code = errno;
        free(stack);
        return code;
    }
    while (waitpid(child, NULL, __WCLONE) < 0 && errno == EINTR) {}
    free(stack);
    return job.seize_error;
}
