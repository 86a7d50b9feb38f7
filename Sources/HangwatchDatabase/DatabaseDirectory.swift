// One open directory of the database and the *at() system calls done relative to it.
// Holding a directory descriptor (opened O_NOFOLLOW) means a symlink planted later in
// place of a subdirectory changes nothing: every name below is resolved inside the real
// directory, and every file is opened O_NOFOLLOW, so no link inside the database is ever
// followed.
#if canImport(Glibc)
import HangwatchSnapshot
import HangwatchPlatform
import Glibc
#endif
import FoundationEssentials

/// A directory entry as seen by `lstat` (links are reported as links, never followed).
package struct DirectoryEntry: Sendable {
    package var name: String
    package var isRegularFile: Bool
    var isSymlink: Bool
    var isDirectory: Bool
    package var size: Int64
    /// The space the file takes on disk (allocated blocks). A sparse file's size does not reflect it.
    package var diskBytes: Int64
    package var modificationDate: Date
    /// Owned by this process's effective user and writable by nobody else: the least a file
    /// must be before we read it as ours or remove it.
    package var isOwnAndPrivate: Bool
}

package struct DatabaseDirectory: Sendable {
    let fd: Int32
    let path: String

    static let directoryMode: mode_t = 0o700
    static let fileMode: mode_t = 0o600

    package func pathOf(_ name: String) -> String { path + "/" + name }

    func fail(_ operation: String, _ name: String, _ code: Int32 = errno) -> DatabaseError {
        .system(operation: operation, path: pathOf(name), errno: code)
    }

    /// The lease file `name` opened (not through a link, not inherited) and locked exclusively
    /// without waiting; nil with errno set: EWOULDBLOCK when another process holds the lock, the
    /// open's error (ENOENT when there is no such lease) otherwise. The kernel drops the lock
    /// when its holder dies, whatever pid namespace it is in; this is how staged hangs and run
    /// records detect that their owner is gone. Only a regular file is a lease of ours. Anything
    /// else in its place (a FIFO, a device) is neither locked nor, later, removed (nil, errno
    /// `ENOTSUP`).
    package func lockLease(_ name: String, creating: Bool) -> Int32? {
        let fd = openat(self.fd, name, O_RDWR | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK | (creating ? O_CREAT : 0),
                        Self.fileMode)
        guard fd >= 0 else { return nil }
        var info = stat()
        guard fstat(fd, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else {
            close(fd)
            errno = ENOTSUP
            return nil
        }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            let code = errno
            close(fd)
            errno = code
            return nil
        }
        if creating { _ = fchmod(fd, Self.fileMode) }
        return fd
    }

    /// Opens (creating if missing) the subdirectory `name`, refusing a symlink or a file in its place.
    package func openSubdirectory(_ name: String, create: Bool = true) throws -> DatabaseDirectory {
        if create, mkdirat(fd, name, Self.directoryMode) != 0, errno != EEXIST {
            throw fail("create directory", name)
        }
        let child = openat(fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard child >= 0 else {
            let code = errno
            throw Self.classifyOpenFailure(code, path: pathOf(name), lstat: { try? self.entry(name) })
        }
        let directory = DatabaseDirectory(fd: child, path: pathOf(name))
        do {
            try directory.enforcePrivateMode()
        } catch {
            close(child)
            throw error
        }
        return directory
    }

    /// Refuses a directory another user owns (its owner could read or replace what we write, as
    /// ssh refuses such key directories; root included), then tightens it to 0700 whatever the
    /// umask was when it was made (mkdir applies it).
    func enforcePrivateMode() throws {
        let info = try checkOwner()
        if info.st_mode & 0o7777 != Self.directoryMode, fchmod(fd, Self.directoryMode) != 0 {
            throw DatabaseError.system(operation: "set mode 0700 on", path: path, errno: errno)
        }
    }

    /// The directory's stat, refused (`notOwned`) unless this process's effective user owns it.
    @discardableResult
    func checkOwner() throws -> stat {
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw DatabaseError.system(operation: "stat", path: path, errno: errno) }
        guard info.st_uid == geteuid() else { throw DatabaseError.notOwned(path: path, owner: info.st_uid, user: geteuid()) }
        return info
    }

    static func classifyOpenFailure(_ code: Int32, path: String, lstat: () -> DirectoryEntry?) -> DatabaseError {
        if code == ELOOP { return .symlinkRefused(path: path) }
        if code == ENOTDIR {
            if let entry = lstat(), entry.isSymlink { return .symlinkRefused(path: path) }
            return .notADirectory(path: path)
        }
        return .system(operation: "open", path: path, errno: code)
    }

    /// lstat-like information about `name`, or nil when it does not exist.
    package func entry(_ name: String) throws -> DirectoryEntry? {
        var info = stat()
        guard fstatat(fd, name, &info, AT_SYMLINK_NOFOLLOW) == 0 else {
            if errno == ENOENT { return nil }
            throw fail("stat", name)
        }
        return Self.makeEntry(name, info)
    }

    static func makeEntry(_ name: String, _ info: stat) -> DirectoryEntry {
        let type = info.st_mode & S_IFMT
        let seconds = Double(info.st_mtim.tv_sec) + Double(info.st_mtim.tv_nsec) / 1e9
        return DirectoryEntry(name: name, isRegularFile: type == S_IFREG, isSymlink: type == S_IFLNK,
                              isDirectory: type == S_IFDIR, size: Int64(info.st_size), diskBytes: Int64(info.st_blocks) * 512,
                              modificationDate: Date(timeIntervalSince1970: seconds),
                              isOwnAndPrivate: info.st_uid == geteuid() && info.st_mode & 0o022 == 0)
    }

    /// All names in the directory except "." and "..", with lstat information. Entries that
    /// vanish between readdir and lstat (claimed by another process) are simply skipped.
    package func entries() throws -> [DirectoryEntry] {
        // A new open file description, not dup(): a dup shares the read offset, and two
        // threads listing the same directory at once would skip each other's entries.
        let copy = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard copy >= 0 else { throw DatabaseError.system(operation: "open", path: path, errno: errno) }
        guard let stream = fdopendir(copy) else {
            let code = errno
            close(copy)
            throw DatabaseError.system(operation: "list", path: path, errno: code)
        }
        defer { closedir(stream) } // also closes `copy`
        var names: [String] = []
        while true {
            errno = 0
            guard let record = readdir(stream) else {
                if errno != 0 { throw DatabaseError.system(operation: "list", path: path, errno: errno) }
                break
            }
            let name = directoryEntryName(record)
            if name != "." && name != ".." { names.append(name) }
        }
        return try names.compactMap { try entry($0) }
    }

    /// Opens an existing file for reading without following links and without blocking on a
    /// planted FIFO; refuses anything that is not a regular file.
    func openForReading(_ name: String) throws -> Int32 {
        let file = openat(fd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK)
        guard file >= 0 else {
            let code = errno
            if code == ENOENT { throw fail("open", name, code) }
            throw Self.classifyOpenFailure(code, path: pathOf(name), lstat: { try? self.entry(name) })
        }
        var info = stat()
        guard fstat(file, &info) == 0 else { let code = errno; close(file); throw fail("stat", name, code) }
        guard info.st_mode & S_IFMT == S_IFREG else { close(file); throw DatabaseError.notARegularFile(path: pathOf(name)) }
        return file
    }

    /// Whether the regular file `name` is empty or starts with one of `headers`. This is how a file
    /// is identified as one that hangwatch wrote before anything deletes it (its name alone is not enough).
    package func startsWithOneOf(_ headers: [[UInt8]], _ name: String, emptyCounts: Bool = true) -> Bool {
        guard let file = try? openForReading(name) else { return false }
        defer { close(file) }
        let longest = headers.map(\.count).max() ?? 0
        var start = [UInt8](repeating: 0, count: longest)
        let count = start.withUnsafeMutableBytes { pread(file, $0.baseAddress, $0.count, 0) }
        if count == 0 { return emptyCounts }
        guard count > 0 else { return false }
        return headers.contains { header in count >= header.count && start[0..<header.count].elementsEqual(header) }
    }

    /// A regular file opened for reading (`openForReading`) with its size, refused when it is
    /// larger than `limit` bytes. The caller closes it.
    package func openBounded(_ name: String, limit: Int64) throws -> (file: Int32, size: Int64) {
        let file = try openForReading(name)
        var info = stat()
        guard fstat(file, &info) == 0 else {
            let code = errno
            close(file)
            throw fail("stat", name, code)
        }
        let size = Int64(info.st_size)
        guard size <= limit else {
            close(file)
            throw DatabaseError.fileTooLarge(path: pathOf(name), size: size, limit: limit)
        }
        return (file, size)
    }

    /// Reads a whole regular file, refusing one larger than `limit` bytes.
    package func readFile(_ name: String, limit: Int64) throws -> Data {
        let (file, size) = try openBounded(name, limit: limit)
        defer { close(file) }
        // Reading one byte more than announced distinguishes a file that grew since fstat from one that did not.
        var buffer = [UInt8](repeating: 0, count: Int(size) + 1)
        var total = 0
        while total < buffer.count {
            let count = buffer.withUnsafeMutableBytes { read(file, $0.baseAddress! + total, $0.count - total) }
            if count < 0 {
                if errno == EINTR { continue }
                throw fail("read", name)
            }
            if count == 0 { break }
            total += count
        }
        guard Int64(total) == size else {
            throw DatabaseError.sizeChanged(path: pathOf(name), expected: size, actual: Int64(total))
        }
        return Data(buffer[0..<total])
    }

    /// A whole regular file read into new memory (aligned for 8-byte loads; the caller
    /// deallocates it), or nil when it is not one we can trust: owned by another user, writable
    /// by others, a link or not a regular file, larger than `limit`. The file is read, not mapped:
    /// if someone truncated a mapped file while it was in use, the reader would be killed with SIGBUS.
    package func readOwnFile(_ name: String, limit: Int64) throws -> UnsafeMutableRawBufferPointer? {
        let (file, size) = try openBounded(name, limit: limit)
        defer { close(file) }
        var info = stat()
        guard fstat(file, &info) == 0, info.st_uid == geteuid(), info.st_mode & 0o022 == 0 else { return nil }
        let memory = UnsafeMutableRawBufferPointer.allocate(byteCount: Int(size), alignment: 8)
        var total = 0
        while total < memory.count {
            let count = read(file, memory.baseAddress! + total, memory.count - total)
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { break }
            total += count
        }
        guard total == memory.count else {
            memory.deallocate()
            throw DatabaseError.sizeChanged(path: pathOf(name), expected: size, actual: Int64(total))
        }
        return memory
    }

    /// A regular file opened for reading and its size, when it is one we can trust (as
    /// `readOwnFile` judges: the user's own, writable by nobody else, not larger than `limit`);
    /// nil otherwise. The caller reads it as it needs (pread) and closes it.
    package func openOwnFile(_ name: String, limit: Int64) throws -> (file: Int32, size: Int64)? {
        let (file, size) = try openBounded(name, limit: limit)
        var info = stat()
        guard fstat(file, &info) == 0, info.st_uid == geteuid(), info.st_mode & 0o022 == 0 else {
            close(file)
            return nil
        }
        return (file, size)
    }

    /// Creates a new file exclusively (never reusing or following an existing name), mode 0600.
    package func createExclusive(_ name: String, flags: Int32 = O_WRONLY) throws -> Int32 {
        let file = openat(fd, name, flags | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY, Self.fileMode)
        guard file >= 0 else { throw fail("create", name) }
        // The umask may have removed bits from 0600 (e.g. umask 0277): set the mode explicitly.
        if fchmod(file, Self.fileMode) != 0 {
            let code = errno
            close(file)
            unlinkat(fd, name, 0)
            throw fail("set mode 0600 on", name, code)
        }
        return file
    }

    package func writeAll(_ file: Int32, _ bytes: Data, name: String) throws {
        try bytes.withUnsafeBytes { try writeAll(file, $0, name: name) }
    }

    package func writeAll(_ file: Int32, _ raw: UnsafeRawBufferPointer, name: String) throws {
        var offset = 0
        while offset < raw.count {
            let count = write(file, raw.baseAddress! + offset, raw.count - offset)
            if count < 0 {
                if errno == EINTR { continue }
                throw fail("write", name)
            }
            offset += count
        }
    }

    /// Writes a complete temporary file (0600) next to its final name — `write` fills it, then
    /// it is fsynced when `durable` — and returns the temporary name; on any failure the
    /// temporary file is removed, so nothing half-written stays. `readable`: `write` may read
    /// back what it wrote (the descriptor is open for both).
    func writeTemporary(for finalName: String, durable: Bool = true, readable: Bool = false, _ write: (Int32) throws -> Void) throws -> String {
        let temporary = DatabaseNames.temporaryName(for: finalName)
        let file = try createExclusive(temporary, flags: readable ? O_RDWR : O_WRONLY)
        do {
            try write(file)
            if durable && fsync(file) != 0 { throw fail("flush", temporary) }
            if close(file) != 0 { throw fail("close", temporary) }
        } catch {
            close(file)
            unlinkat(fd, temporary, 0)
            throw error
        }
        return temporary
    }

    /// The one atomic file write (docs/database.md): an exclusive temporary file beside `name`
    /// (0600, never through a link), written by `write`, fsynced when `durable`, then renamed
    /// over `name`. Readers see the old file or the new one, never a mix; a symlink planted at
    /// `name` is replaced by the file (rename does not follow it).
    /// `readable`: `write` may read back what it wrote.
    package func writeAtomically(_ name: String, durable: Bool = true, readable: Bool = false, _ write: (Int32) throws -> Void) throws {
        let temporary = try writeTemporary(for: name, durable: durable, readable: readable, write)
        guard renameat(fd, temporary, fd, name) == 0 else {
            let code = errno
            unlinkat(fd, temporary, 0)
            throw fail("rename \(temporary) to", name, code)
        }
    }

    package func writeAtomically(_ name: String, _ bytes: Data, durable: Bool = true) throws {
        try writeAtomically(name, durable: durable) { file in try writeAll(file, bytes, name: name) }
    }

    /// The directory containing `path` (opened as named, because a link among its parents is the
    /// user's choice), and the file name within it. Used for paths given by a user or by one of our
    /// programs; files there are then created, read and replaced with the same rules as in the database.
    /// Close the directory after use.
    package static func openParent(of path: String) throws -> (directory: DatabaseDirectory, name: String) {
        let slash = path.lastIndex(of: "/")
        let name = slash.map { String(path[path.index(after: $0)...]) } ?? path
        let parent = slash.map { $0 == path.startIndex ? "/" : String(path[..<$0]) } ?? "."
        guard !name.isEmpty, name != ".", name != ".." else { throw DatabaseError.notARegularFile(path: path) }
        let fd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw DatabaseError.system(operation: "open directory", path: parent, errno: errno) }
        return (DatabaseDirectory(fd: fd, path: parent), name)
    }

    /// For directories from `openParent`; the database's own stay open for its lifetime.
    package func closeDirectory() { _ = close(fd) }

    /// rename(2) between two database directories. Returns false when the source is gone
    /// (someone else renamed it first: the loser of a claim race).
    func move(_ name: String, to destination: DatabaseDirectory, as newName: String) throws -> Bool {
        if renameat(fd, name, destination.fd, newName) == 0 { return true }
        if errno == ENOENT { return false }
        throw DatabaseError.system(operation: "rename \(pathOf(name)) to", path: destination.pathOf(newName), errno: errno)
    }

    /// unlink(2); returns false when the name was already gone.
    @discardableResult
    package func remove(_ name: String) throws -> Bool {
        if unlinkat(fd, name, 0) == 0 { return true }
        if errno == ENOENT { return false }
        throw fail("remove", name)
    }

    func sync() { fsync(fd) }

    /// Sets `name`'s modification time to now (never through a link): marks a cache entry used.
    package func touch(_ name: String) {
        _ = utimensat(fd, name, nil, AT_SYMLINK_NOFOLLOW)
    }
}
