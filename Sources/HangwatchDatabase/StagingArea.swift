// The staging area, <db>/staging/: one staged hang is an intermediate dump, a tiny sidecar
// (timing, updated while the hang lasts), the aggregated samples and the owner's lease, all
// named `<bundle>@<id>.hang.*` (RecordName, LeasedFiles: LeasedRecord.swift). HangMonitor and
// `hangwatch run` stage through this type only, addressing a hang by its `StagedHang` (bundle
// id + id), never by a path. This is storage: it names, writes, lists, leases, moves and
// removes staged hangs, and hands their contents over (`StagedHangContents`). What becomes of
// a hang whose owner died — promoted to a fatal-hang dump, superseded by a crash of its
// process, stitched into a report — is decided by processing (HangwatchPromotion's
// HangPromotion, HangwatchProcessing's HangStitch and DumpProcessor).
// The names are produced and parsed here only.
import HangwatchPlatform
import HangwatchSnapshot
import FoundationEssentials
import Synchronization
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
    /// Written as its name (HangTarget's codec).
    package var target: HangTarget
    package var thresholdSeconds: Double
    /// Wall clock, seconds since 1970.
    package var startTime: Double
    package var lastSeenTime: Double
    package var sampleCount: Int
    /// The first of `hungThreads` (what version 1 sidecars hold).
    package var hungThread: Int32?
    package var hungThreads: [Int32]?
    package var signature: String
    /// The W3C traceparents of the watched operations the hang involves (docs/traces.md), at
    /// most `maximumTraceparents`. Whoever promotes the hang reports to those traces that it was fatal.
    package var traceparents: [String]?

    /// The maximum number of traceparents a sidecar stores.
    package static let maximumTraceparents = 8

    package init(bundleID: String, pid: Int32, processStartTicks: UInt64, target: HangTarget, thresholdSeconds: Double,
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

    /// Why a sidecar read back cannot be used (a value no monitor writes); nil when it can.
    package var problem: String? {
        Plausible.firstProblem([
            "version": version == 1,
            "pid": pid > 0,
            "target": Plausible.text(target.name, maxBytes: 1024),
            "thresholdSeconds": Plausible.duration(thresholdSeconds),
            "startTime": Plausible.time(startTime),
            "lastSeenTime": Plausible.time(lastSeenTime) && lastSeenTime >= startTime - 1,
            "sampleCount": sampleCount >= 0,
            "hungThreads": (hungThreads?.count ?? 0) <= 4096,
            "signature": Plausible.text(signature, maxBytes: 16 << 10),
            "traceparents": (traceparents ?? []).count <= Self.maximumTraceparents
                && (traceparents ?? []).allSatisfy { Traceparent.validated($0) != nil },
        ])
    }
}

/// One staged hang: its name and its sidecar.
package struct StagedHang: Sendable {
    package let name: RecordName
    package var sidecar: HangSidecar
    /// The owner's lock on the lease file (-1: none held here). While the owner lives the lock
    /// is held; the kernel drops it when the owner dies (zombie or not, in whatever pid
    /// namespace), which is how other processes detect that the hang is orphaned.
    package var lease: Int32 = -1

    package var bundleID: String { name.bundleID }
    package var id: String { name.id }
    /// The dump it becomes when promoted (StagingArea.promote): its own bundle id and id.
    package var promotedKey: DumpKey { DumpKey(bundleID: bundleID, uuid: UUID(uuidString: id)!) }
    package var dumpName: String { name.fileName(StagingArea.dumpSuffix) }
    var sidecarName: String { name.fileName(StagingArea.sidecarSuffix) }
    var samplesName: String { name.fileName(StagingArea.samplesSuffix) }
}

/// The contents of a staged hang's files, handed to whoever joins the hang to a report (processing's
/// HangStitch): its id, its sidecar and its aggregated samples.
package struct StagedHangContents: Sendable {
    package var id: String
    package var sidecar: HangSidecar
    package var samples: [StackSample]

    package init(id: String, sidecar: HangSidecar, samples: [StackSample]) {
        self.id = id
        self.sidecar = sidecar
        self.samples = samples
    }
}

package struct StagingArea: Sendable {
    static let sidecarSuffix = ".hang.json"
    package static let dumpSuffix = ".hang.dump"
    static let samplesSuffix = ".hang.samples.json"
    static let leaseSuffix = ".hang.lease"
    static let maxSidecarBytes: Int64 = 64 << 10
    static let maxSamplesBytes: Int64 = 8 << 20

    package let database: CrashReportDatabase
    var directory: DatabaseDirectory { database.staging }
    var leases: LeasedFiles { LeasedFiles(directory: directory, leaseSuffix: Self.leaseSuffix) }
    /// The database's path, as it was opened.
    package var databasePath: String { database.path }

    /// Where the staged dump of `hang` is, as shown to the user (events, messages).
    package func dumpPath(of hang: StagedHang) -> String { directory.pathOf(hang.dumpName) }

    /// A new staged hang for `sidecar`, with its lease taken (while this process is alive, nobody
    /// promotes it). Nothing else is written yet.
    package func begin(_ sidecar: HangSidecar) throws -> StagedHang {
        var hang = StagedHang(name: try .new(bundleID: sidecar.bundleID, lowercase: true), sidecar: sidecar)
        hang.lease = try leases.take(hang.name)
        return hang
    }

    /// Writes the hang's dump (replacing an earlier one of the same hang), then its sidecar
    /// with `hang.sidecar` as it is now: a sidecar always names a dump that exists.
    package func write(_ snapshot: ProcessSnapshot, of hang: StagedHang) throws {
        try directory.writeAtomically(hang.dumpName) { fd in try IntermediateDumpWriter.write(snapshot, to: fd) }
        try writeSidecar(hang)
    }

    /// Whether a processor took the hang over (its own process's crash superseded it): the
    /// lease file this process holds was unlinked. One fstat, no directory read.
    package func wasTakenOver(_ hang: StagedHang) -> Bool {
        guard hang.lease >= 0 else { return false }
        var info = stat()
        return fstat(hang.lease, &info) == 0 && info.st_nlink == 0
    }

    /// The crash report that superseded `hang`, when a processor in this process took it over.
    package func supersedingReport(of hang: StagedHang) -> String? {
        Self.supersededHere.withLock { $0[hang.id] }
    }

    /// Staged hang id → the crash report that took it over, for hangs owned by this process.
    private static let supersededHere = Mutex<[String: String]>([:])

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

    /// The contents of `hang`'s files: its sidecar and its samples (none when they cannot be read).
    package func contents(of hang: StagedHang) -> StagedHangContents {
        let data = try? directory.readFile(hang.samplesName, limit: Self.maxSamplesBytes)
        return StagedHangContents(id: hang.id, sidecar: hang.sidecar, samples: data.flatMap(Self.decodeSamples) ?? [])
    }

    /// A samples file's contents (`writeSamples`); nil when they are not that.
    package static func decodeSamples(_ data: Data) -> [StackSample]? {
        guard let records = try? JSONDecoder().decode([SampleRecord].self, from: data) else { return nil }
        // Counts are added up further on: a crafted one is clamped where it is read (2^31 samples
        // at 1 ms is 24 days), so no sum of them can overflow.
        return records.map { StackSample(tid: $0.tid, frames: $0.frames.prefix(512).compactMap { UInt64($0) },
                                          count: min(max($0.count, 0), 1 << 31)) }
    }

    /// Removes every file of the hang, the lease last: until every other file is gone, nobody else
    /// mistakes the hang for an orphan.
    package func remove(_ hang: StagedHang) {
        removeTemporaries(of: hang)
        leases.remove(hang.name, [Self.dumpSuffix, Self.samplesSuffix, Self.sidecarSuffix], lease: hang.lease)
    }

    /// `remove`, for hangs a stored crash report took over (`report`: where it is): a monitor of
    /// this process that owned one is notified (it sees its lease file unlinked; `wasTakenOver`).
    package func remove(_ hangs: [StagedHang], takenOverBy report: String) {
        for hang in hangs {
            if hang.sidecar.pid == getpid() { Self.supersededHere.withLock { $0[hang.id] = report } }
            remove(hang)
        }
    }

    /// Releases the leases this process holds on `hangs`, leaving them staged for a later processor.
    package func release(_ hangs: [StagedHang]) {
        for hang in hangs { leases.release(hang.lease) }
    }

    /// The half-written `.tmp-` files of `hang`'s own names (DatabaseNames.temporaryName): its
    /// owner, killed in the middle of a write, left them; nobody else writes them.
    private func removeTemporaries(of hang: StagedHang) {
        let names: Set = [hang.dumpName, hang.samplesName, hang.sidecarName]
        for entry in (try? directory.entries()) ?? [] where entry.isRegularFile {
            if let final = DatabaseNames.finalName(ofTemporary: entry.name), names.contains(final) { _ = try? directory.remove(entry.name) }
        }
    }

    /// The staged hang `name`, nil when it is not one (no sidecar, unreadable).
    func hang(_ name: RecordName) -> StagedHang? {
        guard case .usable(let hang)? = readHang(name) else { return nil }
        return hang
    }

    /// A staged hang's sidecar as read back: usable, or ours (by name and header) with values no
    /// monitor writes; nil when it is not one (no sidecar, unreadable, another bundle's header).
    private enum ReadHang {
        case usable(StagedHang)
        case implausible(StagedHang, problem: String)
    }

    private func readHang(_ name: RecordName) -> ReadHang? {
        guard let data = try? directory.readFile(name.fileName(Self.sidecarSuffix), limit: Self.maxSidecarBytes),
              let sidecar = try? JSONDecoder().decode(HangSidecar.self, from: data), sidecar.bundleID == name.bundleID else { return nil }
        let hang = StagedHang(name: name, sidecar: sidecar)
        return sidecar.problem.map { .implausible(hang, problem: $0) } ?? .usable(hang)
    }

    /// A staged hang whose sidecar can never be used: once its owner is gone (its lease free),
    /// its files are moved to failed/ with the reason (the sidecar last), and the lease is removed.
    private func setAside(_ hang: StagedHang, problem: String) {
        guard let lease = leases.probe(hang.name).heldOrNone else { return }
        defer { leases.release(lease) }
        for name in [hang.dumpName, hang.samplesName, hang.sidecarName] where (try? directory.entry(name)) ?? nil != nil {
            _ = database.setAside(name, from: directory, reason: "staged hang not promoted: its sidecar has an \(problem)")
        }
        if lease >= 0 { _ = try? directory.remove(hang.name.fileName(Self.leaseSuffix)) }
    }

    /// Every staged hang (of `bundleID`, or of any bundle) whose dump is here (not promoted), unlocked.
    private func stagedHangs(bundleID: String?) -> [StagedHang] {
        sidecars(bundleID: bundleID).filter { (try? directory.entry($0.dumpName)) ?? nil != nil }
    }

    /// Every readable sidecar (of `bundleID`, or of any bundle), oldest hang first.
    private func sidecars(bundleID: String?) -> [StagedHang] {
        var found: [StagedHang] = []
        for listed in leases.records(withFile: Self.sidecarSuffix) where bundleID == nil || listed.bundleID == bundleID {
            guard let name = RecordName.lowercase(bundleID: listed.bundleID, id: listed.id), let read = readHang(name) else { continue }
            switch read {
            case .usable(let hang): found.append(hang)
            case .implausible(let hang, let problem): setAside(hang, problem: problem)
            }
        }
        return found.sorted { $0.sidecar.startTime < $1.sidecar.startTime }
    }

    /// `hang` with its lease locked here when its owning process is gone: the lease is free
    /// (so two processors never take the same hang), or, for a hang staged without a lease,
    /// its owner (RecordOwner: pid and start time) no longer runs; never this process. nil while
    /// the owner is alive.
    private func lockedIfOrphaned(_ hang: StagedHang) -> StagedHang? {
        var hang = hang
        switch leases.probe(hang.name) {
        case .taken(let lease):
            hang.lease = lease
            return hang
        case .ownerHolds, .notALease:
            return nil  // its owner is alive (it holds the lock), or no lease of ours is in its place: not ours to take
        case .missing, .unavailable:
            guard hang.sidecar.pid != getpid() else { return nil }
            let owner = RecordOwner(bootID: nil, pidNamespace: nil, pid: hang.sidecar.pid, startTicks: hang.sidecar.processStartTicks)
            return owner.liveness() == .alive ? nil : hang
        }
    }

    /// Staged hangs (of `bundleID`, or of any bundle) whose owning process is gone, their
    /// leases now held by the caller (`lockedIfOrphaned`). Release each one with `release`, or
    /// `remove` or `promote` it.
    package func orphanedHangs(bundleID: String? = nil) -> [StagedHang] {
        stagedHangs(bundleID: bundleID).compactMap(lockedIfOrphaned)
    }

    /// The staged hangs of `bundleID` whose sidecar passes `filter` and which this process holds:
    /// either their owner is gone (this process now holds their leases), or the owner is this
    /// process (its own monitor holds the lease). Hangs of other live processes are left alone.
    package func heldHangs(bundleID: String, where filter: (HangSidecar) -> Bool) -> [StagedHang] {
        let ownTicks = ProcFS.startTicks(of: getpid())
        return stagedHangs(bundleID: bundleID).filter { filter($0.sidecar) }.compactMap { hang in
            let owned = hang.sidecar.pid == getpid() && hang.sidecar.processStartTicks == ownTicks
            return owned ? hang : lockedIfOrphaned(hang)
        }
    }

    /// Whether process `pid` (started at `startTicks`) has a hang staged here, not yet promoted.
    package func holdsHang(ofProcess pid: Int32, startTicks: UInt64) -> Bool {
        stagedHangs(bundleID: nil).contains { $0.sidecar.pid == pid && $0.sidecar.processStartTicks == startTicks }
    }

    /// The names of the regular files in staging/, sorted (listings and tests).
    package func fileNames() throws -> [String] {
        try directory.entries().filter { $0.isRegularFile && !$0.name.hasPrefix(".") }.map(\.name).sorted()
    }

    /// How many staged hangs have no owner now (a processor would promote them, or a crash of
    /// theirs supersede them); the leases taken to find out are released at once.
    package func orphanCount() -> Int {
        let orphans = orphanedHangs()
        release(orphans)
        return orphans.count
    }

    /// Moves the dump of `staged` (held here), as it was written, into intermediate/ under the
    /// hang's id, where any processor claims it; its sidecar and samples stay until that dump's
    /// processor has joined them to its report (`promotedHang`). The lease file is removed, and the
    /// lease held here is released. Returns the new dump's path; nil when another processor moved it first.
    package func promote(_ staged: StagedHang) throws -> String? {
        defer { leases.release(staged.lease) }
        let name = Self.promotedName(staged)
        guard try directory.move(staged.dumpName, to: database.intermediate, as: name.finishedName) else { return nil }
        removeTemporaries(of: staged)
        _ = try? directory.remove(staged.name.fileName(Self.leaseSuffix))
        return database.intermediate.pathOf(name.finishedName)
    }

    /// The promoted dump's name: the hang's id, so its processor finds the sidecar.
    private static func promotedName(_ hang: StagedHang) -> DumpName {
        DumpName(record: RecordName(bundleID: hang.bundleID, id: hang.id.uppercased()), abandoned: false, attempts: 0)
    }

    /// The files that the hang promoted as dump `dump` left here (its sidecar and samples); nil when
    /// that dump does not come from a promoted hang (no sidecar, or its dump is still staged).
    package func promotedHang(_ dump: DumpKey) -> StagedHangContents? {
        guard let name = RecordName.lowercase(bundleID: dump.bundleID, id: dump.uuid.uuidString), let hang = hang(name),
              (try? directory.entry(hang.dumpName)) ?? nil == nil else { return nil }
        return contents(of: hang)
    }

    /// Removes the remaining files of a promoted hang once its report is stored.
    package func removePromotedHang(_ dump: DumpKey) {
        if let name = RecordName.lowercase(bundleID: dump.bundleID, id: dump.uuid.uuidString), let hang = hang(name) { remove(hang) }
    }

    /// Sidecars (of `bundleID`, or of any bundle) with no dump here and none of theirs waiting in
    /// intermediate/ or processing/ (its processor died after storing the report, or it
    /// failed), whose lease nobody holds: removed.
    package func removeLeftovers(bundleID: String?) {
        // In this order: a dump gone from here at the first look is, at the later ones, in
        // intermediate/, then processing/ (a claim only moves it on), or processed.
        let promoted = sidecars(bundleID: bundleID).filter { (try? directory.entry($0.dumpName)) ?? nil == nil }
        guard !promoted.isEmpty else { return }
        var waiting: Set<RecordName> = []
        for other in [database.intermediate, database.processing] {
            for entry in (try? other.entries()) ?? [] { if let (name, _) = RecordName.parse(entry.name) { waiting.insert(name) } }
        }
        for hang in promoted where !waiting.contains(Self.promotedName(hang).record) {
            if let orphan = lockedIfOrphaned(hang) { remove(orphan) }
        }
    }

    /// Takes over `<bundleID>@<id>` (a supervisor that reported the hang itself): its contents,
    /// after which the staged hang is removed so that nobody promotes the same hang again; nil
    /// when there is no such staged hang.
    package func takeOver(bundleID: String, id: String) -> StagedHangContents? {
        guard let name = RecordName.lowercase(bundleID: bundleID, id: id), let hang = hang(name) else { return nil }
        let taken = contents(of: hang)
        remove(hang)
        return taken
    }

    /// Takes over the staged hang whose dump is at `path` (`…/staging/<bundle>@<id>.hang.dump`,
    /// what version 1 hang messages sent): only inside this staging directory, compared by
    /// device and inode however the path was spelled.
    package func takeOver(dumpPath path: String) -> StagedHangContents? {
        guard let name = RecordName.parse(Paths.lastComponent(of: path), suffix: Self.dumpSuffix),
              let slash = path.lastIndex(of: "/") else { return nil }
        var named = stat(), own = stat()
        let parent = slash == path.startIndex ? "/" : String(path[..<slash])
        guard stat(parent, &named) == 0, fstat(directory.fd, &own) == 0,
              named.st_dev == own.st_dev, named.st_ino == own.st_ino else { return nil }
        return takeOver(bundleID: name.bundleID, id: name.id)
    }
}

extension CrashReportDatabase {
    /// staging/ (HangMonitor's staged hangs).
    package var stagingArea: StagingArea { StagingArea(database: self) }
}
