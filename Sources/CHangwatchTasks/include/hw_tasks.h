// Swift tasks read out of a process's memory (docs/tasks.md): every live AsyncTask found by its
// metadata pointer in the process's writable anonymous memory, validated word by word, with
// its await chain (the resume functions of its AsyncContext chain). Memory is read only
// through process_vm_readv, also for this very process: a task freed or reused while it is
// read gives an error or a value that fails validation, never a fault. Not for signal
// handlers (it allocates its read buffer); bounded in tasks, chain depth, bytes and time, and
// reads only the pages the process uses (docs/tasks.md).
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/// The deepest await chain kept per task (resume function first).
#define HWT_MAX_CHAIN 64

typedef struct {
    uint64_t start, end;
} hwt_range;

/// Where a runtime keeps what is read (HangwatchTaskCapture's layout table names the runtimes).
typedef struct {
    /// The AsyncTask metadata pointer: every task's first word.
    uint64_t metadata;
    /// sizeof(AsyncTask): the bytes read per task.
    uint32_t task_size;
    uint32_t off_job_flags;     // u32 JobFlags
    uint32_t off_job_id;        // u32 Job::Id: the task id's low half
    uint32_t off_id_high;       // u32: the task id's high half (UINT32_MAX: none)
    uint32_t off_resume_function;
    uint32_t off_resume_context;
    /// ActiveTaskStatus: its flags word (u32) and its innermost status record (a pointer).
    uint32_t off_status_flags;
    uint32_t off_status_record;
    /// The dependency record (what a task with the dependency flag waits on).
    uint32_t off_dependency_record;
    uint32_t status_running_mask;
    uint32_t status_enqueued_mask;
    uint32_t status_cancelled_mask;
    uint32_t status_complete_mask;
    uint32_t status_dependency_mask;
    /// JobFlags masks: a child task (its parent is the first word after the task), a task
    /// group's child, an `async let` child.
    uint32_t job_child_mask;
    uint32_t job_group_child_mask;
    uint32_t job_async_let_mask;
    /// Status records: kind in the low byte of the first word, the next record at +8, the
    /// payload at +16. The kind of a task-name record (its payload a C string pointer).
    uint32_t record_kind_name;
    /// In a dependency record: what it waits on (a pointer) and the kind (u32).
    uint32_t off_dependency_on;
    uint32_t off_dependency_kind;
} hwt_layout;

/// What a suspended task waits on (`hwt_task.waiting_kind`).
enum {
    HWT_WAITING_NOTHING_KNOWN = 0,
    HWT_WAITING_TASK = 1,
    HWT_WAITING_CONTINUATION = 2,
    HWT_WAITING_GROUP = 3,
    HWT_WAITING_EXECUTOR = 4,
};

/// The longest task name kept (bytes, without the terminator).
#define HWT_MAX_NAME 127

typedef struct {
    uint64_t address;
    uint64_t id;
    uint64_t resume_context;
    /// The parent task of a child task (0: none).
    uint64_t parent;
    /// What it waits on (a task, a continuation context, a group, an executor), by kind.
    uint64_t waiting_on;
    uint32_t waiting_kind;
    uint32_t job_flags;
    uint32_t status_flags;
    uint32_t frame_count;
    /// Its name (`Task(name:)`), NUL-terminated; empty when it has none.
    char name[HWT_MAX_NAME + 1];
    /// 1 when the chain went on past HWT_MAX_CHAIN, or stopped at a context that failed validation.
    uint32_t chain_cut;
    uint64_t frames[HWT_MAX_CHAIN];
} hwt_task;

/// Bounds of one scan (hwt_scan) and how it finds the pages in use; 0 in a bound: none.
typedef struct {
    /// Bytes of the process's memory scanned at most (the tasks' own reads are not counted).
    uint64_t max_bytes;
    /// CLOCK_MONOTONIC time (nanoseconds) past which nothing more is read.
    uint64_t deadline_ns;
    /// The first way tried to find the pages in use (HWT_PAGES_SCAN, or HWT_PAGES_READ to skip
    /// the ioctl); each falls back to the next. Without a pagemap: HWT_PAGES_ALL.
    uint32_t pages;
} hwt_options;

/// How the pages the process uses were told from those it never touched (`hwt_stats.page_source`).
enum {
    /// Not told apart: every page of every region given was read (no pagemap).
    HWT_PAGES_ALL = 0,
    /// The pagemap's PAGEMAP_SCAN ioctl (Linux 6.7+): runs of present or swapped pages.
    HWT_PAGES_SCAN = 1,
    /// The pagemap's entries read 4,096 pages at a time (bits 63 present, 62 swapped).
    HWT_PAGES_READ = 2,
};

/// Why a scan stopped before the end (`hwt_stats.stopped`, bits).
enum {
    HWT_STOPPED_BYTES = 1,
    HWT_STOPPED_DEADLINE = 2,
};

typedef struct {
    uint64_t bytes_scanned;
    uint64_t candidates;
    uint64_t rejected;
    /// Regions that could not be read (unmapped meanwhile, or not readable).
    uint64_t unreadable_regions;
    /// More tasks than the caller had room for: the rest were not kept.
    uint32_t truncated;
    /// HWT_PAGES_…: how present pages were found.
    uint32_t page_source;
    /// Bytes of the regions that no page is present or swapped in: never touched, not read.
    uint64_t bytes_untouched;
    /// Bytes of present or swapped pages not read: past `max_bytes`.
    uint64_t bytes_unread;
    /// Bytes not looked at (present or not) when the deadline passed.
    uint64_t bytes_unexamined;
    /// HWT_STOPPED_… bits.
    uint32_t stopped;
} hwt_stats;

/// Scans `writable` regions of process `pid` (getpid() for this one) for tasks; their resume
/// functions must lie in `executable`, their contexts in `writable` (both sorted by address,
/// without overlaps, as /proc/PID/maps lists them). Only pages present or swapped are read when
/// `pagemap_fd` is the process's /proc/PID/pagemap (-1: every page of the regions, which the
/// caller then chose); `options` bound the bytes and the time. At most `max_tasks` go to `tasks`;
/// `*count` says how many. 0, or -1 with errno when nothing could be read at all (EPERM: not
/// allowed to read that process; ESRCH: it is gone).
int hwt_scan(pid_t pid, const hwt_layout *layout, const hwt_range *writable, size_t writable_count,
             const hwt_range *executable, size_t executable_count, int pagemap_fd, const hwt_options *options,
             hwt_task *tasks, size_t max_tasks, size_t *count, hwt_stats *stats);

/// Reads `size` bytes at `address` of process `pid` (all or nothing): 0, or -1 with errno.
int hwt_read(pid_t pid, uint64_t address, void *buffer, size_t size);

/// The glibc version this process runs ("2.36"; gnu_get_libc_version), for the lock layouts
/// HangwatchTaskCapture/LockCapture.swift reads.
const char *hwt_libc_version(void);

/// Symbols looked up at once at most (hwt_elf_symbols).
#define HWT_MAX_SYMBOLS 8

/// What an ELF look-up read and left out.
typedef struct {
    /// The lowest PT_LOAD virtual address (the load bias is where that segment is mapped, minus this).
    uint64_t lowest_load_address;
    /// Bit i set: `names[i]` was found, its value in `values[i]`.
    uint32_t found;
    /// Symbol tables in the file (SHT_DYNSYM and SHT_SYMTAB sections).
    uint32_t symbol_tables;
    /// Symbol tables not read: beyond the first .dynsym and the first .symtab (a linker writes
    /// one of each), or over the size bound.
    uint32_t tables_skipped;
    /// Bytes read from the file.
    uint64_t bytes_read;
} hwt_elf_lookup;

/// The values (st_value) of up to HWT_MAX_SYMBOLS symbols `names` in ELF64 file `path`, from
/// its first .dynsym, then its first .symtab, in one pass over each: at most two tables of at
/// most 64 MiB each are read, whatever the file holds. Files larger than 1 GiB, other classes
/// and malformed headers are refused. 0 (`lookup->found` says which were found), or -1 with errno.
int hwt_elf_symbols(const char *path, const char *const *names, size_t count, uint64_t *values, hwt_elf_lookup *lookup);

#ifdef __cplusplus
}
#endif
