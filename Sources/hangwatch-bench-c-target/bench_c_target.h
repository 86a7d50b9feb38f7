// What main.c and floor.c share: the threads of the bench's C target.
#ifndef BENCH_C_TARGET_H
#define BENCH_C_TARGET_H

/// Starts `parked` threads that park 30 frames deep in a futex and, with `spinning`, one that
/// spins 30 frames deep; returns once every parked one is in place: 0, or -1.
int start_threads(int parked, int spinning);

/// A descriptor of /proc/self/task, or -1.
int open_task_directory(void);

/// `floor THREADS ROUNDS` (floor.c).
int floor_main(int threads, int rounds);

#endif
