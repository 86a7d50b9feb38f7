// Run records, <db>/runs/ (docs/killed.md): a process that runs a HangMonitor keeps one record
// of itself while it runs — who it is, when it was last alive, a small ring of its recent
// state — and a lease file it holds locked. A clean end (`HangMonitor.stop()`, `exit()`)
// removes both. A record whose lease is free belongs to a process that ended without a clean
// end: processing (HangwatchProcessing's `DumpProcessor.judgeEndedRuns`, `RunVerdict`) turns it
// into a `killed` report unless a crash or a fatal hang of that process already explains what happened.
// Names: `<bundle>@<id>.run.json` and `<bundle>@<id>.run.lease` (RecordName, LeasedFiles:
// LeasedRecord.swift).
import HangwatchPlatform
import HangwatchSnapshot
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// What a run record holds (`<bundle>@<id>.run.json`, version 1).
package struct RunRecord: Codable, Equatable, Sendable {
    package var version = 1
    package var bundleID: String
    package var pid: Int32
    /// /proc/PID/stat start time, so that a reused pid is not mistaken for the owner.
    package var processStartTicks: UInt64
    /// /proc/sys/kernel/random/boot_id when it started: a record from an earlier boot ended when the machine went down.
    package var bootID: String
    /// The `hangwatch run` it runs under (HANGWATCH_RUN_ID), if any.
    package var runID: String?
    package var name: String
    package var executable: String
    package var arguments: [String]
    /// Wall clock, seconds since 1970.
    package var startTime: Double
    package var lastHeartbeat: Double
    package var heartbeatIntervalSeconds: Double
    package var memoryCgroup: MemoryCgroup?
    /// The cgroup's OOM-kill counter at the last heartbeat.
    package var oomKillsSeen: UInt64?
    /// The last `RunRecord.maxSamples` states, oldest first.
    package var samples: [Sample]

    /// One state of the process.
    package struct Sample: Codable, Equatable, Sendable {
        package var time: Double
        package var residentBytes: UInt64
        package var threads: Int
        package var hangs: [String]

        package init(time: Double, residentBytes: UInt64, threads: Int, hangs: [String]) {
            self.time = time
            self.residentBytes = residentBytes
            self.threads = threads
            self.hangs = hangs
        }
    }

    package static let maxSamples = 32
    /// Bounds on how much of its command line a record stores (also the most that a reader accepts from a record).
    package static let maxArguments = 64
    package static let maxArgumentBytes = 1024

    /// Why a record read back cannot be judged (a value no monitor writes: a time that is not
    /// one, a negative count, more than the bounds above); nil when it can.
    package var problem: String? {
        Plausible.firstProblem([
            "version": version == 1,
            "pid": pid > 0,
            "startTime": Plausible.time(startTime),
            "lastHeartbeat": Plausible.time(lastHeartbeat) && lastHeartbeat >= startTime - 1,
            "heartbeatIntervalSeconds": Plausible.duration(heartbeatIntervalSeconds),
            "name": Plausible.text(name, maxBytes: 256),
            "executable": Plausible.text(executable, maxBytes: 4096),
            "bootID": Plausible.text(bootID, maxBytes: 64),
            "runID": Plausible.text(runID ?? "", maxBytes: 128),
            "arguments": arguments.count <= Self.maxArguments && arguments.allSatisfy { Plausible.text($0, maxBytes: Self.maxArgumentBytes) },
            "memoryCgroup": Plausible.text(memoryCgroup?.path ?? "", maxBytes: 4096),
            "samples": samples.count <= Self.maxSamples && samples.allSatisfy { sample in
                Plausible.time(sample.time) && sample.time >= startTime - 1 && sample.time <= lastHeartbeat + 1 && sample.threads >= 0 && sample.threads <= 1 << 22 && sample.hangs.count <= 16
                    && sample.hangs.allSatisfy { Plausible.text($0, maxBytes: 256) }
            },
        ])
    }

    /// Whether `other` is a record of the same process: the same pid, start time and boot, and
    /// the same program (name, executable, arguments, `hangwatch run`). Several monitors of one
    /// process write records that agree on all of these.
    package func isSameProcess(as other: RunRecord) -> Bool {
        pid == other.pid && processStartTicks == other.processStartTicks && bootID == other.bootID && name == other.name
            && executable == other.executable && arguments == other.arguments && runID == other.runID
    }

    /// This process as it is now: who it is. Its memory cgroup and the counter's value come with
    /// each sample (`sample(hangs:)`), the first one included.
    package static func current(bundleID: String, heartbeatIntervalSeconds: Double) -> RunRecord {
        let pid = getpid(), now = Date().timeIntervalSince1970
        return RunRecord(
            bundleID: bundleID, pid: pid, processStartTicks: ProcFS.startTicks(of: pid) ?? 0, bootID: ProcFS.bootID(),
            runID: RunIdentity.current(environment: ProcessInfo.processInfo.environment), name: ProcFS.comm(of: nil),
            executable: ProcFS.readLink("/proc/self/exe") ?? "",
            arguments: ProcFS.commandLine(of: nil).prefix(maxArguments).map { String(decoding: $0.utf8.prefix(maxArgumentBytes), as: UTF8.self) },
            startTime: now, lastHeartbeat: now, heartbeatIntervalSeconds: heartbeatIntervalSeconds, samples: [])
    }

    /// Appends a sample of this process now (resident memory, threads), keeping the ring's bound.
    package mutating func sample(hangs: [String]) {
        let now = Date().timeIntervalSince1970
        lastHeartbeat = now
        // Re-read: a process can be moved to another cgroup (a job's own, a container's) while it runs.
        memoryCgroup = MemoryCgroup.of(nil) ?? memoryCgroup
        oomKillsSeen = memoryCgroup?.oomKills() ?? oomKillsSeen
        let (resident, threads) = ProcFS.residentBytesAndThreads(of: nil)
        samples.append(Sample(time: now, residentBytes: resident, threads: threads, hangs: Array(hangs.prefix(16))))
        if samples.count > Self.maxSamples { samples.removeFirst(samples.count - Self.maxSamples) }
    }
}

/// A run record and its lease, held by the process that owns it or by the processor judging it.
package struct HeldRunRecord: Sendable {
    let name: RecordName
    package var record: RunRecord
    /// The lease's locked descriptor (-1: none).
    package var lease: Int32

    package var id: String { name.id }
    var jsonName: String { name.fileName(RunRecords.jsonSuffix) }
}

/// <db>/runs/.
package struct RunRecords: Sendable {
    static let jsonSuffix = ".run.json"
    static let leaseSuffix = ".run.lease"
    static let maxRecordBytes: Int64 = 256 << 10

    /// The database is retained, not only its runs/ descriptor, because it closes its descriptors when it is freed.
    let database: CrashReportDatabase
    var directory: DatabaseDirectory { database.runs }
    var leases: LeasedFiles { LeasedFiles(directory: directory, leaseSuffix: Self.leaseSuffix) }

    /// A new record, its lease taken first (so nobody judges it while this process lives), then written.
    package func begin(_ record: RunRecord) throws -> HeldRunRecord {
        let name = try RecordName.new(bundleID: record.bundleID, lowercase: true)
        let held = HeldRunRecord(name: name, record: record, lease: try leases.take(name))
        do {
            try write(held)
        } catch {
            close(held)
            throw error
        }
        return held
    }

    /// Replaces the record with `held.record` (atomically; not fsynced: a heartbeat lost in a
    /// machine crash only makes the last one older).
    package func write(_ held: HeldRunRecord) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        try directory.writeAtomically(held.jsonName, try encoder.encode(held.record), durable: false)
    }

    /// The clean end: the record, then its lease, are removed.
    package func close(_ held: HeldRunRecord) {
        leases.remove(held.name, [Self.jsonSuffix], lease: held.lease)
    }

    /// Records whose owner ended without a clean end; the caller now holds their leases (close
    /// each with `close` once it is judged, or call `release` to leave it). A record whose owner is
    /// alive (it holds the lease) is not among them. Neither is one whose lease is free while its
    /// process still runs with the same start time: that process exec'd another program, so the
    /// record is removed, because the process no longer runs the code that wrote it.
    package func ended() -> [HeldRunRecord] {
        var setAside: [String] = []
        return ended(settingAside: &setAside)
    }

    /// `ended()`, and the paths of the records set aside in failed/ on the way (values no monitor
    /// writes: `RunRecord.problem`), for the caller to report once.
    package func ended(settingAside setAside: inout [String]) -> [HeldRunRecord] {
        var found: [HeldRunRecord] = []
        for name in leases.records(withFile: Self.jsonSuffix) where name.id == name.id.lowercased() {
            guard let lease = leases.probe(name).heldOrNone else { continue }  // its owner holds it, so it is alive
            guard let data = try? directory.readFile(name.fileName(Self.jsonSuffix), limit: Self.maxRecordBytes),
                  let record = try? JSONDecoder().decode(RunRecord.self, from: data), record.bundleID == name.bundleID else {
                leases.release(lease)
                continue  // unreadable or not what we write: left for a human (we never delete a file we have not read)
            }
            if let judged = judgeable(HeldRunRecord(name: name, record: record, lease: lease), settingAside: &setAside) {
                found.append(judged)
            }
        }
        return found.sorted { $0.record.startTime < $1.record.startTime }
    }

    /// Returns `held` when it is a record to judge. A record that is ours by name and header but
    /// has values no monitor writes is never judged; it is set aside once, with the reason (a record
    /// containing ±1e300 once trapped every processor). A record whose process still runs is not
    /// judged either: without a lease, the process is simply alive; with its lease free, the process
    /// exec'd another program, and the record is removed.
    private func judgeable(_ held: HeldRunRecord, settingAside setAside: inout [String]) -> HeldRunRecord? {
        if let problem = held.record.problem {
            if database.setAside(held.jsonName, from: directory, reason: "run record not judged: \(problem)") {
                setAside.append(database.failedPath + "/" + held.jsonName)
                close(held)
            } else {
                release(held)
            }
            return nil
        }
        let owner = RecordOwner(bootID: held.record.bootID, pidNamespace: nil, pid: held.record.pid,
                                startTicks: held.record.processStartTicks)
        if owner.liveness() == .alive {
            if held.lease >= 0 { close(held) }
            return nil
        }
        return held
    }

    /// Removes the records process `pid` left under the `hangwatch run` `runID`, once that run
    /// has reported how the process ended (its reports may be in another database than this one).
    package func closeEnded(pid: Int32, runID: String) {
        for held in ended() {
            if held.record.pid == pid && held.record.runID == runID { close(held) } else { release(held) }
        }
    }

    /// Releases a record's lease, leaving the record for a later processor.
    package func release(_ held: HeldRunRecord) {
        leases.release(held.lease)
    }

    /// The names of the files in runs/, sorted (tests).
    package func fileNames() throws -> [String] {
        try directory.entries().filter { $0.isRegularFile && !$0.name.hasPrefix(".") }.map(\.name).sorted()
    }
}

extension CrashReportDatabase {
    /// runs/ (the run records of live HangMonitor processes, and of ended ones not yet judged).
    package var runRecords: RunRecords { RunRecords(database: self) }
}

extension StagingArea {
    /// The run records of the same database (a HangMonitor reaches its database through its staging area).
    package var runRecords: RunRecords { database.runRecords }
}
