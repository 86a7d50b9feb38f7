// Writing, claiming and retiring intermediate dumps. Every state change is a single
// rename(2) of a name that only one process can win: of N processes renaming the same
// source, one succeeds and the others get ENOENT. That is the whole locking protocol.
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

/// A dump this process has claimed: it lives in processing/ until `completeClaim`
/// (processed), `releaseClaim` (retry later) or `failClaim` (give up).
package struct ClaimedDump: Sendable, Equatable {
    package let bundleID: String
    package let uuid: UUID
    /// Where the claimed dump is now (in processing/).
    package let path: String
    /// The writer never finished it (an abandoned `.locked` file): the report is incomplete.
    package let abandoned: Bool
    /// 1 for the first claim; more when earlier processors failed or died.
    package let attempt: Int
    package let size: Int64
    /// Last write to the dump by its writer.
    package let modificationDate: Date
    package let name: DumpName
    let claimName: String
}

extension CrashReportDatabase {
    // MARK: writing

    /// Pre-opens a new dump file, `<bundle>@<uuid>.locked`, 0600, created exclusively.
    package func createIntermediateDump(bundleID: String) throws -> IntermediateDumpFile {
        try DatabaseNames.validateBundleID(bundleID)
        let uuid = UUID()
        let name = DumpName(bundleID: bundleID, uuidText: uuid.uuidString, abandoned: false, attempts: 0)
        let fd = try intermediate.createExclusive(name.lockedName)
        // The lease: a claimer that cannot take this lock knows the writer is alive, however old the file.
        _ = flock(fd, LOCK_EX | LOCK_NB)
        return IntermediateDumpFile(fd: fd, path: intermediate.pathOf(name.lockedName), uuid: uuid, bundleID: bundleID, name: name)
    }

    /// Flushes the dump and renames it to `<bundle>@<uuid>.hwdump`, which makes it claimable.
    /// Closes the descriptor. Returns the new path.
    @discardableResult
    package func finish(_ file: IntermediateDumpFile) throws -> String {
        defer { close(file.fd) } // after the rename: the lease must cover the whole transition
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

    /// Creates `staging/<fileName>` for HangMonitor (0600, `O_EXCL|O_NOFOLLOW|O_CLOEXEC`,
    /// read-write) and returns its descriptor; the caller owns and closes it.
    package func createStagingFile(named fileName: String) throws -> (fd: Int32, path: String) {
        try Self.validateStagingName(fileName)
        return (try staging.createExclusive(fileName, flags: O_RDWR), staging.pathOf(fileName))
    }

    /// Removes a staged file (the hang recovered). Returns false when it was already gone.
    @discardableResult
    package func removeStagingFile(named fileName: String) throws -> Bool {
        try Self.validateStagingName(fileName)
        return try staging.remove(fileName)
    }

    /// Names of the regular files in staging/ (links and temporary files skipped).
    package func listStagingFiles() throws -> [String] {
        try staging.entries().filter { $0.isRegularFile && !$0.name.hasPrefix(".") }.map(\.name).sorted()
    }

    package static func validateStagingName(_ fileName: String) throws {
        if fileName.isEmpty || fileName.contains("/") || fileName.hasPrefix(".") || fileName.utf8.contains(0)
            || fileName.utf8.count > 255 {
            throw DatabaseError.invalidFileName(fileName, reason: "a staged dump is named by a plain file name (no '/', not hidden)")
        }
    }

    /// Turns a file HangMonitor staged in staging/ into a finished dump (a hang that became fatal).
    @discardableResult
    package func promoteStagedDump(named fileName: String, bundleID: String) throws -> String {
        try DatabaseNames.validateBundleID(bundleID)
        try Self.validateStagingName(fileName)
        guard let entry = try staging.entry(fileName) else { throw staging.fail("open", fileName, ENOENT) }
        if entry.isSymlink { throw DatabaseError.symlinkRefused(path: staging.pathOf(fileName)) }
        guard entry.isRegularFile else { throw DatabaseError.notARegularFile(path: staging.pathOf(fileName)) }
        let name = DumpName(bundleID: bundleID, uuidText: UUID().uuidString, abandoned: false, attempts: 0)
        guard try staging.move(fileName, to: intermediate, as: name.finishedName) else {
            throw DatabaseError.claimLost(path: staging.pathOf(fileName))
        }
        return intermediate.pathOf(name.finishedName)
    }

    // MARK: claiming

    /// Claims up to `limit` dumps, oldest first, for processing by this process:
    /// - every finished `.hwdump`, whatever its bundle id (any client sharing the database
    ///   may process the others' dumps, as in Crashpad);
    /// - `.locked` files abandoned by their writer (tagged `abandoned`): those of `bundleID`
    ///   older than `sameBundleAbandonAge` and those of any bundle older than
    ///   `anyBundleAbandonAge`, unless a live writer still holds the lease;
    /// - claims in processing/ whose claimer died, or older than `staleClaimAge`.
    /// Dumps already tried `maxProcessingAttempts` times go to failed/ instead.
    /// An abandoned `.locked` file that is empty holds nothing to process and is removed.
    package func claimIntermediateDumps(bundleID: String, now: Date = Date(), limit: Int = .max) throws -> [ClaimedDump] {
        try DatabaseNames.validateBundleID(bundleID)
        let me = ClaimerIdentity.current()
        var candidates: [(entry: DirectoryEntry, name: DumpName, from: DatabaseDirectory)] = []
        for entry in try intermediate.entries() where entry.isRegularFile {
            guard let (name, state) = DumpName.parseIntermediate(entry.name) else { continue }
            switch state {
            case .finished:
                candidates.append((entry, name, intermediate))
            case .locked:
                let age = now.timeIntervalSince(entry.modificationDate)
                let abandoned = age > options.anyBundleAbandonAge
                    || (name.bundleID == bundleID && age > options.sameBundleAbandonAge)
                guard abandoned, !writerHoldsLease(entry.name) else { continue }
                var tagged = name
                tagged.abandoned = true
                candidates.append((entry, tagged, intermediate))
            }
        }
        for entry in try processing.entries() where entry.isRegularFile {
            guard let (name, claimer, claimedAt) = DumpName.parseClaim(entry.name) else { continue }
            let tooOld = now.timeIntervalSince(claimedAt) > options.staleClaimAge
            guard tooOld || claimer.liveness(seenFrom: me) == .dead else { continue }
            candidates.append((entry, name, processing))
        }
        candidates.sort { ($0.entry.modificationDate, $0.entry.name) < ($1.entry.modificationDate, $1.entry.name) }

        var claims: [ClaimedDump] = []
        for candidate in candidates where claims.count < limit {
            var name = candidate.name
            if name.attempts >= options.maxProcessingAttempts {
                _ = try candidate.from.move(candidate.entry.name, to: failed, as: name.triedName)
                continue
            }
            name.attempts += 1
            let claimName = name.claimName(by: me, at: now)
            // The one rename that decides who processes this dump; losers get ENOENT (false).
            guard try candidate.from.move(candidate.entry.name, to: processing, as: claimName) else { continue }
            if name.abandoned && candidate.entry.size == 0 {
                try processing.remove(claimName)
                continue
            }
            claims.append(ClaimedDump(bundleID: name.bundleID, uuid: UUID(uuidString: name.uuidText)!,
                                      path: processing.pathOf(claimName), abandoned: name.abandoned,
                                      attempt: name.attempts, size: candidate.entry.size,
                                      modificationDate: candidate.entry.modificationDate,
                                      name: name, claimName: claimName))
        }
        return claims
    }

    /// True when some process holds the flock lease of a `.locked` file (its writer is alive).
    private func writerHoldsLease(_ lockedName: String) -> Bool {
        guard let fd = try? intermediate.openForReading(lockedName) else { return false }
        defer { close(fd) }
        if flock(fd, LOCK_EX | LOCK_NB) == 0 { return false } // closing the fd drops our probe lock
        return errno == EWOULDBLOCK
    }

    /// Reads a claimed dump (bounded by `options.maxReadBytes`, links never followed).
    package func readClaimedDump(_ claim: ClaimedDump) throws -> Data {
        do {
            return try processing.readFile(claim.claimName, limit: options.maxReadBytes)
        } catch DatabaseError.system(_, _, ENOENT) {
            throw DatabaseError.claimLost(path: claim.path)
        }
    }

    /// The dump was processed and its report stored: remove it.
    package func completeClaim(_ claim: ClaimedDump) throws {
        guard try processing.remove(claim.claimName) else { throw DatabaseError.claimLost(path: claim.path) }
    }

    /// Processing failed: put the dump back so a later claim retries it (counting the attempt).
    package func releaseClaim(_ claim: ClaimedDump) throws {
        guard try processing.move(claim.claimName, to: intermediate, as: claim.name.triedName) else {
            throw DatabaseError.claimLost(path: claim.path)
        }
    }

    /// The dump can never be processed: keep it in failed/ for a human, and never retry it.
    @discardableResult
    package func failClaim(_ claim: ClaimedDump) throws -> String {
        guard try processing.move(claim.claimName, to: failed, as: claim.name.triedName) else {
            throw DatabaseError.claimLost(path: claim.path)
        }
        return failed.pathOf(claim.name.triedName)
    }

    /// Names of the dumps in failed/ (regular files only).
    package func listFailedDumps() throws -> [String] {
        try failed.entries().filter { $0.isRegularFile && !$0.name.hasPrefix(".") }.map { failed.pathOf($0.name) }.sorted()
    }
}

/// A hang superseded by a crash dump that was not processed yet:
/// `staging/<bundle>@<uuid>.superseded-hang.json` (JSON: target, thresholdSeconds,
/// durationSeconds, startTime), written by HangMonitor, merged into the crash report and
/// removed by processing.
package enum SupersededHangNote {
    package static let fileSuffix = ".superseded-hang.json"
}

extension CrashReportDatabase {
    /// The superseded-hang note of `claim`'s dump; nil when there is none.
    package func supersededHangNote(of claim: ClaimedDump) -> Data? {
        try? staging.readFile(Self.supersededHangNoteName(claim), limit: 64 * 1024)
    }

    /// Removes the note once the report that merged it is stored.
    package func removeSupersededHangNote(of claim: ClaimedDump) {
        _ = try? staging.remove(Self.supersededHangNoteName(claim))
    }

    private static func supersededHangNoteName(_ claim: ClaimedDump) -> String {
        claim.name.bundleID + "@" + claim.name.uuidText + SupersededHangNote.fileSuffix
    }
}
