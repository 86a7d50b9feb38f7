// The one parser of each /proc text file hangwatch reads fields from: stat, status and maps.
// Swift (HangwatchPlatform's ProcFS and TaskReader) and C (the crash handler, the quiet-capture
// helper, the ptrace unwinder) read the files their own way — a signal handler and a CLONE_VM
// helper cannot run Swift — and hand the bytes here. Pure functions of the bytes given: no
// allocation, no locks, no libc calls, so they are async-signal-safe and need no C library.
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/// The fields of /proc/PID/stat (or PID/task/TID/stat) hangwatch uses.
typedef struct {
    /// comm, between the first '(' and the last ')' (it may itself hold spaces and parentheses).
    size_t name_offset, name_length;
    /// Field 3: R, S, D, T, t, Z, X, …
    char state;
    /// Fields 4 and 5.
    int32_t parent, process_group;
    /// Fields 14 and 15, in clock ticks.
    uint64_t user_ticks, system_ticks;
    /// Field 22: clock ticks after boot; with the pid, a process's identity across pid reuse.
    uint64_t start_ticks;
    /// Field 23: bytes of address space; 0 for a process whose memory is gone (exiting), or
    /// when the line ends before it.
    uint64_t virtual_bytes;
    /// Field 38: the signal its parent gets when it ends (SIGCHLD for a fork or vfork child, 0
    /// for a clone made without one); -1 when the line ends before it.
    int32_t exit_signal;
} hw_proc_stat;

/// Parses `text` (`length` bytes, not necessarily NUL-terminated). 0, or -1 when it is not a
/// stat line (no parentheses, or fewer than 22 fields); fields 23 to 38 are read when present.
int hw_proc_parse_stat(const char *text, size_t length, hw_proc_stat *out);

/// The value of the `key:` line of a status file: its offset and length in `text`, blanks
/// after the colon and the newline left out. 1 when found, 0 when not.
int hw_proc_status_field(const char *text, size_t length, const char *key, size_t *value_offset, size_t *value_length);

/// A hexadecimal (status masks: SigBlk, SigPnd…) or decimal number at the start of `text`;
/// parsing stops at the first other byte, and after 16 digits.
uint64_t hw_proc_hex(const char *text, size_t length);
uint64_t hw_proc_decimal(const char *text, size_t length);

/// One line of /proc/PID/maps: `start-end perms offset major:minor inode [path]`.
typedef struct {
    uint64_t start, end, offset, inode;
    uint32_t device_major, device_minor;
    /// perms: 'r'/'w'/'x' or '-', then 'p' (private) or 's' (shared).
    char perms[4];
    /// The path (or `[vdso]`, `[stack]`…), trailing blanks left out; length 0 for anonymous memory.
    size_t path_offset, path_length;
} hw_proc_mapping;

/// Parses one line (`length` bytes, without its newline). 0, or -1 when malformed.
int hw_proc_parse_maps_line(const char *line, size_t length, hw_proc_mapping *out);

#ifdef __cplusplus
}
#endif
