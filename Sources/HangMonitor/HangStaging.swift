// The staging area: one staged hang = an intermediate dump, a tiny sidecar (timing, updated
// while the hang lasts) and the aggregated samples, all in <db>/staging/. A process that dies
// while hung leaves them behind; the next start with the same database and bundle id finds them.
import FoundationEssentials
import Glibc
import HangwatchPlatform
import HangwatchCapture
import HangwatchDatabase
import HangwatchSnapshot

struct HangSidecar: Codable, Equatable {
    var version = 1
    var bundleID: String
    var pid: Int32
    /// /proc/PID/stat start time, so a reused pid is not mistaken for the owner.
    var processStartTicks: UInt64
    var target: String
    var thresholdSeconds: Double
    /// Wall clock, seconds since 1970.
    var startTime: Double
    var lastSeenTime: Double
    var sampleCount: Int
    /// The first of `hungThreads` (what version 1 sidecars hold).
    var hungThread: Int32?
    var hungThreads: [Int32]?
    var signature: String
}

struct StagedHang {
    let id: String
    let dumpPath: String
    let sidecarPath: String
    let samplesPath: String
    var sidecar: HangSidecar
    /// The owner's lock on `<bundle>@<id>.hang.lease` (-1: none held here). While the owner
    /// lives the lock is held; the kernel drops it when the owner dies (zombie or not, in
    /// whatever pid namespace), which is how others tell the hang is orphaned.
    var lease: Int32 = -1
    var leasePath: String { String(dumpPath.dropLast(HangStagingArea.dumpSuffix.count)) + HangStagingArea.leaseSuffix }
}

struct HangStagingArea {
    let directory: String
    static let sidecarSuffix = ".hang.json"
    static let dumpSuffix = ".hang.dump"
    static let samplesSuffix = ".hang.samples.json"
    static let leaseSuffix = ".hang.lease"

    init(directory: String) { self.directory = directory }

    func paths(bundleID: String, id: String) -> (dump: String, sidecar: String, samples: String) {
        let base = "\(directory)/\(bundleID)@\(id)"
        return (base + Self.dumpSuffix, base + Self.sidecarSuffix, base + Self.samplesSuffix)
    }

    func newHang(_ sidecar: HangSidecar) throws -> StagedHang {
        try SecureFile.makeDirectory(directory)
        let id = UUID().uuidString.lowercased()
        let p = paths(bundleID: sidecar.bundleID, id: id)
        return StagedHang(id: id, dumpPath: p.dump, sidecarPath: p.sidecar, samplesPath: p.samples, sidecar: sidecar)
    }

    func writeSidecar(_ hang: StagedHang) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        try SecureFile.writeAtomically(try encoder.encode(hang.sidecar), to: hang.sidecarPath)
    }

    /// One aggregated stack in `<bundle>@<uuid>.hang.samples.json` (frames as decimal strings:
    /// addresses above 2^53 would not survive a JSON number).
    private struct SampleRecord: Codable {
        var tid: Int32
        var count: Int
        var frames: [String]
    }

    func writeSamples(_ samples: [StackSample], of hang: StagedHang) throws {
        let records = samples.map { SampleRecord(tid: $0.tid, count: $0.count, frames: $0.frames.map { String($0) }) }
        try SecureFile.writeAtomically(try JSONEncoder().encode(records), to: hang.samplesPath)
    }

    func readSamples(at path: String) -> [StackSample] {
        guard let data = try? SecureFile.read(path, limit: 8 << 20),
              let records = try? JSONDecoder().decode([SampleRecord].self, from: data) else { return [] }
        return records.map { StackSample(tid: $0.tid, frames: $0.frames.compactMap { UInt64($0) }, count: $0.count) }
    }

    /// Creates and locks the hang's lease file (0600, not through a link, not inherited by
    /// programs this process runs).
    func takeLease(of hang: StagedHang) throws -> Int32 {
        guard let fd = Self.lockLease(at: hang.leasePath, creating: true) else {
            throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO)
        }
        return fd
    }

    /// The lease file opened (not through a link, not inherited) and locked exclusively without
    /// waiting; nil with errno set: EWOULDBLOCK when another process holds the lock, the
    /// open's error (ENOENT for a hang staged without a lease) otherwise.
    private static func lockLease(at path: String, creating: Bool) -> Int32? {
        let fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC | (creating ? O_CREAT : 0), 0o600)
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
    func remove(_ hang: StagedHang) {
        unlink(hang.dumpPath); unlink(hang.samplesPath); unlink(hang.sidecarPath)
        unlink(hang.leasePath)
        if hang.lease >= 0 { close(hang.lease) }
    }

    /// Staged hangs of `bundleID` whose owning process is gone: its lease is free (the
    /// returned hangs hold it now, so two monitors never promote the same hang), or, for a
    /// hang staged without a lease, its pid is dead, a zombie or another process.
    func orphanedHangs(bundleID: String) -> [StagedHang] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        var found: [StagedHang] = []
        for name in names where name.hasPrefix(bundleID + "@") && name.hasSuffix(Self.sidecarSuffix) {
            let id = String(name.dropFirst(bundleID.count + 1).dropLast(Self.sidecarSuffix.count))
            let p = paths(bundleID: bundleID, id: id)
            guard let data = try? SecureFile.read(p.sidecar, limit: 64 * 1024),
                  let sidecar = try? JSONDecoder().decode(HangSidecar.self, from: data), sidecar.bundleID == bundleID else { continue }
            var hang = StagedHang(id: id, dumpPath: p.dump, sidecarPath: p.sidecar, samplesPath: p.samples, sidecar: sidecar)
            if let lease = Self.lockLease(at: hang.leasePath, creating: false) {
                hang.lease = lease
            } else if errno == EWOULDBLOCK {
                continue  // its owner lives: it holds the lock
            } else {
                guard sidecar.pid != getpid() else { continue }
                if let stat = ProcFS.processStat(of: sidecar.pid), stat.state != "Z", stat.startTicks == sidecar.processStartTicks { continue }
            }
            found.append(hang)
        }
        return found.sorted { $0.sidecar.startTime < $1.sidecar.startTime }
    }
}

/// For a supervisor (`hangwatch run`) that killed a child while it was hung: the child's
/// staged hang (the path it sent in its `hang` message) becomes part of the supervisor's
/// report, and is removed so that the child's next start does not report the same hang again.
package enum StagedHangHandOver {
    /// `<bundle>@<id>` + this is a staged hang's dump in staging/.
    package static let dumpSuffix = HangStagingArea.dumpSuffix

    package struct Taken: Sendable {
        package var samples: [StackSample]
        /// Wall clock, seconds since 1970.
        package var startTime: Double
    }

    /// nil when `dumpPath` is not a staged hang (wrong name, no sidecar, unreadable).
    package static func take(stagedDumpPath dumpPath: String) -> Taken? {
        guard dumpPath.hasSuffix(HangStagingArea.dumpSuffix), !dumpPath.contains("/../") else { return nil }
        let base = String(dumpPath.dropLast(HangStagingArea.dumpSuffix.count))
        let area = HangStagingArea(directory: Paths.parent(of: dumpPath))
        guard let data = try? SecureFile.read(base + HangStagingArea.sidecarSuffix, limit: 64 * 1024),
              let sidecar = try? JSONDecoder().decode(HangSidecar.self, from: data) else { return nil }
        let staged = StagedHang(id: "", dumpPath: dumpPath, sidecarPath: base + HangStagingArea.sidecarSuffix,
                                samplesPath: base + HangStagingArea.samplesSuffix, sidecar: sidecar)
        let taken = Taken(samples: area.readSamples(at: staged.samplesPath), startTime: sidecar.startTime)
        area.remove(staged)
        return taken
    }
}
