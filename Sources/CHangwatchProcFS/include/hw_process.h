// Besides the parsers (hw_procfs.h): what the kernel says about two processes that /proc does
// not, for the process walks (Sources/HangwatchPlatform/ProcFS.swift), and the name the quiet
// capture's helper gives itself (Sources/CHangwatchCapture/hw_quiet.c), so a walk can tell it.
#pragma once

#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/// The comm of the quiet capture's helper (15 bytes, the kernel's limit): a process of its
/// own that shares its parent's memory (clone CLONE_VM) for the few milliseconds of a capture.
#define HW_QUIET_HELPER_NAME "hangwatch-quiet"

/// Whether processes `a` and `b` share one address space (kcmp KCMP_VM): 1 they do, 0 they do
/// not, -1 unknown (either is gone, kcmp is missing or refused: errno says which).
int hw_process_shares_memory(pid_t a, pid_t b);

#ifdef __cplusplus
}
#endif
