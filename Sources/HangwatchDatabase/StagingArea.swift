// The staging area, <db>/staging/: one staged hang is an intermediate dump, a tiny sidecar
// (timing, updated while the hang lasts), the aggregated samples and the owner's lease, all
// named `<bundle>@<id>.hang.*`. HangMonitor writes them while a hang lasts; a process that
// dies hung leaves them behind, and whoever processes the database next — a HangMonitor
// starting, `DumpClient.processIntermediateDumps()`, `hangwatch process` — promotes them to
// fatal-hang dumps (`promoteOrphans`), judged by the owner's lease, whatever the bundle id.
// The names are produced and parsed here only.
import HangwatchPlatform
import HangwatchSnapshot
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// A staged hang's timing (`<bundle>@<id>.hang.json`).
package struct HangSidecar: Codable, Equatable, Sendable {
    package var version = 1
    package var bundleID: String
    package var pid: Int32
    /// /proc/PID/stat start time, so a reused pid is not mistaken for the owner.
    package var processStartTicks: UInt64
    package var target: String
    package var thresholdSeconds: Double
    /// Wall clock, seconds since 1970.
    package var startTime: Double
    package var lastSeenTime: Double
    package var sampleCount: Int
    /// The first of `hungThreads` (what version 1 sidecars hold).
    package var hungThread: Int32?
    package var hungThreads: [Int32]?
    package var signature: String

    package init(bundleID: String, pid: Int32, processStartTicks: UInt64, target: String, thresholdSeconds: Double,
                 startTime: Double, lastSeenTime: Double, sampleCount: Int, hungThread: Int32?, hungThreads: [Int32]?,
                 signature: String) {
        self.bundleID = bundleID
        self.pid = pid
        self.processStartTicks = processStartTicks
        self.target = target
        self.thresholdSeconds = thresholdSeconds
        self.startTime = startTime
        self.lastSeenTime = lastSeenTime
        self.sampleCount = sampleCount
        self.hungThread = hungThread
        self.hungThreads = hungThreads
        self.signature = signature
    }
}

/// One staged hang: its files' names and its sidecar.
package struct StagedHang: Sendable {
    package let bundleID: String
    package let id: String
    package var sidecar: HangSidecar
    /// The owner's lock on the lease file (-1: none held here). While the owner lives the lock
    /// is held; the kernel drops it when the owner dies (zombie or not, in whatever pid
    /// namespace), which is how others tell the hang is orphaned.
    package var lease: Int32 = -1

    package var dumpName: String { StagingArea.name(bundleID, id, StagingArea.dumpSuffix) }
    var sidecarName: String { StagingArea.name(bundleID, id, StagingArea.sidecarSuffix) }
    var samplesName: String { StagingArea.name(bundleID, id, StagingArea.samplesSuffix) }
    var leaseName: String { StagingArea.name(bundleID, id, StagingArea.leaseSuffix) }
}

/// What promoting one orphaned hang came to.
package enum StagedHangOutcome: Sendable {
    /// Now a fatal-hang dump in intermediate/ (`dumpPath`); it lasted at least `atLeastSeconds`.
    case promoted(HangSidecar, atLeastSeconds: Double, dumpPath: String)
    /// A crash of the same bundle after the hang began supersedes it: removed.
    case supersededByCrash(HangSidecar, crash: String)
    /// Kept in staging, its lease let go: a later processor may manage (nothing is lost).
    case failed(HangSidecar, Error)
}

package struct StagingArea: Sendable {
    static let sidecarSuffix = ".hang.json"
    package static let dumpSuffix = ".hang.dump"
    static let samplesSuffix = ".hang.samples.json"
    static let leaseSuffix = ".hang.lease"
    static let maxSidecarBytes: Int64 = 64 << 10
    static let maxSamplesBytes: Int64 = 8 << 20

    /// `<bundle>@<id><suffix>`: every name in staging/.
    static func name(_ bundleID: String, _ id: String, _ suffix: String) -> String { "\(bundleID)@\(id)\(suffix)" }

    let database: CrashReportDatabase
    var directory: DatabaseDirectory { database.staging }
    /// The database's path, as it was opened.
    package var databasePath: String { database.path }

    /// Where the staged dump of `hang` is written (HangMonitor writes it with the dump writer).
    package func dumpPath(of hang: StagedHang) -> String { directory.pathOf(hang.dumpName) }

    /// A new staged hang for `sidecar` (nothing written yet).
    package func newHang(_ sidecar: HangSidecar) throws -> StagedHang {
        try DatabaseNames.validateBundleID(sidecar.bundleID)
        return StagedHang(bundleID: sidecar.bundleID, id: UUID().uuidString.lowercased(), sidecar: sidecar)
    }

    /// Replaced atomically; not fsynced (staging is rewritten while a hang lasts, and a staged
    /// file lost in a machine crash only loses that hang's notes).
    package func writeSidecar(_ hang: StagedHang) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        try directory.writeAtomically(hang.sidecarName, try encoder.encode(hang.sidecar), durable: false)
    }

    /// One aggregated stack in `<bundle>@<id>.hang.samples.json` (frames as decimal strings:
    /// addresses above 2^53 would not survive a JSON number).
    private struct SampleRecord: Codable {
        var tid: Int32
        var count: Int
        var frames: [String]
    }

    package func writeSamples(_ samples: [StackSample], of hang: StagedHang) throws {
        let records = samples.map { SampleRecord(tid: $0.tid, count: $0.count, frames: $0.frames.map { String($0) }) }
        try directory.writeAtomically(hang.samplesName, try JSONEncoder().encode(records), durable: false)
    }

    func readSamples(of hang: StagedHang) -> [StackSample] {
        guard let data = try? directory.readFile(hang.samplesName, limit: Self.maxSamplesBytes),
              let records = try? JSONDecoder().decode([SampleRecord].self, from: data) else { return [] }
        return records.map { StackSample(tid: $0.tid, frames: $0.frames.compactMap { UInt64($0) }, count: $0.count) }
    }

    /// Creates and locks the hang's lease file (0600, not through a link, not inherited by
    /// programs this process runs).
    package func takeLease(of hang: StagedHang) throws -> Int32 {
        guard let fd = lockLease(hang.leaseName, creating: true) else {
            throw directory.fail("lock", hang.leaseName)
        }
        return fd
    }

    /// The lease file opened (not through a link, not inherited) and locked exclusively without
    /// waiting; nil with errno set: EWOULDBLOCK when another process holds the lock, the
    /// open's error (ENOENT for a hang staged without a lease) otherwise.
    private func lockLease(_ name: String, creating: Bool) -> Int32? {
        let fd = openat(directory.fd, name, O_RDWR | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK | (creating ? O_CREAT : 0),
                        DatabaseDirectory.fileMode)
        guard fd >= 0 else { return nil }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            let code = errno
            close(fd)
            errno = code
            return nil
        }
        return fd
    }

    /// The lease last: until every other file is gone, nobody else takes the hang for orphaned.
    package func remove(_ hang: StagedHang) {
        for name in [hang.dumpName, hang.samplesName, hang.sidecarName, hang.leaseName] { _ = try? directory.remove(name) }
        if hang.lease >= 0 { close(hang.lease) }
    }

    /// The staged hang `<bundleID>@<id>`, nil when it is not one (no sidecar, unreadable).
    func hang(bundleID: String, id: String) -> StagedHang? {
        guard (try? DatabaseNames.validateBundleID(bundleID)) != nil, UUID(uuidString: id) != nil else { return nil }
        let id = id.lowercased()
        guard let data = try? directory.readFile(Self.name(bundleID, id, Self.sidecarSuffix), limit: Self.maxSidecarBytes),
              let sidecar = try? JSONDecoder().decode(HangSidecar.self, from: data), sidecar.bundleID == bundleID else { return nil }
        return StagedHang(bundleID: bundleID, id: id, sidecar: sidecar)
    }

    /// Staged hangs (of `bundleID`, or of any bundle) whose owning process is gone: its lease
    /// is free (the returned hangs hold it now, so two processors never promote the same
    /// hang), or, for a hang staged without a lease, its pid is dead, a zombie or another process.
    package func orphanedHangs(bundleID: String? = nil) -> [StagedHang] {
        var found: [StagedHang] = []
        for entry in (try? directory.entries()) ?? [] where entry.isRegularFile && entry.name.hasSuffix(Self.sidecarSuffix) {
            let base = entry.name.dropLast(Self.sidecarSuffix.count)
            guard let at = base.firstIndex(of: "@") else { continue }
            let bundle = String(base[..<at])
            guard bundleID == nil || bundle == bundleID,
                  var hang = hang(bundleID: bundle, id: String(base[base.index(after: at)...])) else { continue }
            if let lease = lockLease(hang.leaseName, creating: false) {
                hang.lease = lease
            } else if errno == EWOULDBLOCK {
                continue  // its owner lives: it holds the lock
            } else {
                guard hang.sidecar.pid != getpid() else { continue }
                if let stat = ProcFS.processStat(of: hang.sidecar.pid), stat.state != "Z",
                   stat.startTicks == hang.sidecar.processStartTicks { continue }
            }
            found.append(hang)
        }
        return found.sorted { $0.sidecar.startTime < $1.sidecar.startTime }
    }

    /// How many staged hangs a processor would promote now (their owners are gone); the
    /// leases this takes to tell are let go at once.
    package func orphanCount() -> Int {
        let orphans = orphanedHangs()
        for hang in orphans where hang.lease >= 0 { close(hang.lease) }
        return orphans.count
    }

    /// Every orphaned hang (of `bundleID`, or of any bundle) becomes a fatal-hang dump in
    /// intermediate/ — or goes, when a crash of its bundle after it began supersedes it.
    @discardableResult
    package func promoteOrphans(bundleID: String? = nil) -> [StagedHangOutcome] {
        orphanedHangs(bundleID: bundleID).map(promote)
    }

    private func promote(_ staged: StagedHang) -> StagedHangOutcome {
        let sidecar = staged.sidecar
        if let crash = (try? database.crashesOrCrashDumps(bundleID: sidecar.bundleID, newerThan: sidecar.startTime))?.first {
            remove(staged)
            return .supersededByCrash(sidecar, crash: crash.location)
        }
        let atLeast = max(sidecar.lastSeenTime - sidecar.startTime, sidecar.thresholdSeconds)
        do {
            var snapshot = try IntermediateDumpReader.read(bytes: [UInt8](directory.readFile(staged.dumpName, limit: database.options.maxReadBytes)))
            snapshot.reason = .hang(HangInfo(target: sidecar.target, thresholdSeconds: sidecar.thresholdSeconds,
                                             durationSeconds: atLeast, recovered: false, startTime: sidecar.startTime,
                                             samples: readSamples(of: staged)))
            snapshot.annotations["hang.outcome"] = "fatal-hang"
            snapshot.annotations["hang.durationIsLowerBound"] = "true"
            snapshot.annotations["hang.lastSeenTime"] = String(sidecar.lastSeenTime)
            let path = try database.writeIntermediateDump(snapshot, bundleID: sidecar.bundleID)
            remove(staged)
            return .promoted(sidecar, atLeastSeconds: atLeast, dumpPath: path)
        } catch {
            if staged.lease >= 0 { close(staged.lease) }
            return .failed(sidecar, error)
        }
    }

    /// What a supervisor takes over from a staged hang it reported itself (the child's samples
    /// and start time), after which the staged hang is removed so that nobody promotes the same
    /// hang again.
    package struct TakenOver: Sendable {
        package var samples: [StackSample]
        /// Wall clock, seconds since 1970.
        package var startTime: Double
    }

    /// Takes over `<bundleID>@<id>`; nil when there is no such staged hang.
    package func takeOver(bundleID: String, id: String) -> TakenOver? {
        guard let hang = hang(bundleID: bundleID, id: id) else { return nil }
        let taken = TakenOver(samples: readSamples(of: hang), startTime: hang.sidecar.startTime)
        remove(hang)
        return taken
    }

    /// Takes over the staged hang whose dump is `fileName` (`<bundle>@<id>.hang.dump`).
    package func takeOver(dumpFileName fileName: String) -> TakenOver? {
        guard fileName.hasSuffix(Self.dumpSuffix), let at = fileName.firstIndex(of: "@") else { return nil }
        return takeOver(bundleID: String(fileName[..<at]),
                        id: String(fileName[fileName.index(after: at)...].dropLast(Self.dumpSuffix.count)))
    }
}

extension CrashReportDatabase {
    /// staging/ (HangMonitor's staged hangs).
    package var stagingArea: StagingArea { StagingArea(database: self) }

    /// Crash reports of `bundleID` stored after `time`, and crash dumps of `bundleID` not yet
    /// processed (in intermediate/ or processing/; hang dumps there are never crashes): what
    /// supersedes a hang that began at `time`.
    package func crashesOrCrashDumps(bundleID: String, newerThan time: Double) throws -> [DatabaseReportReference] {
        var found: [DatabaseReportReference] = []
        for stored in try listReports() where stored.modificationDate.timeIntervalSince1970 > time {
            guard let data = try? readReport(id: stored.id),
                  let header = try? JSONDecoder().decode(StoredReportHeader.self, from: data),
                  header.process.bundleID == bundleID, header.kind == "crash" else { continue }
            found.append(DatabaseReportReference(location: stored.path, createdAt: stored.modificationDate.timeIntervalSince1970,
                                                 reportID: stored.id))
        }
        for directory in [intermediate, processing] {
            for entry in try directory.entries() where entry.isRegularFile && entry.name.hasPrefix(bundleID + "@") {
                let created = entry.modificationDate.timeIntervalSince1970
                guard created > time else { continue }
                // A dump still being written (.locked) is a crash in progress or an armed crash
                // file; a finished one says what it is.
                if !entry.name.hasSuffix(DatabaseNames.lockedSuffix) {
                    guard let bytes = try? directory.readFile(entry.name, limit: options.maxReadBytes),
                          let snapshot = try? IntermediateDumpReader.read(bytes: [UInt8](bytes)), case .crash = snapshot.reason else { continue }
                } else if entry.size == 0 {
                    continue  // the crash handler's armed, still empty file
                }
                found.append(DatabaseReportReference(location: directory.pathOf(entry.name), createdAt: created))
            }
        }
        return found.sorted { $0.createdAt < $1.createdAt }
    }
}

/// A report already in the database (or a dump waiting for processing) that may supersede a staged hang.
package struct DatabaseReportReference: Sendable, Equatable {
    /// Path of the report or pending dump, as shown to the user.
    package var location: String
    /// Wall-clock creation time, seconds since 1970.
    package var createdAt: Double
    /// Set when it is a stored (processed) report.
    package var reportID: String? = nil

    package init(location: String, createdAt: Double, reportID: String? = nil) {
        self.location = location
        self.createdAt = createdAt
        self.reportID = reportID
    }
}

/// The two fields of a stored report's JSON that tell a crash of a bundle (the report model
/// itself belongs to processing, which the database does not link).
private struct StoredReportHeader: Decodable {
    struct Process: Decodable { var bundleID: String }
    var kind: String
    var process: Process
}
