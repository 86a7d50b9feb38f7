// `hangwatch-bench-c-target floor THREADS ROUNDS`: the kernel's part of a quiet capture alone,
// for the bench's section 3 (the floor under its quiet rows: docs/performance.md, "3. In-process
// capture"). THREADS in all: this main thread, one spinning (the hung thread) and the rest parked
// in a futex, each 30 frames deep.
// Each round is one hwb_floor_round (Sources/CHangwatchBenchFloor): what the
// quiet capture's helper does per thread and nothing else, every thread but this one. The bench
// itself pairs each quiet capture with such a round over the same threads (InProcessBench.swift);
// this standalone probe is for looking at the floor alone. Prints "FLOOR <threads stopped>
// <median µs> <min µs>": the helper's start to its exit.
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "bench_c_target.h"
#include "hw_bench_floor.h"
#include "hw_process.h"

enum { FLOOR_MAX_THREADS = 4096, FLOOR_STACK_BYTES = 16384, FLOOR_MAX_ROUNDS = 1000 };

static int compare_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

// The thread ids of this process but the calling thread, from /proc/self/task (the lister
// every capture uses: hw_proc_list_threads).
static int other_threads(int32_t *tids, int capacity) {
    static uint8_t buffer[1 << 16] __attribute__((aligned(8)));
    int fd = open_task_directory();
    if (fd < 0) return -1;
    int truncated = 0;
    int count = hw_proc_list_threads(fd, getpid(), (int32_t)syscall(SYS_gettid), tids, (uint32_t)capacity, &truncated,
                                        buffer, sizeof buffer);
    close(fd);
    return count;
}

int floor_main(int threads, int rounds) {
    if (threads < 3 || threads > FLOOR_MAX_THREADS || rounds < 1 || rounds > FLOOR_MAX_ROUNDS) {
        fprintf(stderr, "usage: hangwatch-bench-c-target floor THREADS(3...%d) ROUNDS(1...%d)\n", FLOOR_MAX_THREADS,
                FLOOR_MAX_ROUNDS);
        return 2;
    }
    if (start_threads(threads - 2, 1) != 0) return 1;
    static int32_t tids[FLOOR_MAX_THREADS];
    int count = other_threads(tids, FLOOR_MAX_THREADS);
    if (count != threads - 1) {
        fprintf(stderr, "floor: %d threads besides this one, expected %d\n", count, threads - 1);
        return 1;
    }
    static uint64_t took[FLOOR_MAX_ROUNDS];
    for (int round = 0; round < rounds; round++) {
        if (hwb_floor_round(tids, count, FLOOR_STACK_BYTES, &took[round]) != 0) {
            fprintf(stderr, "floor: the helper failed\n");
            return 1;
        }
        usleep(3000);
    }
    qsort(took, (size_t)rounds, sizeof took[0], compare_u64);
    printf("FLOOR %d %.1f %.1f\n", count, took[rounds / 2] / 1000.0, took[0] / 1000.0);
    return 0;
}
