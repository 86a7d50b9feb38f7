// See hw_bench_floor.h.
#define _GNU_SOURCE
#include "hw_bench_floor.h"
#include "hw_registers.h"  // CHangwatchDump's include directory

#include <elf.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { FLOOR_STACK_BYTES = 16384 };

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

struct floor_job {
    const int32_t *tids;
    int count;
    pid_t target;
    uint32_t stack_bytes;
    int go;  // the read end of a pipe: one byte says go
};

// Threads interrupted ahead of the one being copied: the quiet helper's HWQ_WINDOW
// (Sources/CHangwatchCapture/hw_quiet.c), so that stops overlap here as they do there.
#define FLOOR_WINDOW 8

// The stopped thread's registers and stack window (cut as every capture cuts it:
// hwd_stack_window_bytes), then let go. 0, or the helper's exit code.
static int copy_and_detach(const struct floor_job *job, pid_t tid, uint8_t *stack) {
    hwd_ptrace_registers registers;
    struct iovec io = {&registers, sizeof registers};
    if (syscall(SYS_ptrace, PTRACE_GETREGSET, tid, NT_PRSTATUS, &io) != 0) return 7;
    uint64_t values[HW_REGISTER_COUNT];
    hwd_registers_from_ptrace(&registers, values);
    uint64_t sp = values[HW_REGISTER_SP];
    uint32_t wanted = hwd_stack_window_bytes(sp, hwd_ptrace_thread_pointer(tid, &registers), job->stack_bytes);
    struct iovec local = {stack, wanted}, remote = {(void *)(uintptr_t)sp, wanted};
    (void)syscall(SYS_process_vm_readv, job->target, &local, 1, &remote, 1, 0);
    return syscall(SYS_ptrace, PTRACE_DETACH, tid, 0, 0) == 0 ? 0 : 8;
}

// The helper: a process of its own sharing this one's memory, raw system calls only. As the
// quiet helper does, it keeps up to FLOOR_WINDOW threads asked to stop and takes them in the
// order asked.
static int helper(void *argument) {
    const struct floor_job *job = argument;
    char ready;
    if (syscall(SYS_read, job->go, &ready, 1) != 1) return 3;
    static uint8_t stack[FLOOR_STACK_BYTES];
    for (int next = 0, oldest = 0; oldest < job->count; oldest++) {
        for (; next < job->count && next - oldest < FLOOR_WINDOW; next++) {
            if (syscall(SYS_ptrace, PTRACE_SEIZE, job->tids[next], 0, 0) != 0) return 4;
            if (syscall(SYS_ptrace, PTRACE_INTERRUPT, job->tids[next], 0, 0) != 0) return 5;
        }
        int status = 0;
        if (syscall(SYS_wait4, job->tids[oldest], &status, __WALL, 0) != job->tids[oldest]) return 6;
        int failed = copy_and_detach(job, job->tids[oldest], stack);
        if (failed) return failed;
    }
    return 0;
}

int hwb_floor_round(const int32_t *tids, int count, uint32_t stack_bytes, uint64_t *elapsed_ns) {
    static char helper_stack[1 << 16];
    int go[2];
    if (pipe(go) != 0) return -1;
    struct floor_job job = {tids, count, getpid(), stack_bytes < FLOOR_STACK_BYTES ? stack_bytes : FLOOR_STACK_BYTES, go[0]};
    uint64_t started = now_ns();
    pid_t child = clone(helper, helper_stack + sizeof helper_stack, CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_UNTRACED | SIGCHLD,
                        &job);
    int status = 0, failed = child < 0;
    if (!failed) {
        // Under Yama's ptrace_scope 1 a child may trace its parent once declared.
        prctl(PR_SET_PTRACER, child, 0, 0, 0);
        failed = write(go[1], "g", 1) != 1;
        if (failed) kill(child, SIGKILL);
        failed |= waitpid(child, &status, __WALL) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0;
        prctl(PR_SET_PTRACER, 0, 0, 0, 0);
    }
    *elapsed_ns = now_ns() - started;
    close(go[0]);
    close(go[1]);
    return failed ? -1 : 0;
}
