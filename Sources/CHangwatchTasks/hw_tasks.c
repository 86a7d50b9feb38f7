// Swift tasks out of a process's memory (hw_tasks.h, docs/tasks.md).
#define _GNU_SOURCE
#include "hw_tasks.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>
#include <gnu/libc-version.h>

int hwt_read(pid_t pid, uint64_t address, void *buffer, size_t size) {
    struct iovec local = {buffer, size};
    struct iovec remote = {(void *)(uintptr_t)address, size};
    ssize_t got = process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (got == (ssize_t)size) return 0;
    if (got >= 0) errno = EFAULT;
    return -1;
}

const char *hwt_libc_version(void) { return gnu_get_libc_version(); }

// `ranges` are sorted by address and do not overlap (as /proc/PID/maps lists them): the last
// range starting at or below `address` is the only one that can hold it.
static int within(const hwt_range *ranges, size_t count, uint64_t address, uint64_t size) {
    if (address == 0 || address + size < address || count == 0) return 0;
    size_t low = 0, high = count;
    while (high - low > 1) {
        size_t middle = low + (high - low) / 2;
        if (ranges[middle].start <= address) low = middle; else high = middle;
    }
    return address >= ranges[low].start && address + size <= ranges[low].end;
}

// Where a candidate's fields are read from: the chunk of memory the scan copied a moment ago,
// which holds the task and, mostly, the contexts its allocator placed after it (one copy of
// that memory at one moment, no system call); anything else from the process afresh. A
// candidate's dozen reads were 7 system calls a task: most of the time of 10,000 tasks.
typedef struct {
    pid_t pid;
    const uint8_t *chunk;
    uint64_t chunk_at, chunk_size;
} source;

static int source_read(const source *from, uint64_t address, void *buffer, size_t size) {
    if (from->chunk && address >= from->chunk_at && size <= from->chunk_size && address - from->chunk_at <= from->chunk_size - size) {
        memcpy(buffer, from->chunk + (address - from->chunk_at), size);
        return 0;
    }
    return hwt_read(from->pid, address, buffer, size);
}

static uint32_t u32_at(const uint8_t *bytes, uint32_t offset) {
    uint32_t value;
    memcpy(&value, bytes + offset, sizeof value);
    return value;
}

static uint64_t u64_at(const uint8_t *bytes, uint32_t offset) {
    uint64_t value;
    memcpy(&value, bytes + offset, sizeof value);
    return value;
}

// What a task waits on: its dependency record, when its status says it has one. The record
// lives in the task's own allocator and goes when the task resumes: its kind is checked.
static void read_dependency(const source *from, const hwt_layout *layout, const uint8_t *bytes, const hwt_range *writable,
                            size_t nw, hwt_task *task) {
    if (!(task->status_flags & layout->status_dependency_mask)) return;
    uint64_t record = u64_at(bytes, layout->off_dependency_record);
    uint8_t fields[64];
    uint32_t size = layout->off_dependency_kind + 4;
    if (size > sizeof fields || !within(writable, nw, record, size) || source_read(from, record, fields, size) != 0) return;
    uint32_t kind = u32_at(fields, layout->off_dependency_kind);
    if (kind < HWT_WAITING_TASK || kind > HWT_WAITING_EXECUTOR) return;
    task->waiting_kind = kind;
    task->waiting_on = u64_at(fields, layout->off_dependency_on);
}

// A task's name: the payload of a name record among its status records (at most 16 looked at).
static void read_name(const source *from, const hwt_layout *layout, uint64_t record, const hwt_range *writable, size_t nw,
                      hwt_task *task) {
    for (int i = 0; i < 16 && record != 0; i++) {
        uint64_t words[3];
        if (!within(writable, nw, record, sizeof words) || source_read(from, record, words, sizeof words) != 0) return;
        if ((words[0] & 0xff) == layout->record_kind_name) {
            char name[HWT_MAX_NAME + 1];
            // A short read near the end of a mapping: try less.
            for (size_t size = sizeof name - 1; size >= 8; size /= 2) {
                if (source_read(from, words[2], name, size) == 0) {
                    name[size] = 0;
                    memcpy(task->name, name, strnlen(name, size) + 1);
                    return;
                }
            }
            return;
        }
        record = words[1];
    }
}

// One candidate, checked field by field, its chain followed context by context.
static int read_task(const source *from, const hwt_layout *layout, uint64_t address, const hwt_range *writable, size_t nw,
                     const hwt_range *executable, size_t nx, hwt_task *task) {
    uint8_t bytes[512];
    if (layout->task_size > sizeof bytes || layout->task_size < 72) return 0;
    if (source_read(from, address, bytes, layout->task_size) != 0) return 0;
    if (u64_at(bytes, 0) != layout->metadata) return 0;
    if (u64_at(bytes, 8) == 0) return 0;  // a freed object's refcount word
    uint32_t status = u32_at(bytes, layout->off_status_flags);
    if (status & layout->status_complete_mask) return 0;  // finished: freed soon, or already
    uint64_t resume = u64_at(bytes, layout->off_resume_function);
    uint64_t context = u64_at(bytes, layout->off_resume_context);
    if (!within(executable, nx, resume, 1)) return 0;
    if (context != 0 && !within(writable, nw, context, 16)) return 0;
    memset(task, 0, sizeof *task);
    task->address = address;
    task->resume_context = context;
    task->job_flags = u32_at(bytes, layout->off_job_flags);
    task->id = u32_at(bytes, layout->off_job_id);
    if (layout->off_id_high != UINT32_MAX) task->id |= (uint64_t)u32_at(bytes, layout->off_id_high) << 32;
    task->status_flags = status;
    read_dependency(from, layout, bytes, writable, nw, task);
    read_name(from, layout, u64_at(bytes, layout->off_status_record), writable, nw, task);
    if (task->job_flags & layout->job_child_mask) {
        // A child task's ChildFragment follows the task: its parent first.
        uint64_t parent = 0;
        if (source_read(from, address + layout->task_size, &parent, sizeof parent) == 0 && within(writable, nw, parent, 16))
            task->parent = parent;
    }
    task->frames[task->frame_count++] = resume;
    // The await chain: each context's ResumeParent, following Parent until the task's first.
    uint64_t seen = context;
    for (uint32_t depth = 0; context != 0; depth++) {
        uint64_t words[2];
        if (task->frame_count >= HWT_MAX_CHAIN || depth > 4 * HWT_MAX_CHAIN) {
            task->chain_cut = 1;
            break;
        }
        if (!within(writable, nw, context, sizeof words) || source_read(from, context, words, sizeof words) != 0) {
            task->chain_cut = 1;
            break;
        }
        uint64_t parent = words[0], resume_parent = words[1];
        if (!within(executable, nx, resume_parent, 1)) {
            // The task's first context may end in no function at all.
            if (parent != 0) task->chain_cut = 1;
            break;
        }
        // A continuation's context resumes where the task's resume function does: once is enough.
        if (!(task->frame_count == 1 && resume_parent == task->frames[0])) task->frames[task->frame_count++] = resume_parent;
        if (parent == 0) break;  // the task's first context: the runtime's completion comes last
        context = parent;
        if (context == seen) {  // a cycle: memory reused under us
            task->chain_cut = 1;
            break;
        }
    }
    return 1;
}

// MARK: - The scan: present pages only, within bounds

// PAGEMAP_SCAN (Linux 6.7, include/uapi/linux/fs.h): runs of pages by category. Defined here:
// the C library's kernel headers may be older than the kernel the program runs on.
struct hwt_page_region {
    uint64_t start, end, categories;
};
struct hwt_pm_scan_arg {
    uint64_t size, flags, start, end, walk_end, vec, vec_len, max_pages;
    uint64_t category_inverted, category_mask, category_anyof_mask, return_mask;
};
#define HWT_PAGEMAP_SCAN _IOWR('f', 16, struct hwt_pm_scan_arg)
#define HWT_PAGE_IS_PRESENT (1u << 3)
#define HWT_PAGE_IS_SWAPPED (1u << 4)

enum { SCAN_GO_ON = 0, SCAN_STOP = 1, SCAN_REGION_GONE = 2 };

typedef struct {
    pid_t pid;
    const hwt_layout *layout;
    const hwt_range *writable, *executable;
    size_t writable_count, executable_count;
    int pagemap_fd;
    uint64_t page_size, max_bytes, deadline_ns;
    hwt_task *tasks;
    size_t max_tasks, *count;
    hwt_stats *stats;
    uint64_t *buffer;
    // Where `buffer` lies when the scanned process is this one: the copies of memory it holds
    // are no tasks (read as such, they were phantom twins of the tasks read before them).
    uint64_t own_buffer_start, own_buffer_end;
    int read_any, first_error;
} scan_state;

static uint64_t now_ns(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
}

static int past_deadline(const scan_state *s) { return s->deadline_ns != 0 && now_ns() >= s->deadline_ns; }

// The deadline passed with [at, end) not looked at.
static int stop_at(scan_state *s, uint64_t at, uint64_t end) {
    s->stats->stopped |= HWT_STOPPED_DEADLINE;
    if (end > at) s->stats->bytes_unexamined += end - at;
    return SCAN_STOP;
}

// Every candidate of one chunk read (`size` bytes at `at`); the deadline is checked between
// candidates (each costs a dozen reads, most of them from the chunk).
static int scan_words(scan_state *s, uint64_t at, size_t size, uint64_t end) {
    source from = {s->pid, (const uint8_t *)s->buffer, at, size};
    for (size_t i = 0; i < size / 8; i++) {
        if (s->buffer[i] != s->layout->metadata) continue;
        if (at + i * 8 >= s->own_buffer_start && at + i * 8 < s->own_buffer_end) continue;
        if (past_deadline(s)) {
            s->stats->bytes_scanned -= size - i * 8;
            return stop_at(s, at + i * 8, end);
        }
        s->stats->candidates++;
        if (*s->count >= s->max_tasks) {
            s->stats->truncated = 1;
            continue;
        }
        if (read_task(&from, s->layout, at + i * 8, s->writable, s->writable_count, s->executable, s->executable_count,
                      &s->tasks[*s->count]))
            (*s->count)++;
        else
            s->stats->rejected++;
    }
    return SCAN_GO_ON;
}

// Memory the process uses, [start, end): read 1 MiB at a time while bytes and time last; past
// the byte bound the rest is counted, not read.
static int scan_run(scan_state *s, uint64_t start, uint64_t end) {
    enum { chunk = 1 << 20 };
    uint64_t at = start & ~(uint64_t)7;
    while (at < end) {
        if (past_deadline(s)) return stop_at(s, at, end);
        uint64_t room = s->max_bytes == 0 ? UINT64_MAX : s->max_bytes - s->stats->bytes_scanned;
        uint64_t size = end - at < chunk ? end - at : chunk;
        if (size > room) size = room;
        size &= ~(uint64_t)7;
        if (size == 0) {
            if (room < 8) {
                s->stats->stopped |= HWT_STOPPED_BYTES;
                s->stats->bytes_unread += end - at;
            }
            return SCAN_GO_ON;
        }
        if (hwt_read(s->pid, at, s->buffer, (size_t)size) != 0) {
            if (!s->first_error) s->first_error = errno;
            s->stats->unreadable_regions++;
            return SCAN_REGION_GONE;  // unmapped since the map was read, or not readable
        }
        s->read_any = 1;
        s->stats->bytes_scanned += size;
        if (scan_words(s, at, (size_t)size, end) == SCAN_STOP) return SCAN_STOP;
        at += size;
    }
    return SCAN_GO_ON;
}

static int region_by_entries(scan_state *s, uint64_t start, uint64_t end);

// The rest of a region whose PAGEMAP_SCAN went wrong midway: by the pagemap's entries, or not
// at all (counted as not looked at).
static int rest_by_entries(scan_state *s, uint64_t at, uint64_t end) {
    int result = region_by_entries(s, at, end);
    if (result >= 0) return result;
    s->stats->bytes_unexamined += end - at;
    return SCAN_GO_ON;
}

// The runs of pages present or swapped in [start, end), by PAGEMAP_SCAN: the kernel walks the
// page tables, so a region never touched costs next to nothing whatever its size. -1 when the
// kernel has no such ioctl (before 6.7).
static int region_by_scan(scan_state *s, uint64_t start, uint64_t end) {
    struct hwt_page_region runs[256];
    uint64_t at = start;
    while (at < end) {
        if (past_deadline(s)) return stop_at(s, at, end);
        struct hwt_pm_scan_arg arg = {
            .size = sizeof arg, .start = at, .end = end, .vec = (uint64_t)(uintptr_t)runs, .vec_len = 256,
            .category_anyof_mask = HWT_PAGE_IS_PRESENT | HWT_PAGE_IS_SWAPPED,
            .return_mask = HWT_PAGE_IS_PRESENT | HWT_PAGE_IS_SWAPPED,
        };
        long found = ioctl(s->pagemap_fd, HWT_PAGEMAP_SCAN, &arg);
        // No progress, or an error midway: the pagemap's entries tell the rest.
        if (found < 0 && at == start) return -1;
        if (found < 0 || found > 256 || arg.walk_end <= at || arg.walk_end > end) return rest_by_entries(s, at, end);
        for (long i = 0; i < found; i++) {
            uint64_t run_start = runs[i].start < at ? at : runs[i].start;
            uint64_t run_end = runs[i].end > arg.walk_end ? arg.walk_end : runs[i].end;
            if (run_start >= run_end) continue;
            s->stats->bytes_untouched += run_start - at;
            at = run_end;
            int result = scan_run(s, run_start, run_end);
            if (result == SCAN_STOP) return stop_at(s, at, end);
            if (result == SCAN_REGION_GONE) return SCAN_GO_ON;
        }
        s->stats->bytes_untouched += arg.walk_end - at;
        at = arg.walk_end;
    }
    return SCAN_GO_ON;
}

// The same from the pagemap's entries (bit 63 present, 62 swapped; a process may read them
// without privilege: only the frame numbers are hidden), 4,096 pages at a time. -1 when the
// pagemap cannot be read at all. Slower: a page never touched costs an entry read.
static int region_by_entries(scan_state *s, uint64_t start, uint64_t end) {
    enum { batch = 4096 };
    const uint64_t used = (1ull << 63) | (1ull << 62);
    uint64_t *entries = malloc(batch * sizeof *entries);
    if (!entries) return -1;
    uint64_t page = start / s->page_size, last = end / s->page_size + (end % s->page_size != 0);
    uint64_t run = 0;  // where the pages in use since the last unused one start (0: none)
    int result = SCAN_GO_ON, any = 0;
    while (page < last && result == SCAN_GO_ON) {
        uint64_t here = page * s->page_size, from = run ? run : here;
        if (past_deadline(s)) {
            result = stop_at(s, from, end);
            break;
        }
        uint64_t want = last - page < batch ? last - page : batch;
        ssize_t got = pread(s->pagemap_fd, entries, (size_t)want * 8, (off_t)(page * 8));
        if (got < 8) {
            free(entries);
            if (!any) return -1;
            // The process went, most likely: what is left was not looked at.
            s->stats->bytes_unexamined += end - from;
            return SCAN_GO_ON;
        }
        any = 1;
        for (uint64_t i = 0; i < (uint64_t)got / 8; i++) {
            uint64_t address = (page + i) * s->page_size;
            if (entries[i] & used) {
                if (!run) run = address;
                continue;
            }
            s->stats->bytes_untouched += s->page_size;
            if (!run) continue;
            result = scan_run(s, run, address);
            run = 0;
            if (result == SCAN_STOP) {
                result = stop_at(s, address, end);
                break;
            }
            if (result == SCAN_REGION_GONE) break;
        }
        page += (uint64_t)got / 8;
    }
    if (run && result == SCAN_GO_ON) result = scan_run(s, run, end);
    free(entries);
    return result == SCAN_STOP ? SCAN_STOP : SCAN_GO_ON;
}

static int scan_region(scan_state *s, uint64_t start, uint64_t end) {
    if (s->stats->page_source == HWT_PAGES_SCAN) {
        int result = region_by_scan(s, start, end);
        if (result >= 0) return result;
        s->stats->page_source = HWT_PAGES_READ;  // a kernel before 6.7
    }
    if (s->stats->page_source == HWT_PAGES_READ) {
        int result = region_by_entries(s, start, end);
        if (result >= 0) return result;
        s->stats->page_source = HWT_PAGES_ALL;  // the pagemap cannot be read
    }
    return scan_run(s, start, end) == SCAN_STOP ? SCAN_STOP : SCAN_GO_ON;
}

int hwt_scan(pid_t pid, const hwt_layout *layout, const hwt_range *writable, size_t writable_count,
             const hwt_range *executable, size_t executable_count, int pagemap_fd, const hwt_options *options,
             hwt_task *tasks, size_t max_tasks, size_t *count, hwt_stats *stats) {
    memset(stats, 0, sizeof *stats);
    *count = 0;
    long page_size = sysconf(_SC_PAGESIZE);
    scan_state s = {
        .pid = pid, .layout = layout, .writable = writable, .writable_count = writable_count,
        .executable = executable, .executable_count = executable_count, .pagemap_fd = pagemap_fd,
        .page_size = page_size > 0 ? (uint64_t)page_size : 4096, .max_bytes = options ? options->max_bytes : 0,
        .deadline_ns = options ? options->deadline_ns : 0, .tasks = tasks, .max_tasks = max_tasks, .count = count,
        .stats = stats,
    };
    // A mapping of its own, made after the caller listed the regions to scan: in this process
    // it is not among them, and is skipped besides should it lie in one.
    enum { buffer_size = 1 << 20 };
    void *buffer = mmap(NULL, buffer_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buffer == MAP_FAILED) return -1;
    s.buffer = buffer;
    if (pid == getpid()) {
        s.own_buffer_start = (uint64_t)(uintptr_t)buffer;
        s.own_buffer_end = s.own_buffer_start + buffer_size;
    }
    stats->page_source = pagemap_fd < 0 ? HWT_PAGES_ALL : options && options->pages == HWT_PAGES_READ ? HWT_PAGES_READ : HWT_PAGES_SCAN;
    size_t r = 0;
    for (; r < writable_count; r++) {
        if (writable[r].end <= writable[r].start) continue;
        if (scan_region(&s, writable[r].start, writable[r].end) == SCAN_STOP) break;
    }
    // The deadline passed: the regions after it were not looked at.
    for (r = r < writable_count ? r + 1 : r; r < writable_count; r++)
        if (writable[r].end > writable[r].start) stats->bytes_unexamined += writable[r].end - writable[r].start;
    munmap(buffer, buffer_size);
    if (!s.read_any && s.first_error) {
        errno = s.first_error;
        return -1;
    }
    return 0;
}

// MARK: - ELF symbols, bounded

static int read_at(int fd, uint64_t offset, void *buffer, size_t size) {
    return pread(fd, buffer, size, (off_t)offset) == (ssize_t)size ? 0 : -1;
}

// One pass over one symbol table for every name not found yet; 0 when it was read.
static int symbols_in_table(int fd, const Elf64_Shdr *symbols, const Elf64_Shdr *strings, const char *const *names,
                            size_t count, uint64_t *values, hwt_elf_lookup *lookup) {
    if (symbols->sh_entsize != sizeof(Elf64_Sym) || symbols->sh_size > (64u << 20) || strings->sh_size > (64u << 20))
        return -1;
    size_t lengths[HWT_MAX_SYMBOLS];
    for (size_t n = 0; n < count; n++) lengths[n] = strlen(names[n]);
    char *text = malloc(strings->sh_size + 1);
    Elf64_Sym *table = malloc(symbols->sh_size ? symbols->sh_size : 1);
    int read = -1;
    if (text && table && read_at(fd, strings->sh_offset, text, strings->sh_size) == 0 &&
        read_at(fd, symbols->sh_offset, table, symbols->sh_size) == 0) {
        read = 0;
        lookup->bytes_read += strings->sh_size + symbols->sh_size;
        text[strings->sh_size] = 0;
        for (size_t i = 0; i < symbols->sh_size / sizeof(Elf64_Sym); i++) {
            uint32_t at = table[i].st_name;
            if (at >= strings->sh_size || table[i].st_shndx == SHN_UNDEF) continue;
            for (size_t n = 0; n < count; n++) {
                if (lookup->found & (1u << n)) continue;
                if (strings->sh_size - at < lengths[n] + 1 || memcmp(text + at, names[n], lengths[n] + 1) != 0) continue;
                values[n] = table[i].st_value;
                lookup->found |= 1u << n;
            }
        }
    }
    free(text);
    free(table);
    return read;
}

// The file's header, checked; its lowest PT_LOAD address into `lookup`. 0, or -1.
static int elf_header(int fd, Elf64_Ehdr *header, hwt_elf_lookup *lookup) {
    struct stat info;
    if (fstat(fd, &info) != 0 || !S_ISREG(info.st_mode) || info.st_size > (1ll << 30) ||
        read_at(fd, 0, header, sizeof *header) != 0 || memcmp(header->e_ident, ELFMAG, SELFMAG) != 0 ||
        header->e_ident[EI_CLASS] != ELFCLASS64 || header->e_shentsize != sizeof(Elf64_Shdr) || header->e_shnum == 0 ||
        header->e_shnum > 4096)
        return -1;
    lookup->lowest_load_address = UINT64_MAX;
    if (header->e_phentsize == sizeof(Elf64_Phdr) && header->e_phnum > 0 && header->e_phnum <= 4096) {
        for (uint32_t i = 0; i < header->e_phnum; i++) {
            Elf64_Phdr program;
            if (read_at(fd, header->e_phoff + (uint64_t)i * sizeof program, &program, sizeof program) != 0) break;
            if (program.p_type == PT_LOAD && program.p_vaddr < lookup->lowest_load_address)
                lookup->lowest_load_address = program.p_vaddr;
        }
    }
    return lookup->lowest_load_address == UINT64_MAX ? -1 : 0;
}

int hwt_elf_symbols(const char *path, const char *const *names, size_t count, uint64_t *values, hwt_elf_lookup *lookup) {
    memset(lookup, 0, sizeof *lookup);
    if (count > HWT_MAX_SYMBOLS) {
        errno = EINVAL;
        return -1;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) return -1;
    Elf64_Ehdr header;
    if (elf_header(fd, &header, lookup) != 0) {
        close(fd);
        errno = ENOEXEC;
        return -1;
    }
    Elf64_Shdr *sections = malloc((size_t)header.e_shnum * sizeof(Elf64_Shdr));
    if (!sections || read_at(fd, header.e_shoff, sections, (size_t)header.e_shnum * sizeof(Elf64_Shdr)) != 0) {
        free(sections);
        close(fd);
        errno = ENOEXEC;
        return -1;
    }
    // .dynsym first (what a stripped library keeps), then .symtab: the first of each only, so
    // a file with a thousand symbol tables costs what a file with two does.
    uint32_t all = (uint32_t)((1ull << count) - 1);
    for (uint32_t kind = 0; kind < 2; kind++) {
        uint32_t wanted = kind == 0 ? SHT_DYNSYM : SHT_SYMTAB;
        int tried = 0;
        for (uint32_t i = 0; i < header.e_shnum; i++) {
            if (sections[i].sh_type != wanted) continue;
            lookup->symbol_tables++;
            if (lookup->found == all) continue;
            if (tried++ || sections[i].sh_link >= header.e_shnum ||
                symbols_in_table(fd, &sections[i], &sections[sections[i].sh_link], names, count, values, lookup) != 0)
                lookup->tables_skipped++;
        }
    }
    free(sections);
    close(fd);
    return 0;
}
