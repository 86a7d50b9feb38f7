// The processing stage: intermediate dumps in, symbolicated reports (JSON + text, with the dump
// kept beside them for minidumps) out, stored in the database. Crashpad's
// ProcessIntermediateDumps; `DumpClient`, `hangwatch process`, `hangwatch run` and the upload
// scheduler (through DumpClient) all go through it. The database only stores: which staged hang
// joins which report is decided here (HangStitch), what becomes of orphaned hangs in
// HangPromotion (HangwatchPromotion), what an ended run's record comes to in RunVerdict.
import FoundationEssentials
import HangwatchDatabase
import HangwatchPlatform
import HangwatchPromotion
import HangwatchReport
import HangwatchSnapshot
import HangwatchSymbolication

package final class DumpProcessor: @unchecked Sendable {
    package let database: CrashReportDatabase
    /// What reports leave out (and the dumps kept beside them, so minidumps and uploads too).
    package let redaction: Redaction
    /// Symbol tables and DWARF opened once per processor, reused across reports (it locks itself).
    private let symbolicator: Symbolicator

    /// `symbolCache`: where module indexes are kept between runs (the CLI passes the user's).
    package convenience init(database: CrashReportDatabase, redaction: Redaction = [], symbolCache: SymbolCache? = nil) {
        self.init(database: database, redaction: redaction, symbolicator: Symbolicator(cache: symbolCache))
    }

    /// A processor symbolicating with `symbolicator` (the CLI's: the user's cache, symbol stores, debuginfod).
    package init(database: CrashReportDatabase, redaction: Redaction, symbolicator: Symbolicator) {
        self.database = database
        self.redaction = redaction
        self.symbolicator = symbolicator
    }

    /// Turns every finished intermediate dump, and every `.locked` one whose writer died, into
    /// a report, whatever its bundle id. Dumps that cannot be parsed are moved to `failed/`.
    /// Hangs staged by processes that died hung (their lease is free) are promoted too, so
    /// they are among the reports: no processor depends on the program being started again.
    /// Last, the run records of processes that ended without a clean stop, a crash or a fatal
    /// hang become `killed` reports (`judgeEndedRuns`).
    package func processIntermediateDumps() throws -> [Report] {
        var setAside: [String] = []
        return try processIntermediateDumps(settingAside: &setAside)
    }

    /// `processIntermediateDumps()`, and the paths of the files set aside in failed/ on the way
    /// (run records whose values no monitor writes), for the caller to say once: the next
    /// processor does not meet them again.
    ///
    /// One pass, in this order:
    /// 1. every dump waiting now: a crash dump takes in the hang its process had staged (`store`).
    ///    This comes before any promotion because supersession is decided best here: the crash
    ///    report knows its process from its own capture (bundle id, pid, time), while promotion
    ///    can only find a waiting crash dump by the bundle id in its file name (ProcessEndings); a
    ///    dump named under another bundle id than its process's (scripts/compare-reports copies
    ///    dumps that way) would let the hang be promoted as well, one event told twice;
    /// 2. staged hangs whose owner died are decided (HangPromotion): superseded by a crash report
    ///    stored already (in 1, or earlier), left for a crash dump still being written, or promoted;
    /// 3. the promoted hangs' dumps;
    /// 4. run records: by then every crash and fatal hang of this pass is stored, so none of those
    ///    processes gets a `killed` report as well.
    package func processIntermediateDumps(settingAside setAside: inout [String]) throws -> [Report] {
        var reports = try process(database.claimableIntermediateDumps())
        let promoted = Set(HangPromotion(database: database).promoteOrphans().compactMap { outcome -> DumpKey? in
            if case .promoted(_, _, _, let dump) = outcome { dump } else { nil }
        })
        if !promoted.isEmpty { reports += try process(database.claimableIntermediateDumps().filter { promoted.contains($0.key) }) }
        return reports + judgeEndedRuns(settingAside: &setAside)
    }

    /// Claims and processes `candidates`, one claim at a time, each right before it is processed:
    /// a processor killed mid-way is charged one attempt, for the dump it was on.
    private func process(_ candidates: [CrashReportDatabase.ClaimCandidate]) throws -> [Report] {
        var reports: [Report] = []
        for candidate in candidates {
            guard let claim = try database.claim(candidate) else { continue }
            do {
                var snapshot = try IntermediateDumpReader.read(bytes: [UInt8](database.readClaimedDump(claim)))
                if claim.abandoned { snapshot.incomplete = true }
                let promoted = joinPromotedHang(into: &snapshot, claim: claim)
                reports.append(try store(snapshot, id: claim.uuid.uuidString.lowercased()))
                try database.completeClaim(claim)
                if promoted { database.stagingArea.removePromotedHang(claim.key) }
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

    /// A promoted fatal hang (a hang snapshot that did not recover, whose sidecar and samples
    /// wait in staging/): they join it (HangStitch). False when the dump is no promoted hang's.
    private func joinPromotedHang(into snapshot: inout ProcessSnapshot, claim: ClaimedDump) -> Bool {
        guard case .hang(let info) = snapshot.reason, !info.recovered,
              let staged = database.stagingArea.promotedHang(claim.key) else { return false }
        var context: Report.Context?
        HangStitch.stitch(staged, .promoted, into: &snapshot, context: &context)
        return true
    }

    /// One dump file (e.g. written with `…AndDeferProcessing(atPath:)`) into a stored report; the
    /// file stays. `kind` overrides what the snapshot implies; `context` is attached.
    package func processIntermediateDump(atPath path: String, kind: ReportKind? = nil, context: Report.Context? = nil) throws -> Report {
        let snapshot = try IntermediateDumpReader.read(path: path)
        return try store(snapshot, id: UUID().uuidString.lowercased(), kind: kind, context: context)
    }

    /// Symbolicates `captured` and writes the report (JSON + text) to the database, both
    /// redacted; `amend` adds what the snapshot does not hold (a process tree, a run id). A
    /// crash report takes in the hang its process had staged when it crashed (HangStitch), which
    /// leaves staging/ once the report is stored.
    package func store(_ captured: ProcessSnapshot, id: String, kind: ReportKind? = nil, context: Report.Context? = nil,
                       amend: (inout Report) -> Void = { _ in }) throws -> Report {
        var snapshot = captured.redacted(redaction)
        let kind = kind ?? ReportKind(implying: snapshot.reason)
        var context = context
        let superseded = kind == .crash && context?.supersededHang == nil ? joinSupersededHang(into: &snapshot, context: &context) : []
        let report = build(snapshot, id: id, kind: kind, context: context, amend: amend)
        // The intermediate dump is kept beside the report: it has the stack bytes minidumps need.
        do {
            try database.store(report, dump: snapshot)
        } catch {
            database.stagingArea.release(superseded)
            throw error
        }
        database.stagingArea.remove(superseded, takenOverBy: database.pendingReportsPath + "/" + report.id + ".json")
        return report
    }

    /// The hang the crashed process had staged (begun before the crash; its owner gone, or this
    /// process) joins the crash report (HangStitch); the hangs held for it are returned, to leave
    /// staging/ once the report is stored.
    private func joinSupersededHang(into snapshot: inout ProcessSnapshot, context: inout Report.Context?) -> [StagedHang] {
        let crashTime = Timestamp.millisecondResolution(snapshot.timestamp)  // the report's time
        let pid = snapshot.process.pid
        let held = database.stagingArea.heldHangs(bundleID: snapshot.process.bundleID) { $0.pid == pid && $0.startTime <= crashTime }
        if let first = held.first {
            HangStitch.stitch(database.stagingArea.contents(of: first), .superseded(crashTime: crashTime), into: &snapshot,
                              context: &context)
        }
        return held
    }

    /// The report `store` would store for `snapshot` as given (no staged hang joins it), not
    /// stored: what a caller that could not store it still shows.
    package func unstoredReport(_ snapshot: ProcessSnapshot, id: String, kind: ReportKind, context: Report.Context? = nil,
                                amend: (inout Report) -> Void = { _ in }) -> Report {
        build(snapshot, id: id, kind: kind, context: context, amend: amend)
    }

    private func build(_ snapshot: ProcessSnapshot, id: String, kind: ReportKind, context: Report.Context?,
                       amend: (inout Report) -> Void) -> Report {
        var report = makeReport(snapshot, id: id, kind: kind)
        if let context { report.context = context }
        amend(&report)
        report.redact(redaction)
        return report
    }

    /// The report for `snapshot`, not stored.
    package func makeReport(_ snapshot: ProcessSnapshot, id: String, kind: ReportKind? = nil) -> Report {
        ReportBuilder.makeReport(from: snapshot, id: id, kind: kind ?? ReportKind(implying: snapshot.reason),
                                 symbolicator: symbolicator)
    }
}

extension CrashReportDatabase {
    /// The one way a report is stored — by processing, `hangwatch run`, DumpWithoutCrash and
    /// `hangwatch dump --save` alike: its JSON, its text, `snapshot` as the intermediate dump
    /// kept beside it (its stack bytes make minidumps), and whose end it tells (`Report.subject`).
    package func store(_ report: Report, dump snapshot: ProcessSnapshot) throws {
        try writeReport(id: report.id, json: ReportRenderer.json(report), text: ReportRenderer.text(report),
                        dump: Data(IntermediateDumpWriter.encode(snapshot)), subject: report.subject)
    }
}
