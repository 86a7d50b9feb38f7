// kcmp for the process walks and the lister of a process's threads (hw_process.h). Neither is
// for the quiet capture's helper (they call libc's syscall, which sets errno).
#define _GNU_SOURCE
#include "hw_process.h"

#include <errno.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef KCMP_VM
#define KCMP_VM 1
#endif

int hw_proc_shares_memory(pid_t a, pid_t b) {
#ifdef SYS_kcmp
    long order = syscall(SYS_kcmp, a, b, KCMP_VM, 0, 0);
    return order < 0 ? -1 : order == 0;
#else
    (void)a, (void)b;
    return -1;
#endif
}

// The longest getdents64 record of a thread id: 19 bytes of header, up to 10 digits and the
// NUL, rounded up to 8.
#define HW_LONGEST_TID_RECORD 32

// A record's name as a thread id, or 0 ("." and "..").
static int32_t tid_of(const char *name) {
    int32_t tid = 0;
    int digits = 0;
    for (; *name; name++, digits++) {
        if (*name < '0' || *name > '9' || digits == 9) return 0;
        tid = tid * 10 + (*name - '0');
    }
    return tid;
}

static void sift_down(int32_t *tids, uint32_t root, uint32_t end) {
    for (uint32_t child; (child = 2 * root + 1) < end; root = child) {
        if (child + 1 < end && tids[child + 1] > tids[child]) child++;
        if (tids[root] >= tids[child]) return;
        int32_t swap = tids[root];
        tids[root] = tids[child];
        tids[child] = swap;
    }
}

// Ascending, without repeats; how many are left. Heapsort: no allocation, no recursion.
static uint32_t sort_tids(int32_t *tids, uint32_t count) {
    for (uint32_t start = count / 2; start-- > 0;) sift_down(tids, start, count);
    for (uint32_t end = count; end-- > 1;) {
        int32_t top = tids[0];
        tids[0] = tids[end];
        tids[end] = top;
        sift_down(tids, 0, end);
    }
    uint32_t kept = 0;
    for (uint32_t i = 0; i < count; i++)
        if (kept == 0 || tids[i] != tids[kept - 1]) tids[kept++] = tids[i];
    return kept;
}

// Whether `tid` is in sorted `tids[0..count)` (a found one is marked: negated).
static int find_and_mark(int32_t *tids, uint32_t count, int32_t tid) {
    uint32_t low = 0, high = count;
    while (low < high) {
        uint32_t middle = low + (high - low) / 2;
        int32_t at = tids[middle] < 0 ? -tids[middle] : tids[middle];
        if (at == tid) { tids[middle] = -at; return 1; }
        if (at < tid) low = middle + 1; else high = middle;
    }
    return 0;
}

// One listing from the directory's start, merged into the sorted `tids[0..*count)`: a thread it
// does not have is added; one it lacks stays only while it lives (tgkill of signal 0: ESRCH is
// gone, EPERM lives). With `*count` 0, the listing itself. 1 when the walk may have ended early
// (a getdents call that left room for another record followed by one that still returned
// records, or a last thread returned that is gone), 0 when not, -errno.
static int merge_listing(int directory, pid_t pid, int32_t skip, int32_t *tids, uint32_t capacity, uint32_t *count,
                         int *truncated, uint8_t *buffer, size_t size) {
    if (lseek(directory, 0, SEEK_SET) < 0) return -errno;
    uint32_t known = *count, total = *count;
    int ended_early = 0, room_left = 0;
    int32_t last = 0;
    for (;;) {
        long got = syscall(SYS_getdents64, directory, buffer, size);
        if (got < 0) return -errno;
        if (got == 0) break;
        if (room_left) ended_early = 1;
        for (long at = 0; at + 19 < got;) {
            uint16_t length;
            memcpy(&length, buffer + at + 16, sizeof length);
            if (length < 20 || at + length > got) break;
            buffer[at + length - 1] = 0;  // a name ends inside its record (the kernel pads with NULs)
            int32_t tid = tid_of((const char *)buffer + at + 19);
            if (tid > 0) last = tid;
            if (tid > 0 && tid != skip && !find_and_mark(tids, known, tid)) {
                if (total < capacity) tids[total++] = tid;
                else *truncated = 1;
            }
            at += length;
        }
        room_left = size - (size_t)got >= HW_LONGEST_TID_RECORD;
    }
    // A walk cut where it found no thread after its place to count from ends with no early end
    // to see; mostly it was cut at the last thread it returned, which is gone.
    if (last > 0 && syscall(SYS_tgkill, pid, last, 0) != 0 && errno == ESRCH) ended_early = 1;
    uint32_t kept = 0;
    for (uint32_t i = 0; i < total; i++) {
        int32_t tid = tids[i];
        if (tid < 0) tid = -tid;
        else if (i < known && syscall(SYS_tgkill, pid, tid, 0) != 0 && errno == ESRCH) continue;
        tids[kept++] = tid;
    }
    *count = sort_tids(tids, kept);
    return ended_early;
}

int hw_proc_list_threads(int directory, pid_t pid, int32_t skip, int32_t *tids, uint32_t capacity, int *truncated,
                            void *buffer, size_t size) {
    uint32_t count = 0;
    *truncated = 0;
    for (int listing = 1;; listing++) {
        int ended_early = merge_listing(directory, pid, skip, tids, capacity, &count, truncated, buffer, size);
        if (ended_early < 0) return ended_early;
        if (listing >= 2 && (!ended_early || listing == HW_LIST_THREADS_LISTINGS)) return (int)count;
    }
}
