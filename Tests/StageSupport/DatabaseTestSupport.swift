// Small helpers shared by the database tests: fresh databases in private temporary
// directories, file modes, and backdating files with utimensat.
import HangwatchDatabase
import HangwatchSnapshot
import Foundation
import HangwatchTestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// A temporary directory holding a database at `<dir>/db`, removed when the test ends.
package final class DatabaseSandbox {
    package let directory: String
    package var databasePath: String { directory + "/db" }

    package init() throws {
        directory = try makeTemporaryDirectory("hangwatch-db")
    }

    deinit { removeTemporaryDirectory(directory) }

    package func open(_ options: DatabaseOptions = DatabaseOptions()) throws -> CrashReportDatabase {
        try CrashReportDatabase(path: databasePath, options: options)
    }
}

/// Permission bits of `path` without following a final symlink.
package func modeOf(_ path: String) -> mode_t? {
    var info = stat()
    guard lstat(path, &info) == 0 else { return nil }
    return info.st_mode & 0o7777
}

package func isSymlink(_ path: String) -> Bool {
    var info = stat()
    return lstat(path, &info) == 0 && info.st_mode & S_IFMT == S_IFLNK
}

/// Sets a file's modification time to `date` (the file itself, never a link's target).
/// What a file takes on disk (allocated blocks), as the database sizes files.
package func diskBytes(of path: String) -> Int64 {
    var info = stat()
    return lstat(path, &info) == 0 ? Int64(info.st_blocks) * 512 : -1
}

package func setModificationDate(_ path: String, _ date: Date) throws {
    let seconds = date.timeIntervalSince1970.rounded(.down)
    var times = [timespec(tv_sec: Int(seconds), tv_nsec: 0), timespec(tv_sec: Int(seconds), tv_nsec: 0)]
    guard utimensat(AT_FDCWD, path, &times, AT_SYMLINK_NOFOLLOW) == 0 else {
        throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO)
    }
}

package func writeFile(_ path: String, _ text: String) throws {
    try Data(text.utf8).write(to: URL(fileURLWithPath: path))
}

package func readFileText(_ path: String) -> String? {
    try? String(contentsOfFile: path, encoding: .utf8)
}

package func directoryNames(_ path: String) -> [String] {
    ((try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []).sorted()
}

extension CrashReportDatabase {
    /// A finished dump containing `text`, as a writer that completed normally leaves it.
    @discardableResult
    package func makeFinishedDump(bundleID: String, text: String? = nil) throws -> (uuid: UUID, path: String) {
        let file = try createIntermediateDump(bundleID: bundleID)
        let contents = text ?? "dump \(file.uuid.uuidString)"
        _ = contents.withCString { write(file.fd, $0, strlen($0)) }
        return (file.uuid, try finish(file))
    }

    /// A `.locked` dump whose writer went away without finishing (its descriptor closed,
    /// which also drops the writer's lease), last written at `date`.
    @discardableResult
    package func makeAbandonedLockedDump(bundleID: String, writtenAt date: Date, text: String = "partial") throws -> IntermediateDumpFile {
        let file = try createIntermediateDump(bundleID: bundleID)
        if !text.isEmpty { _ = text.withCString { write(file.fd, $0, strlen($0)) } }
        close(file.fd)
        try setModificationDate(file.path, date)
        return file
    }
}

package let hour: TimeInterval = 3600
package let day: TimeInterval = 24 * hour
