// `hangwatch-bench-c-target floor THREADS ROUNDS`: the kernel's part of a quiet capture alone,
// for the bench's section 3 (the floor under its quiet rows, docs/performance.md). THREADS in
// all: this main thread, one spinning (the hung thread) and the rest parked in a futex, each
// 30 frames deep. Each round a helper process does what the quiet capture's helper does per
// thread (Sources/CHangwatchCapture/hw_quiet.c) and nothing else: PTRACE_SEIZE, PTRACE_INTERRUPT,
// wait for the stop, the registers, a copy of 16 KiB of stack from the stack pointer, detach —
// thread after thread, every thread but this one. No /proc read, no unwinding, no name, no
// snapshot. Prints "FLOOR <threads stopped> <median µs> <min µs>": the helper's start to its exit.
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <linux/elf.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_c_target.h"

enum { FLOOR_MAX_THREADS = 4096, FLOOR_STACK_BYTES = 16384, FLOOR_MAX_ROUNDS = 1000 };

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static int compare_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

// The thread ids of this process but the calling thread, from /proc/self/task.
static int other_threads(pid_t *tids, int capacity) {
    char buffer[1 << 16];
    int fd = open_task_directory();
    if (fd < 0) return -1;
    int count = 0;
    pid_t self = (pid_t)syscall(SYS_gettid);
    for (;;) {
        long got = syscall(SYS_getdents64, fd, buffer, sizeof buffer);
        if (got <= 0) break;
        for (long at = 0; at < got;) {
            unsigned short length = *(unsigned short *)(buffer + at + 16);
            const char *name = buffer + at + 19;
            pid_t tid = (pid_t)atoi(name);
            if (name[0] != '.' && tid != self && count < capacity) tids[count++] = tid;
            at += length;
        }
    }
    close(fd);
    return count;
}

// One round's work, for the helper: every thread but the main one.
struct floor_job {
    const pid_t *tids;
    int count;
    pid_t target;
    int go;
};

// The helper: a process of its own sharing this one's memory (clone with CLONE_VM, as the
// quiet capture starts its helper), raw system calls only.
static int helper(void *argument) {
    const struct floor_job *job = argument;
    char ready;
    if (syscall(SYS_read, job->go, &ready, 1) != 1) return 3;
    static uint8_t stack[FLOOR_STACK_BYTES];
    for (int i = 0; i < job->count; i++) {
        pid_t tid = job->tids[i];
        if (syscall(SYS_ptrace, PTRACE_SEIZE, tid, 0, 0) != 0) return 4;
        if (syscall(SYS_ptrace, PTRACE_INTERRUPT, tid, 0, 0) != 0) return 5;
        int status = 0;
        if (syscall(SYS_wait4, tid, &status, __WALL, 0) != tid) return 6;
        struct user_regs_struct registers;
        struct iovec io = {&registers, sizeof registers};
        if (syscall(SYS_ptrace, PTRACE_GETREGSET, tid, NT_PRSTATUS, &io) != 0) return 7;
#if defined(__x86_64__)
        uint64_t sp = registers.rsp;
#else
        uint64_t sp = registers.sp;
#endif
        struct iovec local = {stack, sizeof stack}, remote = {(void *)(uintptr_t)sp, sizeof stack};
        (void)syscall(SYS_process_vm_readv, job->target, &local, 1, &remote, 1, 0);
        if (syscall(SYS_ptrace, PTRACE_DETACH, tid, 0, 0) != 0) return 8;
    }
    return 0;
}

int floor_main(int threads, int rounds) {
    if (threads < 3 || threads > FLOOR_MAX_THREADS || rounds < 1 || rounds > FLOOR_MAX_ROUNDS) {
        fprintf(stderr, "usage: hangwatch-bench-c-target floor THREADS(3...%d) ROUNDS(1...%d)\n", FLOOR_MAX_THREADS,
                FLOOR_MAX_ROUNDS);
        return 2;
    }
    if (start_threads(threads - 2, 1) != 0) return 1;
    static pid_t tids[FLOOR_MAX_THREADS];
    int count = other_threads(tids, FLOOR_MAX_THREADS);
    if (count != threads - 1) {
        fprintf(stderr, "floor: %d threads besides this one, expected %d\n", count, threads - 1);
        return 1;
    }
    static uint64_t took[FLOOR_MAX_ROUNDS];
    for (int round = 0; round < rounds; round++) {
        int go[2];
        if (pipe(go) != 0) return 1;
        static char helper_stack[1 << 16];
        struct floor_job job = {tids, count, getpid(), go[0]};
        uint64_t started = now_ns();
        pid_t child = clone(helper, helper_stack + sizeof helper_stack, CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_UNTRACED | SIGCHLD,
                            &job);
        if (child < 0) return 1;
        // Under Yama's ptrace_scope 1 a child may trace its parent once declared.
        prctl(PR_SET_PTRACER, child, 0, 0, 0);
        if (write(go[1], "g", 1) != 1) return 1;
        int status = 0;
        if (waitpid(child, &status, __WALL) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "floor: the helper failed (status %#x)\n", status);
            return 1;
        }
        took[round] = now_ns() - started;
        close(go[0]);
        close(go[1]);
        usleep(3000);
    }
    prctl(PR_SET_PTRACER, 0, 0, 0, 0);
    qsort(took, (size_t)rounds, sizeof took[0], compare_u64);
    printf("FLOOR %d %.1f %.1f\n", count, took[rounds / 2] / 1000.0, took[0] / 1000.0);
    return 0;
}
