// Small file helpers with the database's safety rules: files 0600, directories 0700,
// no following symlinks, bounded reads of files another process may have written.
import HangwatchCapture
import HangwatchDatabase
import HangwatchSnapshot
import Foundation

enum StagingError: Error, CustomStringConvertible {
    case io(String, Int32)
    case corrupt(String)
    var description: String {
        switch self {
        case let .io(what, err): return "\(what): \(String(cString: strerror(err)))"
        case let .corrupt(what): return "corrupt staged hang: \(what)"
        }
    }
}

enum SecureFile {
    static func makeDirectories(_ path: String) throws {
        var current = path.hasPrefix("/") ? "" : "."
        for part in path.split(separator: "/") {
            current += "/" + part
            if mkdir(current, 0o700) != 0 && errno != EEXIST { throw StagingError.io("mkdir \(current)", errno) }
        }
        var info = stat()
        guard lstat(path, &info) == 0, (info.st_mode & S_IFMT) == S_IFDIR else { throw StagingError.io("\(path) is not a directory", ENOTDIR) }
    }

    /// Write to a temporary sibling, fsync-free (staging is best effort), then rename over.
    package static func writeAtomically(_ data: Data, to path: String) throws {
        let temporary = path + ".tmp\(getpid())"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw StagingError.io("open \(temporary)", errno) }
        var ok = true
        data.withUnsafeBytes { raw in
            var offset = 0
            while offset < raw.count {
                let n = write(fd, raw.baseAddress! + offset, raw.count - offset)
                if n < 0 { if errno == EINTR { continue }; ok = false; return }
                offset += n
            }
        }
        let writeErrno = errno
        close(fd)
        guard ok else { unlink(temporary); throw StagingError.io("write \(temporary)", writeErrno) }
        guard rename(temporary, path) == 0 else { let e = errno; unlink(temporary); throw StagingError.io("rename \(path)", e) }
    }

    static func read(_ path: String, limit: Int) throws -> Data {
        let fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { throw StagingError.io("open \(path)", errno) }
        defer { close(fd) }
        var bytes = [UInt8](repeating: 0, count: limit + 1)
        var used = 0
        while used < bytes.count {
            let n = bytes[used...].withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if n < 0 { if errno == EINTR { continue }; throw StagingError.io("read \(path)", errno) }
            if n == 0 { break }
            used += n
        }
        guard used <= limit else { throw StagingError.corrupt("\(path) is larger than \(limit) bytes") }
        return Data(bytes[..<used])
    }
}

enum ProcFile {
    /// Small /proc files only (bounded).
    static func read(_ path: String) -> String? {
        guard let data = try? SecureFile.read(path, limit: 64 * 1024) else { return nil }
        return String(decoding: data, as: UTF8.self)
    }

    /// Start time of `pid` in clock ticks since boot (the database's reading of /proc/PID/stat).
    static func startTicks(pid: Int32) -> UInt64? { ClaimerIdentity.startTicks(of: pid) }

    /// TracerPid of /proc/self/status, scanned as bytes: the monitor asks every tick it might
    /// judge a hang, and splitting the whole file into Strings was 90 % of an idle tick.
    static func tracerPid() -> Int32 {
        let fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return 0 }
        defer { close(fd) }
        // TracerPid is the 8th line, long before the variable-length ones (Groups, masks).
        return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 2048) { buffer -> Int32 in
            var count = 0
            while count == 0 {
                let got = Glibc.read(fd, buffer.baseAddress, buffer.count)
                if got < 0 && errno == EINTR { continue }
                guard got > 0 else { return 0 }
                count = got
            }
            let key = Array("\nTracerPid:".utf8)
            var index = 0
            search: while index + key.count <= count {
                for offset in key.indices where buffer[index + offset] != key[offset] { index += 1; continue search }
                var at = index + key.count
                while at < count && (buffer[at] == 0x20 || buffer[at] == 0x09) { at += 1 }
                var value: Int32 = 0
                while at < count, buffer[at] >= 48, buffer[at] <= 57, value < 100_000_000 {
                    value = value * 10 + Int32(buffer[at] - 48)
                    at += 1
                }
                return value
            }
            return 0
        }
    }
}
