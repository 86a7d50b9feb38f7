import HangwatchSnapshot

/// Writing an intermediate dump to a path of the caller's choosing (staging, --output). It uses
/// the database's single atomic write (DatabaseDirectory.writeAtomically), so the path contains
/// either the old file or a complete new one, 0600, never written through a link.
package enum IntermediateDumpFiles {
    package static func write(_ snapshot: ProcessSnapshot, toPath path: String) throws {
        let (directory, name) = try DatabaseDirectory.openParent(of: path)
        defer { directory.closeDirectory() }
        try directory.writeAtomically(name) { fd in try IntermediateDumpWriter.write(snapshot, to: fd) }
    }
}

extension CrashReportDatabase {
    /// `snapshot` as a pending intermediate dump of `bundleID` (DumpWithoutCrashAndDeferProcessing):
    /// written into a leased `.locked` file, then renamed to `.hwdump`; a failed write leaves
    /// nothing behind. Returns the dump's path.
    package func writeIntermediateDump(_ snapshot: ProcessSnapshot, bundleID: String) throws -> String {
        let file = try createIntermediateDump(bundleID: bundleID)
        do {
            try IntermediateDumpWriter.write(snapshot, to: file.fd)
            return try finish(file)
        } catch {
            try? discard(file)
            throw error
        }
    }
}
