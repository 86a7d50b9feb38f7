// Every database failure names the file and the reason, so a user reading a log line can
// act on it without a debugger ("could not create … : Read-only file system").
#if canImport(Glibc)
import HangwatchSnapshot
import Glibc
#endif

public enum DatabaseError: Error, Sendable, Equatable, CustomStringConvertible {
    /// A system call failed; `operation` is a verb phrase ("create", "rename … to …").
    case system(operation: String, path: String, errno: Int32)
    case invalidBundleID(String, reason: String)
    case invalidReportID(String, reason: String)
    case invalidFileName(String, reason: String)
    /// A symlink sits where the database expects a real file or directory: never followed.
    case symlinkRefused(path: String)
    case notADirectory(path: String)
    /// The directory belongs to another user.
    case notOwned(path: String, owner: UInt32, user: UInt32)
    case notARegularFile(path: String)
    case fileTooLarge(path: String, size: Int64, limit: Int64)
    /// The file shrank or grew while being read.
    case sizeChanged(path: String, expected: Int64, actual: Int64)
    case noSuchReport(String)
    case ambiguousReportID(String, matches: [String])
    case reportAlreadyCompleted(String)
    /// The claimed (or pre-opened) file is no longer where this process left it: another
    /// processor took it over (the claim was considered stale) or someone removed it.
    case claimLost(path: String)
    case corruptSettings(path: String, reason: String)
    /// A directory on the way to the database or the symbol cache that someone else controls,
    /// or a leaf directory that is not hangwatch's (`TrustedPath`).
    case untrustedPath(path: String, reason: String)

    public var errnoText: String? {
        guard case .system(_, _, let code) = self else { return nil }
        return String(cString: strerror(code))
    }

    public var description: String {
        switch self {
        case .system(let operation, let path, let code):
            return "could not \(operation) \(path): \(String(cString: strerror(code))) (errno \(code))"
        case .invalidBundleID(let id, let reason):
            return "invalid bundle id \(id.debugDescription): \(reason)"
        case .invalidReportID(let id, let reason):
            return "invalid report id \(id.debugDescription): \(reason)"
        case .invalidFileName(let name, let reason):
            return "invalid file name \(name.debugDescription): \(reason)"
        case .symlinkRefused(let path):
            return "refusing \(path): it is a symbolic link, and the database never follows links"
        case .notADirectory(let path):
            return "\(path) should be a directory but is not"
        case let .notOwned(path, owner, user):
            return "refusing \(path): it is owned by uid \(owner), not by you (uid \(user)); another user could read or replace the reports there"
        case .notARegularFile(let path):
            return "\(path) is not a regular file"
        case let .untrustedPath(path, reason):
            return "refusing \(path): \(reason); another user could choose or replace what hangwatch writes there"
        case .fileTooLarge(let path, let size, let limit):
            return "\(path) is \(size) bytes, more than the limit of \(limit) bytes"
        case .sizeChanged(let path, let expected, let actual):
            return "\(path) changed size while being read (expected \(expected) bytes, read \(actual))"
        case .noSuchReport(let id):
            return "no report with id \(id.debugDescription)"
        case .ambiguousReportID(let prefix, let matches):
            return "report id prefix \(prefix.debugDescription) is ambiguous: \(matches.joined(separator: ", "))"
        case .reportAlreadyCompleted(let id):
            return "report \(id) is already completed (uploaded); refusing to write it again"
        case .claimLost(let path):
            return "\(path) is gone: another processor took the claim over, or it was removed"
        case .corruptSettings(let path, let reason):
            return "\(path) is unreadable (\(reason)); remove it to create a new client id"
        }
    }
}
