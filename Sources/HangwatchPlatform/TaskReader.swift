// Per-thread /proc files of a process (this one or another), read cheaply: a capture reads two
// or three of them per thread while every thread waits for it, and splitting whole files into
// Swift strings was most of its cost. Paths are opened relative to one /proc/PID/task
// descriptor, read into one reused buffer, and parsed as bytes for the few fields a snapshot
// needs.
import CHangwatchProcFS
import HangwatchSnapshot
#if canImport(Glibc)
import Glibc
#endif

package final class TaskReader {
    /// What a snapshot records of a thread from /proc.
    package struct ThreadStatus: Sendable, Equatable {
        package var name: String
        package var state: ThreadState
        /// Signals the thread blocks, bit (n-1) for signal n (0 when read from `stat`).
        package var blocked: UInt64
        /// Signals sent to the thread itself and not yet delivered (`SigPnd`; 0 from `stat`).
        package var pending: UInt64 = 0
        package var userCPUSeconds: Double = 0
        package var systemCPUSeconds: Double = 0

        package init(name: String, state: ThreadState, blocked: UInt64, pending: UInt64 = 0, userCPUSeconds: Double = 0,
                     systemCPUSeconds: Double = 0) {
            self.name = name
            self.state = state
            self.blocked = blocked
            self.pending = pending
            self.userCPUSeconds = userCPUSeconds
            self.systemCPUSeconds = systemCPUSeconds
        }
    }

    /// nil: this process, whose threads' CPU clocks can be read directly.
    private let pid: Int32?
    private let directory: Int32
    private let buffer: UnsafeMutableRawBufferPointer
    private let path: UnsafeMutableBufferPointer<CChar>
    private static let ticksPerSecond = Double(max(sysconf(Int32(_SC_CLK_TCK)), 1))

    /// The threads of `pid` (nil: this process); nil when the process is gone or unreadable.
    package init?(pid: Int32? = nil) {
        self.pid = pid
        directory = open(ProcFS.directory(of: pid) + "/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard directory >= 0 else { return nil }
        // status is ~1.4 KB, stat ~350 B, syscall ~100 B: all fit (reads are bounded anyway).
        buffer = .allocate(byteCount: 4096, alignment: 8)
        path = .allocate(capacity: 64)
    }

    deinit {
        close(directory)
        buffer.deallocate()
        path.deallocate()
    }

    /// Thread ids, ascending; nil (errno set) when the task directory cannot be listed. Not
    /// readdir's listing, which can miss a live thread while others exit
    /// (hw_proc_list_threads, Sources/CHangwatchProcFS/include/hw_process.h).
    package func threadIDs() -> [Int32]? {
        var capacity = 1024
        while true {
            var tids = [Int32](repeating: 0, count: capacity)
            var truncated: Int32 = 0
            let count = tids.withUnsafeMutableBufferPointer {
                hw_proc_list_threads(directory, pid ?? getpid(), 0, $0.baseAddress, UInt32($0.count), &truncated,
                                     buffer.baseAddress, buffer.count)
            }
            if count < 0 {
                errno = -count
                return nil
            }
            // Threads left out: listed again into a larger array (pid_max is at most 2^22).
            if truncated == 0 || capacity >= 1 << 22 { return Array(tids.prefix(Int(count))) }
            capacity *= 4
        }
    }

    /// Name, state and blocked signals from `status`; CPU times from the thread's CPU clocks
    /// for this process (three clock_gettime calls instead of formatting and parsing `stat`),
    /// from `stat` for another; nil if the thread is gone.
    package func status(tid: Int32) -> ThreadStatus? {
        guard let count = read(tid: tid, file: "status") else { return nil }
        let bytes = UnsafeRawBufferPointer(rebasing: buffer[0..<count])
        let name = field("Name", in: bytes).map { String(decoding: $0, as: UTF8.self) } ?? ""
        let state = field("State", in: bytes).flatMap { $0.first }.map { ThreadState(byte: CChar(bitPattern: $0)) } ?? .unknown
        var result = ThreadStatus(name: name, state: state, blocked: field("SigBlk", in: bytes).map(hexadecimal) ?? 0,
                                  pending: field("SigPnd", in: bytes).map(hexadecimal) ?? 0)
        if let (user, system) = ownThreadCPU(tid: tid) {
            result.userCPUSeconds = user
            result.systemCPUSeconds = system
        } else if let times = stat(tid: tid) {
            result.userCPUSeconds = times.userCPUSeconds
            result.systemCPUSeconds = times.systemCPUSeconds
        }
        return result
    }

    /// What `status(tid:)` reads for the calling thread `tid` of this process, without its
    /// status file (the costliest a capture reads): its name (comm), running, the signals it
    /// blocks and its CPU clocks.
    package func callingThreadStatus(tid: Int32) -> ThreadStatus {
        var name = ""
        if let count = read(tid: tid, file: "comm") {
            let bytes = UnsafeRawBufferPointer(rebasing: buffer[0..<count])
            name = String(decoding: bytes.prefix { $0 != 0x0A }, as: UTF8.self)
        }
        var mask = sigset_t()
        pthread_sigmask(SIG_BLOCK, nil, &mask)
        // Signals 1-64 are the set's first 64 bits, bit n-1 for signal n (as SigBlk shows them).
        let blocked = withUnsafeBytes(of: &mask) { $0.loadUnaligned(as: UInt64.self) }
        var status = ThreadStatus(name: name, state: .running, blocked: UInt64(littleEndian: blocked))
        if let (user, system) = ownThreadCPU(tid: tid) {
            status.userCPUSeconds = user
            status.systemCPUSeconds = system
        }
        return status
    }

    /// A thread of this process: its CPU clocks. SCHED is the precise total; PROF (user +
    /// system) and VIRT (user) are tick-sampled and only split it, as the kernel does for `stat`.
    private func ownThreadCPU(tid: Int32) -> (user: Double, system: Double)? {
        guard pid == nil, let total = Self.threadClock(tid: tid, kind: 2), let sampled = Self.threadClock(tid: tid, kind: 0),
              let user = Self.threadClock(tid: tid, kind: 1) else { return nil }
        return Self.cpuSplit(sched: total, prof: sampled, virt: user)
    }

    /// User and system seconds from a thread's SCHED (precise total), PROF and VIRT clocks.
    package static func cpuSplit(sched total: Double, prof sampled: Double, virt user: Double) -> (user: Double, system: Double) {
        let userShare = sampled > 0 && sampled > user ? user / sampled : 1
        return (total * userShare, total - total * userShare)
    }

    /// `SigBlk` of TID/status (bit n-1 for signal n); nil if the thread is gone.
    package func blockedSignals(tid: Int32) -> UInt64? {
        guard let count = read(tid: tid, file: "status") else { return nil }
        return field("SigBlk", in: UnsafeRawBufferPointer(rebasing: buffer[0..<count])).map(hexadecimal) ?? 0
    }

    /// Seconds of CPU clock `kind` (0 PROF, 1 VIRT, 2 SCHED) of a thread of this process, through the
    /// clock id glibc's pthread_getcpuclockid builds: ((~tid) << 3) | per-thread | kind.
    package static func threadClock(tid: Int32, kind: Int32) -> Double? {
        let clock = clockid_t((~tid) << 3 | 4 | kind)
        var now = timespec()
        guard clock_gettime(clock, &now) == 0 else { return nil }
        return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
    }

    /// TID/stat: `pid (comm) state ppid … utime stime …`. The name may itself contain spaces
    /// and parentheses, so the fields start after the LAST ')'.
    package func stat(tid: Int32) -> ThreadStatus? {
        guard let count = read(tid: tid, file: "stat") else { return nil }
        let bytes = UnsafeRawBufferPointer(rebasing: buffer[0..<count])
        guard let stat = ProcFS.parseStat(bytes) else { return nil }
        return ThreadStatus(name: String(decoding: bytes[stat.name_offset..<(stat.name_offset + stat.name_length)], as: UTF8.self),
                            state: ThreadState(byte: stat.state), blocked: 0,
                            userCPUSeconds: Double(stat.user_ticks) / Self.ticksPerSecond,
                            systemCPUSeconds: Double(stat.system_ticks) / Self.ticksPerSecond)
    }

    /// First line of TID/syscall ("202 0x… …", "running", "-1 …"); nil if gone or empty.
    package func syscallLine(tid: Int32) -> String? {
        guard let count = read(tid: tid, file: "syscall") else { return nil }
        let bytes = UnsafeRawBufferPointer(rebasing: buffer[0..<count])
        let end = bytes.firstIndex(of: 0x0A) ?? count
        return end == 0 ? nil : String(decoding: bytes[0..<end], as: UTF8.self)
    }

    // MARK: - bytes

    /// Reads TID/`file` into `buffer`; the byte count, or nil if it cannot be opened or read.
    private func read(tid: Int32, file: StaticString) -> Int? {
        // "TID/file\0" without allocating.
        var length = 0
        var digits: (UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8) = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        var value = UInt32(bitPattern: tid)
        var digitCount = 0
        withUnsafeMutableBytes(of: &digits) { scratch in
            repeat { scratch[digitCount] = UInt8(48 + value % 10); value /= 10; digitCount += 1 } while value > 0 && digitCount < 10
            for at in stride(from: digitCount - 1, through: 0, by: -1) { path[length] = CChar(bitPattern: scratch[at]); length += 1 }
        }
        path[length] = CChar(bitPattern: UInt8(ascii: "/")); length += 1
        file.withUTF8Buffer { name in
            for byte in name where length < path.count - 1 { path[length] = CChar(bitPattern: byte); length += 1 }
        }
        path[length] = 0
        let fd = openat(directory, path.baseAddress!, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var used = 0
        while used < buffer.count {
            let got = Glibc.read(fd, buffer.baseAddress! + used, buffer.count - used)
            if got < 0 {
                if errno == EINTR { continue }
                return used > 0 ? used : nil
            }
            // These are single-record seq files: a short read means the record is complete.
            if got == 0 { break }
            used += got
            if used < buffer.count { break }
        }
        return used
    }

    /// The value of a `key:` line of status text (ProcFS.statusField: the one status parser).
    private func field(_ key: String, in bytes: UnsafeRawBufferPointer) -> UnsafeRawBufferPointer.SubSequence? {
        ProcFS.statusField(key, in: bytes)
    }

    private func hexadecimal(_ digits: UnsafeRawBufferPointer.SubSequence) -> UInt64 { ProcFS.hexadecimal(digits) }
}
