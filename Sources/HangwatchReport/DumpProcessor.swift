// The processing stage: intermediate dumps in, symbolicated reports (JSON + text, with the dump
// kept beside them for minidumps) out, stored in the database. Crashpad's
// ProcessIntermediateDumps; `DumpClient` and `hangwatch process` both call it.
import FoundationEssentials
import HangwatchDatabase
import HangwatchPlatform
import HangwatchSnapshot
import HangwatchSymbolication

package final class DumpProcessor: @unchecked Sendable {
    package let database: CrashReportDatabase
    /// What reports leave out (and the dumps kept beside them, so minidumps and uploads too).
    package let redaction: Redaction
    /// Symbol tables and DWARF opened once per processor, reused across reports (it locks itself).
    private let symbolicator: Symbolicator

    /// `symbolCache`: where module indexes are kept between runs (the CLI passes the user's).
    package init(database: CrashReportDatabase, redaction: Redaction = [], symbolCache: SymbolCache? = nil) {
        self.database = database
        self.redaction = redaction
        self.symbolicator = Symbolicator(cache: symbolCache)
    }

    /// Turns every finished intermediate dump, and every `.locked` one whose writer died, into
    /// a report, whatever its bundle id. Dumps that cannot be parsed are moved to `failed/`.
    /// Hangs staged by processes that died hung (their lease is free) are promoted too, so
    /// they are among the reports: no processor depends on the program being started again.
    /// Crash dumps go first, so the hangs their processes had staged are stitched into them
    /// (`store`) rather than promoted. Last, the run records of processes that ended without a
    /// clean stop, a crash or a fatal hang become `killed` reports (`judgeEndedRuns`).
    package func processIntermediateDumps() throws -> [Report] {
        var setAside: [String] = []
        return try processIntermediateDumps(settingAside: &setAside)
    }

    /// `processIntermediateDumps()`, and the paths of the files set aside in failed/ on the way
    /// (run records whose values no monitor writes), for the caller to say once: the next
    /// processor does not meet them again.
    package func processIntermediateDumps(settingAside setAside: inout [String]) throws -> [Report] {
        var reports = try processClaimableDumps()
        let promoted = database.stagingArea.promoteOrphans().contains { if case .promoted = $0 { true } else { false } }
        if promoted { reports += try processClaimableDumps() }
        return reports + judgeEndedRuns(settingAside: &setAside)
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
        let judged = records.ended(settingAside: &setAside).map { ($0, database.verdict(on: $0.record)) }
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
                reports.append(try storeKilled(held.record, id: held.id))
                reported.append(held.record)
                records.close(held)
            } catch {
                records.release(held)  // kept for a later processor: nothing is lost
            }
        }
        return reports
    }

    private func storeKilled(_ record: RunRecord, id: String) throws -> Report {
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
        return try store(Self.killedSnapshot(of: record, cause: killed.cause), id: id, kind: .killed) { report in
            Self.amend(&report, killedRun: record, killed)
        }
    }

    /// The snapshot a run record's `killed` report is built from: who the process was, no threads.
    package static func killedSnapshot(of record: RunRecord, cause: KillCause) -> ProcessSnapshot {
        var annotations: [String: String] = [:]
        if let runID = record.runID { annotations["hangwatch.run-id"] = runID }  // RunIdentity.annotationKey
        return ProcessSnapshot(
            reason: .killed(KillInfo(signal: nil, cause: cause)), timestamp: record.lastHeartbeat,
            process: ProcessIdentity(pid: record.pid, name: record.name, executable: record.executable,
                                     arguments: record.arguments, bundleID: record.bundleID),
            threads: [], modules: [], annotations: annotations, captureDurationSeconds: 0, incomplete: false)
    }

    /// What a run record adds to its `killed` report: the judgement, its last heartbeat and samples.
    package static func amend(_ report: inout Report, killedRun record: RunRecord, _ judged: Report.Killed) {
        var killed = judged
        killed.lastSeenAlive = record.lastHeartbeat
        killed.samples = record.samples.map(Report.StateSample.init)
        report.killed = killed
        report.runID = record.runID
    }

    private func processClaimableDumps() throws -> [Report] {
        var reports: [Report] = []
        // One claim at a time, each right before it is processed: a processor killed mid-way
        // is charged one attempt, for the dump it was on.
        for candidate in try database.claimableIntermediateDumps() {
            guard let claim = try database.claim(candidate) else { continue }
            do {
                var snapshot = try IntermediateDumpReader.read(bytes: [UInt8](database.readClaimedDump(claim)))
                if claim.abandoned { snapshot.incomplete = true }
                // A promoted fatal hang: its sidecar and samples join it here (StagingArea).
                let promoted = database.stagingArea.stitchPromotedHang(into: &snapshot, bundleID: claim.bundleID, id: claim.uuid)
                reports.append(try store(snapshot, id: claim.uuid.uuidString.lowercased()))
                try database.completeClaim(claim)
                if promoted { database.stagingArea.removePromotedHang(bundleID: claim.bundleID, id: claim.uuid) }
            } catch let error as IntermediateDumpError {
                // Unreadable: never retried; kept in failed/ with the reason (database.listFailedDumps()).
                _ = try? database.failClaim(claim, reason: "unreadable: \(error)")
            } catch DatabaseError.fileTooLarge(_, let size, let limit) {
                // Grew past the limit after it was listed: it will never be read either.
                _ = try? database.failClaim(claim, reason: CrashReportDatabase.tooLargeReason(size: size, limit: limit))
            } catch {
                try? database.releaseClaim(claim)
                throw error
            }
        }
        return reports
    }

    /// One dump file (e.g. written with `…AndDeferProcessing(atPath:)`) into a stored report; the
    /// file stays. `kind` overrides what the snapshot implies; `context` is attached.
    package func processIntermediateDump(atPath path: String, kind: ReportKind? = nil, context: Report.Context? = nil) throws -> Report {
        let snapshot = try IntermediateDumpReader.read(path: path)
        return try store(snapshot, id: UUID().uuidString.lowercased(), kind: kind, context: context)
    }

    /// Symbolicates `captured` and writes the report (JSON + text) to the database, both
    /// redacted; `amend` adds what the snapshot does not hold (a process tree, a run id). A
    /// crash report gets the hang its process had staged when it crashed (`stitchSupersededHang`).
    package func store(_ captured: ProcessSnapshot, id: String, kind: ReportKind? = nil, context: Report.Context? = nil,
                       amend: (inout Report) -> Void = { _ in }) throws -> Report {
        let snapshot = captured.redacted(redaction)
        var report = makeReport(snapshot, id: id, kind: kind)
        if let context { report.context = context }
        let superseded = report.kind == .crash && report.context?.supersededHang == nil ? stitchSupersededHang(into: &report) : []
        amend(&report)
        report.redact(redaction)
        // The intermediate dump is kept beside the report: it has the stack bytes minidumps need.
        do {
            try database.writeReport(id: report.id, json: ReportRenderer.json(report), text: ReportRenderer.text(report),
                                     dump: Data(IntermediateDumpWriter.encode(snapshot)))
        } catch {
            database.stagingArea.abandonSupersession(superseded)
            throw error
        }
        database.stagingArea.completeSupersession(superseded, report: database.pendingReportsPath + "/" + report.id + ".json")
        return report
    }

    /// The one supersession step (KSCrash's stitchReport): the hang the crashed process had
    /// staged becomes the crash report's `context.supersededHang`; it leaves staging/ once the
    /// report is stored (the hangs returned).
    private func stitchSupersededHang(into report: inout Report) -> [SupersededStagedHang] {
        let hangs = database.stagingArea.supersededHangs(byCrashOf: report.process.pid, bundleID: report.process.bundleID,
                                                         at: report.timestamp)
        guard let hang = hangs.first else { return [] }
        var context = report.context ?? Report.Context()
        context.supersededHang = Report.SupersededHang(
            target: hang.target.name, thresholdSeconds: hang.thresholdSeconds, durationSeconds: hang.durationSeconds,
            startTime: Timestamp.millisecondResolution(hang.startTime), reportID: hang.id)
        report.context = context
        return hangs
    }

    /// The report for `snapshot`, not stored.
    package func makeReport(_ snapshot: ProcessSnapshot, id: String, kind: ReportKind? = nil) -> Report {
        ReportBuilder.makeReport(from: snapshot, id: id, kind: kind ?? ReportKind(implying: snapshot.reason),
                                 symbolicator: symbolicator)
    }
}

extension ReportKind {
    /// A hang that recovered is a `hang`; one that did not (the process died hung) is fatal.
    package init(implying reason: CaptureReason) {
        switch reason {
        case .dumpRequested: self = .dump
        case .hang(let info): self = info.recovered ? .hang : .fatalHang
        case .crash: self = .crash
        case .killed: self = .killed
        }
    }
}

extension Report {
    /// Leaves out what `redaction` says from every part of the report: its process's and its
    /// tree's arguments, annotation values, the stderr tail, and says so in `redacted`. A report
    /// built from an already redacted snapshot stays as it is (redacting twice changes nothing).
    package mutating func redact(_ redaction: Redaction) {
        guard !redaction.isEmpty else { return }
        process.arguments = redaction.redact(arguments: process.arguments)
        annotations = redaction.redact(annotations: annotations)
        redacted = Redaction.recorded(in: annotations).names
        if redaction.contains(.kernelLog), var kill = killed {
            kill.evidence = kill.evidence.map { $0.hasPrefix(KillJudgement.kernelEvidencePrefix) ? KillJudgement.kernelEvidencePrefix + Redaction.placeholder : $0 }
            killed = kill
        }
        if let tail = context?.stderrTail {
            context?.stderrTail = redaction.contains(.stderrTail) ? nil
                : redaction.contains(.keyValues) ? Redaction.redactingKeyValues(in: tail) : tail
        }
        if var tree = processTree {
            for index in tree.processes.indices {
                tree.processes[index].arguments = redaction.redact(arguments: tree.processes[index].arguments)
            }
            processTree = tree
        }
    }
}
