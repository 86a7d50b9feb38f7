// Every database failure names the file and the reason, so a user reading a log line can
// act on it without a debugger ("could not create … : Read-only file system").
#if canImport(Glibc)
import HangwatchSnapshot
import Glibc
#endif

/// Why the database refused or failed an operation; each case names what was at fault (a path,
/// a bundle id, a report id).
public enum DatabaseError: Error, Sendable, Equatable, CustomStringConvertible {
    /// A system call failed; `operation` is a verb phrase ("create", "rename … to …").
    case system(operation: String, path: String, errno: Int32)
    /// A bundle id that cannot name files in the database, and why.
    case invalidBundleID(String, reason: String)
    /// A report id that is not one (a lowercase UUID, or a prefix of one), and why.
    case invalidReportID(String, reason: String)
    /// A file name the database would not create or read, and why.
    case invalidFileName(String, reason: String)
    /// A symlink sits where the database expects a real file or directory: never followed.
    case symlinkRefused(path: String)
    /// Something other than a directory where one must be.
    case notADirectory(path: String)
    /// The directory belongs to another user.
    case notOwned(path: String, owner: UInt32, user: UInt32)
    /// Something other than a regular file where one must be.
    case notARegularFile(path: String)
    /// A file larger than the database reads (`DatabaseOptions.maxReadBytes`).
    case fileTooLarge(path: String, size: Int64, limit: Int64)
    /// The file shrank or grew while being read.
    case sizeChanged(path: String, expected: Int64, actual: Int64)
    /// No report has this id.
    case noSuchReport(String)
    /// A report id prefix that matches several reports.
    case ambiguousReportID(String, matches: [String])
    /// The report is already in completed/.
    case reportAlreadyCompleted(String)
    /// The claimed (or pre-opened) file is no longer where this process left it: another
    /// processor took it over (the claim was considered stale) or someone removed it.
    case claimLost(path: String)
    /// The database's settings file cannot be read, and why.
    case corruptSettings(path: String, reason: String)
    /// A directory on the way to the database or the symbol cache that someone else controls,
    /// or a leaf directory that is not hangwatch's (`TrustedPath`).
    case untrustedPath(path: String, reason: String)

    /// `strerror` of a system error; nil for the other cases.
    public var errnoText: String? {
        guard case .system(_, _, let code) = self else { return nil }
        return String(cString: strerror(code))
    }

    /// What went wrong, with the path, in a sentence.
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
