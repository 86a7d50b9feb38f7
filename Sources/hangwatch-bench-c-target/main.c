// The bench's C target (section 4): the C counterpart of its Swift one, so `hangwatch dump
// --pid` is compared with eu-stack where eu-stack is at its best (small DWARF, C names).
// THREADS threads in all (default 65): the main thread spins 30 frames deep, the others park
// 30 frames deep. Prints "READY <pid>" once every thread is in place. `floor` is floor.c's.
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_c_target.h"

enum { DEPTH = 30 };

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t never = PTHREAD_COND_INITIALIZER;
static pthread_cond_t arrived = PTHREAD_COND_INITIALIZER;
static int parked;

// Not a tail call and not inlined: every level is a real frame.
__attribute__((noinline)) static int descend(int depth, void (*leaf)(void)) {
    if (depth == 0) {
        leaf();
        return 0;
    }
    volatile int below = descend(depth - 1, leaf);
    return below + depth;
}

static void park(void) {
    pthread_mutex_lock(&lock);
    parked++;
    pthread_cond_signal(&arrived);
    for (;;) pthread_cond_wait(&never, &lock);
}

static void spin(void) {
    volatile unsigned long turns = 0;
    for (;;) turns++;
}

static void *worker(void *unused) {
    (void)unused;
    descend(DEPTH, park);
    return NULL;
}

static void *spinner(void *unused) {
    (void)unused;
    descend(DEPTH, spin);
    return NULL;
}

static void spin_deep(void) { descend(DEPTH, spin); }

int open_task_directory(void) { return open("/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC); }

int start_threads(int parked_threads, int spinning) {
    for (int i = 0; i < parked_threads + (spinning ? 1 : 0); i++) {
        pthread_t thread;
        if (pthread_create(&thread, NULL, i < parked_threads ? worker : spinner, NULL) != 0) {
            perror("pthread_create");
            return -1;
        }
    }
    pthread_mutex_lock(&lock);
    while (parked < parked_threads) pthread_cond_wait(&arrived, &lock);
    pthread_mutex_unlock(&lock);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "floor") == 0)
        return floor_main(argc > 2 ? atoi(argv[2]) : 64, argc > 3 ? atoi(argv[3]) : 40);
    int threads = argc > 1 ? atoi(argv[1]) : 65;
    if (threads < 1 || threads > 4096) {
        fprintf(stderr, "usage: hangwatch-bench-c-target [THREADS 1...4096] | floor THREADS ROUNDS\n");
        return 2;
    }
    if (start_threads(threads - 1, 0) != 0) return 1;
    printf("READY %d\n", (int)getpid());
    fflush(stdout);
    spin_deep();
    return 0;
}
