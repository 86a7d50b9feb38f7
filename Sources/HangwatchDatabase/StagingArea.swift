// The staging area, <db>/staging/: one staged hang is an intermediate dump, a tiny sidecar
// (timing, updated while the hang lasts), the aggregated samples and the owner's lease, all
// named `<bundle>@<id>.hang.*`. HangMonitor and `hangwatch run` stage through this type only,
// addressing a hang by its `StagedHang` (bundle id + id), never by a path. A process that
// dies hung leaves its hang behind, and whoever processes the database next — a HangMonitor
// starting, `DumpClient.processIntermediateDumps()`, `hangwatch process` — promotes it to a
// fatal-hang dump (`promoteOrphans`), judged by the owner's lease, whatever the bundle id.
//
// Supersession has one mechanism, decided where reports are built: the processor that builds
// a crash report asks `supersededHangs(byCrashOf:)` for the hangs that process had staged; they
// are stitched into the crash report as `context.supersededHang` and removed once it is stored
// (KSCrash's stitchReport). A monitor whose hang was taken that way sees its lease file unlinked.
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
        ])
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
    /// The same process crashed after the hang began and its crash report is stored already:
    /// the crash supersedes the hang, which is removed.
    case supersededByCrash(HangSidecar, crash: String)
    /// The same process crashed after the hang began and the crash dump waits to be processed:
    /// left staged, for that dump's processor to stitch (`supersededHangs(byCrashOf:)`).
    case awaitingCrashDump(HangSidecar, crashDump: String)
    /// Kept in staging, its lease let go: a later processor may manage (nothing is lost).
    case failed(HangSidecar, Error)
}

/// A staged hang a crash of its own process superseded: what the crash report says of it.
package struct SupersededStagedHang: Sendable {
    package var target: HangTarget
    package var thresholdSeconds: Double
    /// Wall clock, seconds since 1970.
    package var startTime: Double
    /// From the hang's start to the crash.
    package var durationSeconds: Double
    /// The staged hang's id.
    package var id: String
    /// The staged hang, its lease held when its owner is gone.
    package var staged: StagedHang
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

    /// Where the staged dump of `hang` is, as shown to the user (events, messages).
    package func dumpPath(of hang: StagedHang) -> String { directory.pathOf(hang.dumpName) }

    /// A new staged hang for `sidecar`, its lease taken (while this process lives nobody
    /// promotes it); nothing else is written yet.
    package func begin(_ sidecar: HangSidecar) throws -> StagedHang {
        try DatabaseNames.validateBundleID(sidecar.bundleID)
        var hang = StagedHang(bundleID: sidecar.bundleID, id: UUID().uuidString.lowercased(), sidecar: sidecar)
        hang.lease = try takeLease(of: hang)
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

    func readSamples(of hang: StagedHang) -> [StackSample] {
        guard let data = try? directory.readFile(hang.samplesName, limit: Self.maxSamplesBytes) else { return [] }
        return Self.decodeSamples(data) ?? []
    }

    /// A samples file's contents (`writeSamples`); nil when they are not that.
    package static func decodeSamples(_ data: Data) -> [StackSample]? {
        guard let records = try? JSONDecoder().decode([SampleRecord].self, from: data) else { return nil }
        // Counts are added up further on: a crafted one is clamped where it is read (2^31 samples
        // at 1 ms is 24 days), so no sum of them can overflow.
        return records.map { StackSample(tid: $0.tid, frames: $0.frames.prefix(512).compactMap { UInt64($0) },
                                          count: min(max($0.count, 0), 1 << 31)) }
    }

    /// Creates and locks the hang's lease file (0600, not through a link, not inherited by
    /// programs this process runs).
    private func takeLease(of hang: StagedHang) throws -> Int32 {
        guard let fd = lockLease(hang.leaseName, creating: true) else {
            throw directory.fail("lock", hang.leaseName)
        }
        return fd
    }

    private func lockLease(_ name: String, creating: Bool) -> Int32? { directory.lockLease(name, creating: creating) }

    /// The lease last: until every other file is gone, nobody else takes the hang for orphaned.
    package func remove(_ hang: StagedHang) {
        removeTemporaries(of: hang)
        for name in [hang.dumpName, hang.samplesName, hang.sidecarName, hang.leaseName] { _ = try? directory.remove(name) }
        if hang.lease >= 0 { close(hang.lease) }
    }

    /// The half-written `.tmp-` files of `hang`'s own names (DatabaseNames.temporaryName): its
    /// owner, killed in the middle of a write, left them; nobody else writes them.
    private func removeTemporaries(of hang: StagedHang) {
        let names: Set = [hang.dumpName, hang.samplesName, hang.sidecarName]
        for entry in (try? directory.entries()) ?? [] where entry.isRegularFile {
            if let final = DatabaseNames.finalName(ofTemporary: entry.name), names.contains(final) { _ = try? directory.remove(entry.name) }
        }
    }

    /// The staged hang `<bundleID>@<id>`, nil when it is not one (no sidecar, unreadable).
    func hang(bundleID: String, id: String) -> StagedHang? {
        guard case .usable(let hang)? = readHang(bundleID: bundleID, id: id) else { return nil }
        return hang
    }

    /// A staged hang's sidecar as read back: usable, or ours (by name and header) with values no
    /// monitor writes; nil when it is not one (no sidecar, unreadable, another bundle's header).
    private enum ReadHang {
        case usable(StagedHang)
        case implausible(StagedHang, problem: String)
    }

    private func readHang(bundleID: String, id: String) -> ReadHang? {
        guard (try? DatabaseNames.validateBundleID(bundleID)) != nil, UUID(uuidString: id) != nil else { return nil }
        let id = id.lowercased()
        guard let data = try? directory.readFile(Self.name(bundleID, id, Self.sidecarSuffix), limit: Self.maxSidecarBytes),
              let sidecar = try? JSONDecoder().decode(HangSidecar.self, from: data), sidecar.bundleID == bundleID else { return nil }
        let hang = StagedHang(bundleID: bundleID, id: id, sidecar: sidecar)
        return sidecar.problem.map { .implausible(hang, problem: $0) } ?? .usable(hang)
    }

    /// A staged hang whose sidecar can never be used: once its owner is gone (its lease free),
    /// its files go to failed/ with the reason (the sidecar last), and the lease is removed.
    private func setAside(_ hang: StagedHang, problem: String) {
        guard let lease = lockLease(hang.leaseName, creating: false) ?? (errno == ENOENT ? -1 : nil) else { return }
        defer { if lease >= 0 { close(lease) } }
        for name in [hang.dumpName, hang.samplesName, hang.sidecarName] where (try? directory.entry(name)) ?? nil != nil {
            _ = database.setAside(name, from: directory, reason: "staged hang not promoted: its sidecar has an \(problem)")
        }
        if lease >= 0 { _ = try? directory.remove(hang.leaseName) }
    }

    /// Every staged hang (of `bundleID`, or of any bundle) whose dump is here (not promoted), unlocked.
    private func stagedHangs(bundleID: String?) -> [StagedHang] {
        sidecars(bundleID: bundleID).filter { (try? directory.entry($0.dumpName)) ?? nil != nil }
    }

    /// Every readable sidecar (of `bundleID`, or of any bundle), oldest hang first.
    private func sidecars(bundleID: String?) -> [StagedHang] {
        var found: [StagedHang] = []
        for entry in (try? directory.entries()) ?? [] where entry.isRegularFile && entry.name.hasSuffix(Self.sidecarSuffix) {
            let base = entry.name.dropLast(Self.sidecarSuffix.count)
            guard let at = base.firstIndex(of: "@") else { continue }
            let bundle = String(base[..<at])
            guard bundleID == nil || bundle == bundleID,
                  let read = readHang(bundleID: bundle, id: String(base[base.index(after: at)...])) else { continue }
            switch read {
            case .usable(let hang): found.append(hang)
            case .implausible(let hang, let problem): setAside(hang, problem: problem)
            }
        }
        return found.sorted { $0.sidecar.startTime < $1.sidecar.startTime }
    }

    /// `hang` with its lease locked here when its owning process is gone: the lease is free
    /// (so two processors never take the same hang), or, for a hang staged without a lease,
    /// its pid is dead, a zombie or another process. nil while the owner lives.
    private func lockedIfOrphaned(_ hang: StagedHang) -> StagedHang? {
        var hang = hang
        if let lease = lockLease(hang.leaseName, creating: false) {
            hang.lease = lease
            return hang
        }
        if errno == EWOULDBLOCK { return nil }  // its owner lives: it holds the lock
        if errno == ENOTSUP { return nil }  // no lease of ours in its place: not ours to take
        guard hang.sidecar.pid != getpid() else { return nil }
        if let stat = ProcFS.processStat(of: hang.sidecar.pid), !stat.state.hasExited,
           stat.startTicks == hang.sidecar.processStartTicks { return nil }
        return hang
    }

    /// Staged hangs (of `bundleID`, or of any bundle) whose owning process is gone, their
    /// leases held by the caller now (`lockedIfOrphaned`).
    package func orphanedHangs(bundleID: String? = nil) -> [StagedHang] {
        stagedHangs(bundleID: bundleID).compactMap(lockedIfOrphaned)
    }

    /// The hangs process `pid` of `bundleID` had staged when it crashed at `crashTime`, which
    /// the crash report being built supersedes (their timing goes into its
    /// `context.supersededHang`): hangs that began before the crash whose owner is gone (their
    /// leases are held now) or is this process, which is building a crash report of itself.
    /// Nothing is removed until `completeSupersession`, once the report is stored.
    package func supersededHangs(byCrashOf pid: Int32, bundleID: String, at crashTime: Double) -> [SupersededStagedHang] {
        let ownTicks = ProcFS.startTicks(of: getpid())
        var taken: [SupersededStagedHang] = []
        for hang in stagedHangs(bundleID: bundleID) where hang.sidecar.pid == pid && hang.sidecar.startTime <= crashTime {
            let owned = pid == getpid() && hang.sidecar.processStartTicks == ownTicks
            guard let held = owned ? hang : lockedIfOrphaned(hang) else { continue }  // a live process's: not this crash's
            taken.append(SupersededStagedHang(target: hang.sidecar.target, thresholdSeconds: hang.sidecar.thresholdSeconds,
                                              startTime: hang.sidecar.startTime,
                                              durationSeconds: max(0, crashTime - hang.sidecar.startTime), id: hang.id,
                                              staged: held))
        }
        return taken
    }

    /// The superseded hangs leave staging/; a monitor of this process that owned one is told
    /// `report` superseded it (it sees its lease file unlinked, `wasTakenOver`).
    package func completeSupersession(_ hangs: [SupersededStagedHang], report: String) {
        for hang in hangs {
            if hang.staged.sidecar.pid == getpid() { Self.supersededHere.withLock { $0[hang.id] = report } }
            remove(hang.staged)
        }
    }

    /// The superseded hangs stay staged (the report could not be stored): their leases are let go.
    package func abandonSupersession(_ hangs: [SupersededStagedHang]) {
        for hang in hangs where hang.staged.lease >= 0 { close(hang.staged.lease) }
    }

    /// Whether process `pid` (started at `startTicks`) has a hang staged here, not yet promoted:
    /// how it ended is not known until that hang is (a fatal hang, or superseded by a crash).
    package func holdsHang(ofProcess pid: Int32, startTicks: UInt64) -> Bool {
        stagedHangs(bundleID: nil).contains { $0.sidecar.pid == pid && $0.sidecar.processStartTicks == startTicks }
    }

    /// The names of the regular files in staging/, sorted (listings and tests).
    package func fileNames() throws -> [String] {
        try directory.entries().filter { $0.isRegularFile && !$0.name.hasPrefix(".") }.map(\.name).sorted()
    }

    /// How many staged hangs a processor would promote now (their owners are gone); the
    /// leases this takes to tell are let go at once.
    package func orphanCount() -> Int {
        let orphans = orphanedHangs()
        for hang in orphans where hang.lease >= 0 { close(hang.lease) }
        return orphans.count
    }

    /// Every orphaned hang (of `bundleID`, or of any bundle) becomes a fatal-hang dump in
    /// intermediate/ — or goes, when a crash of its own process after it began supersedes it.
    /// Sidecars whose promoted dump is gone (processed, or failed) are removed.
    @discardableResult
    package func promoteOrphans(bundleID: String? = nil) -> [StagedHangOutcome] {
        removeLeftovers(bundleID: bundleID)
        return orphanedHangs(bundleID: bundleID).compactMap(promote)
    }

    /// The staged dump moves into intermediate/ as it was written, under the hang's id: the
    /// capture is written once and read once, by its processor, which stitches in the sidecar
    /// and samples left here (`stitchPromotedHang`). nil when another processor promoted it first.
    private func promote(_ staged: StagedHang) -> StagedHangOutcome? {
        let sidecar = staged.sidecar
        if let crash = database.crash(ofProcess: sidecar.pid, bundleID: sidecar.bundleID, after: sidecar.startTime) {
            guard crash.reportID != nil else {
                if staged.lease >= 0 { close(staged.lease) }
                return .awaitingCrashDump(sidecar, crashDump: crash.location)
            }
            remove(staged)
            return .supersededByCrash(sidecar, crash: crash.location)
        }
        let atLeast = max(sidecar.lastSeenTime - sidecar.startTime, sidecar.thresholdSeconds)
        defer { if staged.lease >= 0 { close(staged.lease) } }
        do {
            let name = Self.promotedName(staged)
            guard try directory.move(staged.dumpName, to: database.intermediate, as: name.finishedName) else { return nil }
            removeTemporaries(of: staged)
            _ = try? directory.remove(staged.leaseName)
            return .promoted(sidecar, atLeastSeconds: atLeast, dumpPath: database.intermediate.pathOf(name.finishedName))
        } catch {
            return .failed(sidecar, error)
        }
    }

    /// The promoted dump's name: the hang's id, so its processor finds the sidecar.
    private static func promotedName(_ hang: StagedHang) -> DumpName {
        DumpName(bundleID: hang.bundleID, uuidText: hang.id.uppercased(), abandoned: false, attempts: 0)
    }

    /// A promoted hang's dump, claimed and read by its processor, becomes the fatal hang the
    /// sidecar describes: duration at least last-seen − start (`hang.durationIsLowerBound`), the
    /// samples, outcome `fatal`. False when `snapshot` is no promoted hang's.
    package func stitchPromotedHang(into snapshot: inout ProcessSnapshot, bundleID: String, id: UUID) -> Bool {
        guard case .hang(let info) = snapshot.reason, !info.recovered,
              let hang = hang(bundleID: bundleID, id: id.uuidString),
              (try? directory.entry(hang.dumpName)) ?? nil == nil else { return false }
        Self.stitch(hang.sidecar, samples: readSamples(of: hang), into: &snapshot)
        return true
    }

    /// The fatal hang a (plausible) sidecar and its samples describe, made `snapshot`'s reason.
    package static func stitch(_ sidecar: HangSidecar, samples: [StackSample], into snapshot: inout ProcessSnapshot) {
        let atLeast = max(sidecar.lastSeenTime - sidecar.startTime, sidecar.thresholdSeconds)
        snapshot.reason = .hang(HangInfo(target: sidecar.target, thresholdSeconds: sidecar.thresholdSeconds,
                                         durationSeconds: atLeast, outcome: .fatal, startTime: sidecar.startTime,
                                         samples: samples))
        snapshot.annotations["hang.durationIsLowerBound"] = "true"
        snapshot.annotations["hang.lastSeenTime"] = String(sidecar.lastSeenTime)
    }

    /// What is left of a promoted hang once its report is stored.
    package func removePromotedHang(bundleID: String, id: UUID) {
        if let hang = hang(bundleID: bundleID, id: id.uuidString) { remove(hang) }
    }

    /// Sidecars with no dump here and none of theirs waiting in intermediate/ or processing/
    /// (its processor died after storing the report, or it failed), whose lease nobody holds.
    private func removeLeftovers(bundleID: String?) {
        // In this order: a dump gone from here at the first look is, at the later ones, in
        // intermediate/, then processing/ (a claim only moves it on), or processed.
        let promoted = sidecars(bundleID: bundleID).filter { (try? directory.entry($0.dumpName)) ?? nil == nil }
        guard !promoted.isEmpty else { return }
        var waiting: [String] = []
        for other in [database.intermediate, database.processing] {
            waiting += ((try? other.entries()) ?? []).map(\.name)
        }
        for hang in promoted {
            let name = Self.promotedName(hang)
            guard !waiting.contains(where: { $0.hasPrefix(name.bundleID + "@" + name.uuidText) }),
                  let orphan = lockedIfOrphaned(hang) else { continue }
            remove(orphan)
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

    /// Takes over the staged hang whose dump is at `path` (`…/staging/<bundle>@<id>.hang.dump`,
    /// what version 1 hang messages sent): only inside this staging directory, compared by
    /// device and inode however the path was spelled.
    package func takeOver(dumpPath path: String) -> TakenOver? {
        let fileName = Paths.lastComponent(of: path)
        guard fileName.hasSuffix(Self.dumpSuffix), let at = fileName.firstIndex(of: "@"),
              let slash = path.lastIndex(of: "/") else { return nil }
        var named = stat(), own = stat()
        let parent = slash == path.startIndex ? "/" : String(path[..<slash])
        guard stat(parent, &named) == 0, fstat(directory.fd, &own) == 0,
              named.st_dev == own.st_dev, named.st_ino == own.st_ino else { return nil }
        return takeOver(bundleID: String(fileName[..<at]),
                        id: String(fileName[fileName.index(after: at)...].dropLast(Self.dumpSuffix.count)))
    }
}

extension CrashReportDatabase {
    /// staging/ (HangMonitor's staged hangs).
    package var stagingArea: StagingArea { StagingArea(database: self) }

    /// The first crash of process `pid` of `bundleID` after `time`: a stored crash report
    /// (`reportID` set), or a crash dump not yet processed (in intermediate/ or processing/;
    /// hang dumps there are never crashes). A dump still being written (`.locked`, not empty)
    /// that cannot be read yet counts as a crash of that process: the crash handler's.
    package func crash(ofProcess pid: Int32, bundleID: String, after time: Double) -> DatabaseReportReference? {
        firstReport(ofProcess: pid, bundleID: bundleID, after: time) { kind in kind == "crash" } dump: { reason in
            if case .crash = reason { true } else { false }
        }
    }

    /// The first report after `time` that says how process `pid` ended — a crash, a fatal hang or
    /// a kill — stored, or a dump of one waiting to be processed; of `bundleID`, or made by the
    /// `hangwatch run` `runID` (whose reports name the child by its executable). Run records ask
    /// it (DumpProcessor): a process whose end is told already gets no `killed` report.
    package func ending(ofProcess pid: Int32, bundleID: String, runID: String?, after time: Double) -> DatabaseReportReference? {
        firstReport(ofProcess: pid, bundleID: bundleID, runID: runID, after: time) { kind in
            kind == "crash" || kind == "fatal-hang" || kind == "killed"
        } dump: { reason in
            switch reason {
            case .crash, .killed: true
            case .hang(let hang): !hang.recovered
            case .dumpRequested: false
            }
        }
    }

    private func firstReport(ofProcess pid: Int32, bundleID: String, runID: String? = nil, after time: Double,
                             report isEnding: (String) -> Bool,
                             dump isEndingDump: (CaptureReason) -> Bool) -> DatabaseReportReference? {
        var found: [DatabaseReportReference] = []
        for stored in (try? listReports()) ?? [] where stored.modificationDate.timeIntervalSince1970 > time {
            guard let data = try? readReport(id: stored.id),
                  let header = try? JSONDecoder().decode(StoredReportHeader.self, from: data),
                  header.process.bundleID == bundleID || (runID != nil && header.runID == runID),
                  header.process.pid == pid, isEnding(header.kind) else { continue }
            found.append(DatabaseReportReference(location: stored.path, createdAt: stored.modificationDate.timeIntervalSince1970,
                                                 reportID: stored.id))
        }
        for directory in [intermediate, processing] {
            for entry in (try? directory.entries()) ?? [] where entry.isRegularFile && entry.name.hasPrefix(bundleID + "@") {
                let created = entry.modificationDate.timeIntervalSince1970
                guard created > time, !(entry.name.hasSuffix(DatabaseNames.lockedSuffix) && entry.size == 0) else { continue }
                if let bytes = try? directory.readFile(entry.name, limit: options.maxReadBytes),
                   let snapshot = try? IntermediateDumpReader.read(bytes: [UInt8](bytes)) {
                    guard isEndingDump(snapshot.reason), snapshot.process.pid == pid else { continue }
                } else if !entry.name.hasSuffix(DatabaseNames.lockedSuffix) {
                    continue
                }
                found.append(DatabaseReportReference(location: directory.pathOf(entry.name), createdAt: created))
            }
        }
        return found.min { $0.createdAt < $1.createdAt }
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
    struct Process: Decodable { var bundleID: String; var pid: Int32 }
    var kind: String
    var process: Process
    var runID: String?
}
