// Symbol indexes on disk, shared by every hangwatch process of the user: what symbolicating a
// module file's addresses gave (SymbolIndex.swift) is stored after each report, and later ones —
// any process, any run — read those answers instead of the module, which they open only for
// addresses not answered yet. An entry grows with the addresses stacks needed, never with the
// module: a 250 MB server binary costs what its few hundred return addresses do.
// docs/symbol-cache.md has the layout.
//
// An entry is keyed by what it was built from, not by the build-id alone (a build-id is only
// a claim the file makes): the build-id plus the device, inode, size and modification time of
// the module file and of the separate debug file found for it, and how it was indexed. The
// directory follows the database's rules (DatabaseDirectory): 0700 and the user's own, no link
// followed, only regular files read, bounded reads, one atomic write; the path to it is
// walked component by component and the directory is marked ours (TrustedPath). An entry is
// read only when it is the user's own and writable by nobody else; one of ours that does not
// check out (truncated, crafted, another module's) is removed and rebuilt, never trusted, and
// nothing that is not ours (by owner, name and header) is ever removed or replaced.
import HangwatchDatabase
import HangwatchPlatform
import HangwatchSnapshot
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

package final class SymbolCache: @unchecked Sendable {
    /// An index larger than this is not stored or read (SymbolIndex.maximumAnswers keeps them far smaller).
    package static let defaultMaximumEntryBytes = 64 << 20
    /// The cache is pruned to this, least recently used entries first.
    package static let defaultMaximumTotalBytes: Int64 = 256 << 20
    static let fileExtension = ".hwsym"
    /// Sighting marks, `<entry name minus .hwsym>.hwseen` starting with `seenMagic`, left by
    /// versions that indexed a module whole on its second sighting: still ours, removed once old.
    static let sightingExtension = ".hwseen"
    static let seenMagic = Array("HWSEEN1\n".utf8)
    static let sightingAge: Double = 30 * 24 * 3600
    /// The cache directory's mark (the Cache Directory Tagging convention, so backup tools skip it).
    static let leaf = TrustedPath.Leaf(
        markerName: "CACHEDIR.TAG",
        markerContents: Array("Signature: 8a477f597d28d172789f06886806bc55\n# hangwatch symbol cache (docs/symbol-cache.md)\n".utf8),
        kind: "symbol cache", layout: [Debuginfod.directoryName], entrySuffixes: [fileExtension, sightingExtension])
    /// Leftovers of writers killed mid-write are removed after this (seconds).
    static let abandonedTemporaryAge: Double = 3600

    package let path: String
    package let maximumTotalBytes: Int64
    private let lock = Lock()
    // Opened on first use; a cache that cannot be opened is not used (symbolication works without).
    private var directory: DatabaseDirectory?
    private var openFailed = false
    private var openError: String?

    package init(path: String, maximumTotalBytes: Int64 = SymbolCache.defaultMaximumTotalBytes) {
        self.path = path
        self.maximumTotalBytes = max(0, maximumTotalBytes)
    }

    deinit { directory?.closeDirectory() }

    /// `HANGWATCH_SYMBOL_CACHE`: `off` for none, an absolute path for that directory; else
    /// `$XDG_CACHE_HOME/hangwatch/symbols`, else `~/.cache/hangwatch/symbols`.
    package static func standard(environment: [String: String]) -> SymbolCache? {
        if let setting = environment["HANGWATCH_SYMBOL_CACHE"], !setting.isEmpty {
            if ["off", "0", "no", "false"].contains(setting.lowercased()) { return nil }
            return setting.hasPrefix("/") ? SymbolCache(path: setting) : nil
        }
        if let cache = environment["XDG_CACHE_HOME"], cache.hasPrefix("/") { return SymbolCache(path: cache + "/hangwatch/symbols") }
        guard let home = UserDirectories.home(environment: environment), home.hasPrefix("/") else { return nil }
        return SymbolCache(path: home + "/.cache/hangwatch/symbols")
    }

    /// What an entry is keyed by; `name` is its file name in the cache.
    package struct Key: Equatable, Sendable {
        package var name: String
        package var identity: String
    }

    /// The key of `modulePath`'s index (nil when the file cannot be stat'ed). `debugFile` is
    /// the separate debug file libdw will read beside it, if any.
    package static func key(modulePath: String, buildID: String, debugFile: String?, namesOnly: Bool) -> Key? {
        func fileIdentity(_ path: String) -> String? {
            var info = stat()
            guard stat(path, &info) == 0, info.st_mode & S_IFMT == S_IFREG else { return nil }
            return "\(info.st_dev):\(info.st_ino):\(info.st_size):\(info.st_mtim.tv_sec).\(info.st_mtim.tv_nsec)"
        }
        guard let module = fileIdentity(modulePath) else { return nil }
        let lowered = buildID.lowercased()
        let hexID = BuildID.isPlainHex(lowered) && lowered.count <= 128 ? lowered : ""
        let debug = debugFile.flatMap(fileIdentity) ?? "none"
        let identity = "hangwatch-symbols \(SymbolIndex.formatVersion)\nbuild-id \(hexID)\nfile \(module)\ndebug-file \(debug)\nmode \(namesOnly ? "names" : "full")\n"
        let digest = String(SymbolIndex.hash(identity), radix: 16)
        let prefix = hexID.isEmpty ? "no-build-id" : String(hexID.prefix(40))
        return Key(name: "\(prefix)-\(digest)\(fileExtension)", identity: identity)
    }

    /// Whether the directory can be used (created or opened, the user's own): when it cannot,
    /// symbolication does not build indexes at all and stays with libdw.
    package var isUsable: Bool {
        lock.lock()
        defer { lock.unlock() }
        return openLocked() != nil
    }

    /// The stored index for `key`, nil when there is none or it does not check out (then it
    /// is removed, if it is ours).
    package func load(_ key: Key) -> SymbolIndex? {
        lock.lock()
        defer { lock.unlock() }
        guard let directory = openLocked() else { return nil }
        // Another user's entry (or a link, a FIFO, one too large) is neither used nor removed.
        guard let opened = try? directory.openOwnFile(key.name, limit: Int64(Self.defaultMaximumEntryBytes)) else { return nil }
        // Read as lookups reach it, not whole (IndexBytes).
        let storage = IndexBytes(file: opened.file, size: Int(opened.size))
        do {
            let index = try SymbolIndex(storage: storage, expectedIdentity: key.identity)
            directory.touch(key.name)
            return index
        } catch {
            let header = storage.withBytes(0..<min(storage.count, SymbolIndex.magic.count)) { Array($0) }
            if header == SymbolIndex.magic { _ = try? directory.remove(key.name) }
            return nil
        }
    }

    /// Stores `index` under `key` (atomically: a reader sees the old entry or the new one; of two
    /// processes adding answers at once, the last rename wins and the other's answers are asked
    /// again next time), then prunes the cache to its bound. Failures only cost the next run time.
    package func store(_ index: SymbolIndex, as key: Key) {
        lock.lock()
        defer { lock.unlock() }
        guard let directory = openLocked() else { return }
        // The rename would replace it: something not ours under our name stays as it is.
        if let existing = try? directory.entry(key.name),
           !(existing.isRegularFile && existing.isOwnAndPrivate && directory.startsWithOneOf([SymbolIndex.magic], key.name, emptyCounts: false)) {
            return
        }
        do {
            // Megabytes: written from the index's own bytes, not copied into a Data first.
            guard let bytes = index.storage.inMemory else { return }  // only a built index is stored
            try directory.writeAtomically(key.name, durable: false) { file in
                try directory.writeAll(file, bytes, name: key.name)
            }
        } catch {
            return
        }
        pruneLocked(directory, keeping: key.name)
    }

    /// Why the cache is not used (its directory refused: a link, another user's, someone else's
    /// files in it; or it cannot be made), once that was found; nil while it is usable.
    package var refusal: String? {
        lock.lock()
        defer { lock.unlock() }
        return openError
    }

    /// The cache's subdirectory `name` (made 0700 when missing; never a link, only the user's
    /// own), for what is kept beside the indexes: debuginfod's files (Debuginfod.swift). The
    /// caller closes it.
    package func openSubdirectory(_ name: String) throws -> DatabaseDirectory {
        lock.lock()
        defer { lock.unlock() }
        guard let directory = openLocked() else { throw Refused(description: openError ?? "the symbol cache \(path) cannot be used") }
        return try directory.openSubdirectory(name)
    }

    /// The cache's directory was refused (`refusal`).
    package struct Refused: Error, CustomStringConvertible {
        package var description: String
    }

    /// Prunes the cache to its bounds now (as every store does): what `hangwatch prune` runs.
    package func prune() {
        lock.lock()
        defer { lock.unlock() }
        guard let directory = openLocked() else { return }
        pruneLocked(directory, keeping: "")
    }

    private func openLocked() -> DatabaseDirectory? {
        if let directory { return directory }
        if openFailed { return nil }
        do {
            directory = try TrustedPath.openDirectory(path, leaf: Self.leaf)
        } catch {
            openError = "\(error)"
            openFailed = true
        }
        return directory
    }

    /// Least recently used (modification time, touched on every hit) entries go first until the
    /// cache fits; writers' leftovers older than an hour go too, and sighting marks older than
    /// `sightingAge`. Only our own files are counted or removed: named as we name entries,
    /// marks (or their temporaries), the user's own, and starting as an index or a mark does (a
    /// temporary may still be empty). Anything else is left alone.
    private func pruneLocked(_ directory: DatabaseDirectory, keeping kept: String) {
        guard let entries = try? directory.entries() else { return }
        let now = Date()
        let ours = entries.filter { $0.isRegularFile && $0.isOwnAndPrivate }
        for entry in ours where now.timeIntervalSince(entry.modificationDate) > Self.abandonedTemporaryAge
            && Self.isTemporaryName(entry.name) && directory.startsWithOneOf([SymbolIndex.magic, Self.seenMagic], entry.name) {
            _ = try? directory.remove(entry.name)
        }
        for entry in ours where now.timeIntervalSince(entry.modificationDate) > Self.sightingAge
            && entry.name.hasSuffix(Self.sightingExtension) && !entry.name.hasPrefix(".")
            && directory.startsWithOneOf([Self.seenMagic], entry.name, emptyCounts: false) {
            _ = try? directory.remove(entry.name)
        }
        directory.removeLeastRecentlyUsed(ours.filter { $0.name.hasSuffix(Self.fileExtension) && !$0.name.hasPrefix(".") },
                                          toFit: maximumTotalBytes, keeping: kept, header: SymbolIndex.magic)
    }

    /// `.tmp-<entry or mark name>-<pid>-<random>`, as DatabaseDirectory.writeAtomically names them.
    static func isTemporaryName(_ name: String) -> Bool {
        guard let final = DatabaseNames.finalName(ofTemporary: name) else { return false }
        return (final.hasSuffix(fileExtension) || final.hasSuffix(sightingExtension)) && !final.contains("/")
    }
}

extension DatabaseDirectory {
    /// Removes the least recently used (modification time) of `files` until those left take at
    /// most `limit` bytes on disk: never `kept`, nor a file that does not start with `header`
    /// (not ours). The symbol cache's indexes and debuginfod's files are pruned so.
    func removeLeastRecentlyUsed(_ files: [DirectoryEntry], toFit limit: Int64, keeping kept: String, header: [UInt8]) {
        var total = files.reduce(Int64(0)) { $0 + $1.diskBytes }
        guard total > limit else { return }
        for file in files.sorted(by: { $0.modificationDate < $1.modificationDate }) where total > limit && file.name != kept
            && startsWithOneOf([header], file.name, emptyCounts: false) {
            if (try? remove(file.name)) == true { total -= file.diskBytes }
        }
    }
}
