// Fatal-signal handling: on SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT or SIGTRAP the handler
// writes an intermediate dump into a pre-opened `.locked` file (raw syscalls, preallocated
// memory, the hwd_ writer), renames it finished, chains to the handler that was installed
// before (the Swift runtime's backtracer) and lets the process die with the original signal.
// Everything the handler cannot compute safely (process identity, modules, annotations) is
// prepared beforehand by Swift into byte blobs handed over here.
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HWC_CRASH_PATH_BYTES 4096
/// Threads the crash handler enumerates (others are left out of the dump).
#define HWC_CRASH_MAX_THREADS 1024
/// Frames of the crashing thread.
#define HWC_CRASH_MAX_FRAMES 256
#define HWC_CRASH_MESSAGE_BYTES 1024

typedef struct hwc_crash_config {
    uint32_t alternate_stack_bytes;  // per thread, excluding the guard page (0: 256 KiB)
    uint32_t alternate_stack_count;  // threads that can hold one of our alternate stacks at once (0: 256)
    uint32_t other_thread_frames;    // frames per other thread; 0: do not ask other threads
    uint32_t reserved;
    uint64_t other_threads_timeout_ns; // how long the handler waits for the other threads' answers
} hwc_crash_config;

/// What the user's "save critical data" callback receives: the signal number.
typedef void (*hwc_crash_callback)(int32_t signal);

/// Installs the handlers (SA_SIGINFO|SA_ONSTACK), saving the previous actions for chaining,
/// gives the calling thread an alternate stack and sets the capture answer hook so threads
/// answering a capture get one too. Requires hwc_init. Returns 0 or -1 with a message.
/// A second call only updates the config's waiting/frames values.
int hwc_crash_install(const hwc_crash_config *config, char *error, size_t error_length);

/// Copies the NUL-terminated string at `text` (this process's memory, maybe a bad pointer) into
/// `out`, at most `size` - 1 bytes and a NUL, a page at a time with process_vm_readv: it stops
/// at the string's end or at the first unreadable page, never faults. Signal-safe. Returns the
/// length copied. (The handler copies the Swift runtime's fatal error message with it.)
size_t hwc_copy_string(const char *text, char *out, size_t size);

/// Restores the previous actions (tests, orderly shutdown). The dump file stays armed.
void hwc_crash_uninstall(void);

/// Arms the file the next crash writes to (`fd` open for writing, `locked_path` its current
/// name, `finished_path` the name it gets once complete). Returns the fd that was armed
/// before (the caller closes and removes it), or -1. Paths longer than the limit fail (-2).
int hwc_crash_arm_dump_file(int fd, const char *locked_path, const char *finished_path);

/// Replaces the prepared sections: `process` is written right after the crash reason (the
/// HWD_KEY_PROCESS map), `tail` after the threads (modules and annotations arrays). Both are
/// complete element sequences in the dump format. Copied; returns 0 or -1 (out of memory).
int hwc_crash_set_prepared_sections(const uint8_t *process, uint64_t process_length,
                                    const uint8_t *tail, uint64_t tail_length);

/// Runs first in the handler (before the dump is written). NULL clears.
void hwc_crash_set_callback(hwc_crash_callback callback);

/// Gives the calling thread an alternate signal stack from the pool unless it has one.
/// Returns 0 (has one now), -1 (pool exhausted or mmap failed). Signal-safe.
int hwc_crash_ensure_alternate_stack(void);

/// The tid of the first crashing thread while it runs our part of the handler (up to the
/// chaining step), else 0. A malloc interposer used by the tests watches it; see
/// hwc_crash_probe_slot in hw_crash.c.
int32_t hwc_crash_handler_active(void);

/// The thread handling a crash right now, 0 if none.
int32_t hwc_crash_thread(void);

/// How many threads hold one of our alternate stacks (diagnostics, tests).
uint32_t hwc_crash_alternate_stacks_in_use(void);

#ifdef __cplusplus
}
#endif
