// kcmp for the process walks (hw_process.h). Not for signal handlers nor the helper: it calls libc.
#define _GNU_SOURCE
#include "hw_process.h"

#include <sys/syscall.h>
#include <unistd.h>

#ifndef KCMP_VM
#define KCMP_VM 1
#endif

int hw_process_shares_memory(pid_t a, pid_t b) {
#ifdef SYS_kcmp
    long order = syscall(SYS_kcmp, a, b, KCMP_VM, 0, 0);
    return order < 0 ? -1 : order == 0;
#else
    (void)a, (void)b;
    return -1;
#endif
}
