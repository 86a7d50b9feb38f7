// The one killed-report path (docs/killed.md): a process ended from outside with no crash and
// no fatal hang — judged from the run record it left (`DumpProcessor.judgeEndedRuns`), or seen
// dying of a signal by `hangwatch run` (RunReporter) — becomes a `killed` report built from one
// snapshot (who the process was, no threads) and what was judged of its end (KillJudgement).
// Which ended runs get one is decided here too (RunVerdict), not in the database.
import FoundationEssentials
import HangwatchDatabase
import HangwatchPlatform
import HangwatchPromotion
import HangwatchReport
import HangwatchSnapshot
import HangwatchSupervisorProtocol

/// A process that was killed, as its `killed` report tells it.
package struct KilledProcess: Sendable {
    package var process: ProcessIdentity
    /// The signal it died of, when its parent saw it.
    package var signal: Int32?
    /// When it was last known alive, or seen dying (wall clock): the report's time.
    package var time: Double
    /// The `hangwatch run` it ran under, if any (RunIdentity).
    package var runID: String?
    /// What is known of its end (KillJudgement) and what its watcher saw of it (last states, liveness).
    package var killed: Report.Killed

    package init(process: ProcessIdentity, signal: Int32?, time: Double, runID: String?, killed: Report.Killed) {
        self.process = process
        self.signal = signal
        self.time = time
        self.runID = runID
        self.killed = killed
    }

    /// The process a run record names, `judged`: its last heartbeat and samples join the judgement.
    package init(record: RunRecord, judged: Report.Killed) {
        var killed = judged
        killed.lastSeenAlive = record.lastHeartbeat
        killed.samples = record.samples.map(Report.StateSample.init)
        self.init(process: ProcessIdentity(pid: record.pid, name: record.name, executable: record.executable,
                                           arguments: record.arguments, bundleID: record.bundleID),
                  signal: nil, time: record.lastHeartbeat, runID: record.runID, killed: killed)
    }

    /// The snapshot its report is built from: who the process was, no threads, and its run.
    package var snapshot: ProcessSnapshot {
        var annotations: [String: String] = [:]
        if let runID { annotations[RunIdentity.annotationKey] = runID }
        return ProcessSnapshot(reason: .killed(KillInfo(signal: signal, cause: killed.cause)), timestamp: time, process: process,
                               threads: [], modules: [], annotations: annotations)
    }

    /// What its report adds to what the snapshot says: the judgement and the run.
    package func amend(_ report: inout Report) {
        report.killed = killed
        report.runID = runID
    }
}

extension DumpProcessor {
    /// The `killed` report of `process`, stored under `id`, with `context` (what a supervisor saw).
    package func storeKilled(_ process: KilledProcess, id: String, context: Report.Context? = nil) throws -> Report {
        try store(process.snapshot, id: id, kind: .killed, context: context, amend: process.amend)
    }

    /// Each run record whose process ended without a clean stop: nothing when a crash, a fatal
    /// hang or a kill of that process is reported (or waits as a dump); left for later while a
    /// hang of it is still staged; otherwise a `killed` report (KillJudgement), the record then
    /// removed. A record that cannot be judged (`RunRecord.problem`) is set aside in failed/.
    package func judgeEndedRuns(settingAside setAside: inout [String]) -> [Report] {
        let records = database.runRecords
        // Every verdict is taken before any report is made: a killed report made in this pass
        // tells nothing of another record's process (a forged record naming the same pid and
        // start time would otherwise pass for that process's end and hide its report).
        let judged = records.ended(settingAside: &setAside).map { ($0, RunVerdict(on: $0.record, in: database)) }
        var reports: [Report] = []
        var reported: [RunRecord] = []
        for (held, verdict) in judged {
            switch verdict {
            case .wait:
                records.release(held)
                continue
            case .told:
                records.close(held)
                continue
            case .killed:
                break
            }
            // Several monitors in one process (other bundle ids) left one record each: one
            // report. A record that names the same pid and start time but another program is
            // judged on its own.
            if reported.contains(where: { $0.isSameProcess(as: held.record) }) {
                records.close(held)
                continue
            }
            do {
                reports.append(try storeKilled(KilledProcess(record: held.record, judged: Self.judge(held.record)), id: held.id))
                reported.append(held.record)
                records.close(held)
            } catch {
                records.release(held)  // kept for a later processor: nothing is lost
            }
        }
        return reports
    }

    /// What the system still says of the end of a run record's process (KillJudgement).
    private static func judge(_ record: RunRecord) -> Report.Killed {
        // Dead by the heartbeat it missed; a process thrashing towards an OOM kill may miss a few.
        let deadBy = record.lastHeartbeat + max(4 * record.heartbeatIntervalSeconds, 60)
        // The cgroup the record names is read only where a cgroup filesystem holds it.
        let cgroup = record.memoryCgroup?.verified()
        var killed = KillJudgement.judge(.init(pid: record.pid, name: record.name, startedAt: record.startTime, deadBy: deadBy),
                                         signal: nil, cgroup: cgroup, oomKillsSeen: record.oomKillsSeen,
                                         sameBoot: record.bootID == ProcFS.bootID())
        if let named = record.memoryCgroup, cgroup == nil {
            killed.evidence.append("its run record names a memory cgroup that is not one (\(Text.singleLine(named.path))): not read")
        }
        return killed
    }
}

/// What the end of an ended run's process comes to.
package enum RunVerdict: Sendable, Equatable {
    /// A hang of it is still staged: how it ended is known once that is promoted.
    case wait
    /// A crash, a fatal hang or a kill of it is reported (or waits as a dump): nothing to add.
    case told
    /// Nothing says how it ended: a `killed` report.
    case killed

    package init(on record: RunRecord, in database: CrashReportDatabase) {
        if database.stagingArea.holdsHang(ofProcess: record.pid, startTicks: record.processStartTicks) {
            self = .wait
        } else if ProcessEndings(database: database).ending(ofProcess: record.pid, bundleID: record.bundleID, runID: record.runID,
                                                             after: record.startTime - 1) != nil {
            self = .told
        } else {
            self = .killed
        }
    }

    /// How many `killed` reports a processor would make now (`hangwatch list`'s hint); the
    /// leases this takes to tell are let go at once.
    package static func killedRunsWaiting(in database: CrashReportDatabase) -> Int {
        let ended = database.runRecords.ended()
        defer { for held in ended { database.runRecords.release(held) } }
        return ended.filter { RunVerdict(on: $0.record, in: database) == .killed }.count
    }
}
