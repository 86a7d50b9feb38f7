#define _GNU_SOURCE
#include "hang_fixture_support.h"

#include <errno.h>
#include <stddef.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

int hwf_forbid_ptrace(int kill_process) {
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_ptrace, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, kill_process ? SECCOMP_RET_KILL_PROCESS : SECCOMP_RET_KILL_THREAD),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog program = {(unsigned short)(sizeof filter / sizeof filter[0]), filter};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return -1;
    long failed = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &program);
    if (failed > 0) errno = EBUSY;  // TSYNC: the id of a thread that could not take it
    return failed == 0 ? 0 : -1;
}

int hwf_allow_core_files(void) {
    struct rlimit limit;
    if (getrlimit(RLIMIT_CORE, &limit) != 0) return -1;
    limit.rlim_cur = limit.rlim_max = RLIM_INFINITY;
    if (setrlimit(RLIMIT_CORE, &limit) == 0) return 0;
    getrlimit(RLIMIT_CORE, &limit);
    limit.rlim_cur = limit.rlim_max;
    return setrlimit(RLIMIT_CORE, &limit);
}

int hwf_name_thread(const char *name) {
    prctl(PR_SET_NAME, name, 0, 0, 0);
    return (int)syscall(SYS_gettid);
}
