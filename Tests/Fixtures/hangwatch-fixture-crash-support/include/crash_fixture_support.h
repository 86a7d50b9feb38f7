// Crashes that Swift cannot express directly, for the crash-fixture program.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/// Integer division by zero (SIGFPE, FPE_INTDIV).
int hwf_divide(int numerator, int denominator);
/// An undefined instruction: SIGILL (ud2 from __builtin_trap on x86-64, udf on aarch64).
void hwf_trap(void);
/// A breakpoint instruction, int3 or brk (SIGTRAP).
void hwf_breakpoint(void);
/// Touches a mapping past the end of the file behind it (SIGBUS, BUS_ADRERR). `path` is a
/// scratch file the function creates and truncates.
int hwf_touch_truncated_mapping(const char *path);
/// A file descriptor opened before any crash, for the "save critical data" callback.
void hwf_set_critical_fd(int fd);
/// The callback: write(2)s a fixed line to that descriptor (no allocation).
void hwf_save_critical_data(int32_t signal);
/// A deliberately bad callback: allocates (the malloc-interposer test must catch it).
void hwf_allocate_in_callback(int32_t signal);
/// The file of the object `symbol` resolves to in the global scope (RTLD_DEFAULT), NULL if unresolved.
const char *hwf_object_defining(const char *symbol);
/// Whether the loader holds `soname` (asked with RTLD_NOLOAD, so nothing is loaded).
int hwf_library_loaded(const char *soname);
/// Stalls the calling thread in vfork() for `seconds` (a thread that cannot answer a capture signal).
void hwf_stall_in_vfork(unsigned seconds);
/// A process made as the program's own quiet-capture helper is (clone(CLONE_VM), no exit signal),
/// named `name` (NULL: the calling thread's name, as the helper before it has run): it seizes
/// thread `tid` (unless 0), writes `line` to `fd` (unless NULL), sleeps `milliseconds`, exits; the
/// caller waits for it. 0, or an errno.
int hwf_run_helper_clone(const char *name, pid_t tid, unsigned milliseconds, int fd, const char *line, size_t length);
