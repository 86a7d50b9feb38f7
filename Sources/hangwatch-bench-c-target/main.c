// The bench's C target (section 4): the C counterpart of its Swift one, so `hangwatch dump
// --pid` is compared with eu-stack where eu-stack is at its best (small DWARF, C names).
// THREADS threads in all (default 65): the main thread spins 30 frames deep, the others park
// 30 frames deep. Prints "READY <pid>" once every thread is in place.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

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

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 65;
    if (threads < 1 || threads > 4096) {
        fprintf(stderr, "usage: hangwatch-bench-c-target [THREADS 1...4096]\n");
        return 2;
    }
    for (int i = 1; i < threads; i++) {
        pthread_t thread;
        if (pthread_create(&thread, NULL, worker, NULL) != 0) {
            perror("pthread_create");
            return 1;
        }
    }
    pthread_mutex_lock(&lock);
    while (parked < threads - 1) pthread_cond_wait(&arrived, &lock);
    pthread_mutex_unlock(&lock);
    printf("READY %d\n", (int)getpid());
    fflush(stdout);
    descend(DEPTH, spin);
    return 0;
}
