// What hangwatch-fixture-hang cannot say in Swift: a seccomp filter, its core-file limit, a thread's name and tid.
#pragma once

/// Installs, in every thread of the process (SECCOMP_FILTER_FLAG_TSYNC), a seccomp filter whose
/// action for ptrace(2) is SECCOMP_RET_KILL_PROCESS (`kill_process` 1, systemd's
/// SystemCallFilter= default) or SECCOMP_RET_KILL_THREAD (0); every other call is allowed. A
/// process (or a clone of it) that calls ptrace dies of SIGSYS. 0, or -1 with errno.
int hwf_forbid_ptrace(int kill_process);

/// RLIMIT_CORE unlimited (soft and hard, as far as the hard limit lets an unprivileged
/// process): a process of this program that dies of a core-dumping signal leaves a core file
/// where core_pattern says. 0, or -1 with errno.
int hwf_allow_core_files(void);

/// The calling thread named `name` (/proc/…/comm, at most 15 bytes); its kernel thread id.
int hwf_name_thread(const char *name);
