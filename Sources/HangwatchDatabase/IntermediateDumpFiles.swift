import HangwatchSnapshot

/// Writing an intermediate dump to a path of the caller's choosing (staging, --output):
/// the database's one atomic write (DatabaseDirectory.writeAtomically), so the path holds
/// either the old file or a complete new one, 0600, never written through a link.
package enum IntermediateDumpFiles {
    package static func write(_ snapshot: ProcessSnapshot, toPath path: String) throws {
        let (directory, name) = try DatabaseDirectory.openParent(of: path)
        defer { directory.closeDirectory() }
        try directory.writeAtomically(name) { fd in try IntermediateDumpWriter.write(snapshot, to: fd) }
    }
}
