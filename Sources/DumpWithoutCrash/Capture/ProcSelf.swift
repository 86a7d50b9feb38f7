// What /proc tells about this process and its threads, read with bounded reads.
#if canImport(Glibc)
import Glibc
#endif

enum ProcSelf {
    /// Reads at most `limit` bytes of a (proc) file; nil if it cannot be opened.
    static func readBytes(_ path: String, limit: Int = 64 * 1024) -> [UInt8]? {
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var result: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while result.count < limit {
            let want = min(chunk.count, limit - result.count)
            let got = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, want) }
            if got < 0 && errno == EINTR { continue }
            if got <= 0 { break }
            result.append(contentsOf: chunk[0..<got])
        }
        return result
    }

    static func readText(_ path: String, limit: Int = 64 * 1024) -> String? {
        readBytes(path, limit: limit).map { String(decoding: $0, as: UTF8.self) }
    }

    static func readLink(_ path: String) -> String? {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let length = readlink(path, &buffer, buffer.count - 1)
        guard length >= 0 else { return nil }
        return String(decoding: buffer[0..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// Thread ids in /proc/self/task, ascending.
    static func threadIDs() throws -> [Int32] {
        guard let directory = opendir("/proc/self/task") else { throw CaptureError.cannotEnumerateThreads(errno: errno) }
        defer { closedir(directory) }
        var tids: [Int32] = []
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            if let tid = Int32(name) { tids.append(tid) }
        }
        return tids.sorted()
    }

    struct ThreadStatus {
        var name: String
        var state: String
        /// Signals the thread blocks, bit (n-1) for signal n.
        var blocked: UInt64
    }

    /// Name, state letter and blocked-signal mask from /proc/self/task/TID/status; nil if gone.
    static func status(tid: Int32) -> ThreadStatus? {
        guard let text = readText("/proc/self/task/\(tid)/status", limit: 16 * 1024) else { return nil }
        var result = ThreadStatus(name: "", state: "?", blocked: 0)
        for line in text.split(separator: "\n", omittingEmptySubsequences: true) {
            if line.hasPrefix("Name:") {
                result.name = String(line.dropFirst(5).drop { $0 == " " || $0 == "\t" })
            } else if line.hasPrefix("State:") {
                result.state = String(line.dropFirst(6).drop { $0 == " " || $0 == "\t" }.prefix(1))
            } else if line.hasPrefix("SigBlk:") {
                let hex = trim(line.dropFirst(7))
                result.blocked = UInt64(hex, radix: 16) ?? 0
            }
        }
        return result
    }

    struct ThreadTimes {
        var state: String
        var user: Double
        var system: Double
    }

    /// State and CPU times from /proc/self/task/TID/stat (fields after the last ')', since the
    /// name in parentheses may itself contain spaces and parentheses).
    static func times(tid: Int32) -> ThreadTimes? {
        guard let text = readText("/proc/self/task/\(tid)/stat", limit: 4096),
              let close = text.lastIndex(of: ")") else { return nil }
        let fields = text[text.index(after: close)...].split(separator: " ")
        // fields[0] is field 3 (state); utime and stime are fields 14 and 15.
        guard fields.count > 12 else { return nil }
        let ticks = Double(max(sysconf(Int32(_SC_CLK_TCK)), 1))
        return ThreadTimes(state: String(fields[0]),
                           user: (Double(fields[11]) ?? 0) / ticks,
                           system: (Double(fields[12]) ?? 0) / ticks)
    }

    /// First line of /proc/self/task/TID/syscall.
    static func syscallLine(tid: Int32) -> String? {
        guard let text = readText("/proc/self/task/\(tid)/syscall", limit: 1024) else { return nil }
        let line = text.split(separator: "\n").first.map(String.init) ?? ""
        return line.isEmpty ? nil : line
    }

    static func identity(bundleID: String) -> ProcessIdentity {
        let pid = getpid()
        let name = readText("/proc/self/comm", limit: 256).map(trim) ?? ""
        let executable = readLink("/proc/self/exe") ?? ""
        var arguments: [String] = []
        if let bytes = readBytes("/proc/self/cmdline", limit: 256 * 1024) {
            arguments = bytes.split(separator: 0, omittingEmptySubsequences: false).map { String(decoding: $0, as: UTF8.self) }
            if arguments.last == "" { arguments.removeLast() }
        }
        return ProcessIdentity(pid: pid, name: name, executable: executable, arguments: arguments, bundleID: bundleID)
    }

    static func trim(_ text: some StringProtocol) -> String {
        let isSpace: (Character) -> Bool = { $0 == " " || $0 == "\t" || $0 == "\n" }
        return String(String(text.drop(while: isSpace).reversed()).drop(while: isSpace).reversed())
    }
}
