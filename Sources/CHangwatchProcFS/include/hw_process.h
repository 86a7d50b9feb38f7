// Besides the parsers (hw_procfs.h): what the kernel says about two processes that /proc does
// not, for the process walks (Sources/HangwatchPlatform/ProcFS.swift); the one lister of a
// process's threads (TaskReader, the crash handler); and the name the quiet capture's helper
// gives itself (Sources/CHangwatchCapture/hw_quiet.c), so a walk can tell it.
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/// The comm of the quiet capture's helper (15 bytes, the kernel's limit): a process of its
/// own that shares its parent's memory (clone CLONE_VM) for the few milliseconds of a capture.
#define HW_QUIET_HELPER_NAME "hangwatch-quiet"

/// Whether processes `a` and `b` share one address space (kcmp KCMP_VM): 1 they do, 0 they do
/// not, -1 unknown (either is gone, kcmp is missing or refused: errno says which).
int hw_proc_shares_memory(pid_t a, pid_t b);

/// Listings of a task directory merged, at most (hw_proc_list_threads).
#define HW_LIST_THREADS_LISTINGS 4

/// The thread ids of process `pid`'s /proc PID/task directory, open at `directory` (read from
/// its start; its offset is moved), but `skip`, ascending, into `tids` (at most `capacity`;
/// `*truncated` 1 when there were more): how many, or -errno. `buffer` (`size` bytes, 8-aligned,
/// 4 KiB or more) holds the getdents64 records.
///
/// Not readdir's listing, which can miss a thread that lives all along: the kernel walks the
/// thread list from where a getdents call is, and when the thread it is at exits meanwhile, the
/// walk ends there. The next call counts its way back from the first thread and skips a live
/// thread for each one that left before it, or finds the count past the end and lists nothing
/// more (fs/proc/base.c, first_tid and next_tid). readdir's listing missed a live thread once in
/// 100 to 200 listings of a process whose threads come and go every few milliseconds
/// (Tests/HangwatchPlatformTests/ThreadListingTests.swift). So the directory is listed twice and
/// the listings merged: a thread either one has, unless the second lacks it and it is gone since
/// (tgkill of signal 0). A listing that may have ended early (a getdents call that left room for
/// another record followed by one that still returned records, or a last thread that is gone)
/// is followed by another, up to HW_LIST_THREADS_LISTINGS in all. System calls only, into the
/// caller's buffers: async-signal-safe (the crash handler lists threads with it).
int hw_proc_list_threads(int directory, pid_t pid, int32_t skip, int32_t *tids, uint32_t capacity, int *truncated,
                            void *buffer, size_t size);

#ifdef __cplusplus
}
#endif
