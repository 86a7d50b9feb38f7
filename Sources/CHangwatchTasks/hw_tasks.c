// Swift tasks out of a process's memory (hw_tasks.h, docs/tasks.md).
#define _GNU_SOURCE
#include "hw_tasks.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

int hwt_read(pid_t pid, uint64_t address, void *buffer, size_t size) {
    struct iovec local = {buffer, size};
    struct iovec remote = {(void *)(uintptr_t)address, size};
    ssize_t got = process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (got == (ssize_t)size) return 0;
    if (got >= 0) errno = EFAULT;
    return -1;
}

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
static void read_dependency(pid_t pid, const hwt_layout *layout, const uint8_t *bytes, const hwt_range *writable,
                            size_t nw, hwt_task *task) {
    if (!(task->status_flags & layout->status_dependency_mask)) return;
    uint64_t record = u64_at(bytes, layout->off_dependency_record);
    uint8_t fields[64];
    uint32_t size = layout->off_dependency_kind + 4;
    if (size > sizeof fields || !within(writable, nw, record, size) || hwt_read(pid, record, fields, size) != 0) return;
    uint32_t kind = u32_at(fields, layout->off_dependency_kind);
    if (kind < HWT_WAITING_TASK || kind > HWT_WAITING_EXECUTOR) return;
    task->waiting_kind = kind;
    task->waiting_on = u64_at(fields, layout->off_dependency_on);
}

// A task's name: the payload of a name record among its status records (at most 16 looked at).
static void read_name(pid_t pid, const hwt_layout *layout, uint64_t record, const hwt_range *writable, size_t nw,
                      hwt_task *task) {
    for (int i = 0; i < 16 && record != 0; i++) {
        uint64_t words[3];
        if (!within(writable, nw, record, sizeof words) || hwt_read(pid, record, words, sizeof words) != 0) return;
        if ((words[0] & 0xff) == layout->record_kind_name) {
            char name[HWT_MAX_NAME + 1];
            // A short read near the end of a mapping: try less.
            for (size_t size = sizeof name - 1; size >= 8; size /= 2) {
                if (hwt_read(pid, words[2], name, size) == 0) {
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

// One candidate: read afresh (it may be gone since the scan saw its first word), checked
// field by field, its chain followed context by context.
static int read_task(pid_t pid, const hwt_layout *layout, uint64_t address, const hwt_range *writable, size_t nw,
                     const hwt_range *executable, size_t nx, hwt_task *task) {
    uint8_t bytes[512];
    if (layout->task_size > sizeof bytes || layout->task_size < 72) return 0;
    if (hwt_read(pid, address, bytes, layout->task_size) != 0) return 0;
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
    read_dependency(pid, layout, bytes, writable, nw, task);
    read_name(pid, layout, u64_at(bytes, layout->off_status_record), writable, nw, task);
    if (task->job_flags & layout->job_child_mask) {
        // A child task's ChildFragment follows the task: its parent first.
        uint64_t parent = 0;
        if (hwt_read(pid, address + layout->task_size, &parent, sizeof parent) == 0 && within(writable, nw, parent, 16))
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
        if (!within(writable, nw, context, sizeof words) || hwt_read(pid, context, words, sizeof words) != 0) {
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

int hwt_scan(pid_t pid, const hwt_layout *layout, const hwt_range *writable, size_t writable_count,
             const hwt_range *executable, size_t executable_count, hwt_task *tasks, size_t max_tasks, size_t *count,
             hwt_stats *stats) {
    enum { chunk = 1 << 20 };
    memset(stats, 0, sizeof *stats);
    *count = 0;
    uint64_t *buffer = malloc(chunk);
    if (!buffer) return -1;
    int read_any = 0, first_error = 0;
    for (size_t r = 0; r < writable_count; r++) {
        for (uint64_t at = writable[r].start & ~(uint64_t)7; at < writable[r].end; at += chunk) {
            size_t size = writable[r].end - at < chunk ? (size_t)(writable[r].end - at) : chunk;
            size &= ~(size_t)7;
            if (size == 0) break;
            if (hwt_read(pid, at, buffer, size) != 0) {
                if (!first_error) first_error = errno;
                stats->unreadable_regions++;
                break;  // unmapped since the map was read, or not readable: the next region
            }
            read_any = 1;
            stats->bytes_scanned += size;
            for (size_t i = 0; i < size / 8; i++) {
                if (buffer[i] != layout->metadata) continue;
                stats->candidates++;
                if (*count >= max_tasks) {
                    stats->truncated = 1;
                    continue;
                }
                if (read_task(pid, layout, at + i * 8, writable, writable_count, executable, executable_count,
                              &tasks[*count]))
                    (*count)++;
                else
                    stats->rejected++;
            }
        }
    }
    free(buffer);
    if (!read_any && writable_count > 0) {
        errno = first_error ? first_error : EIO;
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
