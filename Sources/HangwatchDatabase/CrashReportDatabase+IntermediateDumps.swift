// Writing, claiming and retiring intermediate dumps. Every state change is a single
// rename(2) of a name that only one process can win: of N processes renaming the same
// source, one succeeds and the others get ENOENT. That is the whole locking protocol.
import HangwatchPlatform
import HangwatchSnapshot
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// A pre-opened `<bundle>@<uuid>.locked` file. `fd` is a plain descriptor that a signal
/// handler may `write(2)` to; the writer holds a flock(2) on it as a liveness lease (see
/// docs/database.md), released automatically when the process dies.
package struct IntermediateDumpFile: Sendable, Equatable {
    package let fd: Int32
    package let path: String
    package let uuid: UUID
    package let bundleID: String
    package let name: DumpName
}

/// A dump this process has claimed. It stays in processing/ until `completeClaim`
/// (processed), `releaseClaim` (retry later) or `failClaim` (give up).
package struct ClaimedDump: Sendable, Equatable {
    package let bundleID: String
    package let uuid: UUID
    /// Where the claimed dump is now (in processing/).
    package let path: String
    /// The writer never finished it (an abandoned `.locked` file), so the report is incomplete.
    package let abandoned: Bool
    /// 1 for the first claim; more when earlier processors failed or died.
    package let attempt: Int
    package let size: Int64
    /// Last write to the dump by its writer.
    package let modificationDate: Date
    package let name: DumpName
    let claimName: String
    /// Which dump it is.
    package var key: DumpKey { name.key }
}

extension CrashReportDatabase {
    // MARK: writing

    /// Pre-opens a new dump file, `<bundle>@<uuid>.locked`, 0600, created exclusively. It is
    /// created under a temporary name, locked (the lease), and only then renamed. A `.locked`
    /// file without a lease therefore always belongs to a dead writer, and is processed at once.
    package func createIntermediateDump(bundleID: String) throws -> IntermediateDumpFile {
        let name = DumpName(record: try .new(bundleID: bundleID, lowercase: false), abandoned: false, attempts: 0)
        let uuid = UUID(uuidString: name.uuidText)!
        let temporary = DatabaseNames.temporaryName(for: name.lockedName)
        let fd = try intermediate.createExclusive(temporary)
        // The lease. A claimer that cannot take this lock knows that the writer is alive, however old the file is.
        guard flock(fd, LOCK_EX | LOCK_NB) == 0, renameat(intermediate.fd, temporary, intermediate.fd, name.lockedName) == 0 else {
            let error = intermediate.fail("lock and name", name.lockedName)
            close(fd)
            unlinkat(intermediate.fd, temporary, 0)
            throw error
        }
        return IntermediateDumpFile(fd: fd, path: intermediate.pathOf(name.lockedName), uuid: uuid, bundleID: bundleID, name: name)
    }

    /// Flushes the dump and renames it to `<bundle>@<uuid>.hwdump`, which makes it claimable.
    /// Closes the descriptor. Returns the new path.
    @discardableResult
    package func finish(_ file: IntermediateDumpFile) throws -> String {
        defer { close(file.fd) } // after the rename, because the lease must cover the whole transition
        if fsync(file.fd) != 0 && errno != EINVAL { throw intermediate.fail("flush", file.name.lockedName) }
        guard try intermediate.move(file.name.lockedName, to: intermediate, as: file.name.finishedName) else {
            throw DatabaseError.claimLost(path: file.path)
        }
        intermediate.sync()
        return intermediate.pathOf(file.name.finishedName)
    }

    /// Closes and removes a pre-opened dump that will not be used.
    package func discard(_ file: IntermediateDumpFile) throws {
        defer { close(file.fd) }
        try intermediate.remove(file.name.lockedName)
    }

    /// Whether `path` names this database's own directory (compared by device and inode).
    package func isSameDirectory(as path: String) -> Bool {
        var named = stat(), own = stat()
        guard stat(path, &named) == 0, fstat(root.fd, &own) == 0 else { return false }
        return named.st_dev == own.st_dev && named.st_ino == own.st_ino
    }

    // MARK: claiming

    /// Claims up to `limit` dumps, oldest first, for processing by this process:
    /// - every finished `.hwdump`, whatever its bundle id (any client sharing the database
    ///   may process the others' dumps, as in Crashpad);
    /// - `.locked` files whose writer died (no process holds the lease; tagged `abandoned`),
    ///   whatever their bundle id, once older than `deadWriterGrace`;
    /// - claims in processing/ whose claimer died, or older than `staleClaimAge`.
    /// Dumps already tried `maxProcessingAttempts` times go to failed/ instead.
    /// An abandoned `.locked` file that is empty contains nothing to process and is removed.
    package func claimIntermediateDumps(bundleID: String, now: Date = Date(), limit: Int = .max) throws -> [ClaimedDump] {
        try DatabaseNames.validateBundleID(bundleID)
        var claims: [ClaimedDump] = []
        for candidate in try claimableIntermediateDumps(now: now) where claims.count < limit {
            if let claim = try claim(candidate, now: now) { claims.append(claim) }
        }
        return claims
    }

    /// A dump that may be claimed, as one scan found it (oldest first).
    package struct ClaimCandidate: Sendable {
        /// Its name in intermediate/ or processing/.
        package let fileName: String
        let name: DumpName
        /// Which dump it is.
        package var key: DumpKey { name.key }
        let size: Int64
        let modificationDate: Date
        let inProcessing: Bool
    }

    /// What `claimIntermediateDumps` would claim, without claiming anything. A processor claims
    /// each dump right before it processes it, so a processor killed midway is charged one attempt
    /// for the dump it was working on, not for every dump it had listed.
    package func claimableIntermediateDumps(now: Date = Date()) throws -> [ClaimCandidate] {
        let me = RecordOwner.current()
        var candidates: [ClaimCandidate] = []
        for entry in try intermediate.entries() where entry.isRegularFile {
            guard let (name, state) = DumpName.parseIntermediate(entry.name) else { continue }
            switch state {
            case .finished:
                candidates.append(ClaimCandidate(fileName: entry.name, name: name, size: entry.size,
                                                 modificationDate: entry.modificationDate, inProcessing: false))
            case .locked:
                // No lease, so the writer died (writers take the lock before the file gets this name;
                // the grace period covers writers of older versions, which locked just after creating it).
                guard now.timeIntervalSince(entry.modificationDate) > options.deadWriterGrace,
                      !writerHoldsLease(entry.name) else { continue }
                var tagged = name
                tagged.abandoned = true
                candidates.append(ClaimCandidate(fileName: entry.name, name: tagged, size: entry.size,
                                                 modificationDate: entry.modificationDate, inProcessing: false))
            }
        }
        for entry in try processing.entries() where entry.isRegularFile {
            guard let (name, claimer, claimedAt) = DumpName.parseClaim(entry.name) else { continue }
            let tooOld = now.timeIntervalSince(claimedAt) > options.staleClaimAge
            guard tooOld || claimer.liveness(seenFrom: me) == .dead else { continue }
            candidates.append(ClaimCandidate(fileName: entry.name, name: name, size: entry.size,
                                             modificationDate: entry.modificationDate, inProcessing: true))
        }
        // Dumps that nobody has tried yet come first, then dead processors' claims. A processor killed
        // while working on a dump (OOM killer, a stopped service) must not make the next processor start
        // with that same dump; otherwise a few kills in a row would use up an innocent dump's attempts.
        return candidates.sorted {
            ($0.inProcessing ? 1 : 0, $0.modificationDate, $0.fileName) < ($1.inProcessing ? 1 : 0, $1.modificationDate, $1.fileName)
        }
    }

    /// Claims one candidate with the single rename that decides who processes it. Returns nil when
    /// another processor was first, or when its attempts are used up and it was moved to failed/.
    package func claim(_ candidate: ClaimCandidate, now: Date = Date()) throws -> ClaimedDump? {
        let from = candidate.inProcessing ? processing : intermediate
        var name = candidate.name
        // Larger than any reader here will read (a sparse file can report any size). It could never
        // be processed, so it is moved to failed/ now with a reason, and does not block the dumps behind it.
        if candidate.size > options.maxReadBytes {
            if try from.move(candidate.fileName, to: failed, as: name.triedName) {
                noteFailure(of: name, reason: Self.tooLargeReason(size: candidate.size, limit: options.maxReadBytes))
            }
            return nil
        }
        if name.attempts >= options.maxProcessingAttempts {
            if try from.move(candidate.fileName, to: failed, as: name.triedName) {
                noteFailure(of: name, reason: "processing was interrupted \(name.attempts) times: the processor died or was "
                            + "killed while on this dump (a dump that crashes its processor ends here too)")
            }
            return nil
        }
        name.attempts += 1
        let claimName = name.claimName(by: RecordOwner.current(), at: now)
        // Losers of the race get ENOENT (false).
        guard try from.move(candidate.fileName, to: processing, as: claimName) else { return nil }
        if name.abandoned && candidate.size == 0 {
            try processing.remove(claimName)
            return nil
        }
        return ClaimedDump(bundleID: name.bundleID, uuid: UUID(uuidString: name.uuidText)!,
                           path: processing.pathOf(claimName), abandoned: name.abandoned,
                           attempt: name.attempts, size: candidate.size, modificationDate: candidate.modificationDate,
                           name: name, claimName: claimName)
    }

    package static func tooLargeReason(size: Int64, limit: Int64) -> String {
        "too large: \(size) bytes, over the \(limit)-byte limit of what a processor reads (DatabaseOptions.maxReadBytes)"
    }

    /// True when some process holds the flock lease of a `.locked` file (its writer is alive).
    private func writerHoldsLease(_ lockedName: String) -> Bool {
        switch intermediate.probeLease(lockedName) {
        case .taken(let fd):
            close(fd)  // drops our probe lock
            return false
        case .ownerHolds: return true
        case .missing, .notALease, .unavailable: return false
        }
    }

    /// Reads a claimed dump (bounded by `options.maxReadBytes`, links never followed).
    package func readClaimedDump(_ claim: ClaimedDump) throws -> Data {
        do {
            return try processing.readFile(claim.claimName, limit: options.maxReadBytes)
        } catch DatabaseError.system(_, _, ENOENT) {
            throw DatabaseError.claimLost(path: claim.path)
        }
    }

    /// The dump was processed and its report was stored, so the dump is removed.
    package func completeClaim(_ claim: ClaimedDump) throws {
        guard try processing.remove(claim.claimName) else { throw DatabaseError.claimLost(path: claim.path) }
    }

    /// Processing failed. Puts the dump back so that a later claim retries it (the attempt is counted).
    package func releaseClaim(_ claim: ClaimedDump) throws {
        guard try processing.move(claim.claimName, to: intermediate, as: claim.name.triedName) else {
            throw DatabaseError.claimLost(path: claim.path)
        }
    }

    /// The dump can never be processed (`reason` explains why, e.g. the reader's error). Keeps it in
    /// failed/ for a human to inspect, with the reason beside it, and never retries it.
    @discardableResult
    package func failClaim(_ claim: ClaimedDump, reason: String) throws -> String {
        guard try processing.move(claim.claimName, to: failed, as: claim.name.triedName) else {
            throw DatabaseError.claimLost(path: claim.path)
        }
        noteFailure(of: claim.name, reason: reason)
        return failed.pathOf(claim.name.triedName)
    }

    /// `failed/<dump>.reason`: one line, bounded.
    private func noteFailure(of name: DumpName, reason: String) { noteFailure(of: name.triedName, reason: reason) }

    private func noteFailure(of fileName: String, reason: String) {
        try? failed.writeAtomically(fileName + Self.failureReasonSuffix, Data((Self.bounded(reason) + "\n").utf8))
    }

    /// `reason` truncated at a character boundary to at most `maxReasonBytes` bytes of UTF-8.
    /// Prune only recognizes a `.reason` file as ours when it is no larger than that plus its
    /// newline (DatabaseFiles.isOurs), so a longer one would never be pruned.
    static func bounded(_ reason: String) -> String {
        var bytes = 0
        let end = reason.unicodeScalars.firstIndex { scalar in
            bytes += UTF8.width(scalar)
            return bytes > maxReasonBytes
        } ?? reason.unicodeScalars.endIndex
        return String(reason.unicodeScalars[..<end])
    }

    static let maxReasonBytes = 4096

    /// Moves a file of ours (by name and header), read back from `directory`, whose values can never
    /// be used (`reason` describes what was wrong) to failed/ under its own name, with the reason
    /// beside it, for a human to inspect. No later reader encounters it again. Returns false when the
    /// file was already gone.
    package func setAside(_ name: String, from directory: DatabaseDirectory, reason: String) -> Bool {
        guard (try? directory.move(name, to: failed, as: name)) == true else { return false }
        noteFailure(of: name, reason: reason)
        return true
    }

    static let failureReasonSuffix = ".reason"

    /// The dumps in failed/ (regular files only), with why each is there.
    package func listFailedDumps() throws -> [(path: String, reason: String?)] {
        try failed.entries().filter { $0.isRegularFile && !$0.name.hasPrefix(".") && !$0.name.hasSuffix(Self.failureReasonSuffix) }
            .map { entry in
                let reason = (try? failed.readFile(entry.name + Self.failureReasonSuffix, limit: 8192))
                    .map { Text.trimmed(String(decoding: $0, as: UTF8.self)) }
                return (failed.pathOf(entry.name), reason)
            }
            .sorted { $0.path < $1.path }
    }
}

/// A dump waiting to become a report (in intermediate/ or processing/), as a listing found it.
package struct WaitingDump: Sendable {
    /// Where it is, as shown to the user.
    package let path: String
    /// Its last write (wall clock, seconds since 1970).
    package let createdAt: Double
    /// A `.locked` file: its writer may still be writing it.
    package let isBeingWritten: Bool
    let directory: DatabaseDirectory
    let fileName: String
}

extension CrashReportDatabase {
    /// The dumps of `bundleID` waiting to be processed — finished, claimed, or being written but
    /// not empty — last written after `time`. Their contents are read with `read(_:)`.
    package func waitingDumps(ofBundle bundleID: String, after time: Double) -> [WaitingDump] {
        var found: [WaitingDump] = []
        for directory in [intermediate, processing] {
            for entry in (try? directory.entries()) ?? [] where entry.isRegularFile && RecordName.parse(entry.name)?.0.bundleID == bundleID {
                let created = entry.modificationDate.timeIntervalSince1970
                let locked = entry.name.hasSuffix(DatabaseNames.lockedSuffix)
                guard created > time, !(locked && entry.size == 0) else { continue }
                found.append(WaitingDump(path: directory.pathOf(entry.name), createdAt: created, isBeingWritten: locked,
                                         directory: directory, fileName: entry.name))
            }
        }
        return found
    }

    /// The current contents of a waiting dump (bounded by `options.maxReadBytes`); nil when it cannot be read.
    package func read(_ dump: WaitingDump) -> Data? {
        try? dump.directory.readFile(dump.fileName, limit: options.maxReadBytes)
    }
}
