// The single primitive underlying every record that a live process owns in the database: a staged
// hang (staging/<bundle>@<id>.hang.*, StagingArea.swift), a run record (runs/<bundle>@<id>.run.*,
// RunRecords.swift), a dump being written or claimed (intermediate/ and processing/,
// DatabaseNames.swift). Each record is
//   - named `<bundle>@<id><tail>` (RecordName is the only codec of that name),
//   - owned through a lease (LeasedFiles: a regular file of ours that the owner keeps locked with
//     flock; the kernel drops the lock when the owner dies, in whatever pid namespace),
//   - or, where there is no lease, judged by who its owner was (RecordOwner: boot id, pid
//     namespace when recorded, pid and start time; a zombie counts as dead).
// Everything is done relative to the directory's descriptor (*at() calls), never through a
// link, on regular files only, 0600.
import HangwatchPlatform
import HangwatchSnapshot
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// `<bundle>@<id><tail>`: a bundle id `DatabaseNames.validateBundleID` accepts, `@` (which no
/// bundle id contains), a UUID of 36 characters, then what the record's kind adds (a suffix, or
/// `~` fields and a suffix). Every record name in the database is built and parsed here.
package struct RecordName: Sendable, Hashable {
    package let bundleID: String
    /// As spelled in the file name (kept verbatim so that names round-trip exactly).
    package let id: String

    /// A name of parts already checked (parsed, or made by `new`).
    init(bundleID: String, id: String) {
        self.bundleID = bundleID
        self.id = id
    }

    /// A new record of `bundleID` under a new UUID, lowercase (staged hangs, run records) or as
    /// `UUID` spells it (dumps).
    static func new(bundleID: String, lowercase: Bool) throws -> RecordName {
        try DatabaseNames.validateBundleID(bundleID)
        let id = UUID().uuidString
        return RecordName(bundleID: bundleID, id: lowercase ? id.lowercased() : id)
    }

    /// `bundleID`@`id` as a caller names it (a message, a processor): nil unless both are valid;
    /// the id lowercase, as staged hangs and run records spell it.
    package static func lowercase(bundleID: String, id: String) -> RecordName? {
        guard (try? DatabaseNames.validateBundleID(bundleID)) != nil, id.utf8.count == 36, UUID(uuidString: id) != nil else { return nil }
        return RecordName(bundleID: bundleID, id: id.lowercased())
    }

    /// The file name of this record's file `tail`.
    package func fileName(_ tail: String) -> String { "\(bundleID)@\(id)\(tail)" }

    /// The record `fileName` names, and what follows its id; nil when it is not a `<bundle>@<uuid>…` name.
    static func parse(_ fileName: String) -> (RecordName, tail: Substring)? {
        guard let at = fileName.firstIndex(of: "@") else { return nil }
        let bundleID = String(fileName[..<at])
        guard (try? DatabaseNames.validateBundleID(bundleID)) != nil else { return nil }
        let rest = fileName[fileName.index(after: at)...]
        let idBytes = rest.utf8.prefix(36)
        let id = String(decoding: idBytes, as: UTF8.self)
        guard idBytes.count == 36, UUID(uuidString: id) != nil else { return nil }
        return (RecordName(bundleID: bundleID, id: id), rest[idBytes.endIndex...])
    }

    /// The record `fileName` names when it is exactly `<bundle>@<uuid><suffix>`.
    static func parse(_ fileName: String, suffix: String) -> RecordName? {
        guard let (name, tail) = parse(fileName), tail == suffix else { return nil }
        return name
    }

    /// What follows the id in `tail` before `suffix`, as `~`-separated fields (none for a tail that
    /// is `suffix` alone); nil when `tail` does not end in `suffix` or does not start with `~`.
    static func fields(of tail: Substring, suffix: String) -> [Substring]? {
        guard tail.hasSuffix(suffix) else { return nil }
        let core = tail.dropLast(suffix.count)
        if core.isEmpty { return [] }
        guard core.hasPrefix("~") else { return nil }
        return core.dropFirst().split(separator: "~", omittingEmptySubsequences: false)
    }
}

/// Who owns a record, precisely enough to distinguish "that process ended" from "its pid was reused":
/// boot id and pid namespace (when the record has them), pid, and the process's start time
/// (clock ticks since boot, /proc/PID/stat field 22).
package struct RecordOwner: Sendable, Equatable {
    /// /proc/sys/kernel/random/boot_id as ProcFS.bootID spells it; nil when the record has none.
    var bootID: String?
    /// The inode of its pid namespace (0: unreadable); nil when the record has none.
    var pidNamespace: UInt64?
    var pid: Int32
    var startTicks: UInt64

    init(bootID: String?, pidNamespace: UInt64?, pid: Int32, startTicks: UInt64) {
        self.bootID = bootID
        self.pidNamespace = pidNamespace
        self.pid = pid
        self.startTicks = startTicks
    }

    /// The calling process. Computed per call: a forked child must not pass for its parent.
    static func current() -> RecordOwner {
        let pid = getpid()
        return RecordOwner(bootID: ProcFS.bootID(), pidNamespace: ProcFS.pidNamespace(), pid: pid,
                           startTicks: ProcFS.startTicks(of: pid) ?? 0)
    }

    package enum Liveness: Sendable { case alive, dead, unknown }

    /// Whether the owner still runs, as far as `observer` can see: dead on another boot, when its
    /// pid is gone, a zombie or another process (another start time); not known across pid
    /// namespaces (nor when /proc has no information about a pid that exists).
    func liveness(seenFrom observer: RecordOwner = .current()) -> Liveness {
        guard pid > 0 else { return .dead }  // no process has this pid
        if let bootID, bootID != observer.bootID { return .dead }  // the machine rebooted since
        if let pidNamespace, pidNamespace != observer.pidNamespace || pidNamespace == 0 { return .unknown }
        if kill(pid, 0) != 0 && errno == ESRCH { return .dead }
        guard let (state, ticks) = ProcFS.stateAndStartTicks(of: pid) else { return .unknown }
        if state.hasExited { return .dead }  // exited, not yet reaped by its parent
        return ticks == startTicks ? .alive : .dead  // a different start time: the pid was reused
    }

    /// `<boot>~<pidns>~<pid>~<start>`: how a claim name spells its claimer.
    var fields: String { "\(bootID ?? "0")~\(pidNamespace ?? 0)~\(pid)~\(startTicks)" }

    init?(fields: [Substring]) {
        guard fields.count == 4, !fields[0].isEmpty, fields[0].allSatisfy(\.isHexDigit),
              let namespace = UInt64(fields[1]), let pid = Int32(fields[2]), pid > 0,
              let ticks = UInt64(fields[3]) else { return nil }
        self.init(bootID: String(fields[0]), pidNamespace: namespace, pid: pid, startTicks: ticks)
    }
}

/// What trying a record's lease found.
package enum LeaseProbe: Sendable, Equatable {
    /// It was free and is now locked by this process (the descriptor; release it with `LeasedFiles.release`).
    case taken(Int32)
    /// Its owner holds it, so the owner is alive.
    case ownerHolds
    /// No lease file (ENOENT).
    case missing
    /// Something that is no lease of ours in its place (a FIFO, a device, a link): never taken nor removed.
    case notALease
    /// It could not be opened for another reason (errno).
    case unavailable(Int32)

    /// The lease to hold while the record is judged: the one just taken, or none (-1) when there is
    /// no lease file. Nil while its owner is alive, or when the lease is not one of ours.
    var heldOrNone: Int32? {
        switch self {
        case .taken(let fd): fd
        case .missing: -1
        case .ownerHolds, .notALease, .unavailable: nil
        }
    }
}

/// The files of one kind of leased record in one directory: `<bundle>@<id><suffix>` for each of
/// them, and `<bundle>@<id><leaseSuffix>`, the lease that its owner keeps locked while it is alive.
package struct LeasedFiles: Sendable {
    let directory: DatabaseDirectory
    let leaseSuffix: String

    /// Creates and locks the lease of `name` (0600, not through a link, not inherited by
    /// programs this process runs); its descriptor.
    func take(_ name: RecordName) throws -> Int32 {
        let leaseName = name.fileName(leaseSuffix)
        guard let fd = directory.lockLease(leaseName, creating: true) else { throw directory.fail("lock", leaseName) }
        return fd
    }

    /// Tries to lock the lease of `name` as it is (never creating it).
    func probe(_ name: RecordName) -> LeaseProbe { directory.probeLease(name.fileName(leaseSuffix)) }

    /// Releases a lease held by this process (-1: none), and leaves its file in place.
    func release(_ lease: Int32) {
        if lease >= 0 { close(lease) }
    }

    /// Removes the record's files `tails`, in that order, then its lease file (unlinked, never
    /// opened, so an owner still holding it sees that it is gone), and releases the lease held by
    /// this process (-1: none). The lease is removed last: until every other file is gone, nobody
    /// mistakes the record for an orphan.
    func remove(_ name: RecordName, _ tails: [String], lease: Int32) {
        for tail in tails { _ = try? directory.remove(name.fileName(tail)) }
        _ = try? directory.remove(name.fileName(leaseSuffix))
        release(lease)
    }

    /// Every record with a regular file `<bundle>@<uuid><suffix>` here, in directory order.
    func records(withFile suffix: String) -> [RecordName] {
        ((try? directory.entries()) ?? []).compactMap { entry in
            entry.isRegularFile ? RecordName.parse(entry.name, suffix: suffix) : nil
        }
    }
}

extension DatabaseDirectory {
    /// `lockLease(name, creating: false)`, reporting what it found.
    func probeLease(_ name: String) -> LeaseProbe {
        if let fd = lockLease(name, creating: false) { return .taken(fd) }
        switch errno {
        case EWOULDBLOCK: return .ownerHolds
        case ENOENT: return .missing
        case ENOTSUP: return .notALease
        case let code: return .unavailable(code)
        }
    }
}
