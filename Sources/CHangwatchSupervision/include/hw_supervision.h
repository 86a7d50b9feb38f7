// What `hangwatch run` needs from the kernel that Swift's Glibc module cannot call (prctl is
// variadic): becoming the child subreaper of the job it runs.
#pragma once

#ifdef __cplusplus
extern "C" {
#endif

/// PR_SET_CHILD_SUBREAPER: orphans of the calling process's descendants are reparented to it
/// (not to init), so every process of the job stays findable and killable. 0, or -1 with errno.
int hwr_become_child_subreaper(void);

#ifdef __cplusplus
}
#endif
