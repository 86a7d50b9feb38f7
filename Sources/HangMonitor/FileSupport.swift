// Small file helpers with the database's safety rules: files 0600, directories 0700,
// no following symlinks, bounded reads of files another process may have written.
import HangwatchCapture
import HangwatchDatabase
import HangwatchSnapshot
import FoundationEssentials
import Glibc

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

/// Staging's files through the database's file rules (DatabaseDirectory): one atomic write,
/// and reads that open only regular files, never through a link, never blocking on a FIFO,
/// bounded in size.
enum SecureFile {
    /// Creates `path` (0700) when it is missing; its parent must exist.
    static func makeDirectory(_ path: String) throws {
        if mkdir(path, 0o700) != 0 && errno != EEXIST { throw StagingError.io("mkdir \(path)", errno) }
    }

    /// Replaced atomically; not fsynced (staging is rewritten while a hang lasts, and a staged
    /// file lost in a machine crash only loses that hang's notes).
    static func writeAtomically(_ data: Data, to path: String) throws {
        let (directory, name) = try DatabaseDirectory.openParent(of: path)
        defer { directory.closeDirectory() }
        try directory.writeAtomically(name, data, durable: false)
    }

    static func read(_ path: String, limit: Int) throws -> Data {
        let (directory, name) = try DatabaseDirectory.openParent(of: path)
        defer { directory.closeDirectory() }
        return try directory.readFile(name, limit: Int64(limit))
    }
}
