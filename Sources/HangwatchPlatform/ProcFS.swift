// The one reader of /proc, for this process and for others: every read is bounded (another
// process's /proc files are untrusted input, and even our own can be huge), and what several
// stages need (thread lists, stat and status fields, the command line, TracerPid, start
// times) is parsed here once. Per-thread files go through `TaskReader`, which keeps one
// task-directory descriptor and one buffer: capture reads them while every thread waits.
import CHangwatchProcFS
import HangwatchSnapshot
#if canImport(Glibc)
import Glibc
#endif

package enum ProcFS {
    /// Most /proc files are far below this; maps and cmdline pass their own limits.
    package static let defaultLimit = 64 * 1024
    /// The command line kept for a report: a program with a longer one is cut there.
    package static let commandLineLimit = 256 * 1024

    /// Reads at most `limit` bytes of a file (growing the buffer as the file turns out
    /// larger, since /proc files report size 0); nil when it cannot be opened or read.
    package static func readBytes(_ path: String, limit: Int = defaultLimit) -> [UInt8]? {
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var bytes = [UInt8](repeating: 0, count: min(limit, 4096))
        var filled = 0
        while filled < limit {
            if filled == bytes.count {
                bytes.append(contentsOf: repeatElement(0, count: min(bytes.count, limit - bytes.count)))
            }
            let got = bytes.withUnsafeMutableBytes { raw in read(fd, raw.baseAddress! + filled, raw.count - filled) }
            if got < 0 {
                if errno == EINTR { continue }
                return filled > 0 ? Array(bytes[..<filled]) : nil
            }
            if got == 0 { break }
            filled += got
        }
        bytes.removeSubrange(filled...)
        return bytes
    }

    package static func readText(_ path: String, limit: Int = defaultLimit) -> String? {
        readBytes(path, limit: limit).map { String(decoding: $0, as: UTF8.self) }
    }

    /// The first line, without its newline.
    package static func firstLine(_ path: String, limit: Int = 4096) -> String? {
        guard let bytes = readBytes(path, limit: limit) else { return nil }
        return String(decoding: bytes.prefix { $0 != 0x0A }, as: UTF8.self)
    }

    package static func readLink(_ path: String) -> String? {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let length = readlink(path, &buffer, buffer.count - 1)
        guard length >= 0 else { return nil }
        return String(decoding: buffer[..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// "/proc/self" or "/proc/PID".
    package static func directory(of pid: Int32?) -> String { pid.map { "/proc/\($0)" } ?? "/proc/self" }

    package static func processExists(_ pid: Int32) -> Bool {
        var info = stat()
        return stat("/proc/\(pid)", &info) == 0
    }

    /// `comm` of a process (nil: this one), without the newline.
    package static func comm(of pid: Int32?) -> String {
        Text.trimmed(firstLine(directory(of: pid) + "/comm", limit: 64) ?? "")
    }

    /// argv of a process (nil: this one), read up to `commandLineLimit` bytes.
    package static func commandLine(of pid: Int32?) -> [String] {
        guard let raw = readBytes(directory(of: pid) + "/cmdline", limit: commandLineLimit) else { return [] }
        var arguments = raw.split(separator: 0, omittingEmptySubsequences: false).map { String(decoding: $0, as: UTF8.self) }
        if arguments.last == "" { arguments.removeLast() }
        return arguments
    }

    /// A `status` file's text (empty when unreadable), read through the one status parser.
    package struct StatusText: Sendable {
        let bytes: [UInt8]
        /// The value of the `key:` line, without the blanks after the colon; nil when absent.
        package subscript(key: String) -> String? {
            bytes.withUnsafeBytes { ProcFS.statusField(key, in: $0) }.map { String(decoding: $0, as: UTF8.self) }
        }
    }

    package static func status(_ path: String) -> StatusText {
        StatusText(bytes: readBytes(path, limit: 16 * 1024) ?? [])
    }

    /// Resident memory (VmRSS) and thread count of a process (nil: this one), from its status
    /// file; 0 for what it does not say (a process gone, a kernel thread).
    package static func residentBytesAndThreads(of pid: Int32?) -> (residentBytes: UInt64, threads: Int) {
        let text = status(directory(of: pid) + "/status")
        return text.bytes.withUnsafeBytes { bytes in
            func number(_ key: String) -> UInt64 { statusField(key, in: bytes).map(decimal) ?? 0 }
            return (number("VmRSS") * 1024, Int(clamping: number("Threads")))
        }
    }

    /// The value of the `key:` line of status text `bytes` (hw_proc_status_field).
    package static func statusField(_ key: String, in bytes: UnsafeRawBufferPointer) -> UnsafeRawBufferPointer.SubSequence? {
        guard let base = bytes.baseAddress else { return nil }
        var offset = 0, length = 0
        guard hw_proc_status_field(base.assumingMemoryBound(to: CChar.self), bytes.count, key, &offset, &length) == 1 else { return nil }
        return bytes[offset..<(offset + length)]
    }

    /// A decimal number at the start of `bytes`, 0 when there is none.
    package static func decimal(_ bytes: UnsafeRawBufferPointer.SubSequence) -> UInt64 {
        UnsafeRawBufferPointer(rebasing: bytes).withMemoryRebound(to: CChar.self) { hw_proc_decimal($0.baseAddress, $0.count) }
    }

    /// A hexadecimal number at the start of `bytes` (a status mask), 0 when there is none.
    package static func hexadecimal(_ bytes: UnsafeRawBufferPointer.SubSequence) -> UInt64 {
        UnsafeRawBufferPointer(rebasing: bytes).withMemoryRebound(to: CChar.self) { hw_proc_hex($0.baseAddress, $0.count) }
    }

    /// Whether a process is being killed: SIGKILL pending for its main thread or the whole
    /// process (`SigPnd`, `ShdPnd`: the kernel sets it on every thread of a group it kills, until
    /// each dequeues it and exits), or it is gone.
    package static func isBeingKilled(_ pid: Int32) -> Bool {
        guard let bytes = readBytes("/proc/\(pid)/status", limit: 8192) else { return true }
        return bytes.withUnsafeBytes { text -> Bool in
            let kill = UInt64(1) << (SIGKILL - 1)
            return ["SigPnd", "ShdPnd"].contains { (statusField($0, in: text).map(hexadecimal) ?? 0) & kill != 0 }
        }
    }

    /// TracerPid of a process (nil: this one); 0 when untraced or unreadable. Scanned as bytes:
    /// the hang monitor asks every time it might judge a hang, and splitting the whole file
    /// into Strings was 90 % of an idle tick.
    package static func tracerPID(of pid: Int32?) -> Int32 {
        let fd = open(directory(of: pid) + "/status", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return 0 }
        defer { close(fd) }
        // TracerPid is the 8th line, long before the variable-length ones (Groups, masks).
        return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 2048) { buffer -> Int32 in
            var count = 0
            while count == 0 {
                let got = read(fd, buffer.baseAddress, buffer.count)
                if got < 0 && errno == EINTR { continue }
                guard got > 0 else { return 0 }
                count = got
            }
            let text = UnsafeRawBufferPointer(UnsafeMutableBufferPointer(rebasing: buffer[0..<count]))
            return Int32(clamping: statusField("TracerPid", in: text).map(decimal) ?? 0)
        }
    }

    /// What /proc/PID/stat reports about a process.
    package struct ProcessStat: Sendable, Equatable {
        /// `comm`, from between the parentheses.
        package var name: String
        /// R, S, D, T, t, Z, X, …
        package var state: ThreadState
        package var parent: Int32
        package var processGroup: Int32
        /// Clock ticks since boot: with the pid, identifies a process across pid reuse.
        package var startTicks: UInt64
        /// Bytes of address space: 0 once its memory is gone (it is exiting).
        package var virtualBytes: UInt64 = 0
        /// The signal its parent gets when it ends: SIGCHLD for a fork or vfork child, 0 for a
        /// clone made without one; -1 unknown.
        package var exitSignal: Int32 = -1
    }

    /// /proc/PID/stat (hw_proc_parse_stat); nil when the process is gone.
    package static func processStat(of pid: Int32) -> ProcessStat? {
        guard let bytes = readBytes("/proc/\(pid)/stat", limit: 4096), let stat = parseStat(bytes) else { return nil }
        return ProcessStat(name: String(decoding: bytes[stat.name_offset..<(stat.name_offset + stat.name_length)], as: UTF8.self),
                           state: ThreadState(byte: stat.state), parent: stat.parent,
                           processGroup: stat.process_group, startTicks: stat.start_ticks,
                           virtualBytes: stat.virtual_bytes, exitSignal: stat.exit_signal)
    }

    /// A stat file's fields (the one stat parser: hw_proc_parse_stat); nil when malformed.
    package static func parseStat(_ bytes: UnsafeRawBufferPointer) -> hw_proc_stat? {
        guard let base = bytes.baseAddress else { return nil }
        var stat = hw_proc_stat()
        return hw_proc_parse_stat(base.assumingMemoryBound(to: CChar.self), bytes.count, &stat) == 0 ? stat : nil
    }

    package static func parseStat(_ bytes: [UInt8]) -> hw_proc_stat? { bytes.withUnsafeBytes { parseStat($0) } }

    /// Fields 3 (state) and 22 (start time) of /proc/PID/stat.
    package static func stateAndStartTicks(of pid: Int32) -> (state: ThreadState, startTicks: UInt64)? {
        processStat(of: pid).map { ($0.state, $0.startTicks) }
    }

    /// Every process id in /proc (a snapshot: processes come and go while it is read).
    package static func processIDs() -> [Int32] {
        guard let directory = opendir("/proc") else { return [] }
        defer { closedir(directory) }
        var pids: [Int32] = []
        while let entry = readdir(directory) {
            if let pid = Int32(directoryEntryName(entry)), pid > 0 { pids.append(pid) }
        }
        return pids
    }

    package static func startTicks(of pid: Int32) -> UInt64? { stateAndStartTicks(of: pid)?.startTicks }

    /// A live process below another in the process tree.
    package struct Descendant: Equatable, Sendable {
        package var pid: Int32
        package var parent: Int32
        /// 1 for a child of the root, 2 for a grandchild, …
        package var depth: Int
        /// Its start time when it was found (/proc/PID/stat field 22; 0 unknown): what proves
        /// later that the pid still names this process (ProcessHandle).
        package var startTicks: UInt64

        package init(pid: Int32, parent: Int32, depth: Int, startTicks: UInt64 = 0) {
            self.pid = pid
            self.parent = parent
            self.depth = depth
            self.startTicks = startTicks
        }
    }

    /// Live (not zombie) descendants of `root`, nearest first (breadth-first), from one scan of
    /// /proc's parent links; at most `limit` of them (a fork bomb cannot make the walk unbounded).
    /// `excluded` processes (hangwatch's own, e.g. a job's watchdog) and theirs are left out.
    package static func descendants(of root: Int32, limit: Int = 100_000, excluding excluded: Set<Int32> = []) -> [Descendant] {
        var children: [Int32: [Int32]] = [:]
        var started: [Int32: UInt64] = [:]
        for pid in processIDs() where pid != root && !excluded.contains(pid) {
            guard let stat = processStat(of: pid), !stat.state.hasExited,
                  !isQuietCaptureHelper(pid, stat: stat) else { continue }
            children[stat.parent, default: []].append(pid)
            started[pid] = stat.startTicks
        }
        var found: [Descendant] = []
        func descendant(_ pid: Int32, of parent: Int32, depth: Int) -> Descendant {
            Descendant(pid: pid, parent: parent, depth: depth, startTicks: started[pid] ?? 0)
        }
        var queue = (children[root] ?? []).sorted().map { descendant($0, of: root, depth: 1) }
        var seen = Set<Int32>()
        var next = 0
        while next < queue.count, found.count < limit {
            let member = queue[next]
            next += 1
            guard seen.insert(member.pid).inserted else { continue }
            found.append(member)
            queue += (children[member.pid] ?? []).sorted().map { descendant($0, of: member.pid, depth: member.depth + 1) }
        }
        return found
    }

    /// A quiet capture's helper (Sources/CHangwatchCapture/hw_quiet.c), from its /proc/PID/stat:
    /// a clone of its parent made as hw_quiet.c makes it — sharing its memory (kcmp), its end
    /// signalled to nobody (exit signal 0; a vfork child's is SIGCHLD) — and named so. Part of its
    /// parent, not a process of its own: not a member of a job or a tree, never blamed nor
    /// captured. The name alone is not enough (any thread can take it), nor is sharing memory
    /// (a vfork child before its exec does too). A walk can also meet it in its first moments,
    /// before it has run to name itself (it bears the name of the parent's thread that made it),
    /// and in its last, its memory gone already (kcmp can no longer say): a helper then too.
    package static func isQuietCaptureHelper(_ pid: Int32, stat: ProcessStat) -> Bool {
        guard stat.parent > 0, stat.exitSignal == 0 else { return false }
        let shares = sharesMemory(stat.parent, pid)
        if shares == true {
            return stat.name == quietCaptureHelperName || threadNames(of: stat.parent).contains(stat.name)
        }
        // kcmp cannot say (nil) once the helper is gone, also one met in its first moments
        // under its parent's thread's name (a run beside two other suites listed one so, as a
        // process that "exited during the capture"); it returns false for any other process.
        let named = stat.name == quietCaptureHelperName || (shares == nil && threadNames(of: stat.parent).contains(stat.name))
        guard named else { return false }
        // Exiting (no memory left), or gone since.
        guard let now = processStat(of: pid) else { return true }
        return now.state.hasExited || now.virtualBytes == 0
    }

    /// The names (comm) of every thread of `pid`.
    package static func threadNames(of pid: Int32) -> Set<String> {
        var names = Set<String>()
        for tid in TaskReader(pid: pid)?.threadIDs() ?? [] {
            guard let comm = firstLine("/proc/\(pid)/task/\(tid)/comm", limit: 64) else { continue }
            names.insert(Text.trimmed(comm))
        }
        return names
    }

    /// Whether two processes share one address space (kcmp KCMP_VM); nil when the kernel does
    /// not say (either is gone, no kcmp, not permitted).
    package static func sharesMemory(_ a: Int32, _ b: Int32) -> Bool? {
        switch hw_proc_shares_memory(a, b) {
        case 1: return true
        case 0: return false
        default: return nil
        }
    }

    /// The comm of the quiet capture's helper (HW_QUIET_HELPER_NAME).
    package static let quietCaptureHelperName = HW_QUIET_HELPER_NAME

    /// First 16 hex digits of the kernel's boot id ("0" when unreadable).
    package static func bootID() -> String {
        let hex = (readText("/proc/sys/kernel/random/boot_id", limit: 128) ?? "").filter(\.isHexDigit)
        return hex.isEmpty ? "0" : String(hex.prefix(16))
    }

    /// The inode of this process's pid namespace ("pid:[4026531836]"), 0 when unreadable.
    package static func pidNamespace() -> UInt64 {
        UInt64((readLink("/proc/self/ns/pid") ?? "").filter(\.isNumber)) ?? 0
    }

    /// One line of /proc/PID/maps backed by a file.
    package struct Mapping: Sendable, Equatable {
        package var start: UInt64
        package var end: UInt64
        package var offset: UInt64
        package var inode: UInt64
        package var path: String
    }

    /// File-backed mappings of `pid` (anonymous, [stack], [vdso]… are skipped).
    package static func fileMappings(of pid: Int32) -> [Mapping] {
        memoryRegions(of: pid).compactMap { region in
            guard region.inode != 0, region.path.hasPrefix("/") else { return nil }
            return Mapping(start: region.start, end: region.end, offset: region.offset, inode: region.inode, path: region.path)
        }
    }

    /// One line of /proc/PID/maps.
    package struct MemoryRegion: Sendable, Equatable {
        package var start: UInt64
        package var end: UInt64
        package var offset: UInt64
        package var inode: UInt64
        package var readable: Bool
        package var writable: Bool
        package var executable: Bool
        package var shared: Bool
        /// The file, `[heap]`, `[stack]`, `[vdso]`…; empty for anonymous memory.
        package var path: String

        /// Writable private memory no file backs (the heap, malloc arenas, thread stacks).
        package var isAnonymousWritable: Bool {
            readable && writable && !shared && inode == 0 && (path.isEmpty || path == "[heap]" || path.hasPrefix("[anon"))
        }
    }

    /// Every mapping of `pid`, each line read by the one maps parser (hw_proc_parse_maps_line).
    package static func memoryRegions(of pid: Int32) -> [MemoryRegion] {
        // Huge address spaces exist; 16 MiB of maps text is far beyond any real program.
        guard let bytes = readBytes("/proc/\(pid)/maps", limit: 16 * 1024 * 1024) else { return [] }
        var regions: [MemoryRegion] = []
        bytes.withUnsafeBufferPointer { text in
            guard let base = text.baseAddress else { return }
            var lineStart = 0
            while lineStart < text.count {
                let lineEnd = text[lineStart...].firstIndex(of: 0x0A) ?? text.count
                defer { lineStart = lineEnd + 1 }
                var line = hw_proc_mapping()
                let start = UnsafeRawPointer(base + lineStart).assumingMemoryBound(to: CChar.self)
                guard hw_proc_parse_maps_line(start, lineEnd - lineStart, &line) == 0 else { continue }
                let path = lineStart + line.path_offset
                let perms = withUnsafeBytes(of: line.perms) { Array($0) }
                regions.append(MemoryRegion(
                    start: line.start, end: line.end, offset: line.offset, inode: line.inode,
                    readable: perms[0] == UInt8(ascii: "r"), writable: perms[1] == UInt8(ascii: "w"),
                    executable: perms[2] == UInt8(ascii: "x"), shared: perms[3] == UInt8(ascii: "s"),
                    path: String(decoding: text[path..<(path + line.path_length)], as: UTF8.self)))
            }
        }
        return regions
    }
}

extension ProcFS {
    /// The bytes of each mapping of `pid` the process uses (its `Rss` plus its `Swap` in
    /// /proc/PID/smaps), by the mapping's start; nil when smaps cannot be read. A reader that
    /// must not touch memory the process never used relies on this when the pagemap is closed
    /// to it: a mapping at 0 contains no page of the process.
    package static func usedBytesByMapping(of pid: Int32) -> [UInt64: UInt64]? {
        // About 1 kB a mapping; 64 MiB is beyond any real program, like maps' own bound.
        guard let bytes = readBytes("/proc/\(pid)/smaps", limit: 64 * 1024 * 1024), !bytes.isEmpty else { return nil }
        var used: [UInt64: UInt64] = [:]
        var current: UInt64?
        var lineStart = 0
        while lineStart < bytes.count {
            let lineEnd = bytes[lineStart...].firstIndex(of: 0x0A) ?? bytes.count
            defer { lineStart = lineEnd + 1 }
            let line = bytes[lineStart..<lineEnd]
            guard let first = line.first else { continue }
            // Mapping lines start with the address in lowercase hex; field names with a capital.
            if (0x30...0x39).contains(first) || (0x61...0x66).contains(first) {
                current = hexPrefix(line)
                if let current { used[current] = 0 }
            } else if let current, let kilobytes = smapsKilobytes(line, fields: ["Rss:", "Swap:"]) {
                used[current, default: 0] &+= kilobytes &* 1024
            }
        }
        return used
    }

    /// The hex number a line starts with (the mapping's start in "7f12…-7f13… rw-p …").
    private static func hexPrefix(_ line: ArraySlice<UInt8>) -> UInt64? {
        var value: UInt64 = 0, digits = 0
        for byte in line {
            let digit: UInt64
            switch byte {
            case 0x30...0x39: digit = UInt64(byte - 0x30)
            case 0x61...0x66: digit = UInt64(byte - 0x61 + 10)
            default: return digits > 0 ? value : nil
            }
            guard digits < 16 else { return nil }
            value = value << 4 | digit
            digits += 1
        }
        return digits > 0 ? value : nil
    }

    /// The kilobytes of a line "Rss:   124 kB" when it is one of `fields`.
    private static func smapsKilobytes(_ line: ArraySlice<UInt8>, fields: [String]) -> UInt64? {
        guard let field = fields.first(where: { line.starts(with: $0.utf8) }) else { return nil }
        var value: UInt64 = 0
        for byte in line.dropFirst(field.utf8.count) {
            if byte == 0x20 || byte == 0x09 { if value == 0 { continue } else { break } }
            guard (0x30...0x39).contains(byte) else { break }
            let (times, overflow) = value.multipliedReportingOverflow(by: 10)
            guard !overflow else { return nil }
            value = times &+ UInt64(byte - 0x30)
        }
        return value
    }
}

/// The name of an entry `readdir` returned, read in place up to its NUL. A record is only as long
/// as its name needs (d_reclen), not `sizeof(dirent)`: copying its 256-byte `d_name` array whole
/// reads past the record, and past the end of glibc's buffer when the record is the last one in
/// it. That killed a `hangwatch run` supervisor with SIGSEGV at a page boundary while it listed
/// /proc (CI, session 25). DirectoryEntryTests puts a record against an unmapped page.
package func directoryEntryName(_ record: UnsafePointer<dirent>) -> String {
    let offset = MemoryLayout<dirent>.offset(of: \dirent.d_name) ?? 19
    return String(cString: (UnsafeRawPointer(record) + offset).assumingMemoryBound(to: CChar.self))
}
