// What /proc tells about this process and its threads, read with bounded reads.
import HangwatchDatabase
import HangwatchSnapshot
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
        guard let reader = TaskReader() else { throw CaptureError.cannotEnumerateThreads(errno: errno) }
        return try reader.threadIDs()
    }

    struct ThreadStatus {
        var name: String
        var state: String
        /// Signals the thread blocks, bit (n-1) for signal n.
        var blocked: UInt64
        var userCPUSeconds: Double = 0
        var systemCPUSeconds: Double = 0
    }

    /// Name, state letter, CPU times (one `stat` read) and blocked-signal mask (`SigBlk` of
    /// `status`) of one thread; nil if it is gone. Convenience over `TaskReader`.
    static func status(tid: Int32) -> ThreadStatus? {
        let reader = TaskReader()
        return reader?.status(tid: tid)
    }

    /// First line of /proc/self/task/TID/syscall.
    static func syscallLine(tid: Int32) -> String? {
        TaskReader()?.syscallLine(tid: tid)
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
