// What out-of-process capture learns from /proc: the thread list, per-thread state, the
// process identity, and its file mappings. Every read is bounded: /proc files of another
// process are treated as untrusted input.
import HangwatchSnapshot
#if canImport(Glibc)
import Glibc
#endif

extension RemoteCapture {
    /// Bounded readers of /proc/PID/... (nested to keep the module's namespace clean).
    enum ProcFS {
        /// Reads at most `limit` bytes of a file; nil when it cannot be opened or read.
        static func readBytes(_ path: String, limit: Int = 64 * 1024) -> [UInt8]? {
            let fd = open(path, O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else { return nil }
            defer { close(fd) }
            // Grown as the file turns out larger: most /proc files are far below `limit`
            // (16 MiB for maps), and zeroing the whole limit per read was a visible cost.
            var bytes = [UInt8](repeating: 0, count: min(limit, 4096))
            var filled = 0
            while filled < limit {
                if filled == bytes.count {
                    bytes.append(contentsOf: repeatElement(0, count: min(bytes.count, limit - bytes.count)))
                }
                let got = bytes.withUnsafeMutableBytes { raw in
                    read(fd, raw.baseAddress! + filled, raw.count - filled)
                }
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

        static func readText(_ path: String, limit: Int = 64 * 1024) -> String? {
            readBytes(path, limit: limit).map { String(decoding: $0, as: UTF8.self) }
        }

        static func firstLine(_ path: String, limit: Int = 4096) -> String? {
            guard let text = readText(path, limit: limit) else { return nil }
            return String(text.split(separator: "\n", maxSplits: 1, omittingEmptySubsequences: false).first ?? "")
        }

        static func processExists(_ pid: Int32) -> Bool {
            var info = stat()
            return stat("/proc/\(pid)", &info) == 0
        }

        /// Thread ids of `pid`, the main thread (tid == pid) first, the rest ascending.
        /// Empty when the process is gone.
        static func threadIDs(of pid: Int32) -> [Int32] {
            guard let directory = opendir("/proc/\(pid)/task") else { return [] }
            defer { closedir(directory) }
            var tids: [Int32] = []
            while let entry = readdir(directory) {
                let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                    String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
                }
                if let tid = Int32(name), tid > 0 { tids.append(tid) }
            }
            return tids.sorted { ($0 == pid ? 0 : 1, $0) < ($1 == pid ? 0 : 1, $1) }
        }

        /// `/proc/PID/status` as key → value (first occurrence of each key).
        static func status(_ path: String) -> [String: String] {
            guard let text = readText(path, limit: 16 * 1024) else { return [:] }
            var fields: [String: String] = [:]
            for line in text.split(separator: "\n") {
                guard let colon = line.firstIndex(of: ":") else { continue }
                let key = String(line[..<colon])
                if fields[key] == nil {
                    fields[key] = line[line.index(after: colon)...].remoteTrimmed()
                }
            }
            return fields
        }

        /// TracerPid of the process (0 when untraced), nil when unreadable.
        static func tracerPID(of pid: Int32) -> Int32? {
            status("/proc/\(pid)/status")["TracerPid"].flatMap { Int32($0) }
        }

        static func comm(_ path: String) -> String {
            (firstLine(path, limit: 64) ?? "").remoteTrimmed()
        }

        struct ThreadInfo {
            var name = ""
            var state = "?"
            var syscall: String?
            var userCPUSeconds = 0.0
            var systemCPUSeconds = 0.0
        }

        /// Read before the thread is stopped, so the state is what the program was doing
        /// (once stopped every thread would read 't').
        static func threadInfo(pid: Int32, tid: Int32) -> ThreadInfo {
            let base = "/proc/\(pid)/task/\(tid)"
            var info = ThreadInfo()
            if let stat = readText(base + "/stat", limit: 4096),
               let close = stat.lastIndex(of: ")") {
                // The name is stat's "(comm)" (up to the LAST ')': it may contain one), which
                // saves reading /comm as well.
                if let open = stat.firstIndex(of: "("), open < close {
                    info.name = String(stat[stat.index(after: open)..<close])
                }
                // Fields after "(comm)": state is field 3, utime 14, stime 15 (1-based).
                let fields = stat[stat.index(after: close)...].split(separator: " ")
                if fields.count > 12 {
                    info.state = String(fields[0])
                    let ticks = Double(max(sysconf(Int32(_SC_CLK_TCK)), 1))
                    info.userCPUSeconds = (Double(fields[11]) ?? 0) / ticks
                    info.systemCPUSeconds = (Double(fields[12]) ?? 0) / ticks
                }
            }
            info.syscall = firstLine(base + "/syscall", limit: 512).map { $0.remoteTrimmed() }
            return info
        }

        static func identity(pid: Int32) -> ProcessIdentity {
            let name = comm("/proc/\(pid)/comm")
            let executable = readLink("/proc/\(pid)/exe") ?? ""
            var arguments: [String] = []
            if let raw = readBytes("/proc/\(pid)/cmdline", limit: 64 * 1024) {
                arguments = raw.split(separator: 0, omittingEmptySubsequences: false)
                    .map { String(decoding: $0, as: UTF8.self) }
                if arguments.last == "" { arguments.removeLast() }
            }
            let bundle = executable.split(separator: "/").last.map(String.init) ?? name
            return ProcessIdentity(pid: pid, name: name, executable: executable,
                                   arguments: arguments, bundleID: bundle.isEmpty ? name : bundle)
        }

        static func readLink(_ path: String) -> String? {
            var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
            let length = readlink(path, &buffer, buffer.count - 1)
            guard length >= 0 else { return nil }
            return String(decoding: buffer[..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        }

        /// One line of /proc/PID/maps backed by a file.
        struct Mapping {
            var start: UInt64
            var end: UInt64
            var offset: UInt64
            var inode: UInt64
            var path: String
        }

        /// File-backed mappings of `pid` (anonymous, [stack], [vdso]… are skipped).
        static func fileMappings(pid: Int32) -> [Mapping] {
            // Huge address spaces exist; 16 MiB of maps text is far beyond any real program.
            guard let text = readText("/proc/\(pid)/maps", limit: 16 * 1024 * 1024) else { return [] }
            var mappings: [Mapping] = []
            for line in text.split(separator: "\n") {
                // start-end perms offset dev inode path (path may contain spaces)
                let parts = line.split(separator: " ", maxSplits: 5, omittingEmptySubsequences: true)
                guard parts.count == 6 else { continue }
                let path = parts[5].remoteTrimmed()
                guard path.hasPrefix("/"), parts[4] != "0" else { continue }
                let range = parts[0].split(separator: "-")
                guard range.count == 2, let start = UInt64(range[0], radix: 16),
                      let end = UInt64(range[1], radix: 16),
                      let offset = UInt64(parts[2], radix: 16), let inode = UInt64(parts[4]) else { continue }
                mappings.append(Mapping(start: start, end: end, offset: offset, inode: inode, path: path))
            }
            return mappings
        }
    }
}

extension StringProtocol {
    fileprivate func remoteTrimmed() -> String {
        var scalars = Substring(self)
        while let first = scalars.first, first == " " || first == "\t" || first == "\n" { scalars.removeFirst() }
        while let last = scalars.last, last == " " || last == "\t" || last == "\n" { scalars.removeLast() }
        return String(scalars)
    }
}
