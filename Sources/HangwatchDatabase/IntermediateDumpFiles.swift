import HangwatchSnapshot
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Writing an intermediate dump to a path of the caller's choosing (staging, --output):
/// a temporary file beside it (0600, never through a symlink), fsync, then rename, so the
/// path holds either the old file or a complete new one.
package enum IntermediateDumpFiles {
    package static func write(_ snapshot: ProcessSnapshot, toPath path: String) throws {
        let temporary = path + ".tmp-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw DatabaseError.system(operation: "create", path: temporary, errno: errno) }
        defer { close(fd) }
        do {
            try IntermediateDumpWriter.write(snapshot, to: fd)
            guard fsync(fd) == 0 else { throw DatabaseError.system(operation: "fsync", path: temporary, errno: errno) }
            guard rename(temporary, path) == 0 else { throw DatabaseError.system(operation: "rename", path: path, errno: errno) }
        } catch {
            unlink(temporary)
            throw error
        }
    }
}
