// ptrace + libunwind-ptrace primitives for out-of-process capture. See hw_ptrace.h.
#define _GNU_SOURCE
#include "hw_cfi.h"
#include "hw_procfs.h"
#include "hw_ptrace.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

// Types and constants only: every libunwind function is reached through dlsym'ed pointers.
#include <libunwind.h>

_Static_assert(sizeof(unw_word_t) == sizeof(uint64_t), "frames are copied as 64-bit words");
HW_UNWIND_CHECKS;  // libunwind's register numbers and the ptrace layout (hw_registers.h)

#ifndef PTRACE_EVENT_STOP
#define PTRACE_EVENT_STOP 128
#endif

// ---- libunwind, loaded RTLD_LOCAL -------------------------------------------------------

typedef void *(*upt_create_fn)(pid_t);
typedef void (*upt_destroy_fn)(void *);
typedef unw_addr_space_t (*create_addr_space_fn)(unw_accessors_t *, int);
typedef void (*destroy_addr_space_fn)(unw_addr_space_t);
typedef int (*set_caching_policy_fn)(unw_addr_space_t, unw_caching_policy_t);
typedef int (*init_remote_fn)(unw_cursor_t *, unw_addr_space_t, void *);
typedef int (*step_fn)(unw_cursor_t *);
typedef int (*get_reg_fn)(unw_cursor_t *, unw_regnum_t, unw_word_t *);
typedef int (*upt_access_mem_fn)(unw_addr_space_t, unw_word_t, unw_word_t *, int, void *);
typedef int (*upt_access_reg_fn)(unw_addr_space_t, unw_regnum_t, unw_word_t *, int, void *);
typedef int (*find_proc_info_fn)(unw_addr_space_t, unw_word_t, unw_proc_info_t *, int, void *);
typedef int (*search_unwind_table_fn)(unw_addr_space_t, unw_word_t, unw_dyn_info_t *, unw_proc_info_t *, int, void *);

static struct {
    upt_create_fn upt_create;
    upt_destroy_fn upt_destroy;
    unw_accessors_t *upt_accessors;
    create_addr_space_fn create_addr_space;
    destroy_addr_space_fn destroy_addr_space;
    set_caching_policy_fn set_caching_policy;
    init_remote_fn init_remote;
    step_fn step;
    get_reg_fn get_reg;
    upt_access_mem_fn upt_access_mem;
    upt_access_reg_fn upt_access_reg;
    find_proc_info_fn upt_find_proc_info;
    search_unwind_table_fn search_unwind_table;
} unwind_api;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static int load_status = -1;
static char load_error[256];

static void *resolve(void *handle, const char *library, const char *name) {
    void *symbol = dlsym(handle, name);
    if (symbol == NULL && load_error[0] == '\0') {
        snprintf(load_error, sizeof load_error, "%s has no symbol %s", library, name);
    }
    return symbol;
}

static void load_unwinder_once(void) {
    static const char *const generic_name = HW_UNWIND_REMOTE_LIBRARY;
    static const char *const ptrace_name = "libunwind-ptrace.so.0";
    // Both libraries go into a private link-map namespace. libunwind-ptrace has no DT_NEEDED
    // on libunwind-ARCH (it expects to be linked beside it), so a plain RTLD_LOCAL dlopen
    // fails (RTLD_NOW) or aborts at the first lazy call. Inside a new namespace the first
    // object opened acts as that namespace's global scope, so libunwind-ptrace binds to it,
    // while the program's own namespace never sees libunwind.so.8's _Unwind_* (docs/platform-facts.md fact 3).
    void *generic = dlmopen(LM_ID_NEWLM, generic_name, RTLD_NOW | RTLD_LOCAL);
    if (generic == NULL) {
        snprintf(load_error, sizeof load_error, "cannot load %s: %s", generic_name, dlerror());
        return;
    }
    Lmid_t namespace_id = LM_ID_BASE;
    if (dlinfo(generic, RTLD_DI_LMID, &namespace_id) != 0) {
        snprintf(load_error, sizeof load_error, "dlinfo(%s): %s", generic_name, dlerror());
        return;
    }
    void *ptrace_lib = dlmopen(namespace_id, ptrace_name, RTLD_NOW | RTLD_LOCAL);
    if (ptrace_lib == NULL) {
        snprintf(load_error, sizeof load_error, "cannot load %s: %s", ptrace_name, dlerror());
        return;
    }
    unwind_api.upt_create = (upt_create_fn)resolve(ptrace_lib, ptrace_name, "_UPT_create");
    unwind_api.upt_destroy = (upt_destroy_fn)resolve(ptrace_lib, ptrace_name, "_UPT_destroy");
    unwind_api.upt_accessors = (unw_accessors_t *)resolve(ptrace_lib, ptrace_name, "_UPT_accessors");
    unwind_api.upt_access_mem = (upt_access_mem_fn)resolve(ptrace_lib, ptrace_name, "_UPT_access_mem");
    unwind_api.upt_access_reg = (upt_access_reg_fn)resolve(ptrace_lib, ptrace_name, "_UPT_access_reg");
    unwind_api.upt_find_proc_info = (find_proc_info_fn)resolve(ptrace_lib, ptrace_name, "_UPT_find_proc_info");
    unwind_api.search_unwind_table =
        (search_unwind_table_fn)resolve(generic, generic_name, HW_UNWIND_REMOTE_PREFIX "dwarf_search_unwind_table");
    unwind_api.create_addr_space =
        (create_addr_space_fn)resolve(generic, generic_name, HW_UNWIND_REMOTE_PREFIX "create_addr_space");
    unwind_api.destroy_addr_space =
        (destroy_addr_space_fn)resolve(generic, generic_name, HW_UNWIND_REMOTE_PREFIX "destroy_addr_space");
    unwind_api.set_caching_policy =
        (set_caching_policy_fn)resolve(generic, generic_name, HW_UNWIND_REMOTE_PREFIX "set_caching_policy");
    unwind_api.init_remote = (init_remote_fn)resolve(generic, generic_name, HW_UNWIND_REMOTE_PREFIX "init_remote");
    unwind_api.step = (step_fn)resolve(generic, generic_name, HW_UNWIND_REMOTE_PREFIX "step");
    unwind_api.get_reg = (get_reg_fn)resolve(generic, generic_name, HW_UNWIND_REMOTE_PREFIX "get_reg");
    if (load_error[0] == '\0') load_status = 0;
}

int hwp_load_unwinder(char *error, size_t error_size) {
    pthread_once(&load_once, load_unwinder_once);
    if (load_status != 0 && error != NULL && error_size > 0) {
        snprintf(error, error_size, "%s", load_error[0] ? load_error : "libunwind not loaded");
    }
    return load_status;
}

// ---- ptrace -------------------------------------------------------------------------------

int hwp_seize(pid_t tid) {
    return ptrace(PTRACE_SEIZE, tid, NULL, NULL) == 0 ? 0 : errno;
}

pid_t hwp_current_tid(void) {
    return (pid_t)syscall(SYS_gettid);
}

int hwp_interrupt(pid_t tid) {
    return ptrace(PTRACE_INTERRUPT, tid, NULL, NULL) == 0 ? 0 : errno;
}

int hwp_detach(pid_t tid, int signal) {
    return ptrace(PTRACE_DETACH, tid, NULL, (void *)(long)signal) == 0 ? 0 : errno;
}

static int64_t monotonic_ns(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
}

// /proc/TID/FILE's first `size` bytes into `text`: how many, or -1.
static ssize_t read_proc_file(pid_t tid, const char *file, char *text, size_t size) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/%s", (int)tid, file);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t got = read(fd, text, size);
    close(fd);
    return got;
}

// 't' in /proc/TID/stat: the thread is in a ptrace stop. Used only when waitpid stays silent,
// in case another waiter in this process (a child reaper) consumed the stop notification.
static int in_tracing_stop(pid_t tid) {
    char text[512];
    ssize_t size = read_proc_file(tid, "stat", text, sizeof text);
    hw_proc_stat stat;
    return size > 0 && hw_proc_parse_stat(text, (size_t)size, &stat) == 0 && stat.state == 't';
}

// The decimal value of `key` in a status text, or -1 when it has none.
static int64_t status_number(const char *text, size_t size, const char *key) {
    size_t offset = 0, length = 0;
    if (!hw_proc_status_field(text, size, key, &offset, &length)) return -1;
    return (int64_t)hw_proc_decimal(text + offset, length);
}

// Whether an event waitid saw is `tid`'s end as a process this one is the parent of. That end
// is not the tracer's to take: `hangwatch run` captures its own child, and a waitpid here would
// reap it, so that the supervisor's own wait (Supervisor.swift, reapChild) never saw the child
// end (it polled forever), and the pid was free for another process while the supervisor still
// knew the child by it. Only the leader's end (its Tgid is itself) is left: the end of any other
// thread of the child is taken as before, since the kernel tells the parent of the process's
// end only once every traced thread of it has been waited for. A zombie's status still names
// its parent and its group.
static int ended_as_our_child(pid_t tid, const siginfo_t *info) {
    if (info->si_code != CLD_EXITED && info->si_code != CLD_KILLED && info->si_code != CLD_DUMPED) return 0;
    char text[1024];
    ssize_t size = read_proc_file(tid, "status", text, sizeof text);
    if (size <= 0) return 0;
    return status_number(text, (size_t)size, "PPid") == getpid() && status_number(text, (size_t)size, "Tgid") == tid;
}

hwp_wait_result hwp_wait_stopped(pid_t tid, int timeout_ms, int *pending_signal) {
    *pending_signal = 0;
    const int64_t start = monotonic_ns();
    const int64_t deadline = start + (int64_t)timeout_ms * 1000000;
    int64_t next_proc_check = start + 10 * 1000000;
    for (;;) {
        // Each event is looked at (WNOWAIT) before it is taken, so that one can be left.
        siginfo_t info;
        memset(&info, 0, sizeof info);
        if (waitid(P_PID, (id_t)tid, &info, WEXITED | WSTOPPED | __WALL | WNOHANG | WNOWAIT) != 0) {
            if (errno == EINTR) continue;
            return HWP_WAIT_EXITED;  // ECHILD: no longer our tracee (gone)
        }
        if (info.si_pid == tid) {
            if (ended_as_our_child(tid, &info)) return HWP_WAIT_EXITED;
            int status = 0;
            if (waitpid(tid, &status, __WALL | WNOHANG) != tid) continue;
            if (WIFEXITED(status) || WIFSIGNALED(status)) return HWP_WAIT_EXITED;
            if (WIFSTOPPED(status)) {
                int event = status >> 16;
                int signal = WSTOPSIG(status);
                // Event stops (our interrupt, a group-stop) carry no signal to give back; a
                // plain stop is a signal on its way to the program: re-inject it on detach.
                if (event == 0) *pending_signal = signal;
                return HWP_WAIT_STOPPED;
            }
            continue;
        }
        int64_t now = monotonic_ns();
        if (now >= next_proc_check) {
            if (in_tracing_stop(tid)) return HWP_WAIT_STOPPED;
            next_proc_check = now + 1000000;
        }
        if (now >= deadline) return HWP_WAIT_TIMED_OUT;
        struct timespec pause = {0, 20000};
        nanosleep(&pause, NULL);
    }
}

int hwp_get_registers(pid_t tid, uint64_t *values, int64_t *syscall, uint64_t *arguments, uint64_t *thread_pointer) {
    hwd_ptrace_registers regs;
    int error = hwd_ptrace_read_registers(tid, &regs);
    if (error != 0) return error;
    hwd_registers_from_ptrace(&regs, values);
    if (syscall != NULL && arguments != NULL) *syscall = hwd_interrupted_syscall(&regs, arguments);
    if (thread_pointer != NULL) *thread_pointer = hwd_ptrace_thread_pointer(tid, &regs);
    return 0;
}

long hwp_read_memory(pid_t pid, uint64_t address, void *buffer, size_t size) {
    struct iovec local = {buffer, size};
    struct iovec remote = {(void *)(uintptr_t)address, size};
    ssize_t got = process_vm_readv(pid, &local, 1, &remote, 1, 0);
    return got < 0 ? -(long)errno : (long)got;
}

// ---- unwinding ----------------------------------------------------------------------------

// libunwind-ptrace's own accessors read the stopped thread one word per PTRACE_PEEKDATA
// and one register per PTRACE_PEEKUSER: hundreds of syscalls per thread while the whole
// target is paused. Ours serve memory from whole pages copied with process_vm_readv (valid
// because every thread stays stopped during one unwind) and registers from one
// hwd_ptrace_read_registers, and fall back to the _UPT_ accessors for anything else.
// libunwind passes the _UPT_create argument to every accessor, so the page cache is found
// through `current_unwind` (one unwind at a time per unwinder; hwp_unwind runs on one thread).

#define HWP_PAGE_SIZE 4096
#define HWP_CACHED_PAGES 32
#define HWP_MAX_MAPPINGS 8192

// The target's executable mappings and, found on first use, each one's .eh_frame_hdr search
// table in the target's memory. libunwind-ptrace's own lookup re-reads /proc/PID/maps and maps
// the whole module file whenever an unwind moves to another module (eleven times for a 65-thread
// Swift process); this reads the maps once per capture and the table's header once per module.
struct hwp_module_table {
    pid_t pid;            // 0: not read for this capture
    int count;
    struct hwp_exec_mapping {
        uint64_t start, end;
        uint64_t header;   // where the module's ELF header is mapped (its offset-0 mapping), 0 if unknown
        int state;         // 0 not looked at, 1 table found, -1 none (libunwind-ptrace's lookup then)
        unw_dyn_info_t info;
        hw_cfi_table cfi;  // the same table, for the CFI stepper
    } *mappings;
};

struct hwp_unwinder {
    unw_addr_space_t address_space;
    unw_accessors_t accessors;
    // Valid during one hwp_unwind call.
    void *upt;
    pid_t tid;
    int have_registers;
    uint64_t registers[HW_REGISTER_COUNT];
    // Copy-then-resume (hwp_unwind_copied): the thread's stack window copied while it was
    // stopped; reads inside it are served from the copy, the thread itself runs again.
    const unsigned char *window;
    uint64_t window_address;
    size_t window_size;
    int page_count;
    int next_victim;
    uint64_t page_address[HWP_CACHED_PAGES];
    unsigned char pages[HWP_CACHED_PAGES][HWP_PAGE_SIZE];
    struct hwp_module_table modules;
    // The CFI stepper's rules by address in the target, allocated on first use and emptied
    // with the modules (hwp_unwinder_forget_modules).
    hw_cfi_cache *rules;
};

static _Thread_local hwp_unwinder *current_unwind;

static int hwp_cached_word(hwp_unwinder *unwinder, unw_word_t address, unw_word_t *value) {
    if (unwinder->window != NULL && unwinder->window_size >= sizeof *value && address >= unwinder->window_address &&
        address - unwinder->window_address <= unwinder->window_size - sizeof *value) {
        memcpy(value, unwinder->window + (address - unwinder->window_address), sizeof *value);
        return 0;
    }
    uint64_t page = address & ~(uint64_t)(HWP_PAGE_SIZE - 1);
    uint64_t offset = address - page;
    if (offset + sizeof(unw_word_t) > HWP_PAGE_SIZE) return -1;  // straddles two pages
    for (int i = 0; i < unwinder->page_count; i++) {
        if (unwinder->page_address[i] == page) {
            memcpy(value, unwinder->pages[i] + offset, sizeof *value);
            return 0;
        }
    }
    int slot;
    if (unwinder->page_count < HWP_CACHED_PAGES) {
        slot = unwinder->page_count++;
    } else {
        slot = unwinder->next_victim;
        unwinder->next_victim = (unwinder->next_victim + 1) % HWP_CACHED_PAGES;
    }
    struct iovec local = {unwinder->pages[slot], HWP_PAGE_SIZE};
    struct iovec remote = {(void *)(uintptr_t)page, HWP_PAGE_SIZE};
    if (process_vm_readv(unwinder->tid, &local, 1, &remote, 1, 0) != HWP_PAGE_SIZE) {
        unwinder->page_address[slot] = UINT64_MAX;  // never matches a page address
        return -1;
    }
    unwinder->page_address[slot] = page;
    memcpy(value, unwinder->pages[slot] + offset, sizeof *value);
    return 0;
}

static int hwp_access_mem(unw_addr_space_t as, unw_word_t address, unw_word_t *value, int write, void *arg) {
    hwp_unwinder *unwinder = current_unwind;
    if (!write && unwinder != NULL && unwinder->upt == arg && hwp_cached_word(unwinder, address, value) == 0) return 0;
    if (write && unwinder != NULL) unwinder->page_count = 0;
    return unwind_api.upt_access_mem(as, address, value, write, arg);
}

static int hwp_access_reg(unw_addr_space_t as, unw_regnum_t reg, unw_word_t *value, int write, void *arg) {
    hwp_unwinder *unwinder = current_unwind;
    int index = hwd_register_index_of_unwind_number(reg);
    if (!write && unwinder != NULL && unwinder->upt == arg && index >= 0) {
        if (!unwinder->have_registers) {
            hwd_ptrace_registers regs;
            unwinder->have_registers = hwd_ptrace_read_registers(unwinder->tid, &regs) == 0 ? 1 : -1;
            if (unwinder->have_registers == 1) hwd_registers_from_ptrace(&regs, unwinder->registers);
        }
        if (unwinder->have_registers == 1) {
            *value = unwinder->registers[index];
            return 0;
        }
    }
    return unwind_api.upt_access_reg(as, reg, value, write, arg);
}

// ---- unwind tables found in the target's memory --------------------------------------------

void hwp_unwinder_forget_modules(hwp_unwinder *unwinder) {
    if (unwinder == NULL) return;
    free(unwinder->modules.mappings);
    memset(&unwinder->modules, 0, sizeof unwinder->modules);
    if (unwinder->rules) memset(unwinder->rules, 0, sizeof *unwinder->rules);
}

// /proc/PID/maps: each executable file mapping, and for it the start of the same file's
// offset-0 mapping (where its ELF header is); the vDSO is an ELF image of its own. Anonymous
// and other special mappings are skipped.
static void read_exec_mappings(struct hwp_module_table *table, pid_t pid) {
    table->pid = pid;
    table->count = 0;
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
    FILE *maps = fopen(path, "re");
    if (maps == NULL) return;
    struct entry { uint64_t start, end, offset, inode; unsigned dev_major, dev_minor; int exec; } *entries = NULL;
    int count = 0, capacity = 0;
    char line[4096];
    while (count < HWP_MAX_MAPPINGS && fgets(line, sizeof line, maps)) {
        size_t length = strlen(line);
        if (length > 0 && line[length - 1] == '\n') length--;
        hw_proc_mapping parsed;
        if (hw_proc_parse_maps_line(line, length, &parsed) != 0) continue;
        struct entry e = {parsed.start, parsed.end, parsed.offset, parsed.inode, parsed.device_major, parsed.device_minor,
                          parsed.perms[2] == 'x'};
        int vdso = parsed.path_length == 6 && memcmp(line + parsed.path_offset, "[vdso]", 6) == 0;
        if (e.inode == 0 && !vdso) continue;
        if (vdso) e.inode = UINT64_MAX;  // matches only itself: its header is its start
        if (count == capacity) {
            capacity = capacity ? capacity * 2 : 128;
            struct entry *grown = realloc(entries, (size_t)capacity * sizeof *entries);
            if (grown == NULL) break;
            entries = grown;
        }
        entries[count++] = e;
    }
    fclose(maps);
    int exec_count = 0;
    for (int i = 0; i < count; i++) exec_count += entries[i].exec;
    table->mappings = exec_count ? calloc((size_t)exec_count, sizeof *table->mappings) : NULL;
    for (int i = 0; table->mappings && i < count; i++) {
        if (!entries[i].exec) continue;
        struct hwp_exec_mapping *m = &table->mappings[table->count++];
        m->start = entries[i].start;
        m->end = entries[i].end;
        for (int k = 0; k < count; k++) {
            if (entries[k].offset == 0 && entries[k].inode == entries[i].inode && entries[k].dev_major == entries[i].dev_major &&
                entries[k].dev_minor == entries[i].dev_minor && entries[k].start <= entries[i].start &&
                (m->header == 0 || entries[k].start > m->header))
                m->header = entries[k].start;  // the nearest one below: the same load of the file
        }
    }
    free(entries);
}

static int read_target(pid_t pid, uint64_t address, void *buffer, size_t size) {
    return hwp_read_memory(pid, address, buffer, size) == (long)size ? 0 : -1;
}

static size_t hwp_read_target(void *context, uint64_t address, void *buffer, size_t length) {
    long got = hwp_read_memory(*(const pid_t *)context, address, buffer, length);
    return got > 0 ? (size_t)got : 0;
}

// The module's PT_GNU_EH_FRAME, read from the target's copy of its ELF and program headers: its
// binary-search table (hw_cfi_table_at) is the CFI stepper's and, as a remote table, the one
// libunwind searches through our accessors. Anything else is left to libunwind-ptrace.
static int find_search_table(pid_t pid, struct hwp_exec_mapping *m) {
    ElfW(Ehdr) header;
    if (m->header == 0 || read_target(pid, m->header, &header, sizeof header) != 0) return -1;
    if (memcmp(header.e_ident, ELFMAG, SELFMAG) != 0 || header.e_ident[EI_CLASS] != ELFCLASS64 ||
        header.e_phentsize != sizeof(ElfW(Phdr)) || header.e_phnum == 0 || header.e_phnum > 256)
        return -1;
    ElfW(Phdr) phdrs[256];
    if (read_target(pid, m->header + header.e_phoff, phdrs, header.e_phnum * sizeof(ElfW(Phdr))) != 0) return -1;
    uint64_t first_load = UINT64_MAX, eh_frame_hdr = 0;
    for (int i = 0; i < header.e_phnum; i++) {
        if (phdrs[i].p_type == PT_LOAD && phdrs[i].p_vaddr < first_load) first_load = phdrs[i].p_vaddr;
        if (phdrs[i].p_type == PT_GNU_EH_FRAME) eh_frame_hdr = phdrs[i].p_vaddr;
    }
    if (first_load == UINT64_MAX || eh_frame_hdr == 0) return -1;
    uint64_t bias = m->header - (first_load & ~(uint64_t)(HWP_PAGE_SIZE - 1));
    if (hw_cfi_table_at(bias + eh_frame_hdr, hwp_read_target, &pid, &m->cfi) != 0) return -1;
    memset(&m->info, 0, sizeof m->info);
    m->info.format = UNW_INFO_FORMAT_REMOTE_TABLE;
    m->info.start_ip = m->start;
    m->info.end_ip = m->end;
    m->info.u.rti.segbase = m->cfi.header;
    m->info.u.rti.table_data = m->cfi.table;
    m->info.u.rti.table_len = (unw_word_t)m->cfi.count * 8 / sizeof(unw_word_t);  // two int32 per entry
    return 1;
}

// The mapping holding `ip` with its search table found; NULL when it has none.
static struct hwp_exec_mapping *hwp_mapping_with_table(hwp_unwinder *unwinder, uint64_t ip) {
    struct hwp_module_table *table = &unwinder->modules;
    if (table->pid == 0) read_exec_mappings(table, unwinder->tid);
    for (int i = 0; i < table->count; i++) {
        struct hwp_exec_mapping *m = &table->mappings[i];
        if (ip < m->start || ip >= m->end) continue;
        if (m->state == 0) m->state = find_search_table(unwinder->tid, m);
        return m->state == 1 ? m : NULL;
    }
    return NULL;
}

static int hwp_find_proc_info(unw_addr_space_t as, unw_word_t ip, unw_proc_info_t *pi, int need_unwind_info, void *arg) {
    hwp_unwinder *unwinder = current_unwind;
    struct hwp_exec_mapping *m = unwinder != NULL && unwinder->upt == arg ? hwp_mapping_with_table(unwinder, ip) : NULL;
    if (m != NULL) {
        int found = unwind_api.search_unwind_table(as, ip, &m->info, pi, need_unwind_info, arg);
        if (found >= 0) return found;
    }
    return unwind_api.upt_find_proc_info(as, ip, pi, need_unwind_info, arg);
}

// ---- the CFI stepper on copies (hw_cfi.c) -------------------------------------------------

static _Atomic int cfi_stepper_on = 1;
static _Atomic uint32_t stepped_threads;

void hwp_set_cfi_stepper(int on) { cfi_stepper_on = on != 0; }

uint32_t hwp_stepped_threads(void) { return stepped_threads; }

// The target's memory for the stepper: the copied window, the page cache, else the target.
static size_t hwp_cfi_read(void *context, uint64_t address, void *buffer, size_t length) {
    hwp_unwinder *unwinder = context;
    if (unwinder->window != NULL && address >= unwinder->window_address && address - unwinder->window_address <= unwinder->window_size
        && length <= unwinder->window_size - (address - unwinder->window_address)) {
        memcpy(buffer, unwinder->window + (address - unwinder->window_address), length);
        return length;
    }
    unw_word_t word;
    if (length == sizeof word && hwp_cached_word(unwinder, address, &word) == 0) {
        memcpy(buffer, &word, sizeof word);
        return length;
    }
    return hwp_read_target(&unwinder->tid, address, buffer, length);
}

// The copied thread's frames by the CFI stepper, as libunwind's loop would give them (frame 0
// the pc; a return address looked up inside its call); 0 when a frame needs what the stepper
// does not do, and libunwind unwinds the thread instead.
static int hwp_unwind_with_rules(hwp_unwinder *unwinder, uint64_t *frames, int max_frames) {
    if (!cfi_stepper_on || unwinder->have_registers != 1) return 0;
    if (unwinder->rules == NULL && (unwinder->rules = calloc(1, sizeof *unwinder->rules)) == NULL) return 0;
    uint64_t registers[HW_REGISTER_COUNT];
    memcpy(registers, unwinder->registers, sizeof registers);
    int count = 0;
    frames[count++] = registers[HW_REGISTER_PC];
    while (count < max_frames) {
        uint64_t pc = registers[HW_REGISTER_PC], lookup = count == 1 ? pc : pc - 1;
        struct hwp_exec_mapping *m = hwp_mapping_with_table(unwinder, lookup);
        if (m == NULL) return 0;
        const hw_cfi_rule *rule = hw_cfi_rule_at(unwinder->rules, &m->cfi, lookup, hwp_cfi_read, unwinder);
        switch (hw_cfi_apply(rule, registers, hwp_cfi_read, unwinder)) {
        case HW_CFI_OK: frames[count++] = registers[HW_REGISTER_PC]; break;
        case HW_CFI_END: return count;
        default: return 0;
        }
    }
    return count;
}

hwp_unwinder *hwp_unwinder_create(void) {
    if (hwp_load_unwinder(NULL, 0) != 0) return NULL;
    hwp_unwinder *unwinder = calloc(1, sizeof *unwinder);
    if (unwinder == NULL) return NULL;
    unwinder->accessors = *unwind_api.upt_accessors;
    unwinder->accessors.access_mem = hwp_access_mem;
    unwinder->accessors.access_reg = hwp_access_reg;
    unwinder->accessors.find_proc_info = hwp_find_proc_info;
    unwinder->address_space = unwind_api.create_addr_space(&unwinder->accessors, 0);
    if (unwinder->address_space == NULL) {
        free(unwinder);
        return NULL;
    }
    // Global caching: 8-10 ms instead of 300+ ms for 65 threads (docs/platform-facts.md fact 4).
    unwind_api.set_caching_policy(unwinder->address_space, UNW_CACHE_GLOBAL);
    return unwinder;
}

void hwp_unwinder_destroy(hwp_unwinder *unwinder) {
    if (unwinder == NULL) return;
    hwp_unwinder_forget_modules(unwinder);
    free(unwinder->rules);
    unwind_api.destroy_addr_space(unwinder->address_space);
    free(unwinder);
}

static int hwp_unwind_with(hwp_unwinder *unwinder, pid_t tid, uint64_t *frames, int max_frames);

int hwp_unwind(hwp_unwinder *unwinder, pid_t tid, uint64_t *frames, int max_frames) {
    if (unwinder == NULL || max_frames <= 0) return 0;
    unwinder->have_registers = 0;
    unwinder->window = NULL;
    return hwp_unwind_with(unwinder, tid, frames, max_frames);
}

int hwp_unwind_copied(hwp_unwinder *unwinder, pid_t tid, const uint64_t *registers, const void *stack,
                      uint64_t stack_address, size_t stack_size, uint64_t *frames, int max_frames) {
    if (unwinder == NULL || registers == NULL || max_frames <= 0) return 0;
    memcpy(unwinder->registers, registers, sizeof unwinder->registers);
    unwinder->have_registers = 1;
    unwinder->window = stack_size > 0 ? stack : NULL;
    unwinder->window_address = stack_address;
    unwinder->window_size = stack_size;
    unwinder->tid = tid;
    unwinder->page_count = 0;  // memory may have changed since the previous thread's copy
    unwinder->next_victim = 0;
    int count = hwp_unwind_with_rules(unwinder, frames, max_frames);
    if (count > 0) {
        stepped_threads++;
        unwinder->window = NULL;
        return count;
    }
    count = hwp_unwind_with(unwinder, tid, frames, max_frames);
    unwinder->window = NULL;
    return count;
}

static int hwp_unwind_with(hwp_unwinder *unwinder, pid_t tid, uint64_t *frames, int max_frames) {
    void *target = unwind_api.upt_create(tid);
    if (target == NULL) return -UNW_ENOMEM;
    // A fresh page cache per thread: memory may have changed since the previous unwind.
    unwinder->upt = target;
    unwinder->tid = tid;
    unwinder->page_count = 0;
    unwinder->next_victim = 0;
    current_unwind = unwinder;
    unw_cursor_t cursor;
    // libunwind's one-time tdep_init runs inside the first init_remote and races when two
    // threads get there together (docs/platform-facts.md fact 4): serialise calls until one has finished.
    static pthread_mutex_t first_init_lock = PTHREAD_MUTEX_INITIALIZER;
    static _Atomic int initialised = 0;
    int result;
    if (initialised) {
        result = unwind_api.init_remote(&cursor, unwinder->address_space, target);
    } else {
        pthread_mutex_lock(&first_init_lock);
        result = unwind_api.init_remote(&cursor, unwinder->address_space, target);
        if (result >= 0) initialised = 1;
        pthread_mutex_unlock(&first_init_lock);
    }
    if (result < 0) {
        current_unwind = NULL;
        unwind_api.upt_destroy(target);
        return result;
    }
    int count = 0;
    do {
        unw_word_t ip = 0;
        if (unwind_api.get_reg(&cursor, UNW_REG_IP, &ip) < 0 || ip == 0) break;
        frames[count++] = ip;
    } while (count < max_frames && unwind_api.step(&cursor) > 0);
    current_unwind = NULL;
    unwinder->upt = NULL;
    unwind_api.upt_destroy(target);
    return count;
}

// ---- tracer thread ------------------------------------------------------------------------

struct tracer_call {
    void (*body)(void *);
    void *context;
};

static void *tracer_main(void *argument) {
    struct tracer_call *call = argument;
    // The waits for threads to stop poll with 20 µs sleeps; the default 50 µs timer slack
    // would stretch each to 70 µs while the whole target is paused.
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
    call->body(call->context);
    return NULL;
}

int hwp_run_on_tracer_thread(void (*body)(void *), void *context) {
    struct tracer_call call = {body, context};
    pthread_t thread;
    int result = pthread_create(&thread, NULL, tracer_main, &call);
    if (result != 0) return result;
    pthread_join(thread, NULL);
    return 0;
}

// ---- staying attached ---------------------------------------------------------------------

_Static_assert(HWP_FOLLOW_OPTIONS == (PTRACE_O_TRACECLONE | PTRACE_O_TRACEEXEC | PTRACE_O_EXITKILL),
               "HWP_FOLLOW_OPTIONS");
_Static_assert(HWP_EVENT_CLONE == PTRACE_EVENT_CLONE && HWP_EVENT_EXEC == PTRACE_EVENT_EXEC &&
               HWP_EVENT_STOP == PTRACE_EVENT_STOP, "ptrace event numbers");

int hwp_seize_with_options(pid_t tid, unsigned long options) {
    return ptrace(PTRACE_SEIZE, tid, NULL, (void *)options) == 0 ? 0 : errno;
}

int hwp_continue(pid_t tid, int signal) {
    return ptrace(PTRACE_CONT, tid, NULL, (void *)(long)signal) == 0 ? 0 : errno;
}

int hwp_listen(pid_t tid) {
    return ptrace(PTRACE_LISTEN, tid, NULL, NULL) == 0 ? 0 : errno;
}

int hwp_get_signal_info(pid_t tid, int *number, int *code, uint64_t *address) {
    siginfo_t info;
    memset(&info, 0, sizeof info);
    if (ptrace(PTRACE_GETSIGINFO, tid, NULL, &info) != 0) return errno;
    *number = info.si_signo;
    *code = info.si_code;
    *address = (uint64_t)(uintptr_t)info.si_addr;
    return 0;
}

int hwp_get_event_message(pid_t tid, unsigned long *message) {
    return ptrace(PTRACE_GETEVENTMSG, tid, NULL, message) == 0 ? 0 : errno;
}

pid_t hwp_wait_any(int *status) {
    for (;;) {
        pid_t got = waitpid(-1, status, __WALL | WNOHANG);
        if (got >= 0) return got;
        if (errno != EINTR) return -errno;
    }
}

int hwp_wait_thread(pid_t tid, int timeout_ms, int *status) {
    const int64_t deadline = monotonic_ns() + (int64_t)timeout_ms * 1000000;
    for (;;) {
        pid_t got = waitpid(tid, status, __WALL | WNOHANG);
        if (got == tid) return 0;
        if (got < 0 && errno != EINTR) return 2;
        if (monotonic_ns() >= deadline) return 1;
        struct timespec pause = {0, 20000};
        nanosleep(&pause, NULL);
    }
}
