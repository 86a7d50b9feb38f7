// Opening a directory hangwatch writes to (the database, the symbol cache) so that nobody else
// decides where that is. The path is walked from a trusted start ("/", or the working
// directory for a relative path) one component at a time, each opened O_NOFOLLOW relative to
// the one before, and every component must be owned by root or by us and writable by no one
// else (a sticky directory such as /tmp excepted: others cannot move what is in it). A symlink
// is followed only when root or we own it, inside a directory that passed the check. So `nobody`
// cannot plant `~nobody/.cache/hangwatch -> /etc` for root's hangwatch, nor swap a component
// between the check and the use (each step keeps open the directory it checked).
//
// The leaf is ours only when it carries our mark (`TrustedPath.Leaf`): created by us, or empty
// when we found it, or marked before. A directory with someone else's files in it is refused
// before anything is changed in it (no chmod, no prune): naming a directory never hands it over.
#if canImport(Glibc)
import Glibc
#endif

package enum TrustedPath {
    /// How the leaf directory shows it is ours.
    package struct Leaf: Sendable {
        /// A file the leaf holds once it is ours (created with `markerContents` when we take it;
        /// nil: the caller creates it, as the database does its settings.json).
        package var markerName: String
        package var markerContents: [UInt8]?
        /// What kind of directory it is, for errors ("symbol cache", "database").
        package var kind: String
        /// Names a directory of this kind holds before its marker exists (another process of
        /// ours may be making it right now: the database creates its subdirectories first). An
        /// array of a few names: a Set's first use costs `hangwatch list` a runtime conformance lookup.
        package var layout: [String]
        /// Endings of the names of the entries an unmarked directory of this kind may hold: one
        /// hangwatch made before it marked its directories (a symbol cache of an earlier
        /// version holds `….hwsym` files and their temporaries only).
        package var entrySuffixes: [String]

        package init(markerName: String, markerContents: [UInt8]?, kind: String, layout: [String] = [],
                     entrySuffixes: [String] = []) {
            self.markerName = markerName
            self.markerContents = markerContents
            self.kind = kind
            self.layout = layout
            self.entrySuffixes = entrySuffixes
        }

        /// Whether `name` may be in a directory of this kind that has no marker yet: a part of
        /// its layout, one of its entries, or a temporary file of either (`DatabaseDirectory.writeAtomically`).
        func mayHoldBeforeMarked(_ name: String) -> Bool {
            let final = DatabaseNames.finalName(ofTemporary: name) ?? name
            return final == markerName || layout.contains(final) || entrySuffixes.contains { final.hasSuffix($0) && final.count > $0.count }
        }
    }

    /// Links followed on one walk at most (as the kernel's own limit, MAXSYMLINKS).
    static let maxLinks = 40

    /// Opens (creating what is missing, 0700) the directory at `path` by the rules above, with
    /// its private mode enforced only once it is known to be ours.
    package static func openDirectory(_ path: String, leaf: Leaf) throws -> DatabaseDirectory {
        guard !path.isEmpty else { throw DatabaseError.invalidFileName(path, reason: "the path is empty") }
        guard !path.utf8.contains(0) else { throw DatabaseError.invalidFileName(path, reason: "it contains a NUL byte") }
        var links = 0
        // Every component but the leaf must be safe from others; the leaf need only be ours: a
        // cache of ours left 0777 is tightened below, and what others put in it is never used
        // (SymbolCache checks each entry's owner and mode).
        let components = path.split(separator: "/").filter { $0 != "." }
        guard let last = components.last.map(String.init) else { throw DatabaseError.invalidFileName(path, reason: "it names no directory") }
        // Joined by hand, String to String: the standard library's joined(separator:) and
        // append(contentsOf:) of a Substring are not specialized here, and the first call of either
        // makes the runtime look up a conformance by scanning every conformance record of the
        // binary (0.2 M instructions, 5 % of a `hangwatch list`).
        var parent = ""
        for component in components.dropLast() {
            if !parent.isEmpty { parent += "/" }
            parent += String(component)
        }
        let parentFD = try walk(parent, from: path.hasPrefix("/") ? "/" : ".", shown: path.hasPrefix("/") ? "/" : ".", links: &links)
        defer { close(parentFD) }
        let fd = try step(from: parentFD, name: last, shown: path, links: &links, isLeaf: true)
        let directory = DatabaseDirectory(fd: fd, path: path)
        do {
            try directory.checkOwner()
            try claim(directory, leaf: leaf)
            try directory.enforcePrivateMode()
        } catch {
            close(fd)
            throw error
        }
        return directory
    }

    /// The components of `path` below `start` (itself checked), one by one; the last one's descriptor.
    private static func walk(_ path: String, from start: String, shown: String, links: inout Int) throws -> Int32 {
        let base = open(start, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard base >= 0 else { throw DatabaseError.system(operation: "open", path: start, errno: errno) }
        defer { close(base) }
        try checkTrusted(base, path: start)
        return try walk(path, fromDescriptor: base, shown: shown, links: &links)
    }

    /// One component below `parent`: created if missing, a link resolved if root or we own it.
    private static func step(from parent: Int32, name: String, shown: String, links: inout Int, isLeaf: Bool = false) throws -> Int32 {
        if name == ".." { throw DatabaseError.invalidFileName(shown, reason: "it contains '..'") }
        if mkdirat(parent, name, DatabaseDirectory.directoryMode) == 0 {
            // We just created it, so it is ours; the umask may have removed bits from 0700, so restore them.
            let created = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            guard created >= 0 else { throw DatabaseError.system(operation: "open", path: shown, errno: errno) }
            _ = fchmod(created, DatabaseDirectory.directoryMode)
            return created
        }
        guard errno == EEXIST else { throw DatabaseError.system(operation: "create directory", path: shown, errno: errno) }
        var info = stat()
        guard fstatat(parent, name, &info, AT_SYMLINK_NOFOLLOW) == 0 else {
            throw DatabaseError.system(operation: "stat", path: shown, errno: errno)
        }
        if info.st_mode & S_IFMT == S_IFLNK {
            // The directory itself is never a link (its files would live elsewhere); a link on the way to it may be.
            if isLeaf { throw DatabaseError.symlinkRefused(path: shown) }
            return try follow(linkIn: parent, name: name, info: info, shown: shown, links: &links)
        }
        let child = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard child >= 0 else {
            let code = errno
            throw DatabaseDirectory.classifyOpenFailure(code, path: shown, lstat: { DatabaseDirectory.makeEntry(shown, info) })
        }
        // The leaf's owner is checked by the caller (it must be ours, not merely root's).
        if !isLeaf {
            do { try checkTrusted(child, path: shown) } catch { close(child); throw error }
        }
        return child
    }

    private static func follow(linkIn parent: Int32, name: String, info: stat, shown: String, links: inout Int) throws -> Int32 {
        guard info.st_uid == 0 || info.st_uid == geteuid() else {
            throw DatabaseError.untrustedPath(path: shown, reason: "it is a symbolic link owned by user \(info.st_uid)")
        }
        links += 1
        guard links <= maxLinks else { throw DatabaseError.system(operation: "resolve", path: shown, errno: ELOOP) }
        var target = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let length = readlinkat(parent, name, &target, target.count - 1)
        guard length > 0 else { throw DatabaseError.system(operation: "read link", path: shown, errno: errno) }
        let text = String(decoding: target[0..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        if text.hasPrefix("/") { return try walk(text, from: "/", shown: "/", links: &links) }
        // Relative: from the directory holding the link (already checked).
        return try walk(text, fromDescriptor: parent, shown: shown + " → ", links: &links)
    }

    /// The components of `path` below the directory `base` (already checked), one by one; the
    /// last one's descriptor (a new one, `base` stays open).
    private static func walk(_ path: String, fromDescriptor base: Int32, shown: String, links: inout Int) throws -> Int32 {
        var current = openat(base, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard current >= 0 else { throw DatabaseError.system(operation: "open", path: shown, errno: errno) }
        var prefix = shown
        do {
            for component in path.split(separator: "/") where component != "." {
                let name = String(component)
                let shownNext = (prefix.isEmpty || prefix.hasSuffix("/") || prefix.hasSuffix(" ") ? prefix : prefix + "/") + name
                let next = try step(from: current, name: name, shown: shownNext, links: &links)
                close(current)
                current = next
                prefix = shownNext
            }
        } catch {
            close(current)
            throw error
        }
        return current
    }

    /// Root's or ours, and nobody else can write it (but in a sticky directory, where they
    /// cannot rename or remove what is not theirs).
    static func checkTrusted(_ fd: Int32, path: String) throws {
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw DatabaseError.system(operation: "stat", path: path, errno: errno) }
        guard info.st_uid == 0 || info.st_uid == geteuid() else {
            throw DatabaseError.untrustedPath(path: path, reason: "it is owned by user \(info.st_uid)")
        }
        if info.st_mode & 0o022 != 0 && info.st_mode & S_ISVTX == 0 {
            throw DatabaseError.untrustedPath(path: path, reason: "others may write to it (mode \(String(info.st_mode & 0o7777, radix: 8)))")
        }
    }

    /// The leaf is ours when it contains our marker, or is empty (then it is marked now). Anything
    /// else is someone else's directory, and is refused without being changed.
    private static func claim(_ directory: DatabaseDirectory, leaf: Leaf) throws {
        if let marker = try directory.entry(leaf.markerName) {
            guard marker.isRegularFile else {
                throw DatabaseError.untrustedPath(path: directory.path, reason: "its \(leaf.markerName) is not a regular file")
            }
            return
        }
        guard try directory.entries().allSatisfy({ leaf.mayHoldBeforeMarked($0.name) }) else {
            throw DatabaseError.untrustedPath(path: directory.path, reason: "it is not empty and is not a hangwatch \(leaf.kind) "
                + "(no \(leaf.markerName)): hangwatch uses only a directory it made or an empty one")
        }
        guard let contents = leaf.markerContents else { return }
        try directory.writeAtomically(leaf.markerName, durable: false) { file in
            try contents.withUnsafeBytes { try directory.writeAll(file, $0, name: leaf.markerName) }
        }
    }
}
