// Run records, <db>/runs/ (docs/killed.md): a process that runs a HangMonitor keeps one record
// of itself while it runs — who it is, when it was last alive, a small ring of its recent
// state — and a lease file it holds locked. A clean end (`HangMonitor.stop()`, `exit()`)
// removes both. A record whose lease is free belongs to a process that ended without a clean
// end: the processor (`DumpProcessor.judgeEndedRuns`) turns it into a `killed` report unless a
// crash or a fatal hang of that process says what happened. Names: `<bundle>@<id>.run.json`
// and `<bundle>@<id>.run.lease`, produced and parsed here only.
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
    /// /proc/PID/stat start time, so a reused pid is not taken for the owner.
    package var processStartTicks: UInt64
    /// /proc/sys/kernel/random/boot_id when it started: a record from an earlier boot ended with the machine.
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
    /// Bounds on what a record keeps of its command line (what a reader trusts of a record too).
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
        let environment = ProcessInfo.processInfo.environment["HANGWATCH_RUN_ID"]
        return RunRecord(
            bundleID: bundleID, pid: pid, processStartTicks: ProcFS.startTicks(of: pid) ?? 0, bootID: ProcFS.bootID(),
            runID: environment.flatMap { $0.isEmpty || $0.utf8.count > 128 ? nil : $0 }, name: ProcFS.comm(of: nil),
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
    package let id: String
    package var record: RunRecord
    /// The lease's locked descriptor (-1: none).
    package var lease: Int32

    var jsonName: String { RunRecords.name(record.bundleID, id, RunRecords.jsonSuffix) }
    var leaseName: String { RunRecords.name(record.bundleID, id, RunRecords.leaseSuffix) }
}

/// <db>/runs/.
package struct RunRecords: Sendable {
    static let jsonSuffix = ".run.json"
    static let leaseSuffix = ".run.lease"
    static let maxRecordBytes: Int64 = 256 << 10

    static func name(_ bundleID: String, _ id: String, _ suffix: String) -> String { "\(bundleID)@\(id)\(suffix)" }

    /// Held, not only its runs/ descriptor: the database closes its descriptors when it goes.
    let database: CrashReportDatabase
    var directory: DatabaseDirectory { database.runs }

    /// A new record, its lease taken first (so nobody judges it while this process lives), then written.
    package func begin(_ record: RunRecord) throws -> HeldRunRecord {
        try DatabaseNames.validateBundleID(record.bundleID)
        var held = HeldRunRecord(id: UUID().uuidString.lowercased(), record: record, lease: -1)
        guard let lease = directory.lockLease(held.leaseName, creating: true) else { throw directory.fail("lock", held.leaseName) }
        held.lease = lease
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
        _ = try? directory.remove(held.jsonName)
        // The lease only when it is the one held here (a regular file of ours, DatabaseDirectory.lockLease).
        guard held.lease >= 0 else { return }
        _ = try? directory.remove(held.leaseName)
        Glibc.close(held.lease)
    }

    /// Records whose owner ended without a clean end, their leases held by the caller now (give
    /// each back with `close` once judged, or `release` to leave it). A record whose owner is
    /// alive (it holds the lease) is not among them; neither is one whose lease is free while
    /// its process still runs with the same start time (it exec'd another program: removed, as
    /// that process no longer runs the code that wrote it).
    package func ended() -> [HeldRunRecord] {
        var setAside: [String] = []
        return ended(settingAside: &setAside)
    }

    /// `ended()`, and the paths of the records set aside in failed/ on the way (values no monitor
    /// writes: `RunRecord.problem`), for the caller to say once.
    package func ended(settingAside setAside: inout [String]) -> [HeldRunRecord] {
        var found: [HeldRunRecord] = []
        for entry in (try? directory.entries()) ?? [] where entry.isRegularFile && entry.name.hasSuffix(Self.jsonSuffix) {
            let base = entry.name.dropLast(Self.jsonSuffix.count)
            guard let at = base.firstIndex(of: "@") else { continue }
            let bundle = String(base[..<at]), id = String(base[base.index(after: at)...])
            guard (try? DatabaseNames.validateBundleID(bundle)) != nil, let uuid = UUID(uuidString: id),
                  uuid.uuidString.lowercased() == id else { continue }
            guard let lease = directory.lockLease(Self.name(bundle, id, Self.leaseSuffix), creating: false)
                    ?? (errno == ENOENT ? -1 : nil) else {
                continue  // its owner holds it: alive
            }
            guard let data = try? directory.readFile(entry.name, limit: Self.maxRecordBytes),
                  let record = try? JSONDecoder().decode(RunRecord.self, from: data), record.bundleID == bundle else {
                if lease >= 0 { Glibc.close(lease) }
                continue  // unreadable or not what we write: left for a human (never ours to delete unread)
            }
            let held = HeldRunRecord(id: id, record: record, lease: lease)
            if let problem = record.problem {
                // Ours by name and header, but no monitor wrote these values: never judged, set
                // aside once with the reason (a record of ±1e300 trapped every processor).
                if database.setAside(entry.name, from: directory, reason: "run record not judged: \(problem)") {
                    setAside.append(database.failedPath + "/" + entry.name)
                    close(held)
                } else {
                    release(held)
                }
                continue
            }
            // Its process runs on: without a lease, it is alive; with its lease free, it exec'd
            // another program, and the record goes.
            if stillRuns(record) {
                if lease >= 0 { close(held) }
                continue
            }
            found.append(held)
        }
        return found.sorted { $0.record.startTime < $1.record.startTime }
    }

    /// Removes the records process `pid` left under the `hangwatch run` `runID`, once that run
    /// has reported how the process ended (its reports may be in another database than this one).
    package func closeEnded(pid: Int32, runID: String) {
        for held in ended() {
            if held.record.pid == pid && held.record.runID == runID { close(held) } else { release(held) }
        }
    }

    /// Lets go of a record's lease, leaving it for a later processor.
    package func release(_ held: HeldRunRecord) {
        if held.lease >= 0 { Glibc.close(held.lease) }
    }

    /// The names of the files in runs/, sorted (tests).
    package func fileNames() throws -> [String] {
        try directory.entries().filter { $0.isRegularFile && !$0.name.hasPrefix(".") }.map(\.name).sorted()
    }

    private func stillRuns(_ record: RunRecord) -> Bool {
        guard record.bootID == ProcFS.bootID(), let stat = ProcFS.processStat(of: record.pid) else { return false }
        return !stat.state.hasExited && stat.startTicks == record.processStartTicks
    }
}

extension CrashReportDatabase {
    /// runs/ (the run records of live HangMonitor processes, and of ended ones not yet judged).
    package var runRecords: RunRecords { RunRecords(database: self) }

    /// What the end of an ended run's process comes to.
    package enum RunVerdict: Sendable, Equatable {
        /// A hang of it is still staged: how it ended is known once that is promoted.
        case wait
        /// A crash, a fatal hang or a kill of it is reported (or waits as a dump): nothing to add.
        case told
        /// Nothing says how it ended: a `killed` report.
        case killed
    }

    package func verdict(on record: RunRecord) -> RunVerdict {
        if stagingArea.holdsHang(ofProcess: record.pid, startTicks: record.processStartTicks) { return .wait }
        if ending(ofProcess: record.pid, bundleID: record.bundleID, runID: record.runID, after: record.startTime - 1) != nil {
            return .told
        }
        return .killed
    }

    /// How many `killed` reports a processor would make now (`hangwatch list`'s hint); the
    /// leases this takes to tell are let go at once.
    package func killedRunsWaiting() -> Int {
        let ended = runRecords.ended()
        defer { for held in ended { runRecords.release(held) } }
        return ended.filter { verdict(on: $0.record) == .killed }.count
    }
}

extension StagingArea {
    /// The run records of the same database (a HangMonitor reaches its database through its staging area).
    package var runRecords: RunRecords { database.runRecords }
}
