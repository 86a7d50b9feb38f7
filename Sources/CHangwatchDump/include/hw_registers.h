// The register layout of a captured thread, one per architecture, and everything else that
// differs between them for capture: how many registers a capture slot, a ptrace read and a
// dump (HWD_KEY_THREAD_REGISTERS) hold, in which order, which are the pc and the sp, their
// names, how to fill them from a signal handler's ucontext and from ptrace, and libunwind's
// symbol and library names. An architecture's order is part of the dump format
// (docs/intermediate-dump-format.md): never reorder it. Swift reads the names from here
// (`Registers.names`, through hwd_register_name). What is verified where: docs/architectures.md.
//
// Plain types and numbers only: glibc names the REG_* indices of uc_mcontext.gregs only under
// _GNU_SOURCE, which not every includer (nor Swift's importer) sets. Everything here is
// async-signal-safe except hwd_ptrace_read_registers and hwd_ptrace_thread_pointer (never called
// from a handler).
#pragma once

#include <errno.h>
#include <signal.h>  // ucontext_t
#include <stddef.h>
#include <stdint.h>
#include <sys/ptrace.h>
#include <sys/types.h>
#include <sys/user.h>
#if defined(__aarch64__)
#include <elf.h>      // NT_PRSTATUS
#include <sys/uio.h>  // struct iovec
#endif

#ifdef __cplusplus
extern "C" {
#endif

/// The local unwinder (dlopen'ed RTLD_LOCAL, docs/platform-facts.md fact 3) is libunwind.so.8
/// on every architecture; its symbols carry HW_UNWIND_LOCAL_PREFIX.
#define HW_UNWIND_LOCAL_LIBRARY "libunwind.so.8"

#if defined(__x86_64__)

#define HW_REGISTER_COUNT 18
#define HW_REGISTER_SP 7   /* rsp */
#define HW_REGISTER_PC 16  /* rip */
#define HW_REGISTER_NAMES                                                                    \
    "rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp", "r8", "r9", "r10", "r11", "r12", \
    "r13", "r14", "r15", "rip", "rflags"

/// libunwind's symbol prefixes (local: libunwind.so.8; remote: HW_UNWIND_REMOTE_LIBRARY, which
/// libunwind-ptrace.so.0 binds to).
#define HW_UNWIND_LOCAL_PREFIX "_ULx86_64_"
#define HW_UNWIND_REMOTE_PREFIX "_Ux86_64_"
#define HW_UNWIND_REMOTE_LIBRARY "libunwind-x86_64.so.8"

static inline void hwd_registers_from_ucontext(const ucontext_t *uc, uint64_t *out) {
    // uc_mcontext.gregs indices REG_RAX, REG_RBX, … REG_RIP, REG_EFL (checked in HW_UNWIND_CHECKS).
    static const uint8_t gregs[HW_REGISTER_COUNT] = {13, 11, 14, 12, 9, 8, 10, 15, 0, 1, 2, 3, 4, 5, 6, 7, 16, 17};
    for (int i = 0; i < HW_REGISTER_COUNT; i++) out[i] = (uint64_t)uc->uc_mcontext.gregs[gregs[i]];
}

typedef struct user_regs_struct hwd_ptrace_registers;

/// PTRACE_GETREGS of a ptrace-stopped thread. 0 or errno.
static inline int hwd_ptrace_read_registers(pid_t tid, hwd_ptrace_registers *regs) {
    return ptrace(PTRACE_GETREGS, tid, NULL, regs) == 0 ? 0 : errno;
}

static inline void hwd_registers_from_ptrace(const hwd_ptrace_registers *r, uint64_t *out) {
    const unsigned long long ordered[HW_REGISTER_COUNT] = {
        r->rax, r->rbx, r->rcx, r->rdx, r->rsi, r->rdi, r->rbp, r->rsp, r->r8,
        r->r9,  r->r10, r->r11, r->r12, r->r13, r->r14, r->r15, r->rip, r->eflags,
    };
    for (int i = 0; i < HW_REGISTER_COUNT; i++) out[i] = ordered[i];
}

/// The system call a thread stopped by ptrace was blocked in, as its /proc TID/syscall line
/// showed it before the stop: its number and six arguments, -1 when it was in no call (running
/// in user space, or a call that had already returned). At a ptrace stop the kernel has not
/// yet turned the call into its restart: orig_rax is the call, rax the error the stop made it
/// leave with, and the argument registers are untouched. Registers tell this on x86-64 only:
/// on arm64 the error overwrites x0, the first argument, and the line is read from /proc
/// before the stop (HW_SYSCALL_FROM_REGISTERS 0).
#define HW_SYSCALL_FROM_REGISTERS 1
static inline int64_t hwd_interrupted_syscall(const hwd_ptrace_registers *r, uint64_t arguments[6]) {
    int64_t number = (int64_t)r->orig_rax, error = -(int64_t)r->rax;
    // ERESTARTSYS, ERESTARTNOINTR, ERESTARTNOHAND, ERESTART_RESTARTBLOCK (the kernel's codes for a
    // call it restarts on resume), or EINTR (the calls signal(7) says a stop ends).
    int interrupted = (error >= 512 && error <= 514) || error == 516 || error == EINTR;
    if (number < 0 || !interrupted) return -1;
    const unsigned long long in_order[6] = {r->rdi, r->rsi, r->rdx, r->r10, r->r8, r->r9};
    for (int i = 0; i < 6; i++) arguments[i] = in_order[i];
    return number;
}

/// The calling thread's thread pointer (the fs base: glibc's TCB, which points to itself).
static inline uint64_t hwd_own_thread_pointer(void) {
    uint64_t pointer;
    __asm__("mov %%fs:0, %0" : "=r"(pointer));
    return pointer;
}

/// A ptrace-stopped thread's thread pointer: on x86-64 in the registers already read.
static inline uint64_t hwd_ptrace_thread_pointer(pid_t tid, const hwd_ptrace_registers *r) {
    (void)tid;
    return r->fs_base;
}

/// Index in this layout of libunwind's register `number`, -1 if it has none. libunwind's
/// x86-64 numbering is DWARF's: rax rdx rcx rbx rsi rdi rbp rsp r8..r15 rip.
static inline int hwd_register_index_of_unwind_number(int number) {
    static const int8_t index[17] = {0, 3, 2, 1, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    return number >= 0 && number < 17 ? index[number] : -1;
}

/// Expanded (with a `;`) by the files that include <libunwind.h>: what the code above assumes.
#define HW_UNWIND_CHECKS                                                                          \
    _Static_assert(sizeof(unw_context_t) == sizeof(ucontext_t),                                  \
                   "on x86-64 unw_context_t is ucontext_t: unw_init_local2 gets the ucontext");  \
    _Static_assert(UNW_X86_64_RAX == 0 && UNW_X86_64_RDX == 1 && UNW_X86_64_RCX == 2 &&          \
                       UNW_X86_64_RBX == 3 && UNW_X86_64_RSP == 7 && UNW_X86_64_R8 == 8 &&       \
                       UNW_X86_64_R15 == 15 && UNW_X86_64_RIP == 16,                             \
                   "hwd_register_index_of_unwind_number: libunwind x86-64 register numbers");     \
    _Static_assert(sizeof(struct user_regs_struct) == 27 * sizeof(unsigned long long),           \
                   "x86-64 user_regs_struct layout");                                            \
    _Static_assert(HW_GREGS_INDICES_OK, "hwd_registers_from_ucontext: REG_* indices")
#if defined(REG_RIP)  /* the includer set _GNU_SOURCE */
#define HW_GREGS_INDICES_OK                                                                       \
    (REG_RAX == 13 && REG_RBX == 11 && REG_RCX == 14 && REG_RDX == 12 && REG_RSI == 9 &&          \
     REG_RDI == 8 && REG_RBP == 10 && REG_RSP == 15 && REG_R8 == 0 && REG_R15 == 7 &&             \
     REG_RIP == 16 && REG_EFL == 17)
#else
#define HW_GREGS_INDICES_OK 1
#endif

#elif defined(__aarch64__)

#define HW_REGISTER_COUNT 34
#define HW_REGISTER_SP 31
#define HW_REGISTER_PC 32
#define HW_REGISTER_NAMES                                                                        \
    "x0", "x1", "x2", "x3", "x4", "x5", "x6", "x7", "x8", "x9", "x10", "x11", "x12", "x13", "x14", \
    "x15", "x16", "x17", "x18", "x19", "x20", "x21", "x22", "x23", "x24", "x25", "x26", "x27",    \
    "x28", "x29", "x30", "sp", "pc", "pstate"

#define HW_UNWIND_LOCAL_PREFIX "_ULaarch64_"
#define HW_UNWIND_REMOTE_PREFIX "_Uaarch64_"
#define HW_UNWIND_REMOTE_LIBRARY "libunwind-aarch64.so.8"

/// x0..x30, sp, pc, pstate lie in this order in uc_mcontext (and in the ptrace registers).
static inline void hwd_registers_from_ucontext(const ucontext_t *uc, uint64_t *out) {
    for (int i = 0; i < 31; i++) out[i] = uc->uc_mcontext.regs[i];
    out[31] = uc->uc_mcontext.sp;
    out[32] = uc->uc_mcontext.pc;
    out[33] = uc->uc_mcontext.pstate;
}

/// glibc's name for the kernel's NT_PRSTATUS register set (struct user_pt_regs).
typedef struct user_regs_struct hwd_ptrace_registers;

/// PTRACE_GETREGSET NT_PRSTATUS of a ptrace-stopped thread (arm64 has no PTRACE_GETREGS). 0 or errno.
static inline int hwd_ptrace_read_registers(pid_t tid, hwd_ptrace_registers *regs) {
    struct iovec io = {regs, sizeof *regs};
    if (ptrace(PTRACE_GETREGSET, tid, (void *)(uintptr_t)NT_PRSTATUS, &io) != 0) return errno;
    return io.iov_len == sizeof *regs ? 0 : EIO;
}

static inline void hwd_registers_from_ptrace(const hwd_ptrace_registers *r, uint64_t *out) {
    for (int i = 0; i < 31; i++) out[i] = r->regs[i];
    out[31] = r->sp;
    out[32] = r->pc;
    out[33] = r->pstate;
}

/// x0, the first argument, holds the call's error at a ptrace stop: the caller reads the
/// /proc syscall line before the stop (see the x86-64 hwd_interrupted_syscall).
#define HW_SYSCALL_FROM_REGISTERS 0
static inline int64_t hwd_interrupted_syscall(const hwd_ptrace_registers *r, uint64_t arguments[6]) {
    (void)r, (void)arguments;
    return -1;
}

#ifndef NT_ARM_TLS
#define NT_ARM_TLS 0x401
#endif

/// The calling thread's thread pointer (TPIDR_EL0).
static inline uint64_t hwd_own_thread_pointer(void) {
    uint64_t pointer;
    __asm__("mrs %0, tpidr_el0" : "=r"(pointer));
    return pointer;
}

/// A ptrace-stopped thread's thread pointer: its NT_ARM_TLS register set; 0 when unreadable.
static inline uint64_t hwd_ptrace_thread_pointer(pid_t tid, const hwd_ptrace_registers *r) {
    (void)r;
    uint64_t pointer = 0;
    struct iovec io = {&pointer, sizeof pointer};
    return ptrace(PTRACE_GETREGSET, tid, (void *)(uintptr_t)NT_ARM_TLS, &io) == 0 ? pointer : 0;
}

/// libunwind numbers x0..x30, sp, pc, pstate 0..33: this layout's order.
static inline int hwd_register_index_of_unwind_number(int number) {
    return number >= 0 && number < HW_REGISTER_COUNT ? number : -1;
}

/// libunwind-aarch64.h makes unw_context_t a ucontext_t cut short inside uc_mcontext.__reserved.
/// libunwind 1.6.2 reads a local context only at uc_mcontext.regs[0..33] (x0..x30, then sp, pc,
/// pstate) and the FP/SIMD record at the start of __reserved (its src/aarch64/Ginit.c, uc_addr),
/// so a signal handler's or getcontext's ucontext_t is passed as it is: these offsets must agree.
#define HW_SAME_OFFSET(field) (offsetof(unw_context_t, field) == offsetof(ucontext_t, field))
#define HW_UNWIND_CHECKS                                                                            \
    _Static_assert(HW_SAME_OFFSET(uc_mcontext.regs) && HW_SAME_OFFSET(uc_mcontext.sp) &&            \
                       HW_SAME_OFFSET(uc_mcontext.pc) && HW_SAME_OFFSET(uc_mcontext.pstate) &&      \
                       HW_SAME_OFFSET(uc_mcontext.__reserved) && sizeof(unw_context_t) <= sizeof(ucontext_t), \
                   "a ucontext_t serves as unw_context_t");                                         \
    _Static_assert(UNW_AARCH64_X0 == 0 && UNW_AARCH64_X30 == 30 && UNW_AARCH64_SP == 31 &&          \
                       UNW_AARCH64_PC == 32 && UNW_AARCH64_PSTATE == 33,                            \
                   "hwd_register_index_of_unwind_number: libunwind aarch64 register numbers");      \
    _Static_assert(sizeof(struct user_regs_struct) == HW_REGISTER_COUNT * sizeof(unsigned long long), \
                   "arm64 user_regs_struct (user_pt_regs) layout")

#else
#error "hangwatch: unsupported architecture: add its register layout to hw_registers.h"
#endif

_Static_assert(HW_REGISTER_SP < HW_REGISTER_COUNT && HW_REGISTER_PC < HW_REGISTER_COUNT, "pc and sp are registers");

/// How many bytes of a stack window of `wanted` bytes from `sp` to copy: the window stops at
/// the thread's own thread pointer where that lies above the stack pointer inside the window.
/// glibc keeps a thread's descriptor at the top of its stack mapping, above every frame of it
/// (nptl/allocatestack.c): on x86-64 the TCB at the thread pointer holds the stack protector's
/// canary and the pointer guard (fs:0x28, fs:0x30), on arm64 the thread's TLS blocks follow the
/// pointer. A stack walker needs nothing above it, and no dump carries those. 0: not known.
/// Every stack window a capture copies (signal handler, quiet helper, remote capture) is cut here.
static inline uint32_t hwd_stack_window_bytes(uint64_t sp, uint64_t thread_pointer, uint32_t wanted) {
    return thread_pointer > sp && thread_pointer - sp < wanted ? (uint32_t)(thread_pointer - sp) : wanted;
}

/// The names in layout order.
static const char *const hw_register_names[HW_REGISTER_COUNT] __attribute__((unused)) = {HW_REGISTER_NAMES};

#ifdef __cplusplus
}
#endif
