import HangwatchPlatform
import HangwatchSnapshot
import HangwatchDatabase
import HangwatchReport
import HangwatchSymbolication
import HangwatchProcessing
import HangwatchMinidump
import HangwatchRemoteCapture
import HangwatchSupervisorProtocol
import HangMonitorConfiguration
import ArgumentParser
import HangwatchCommandLine
import FoundationEssentials
import Glibc

struct List: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "list",
        abstract: "List the reports in the database, oldest capture first.",
        discussion: """
            One line per report: id, state (pending: not uploaded yet; completed: uploaded or \
            marked done), kind, capture time, process and what happened, in the order of the \
            capture times (a dump processed late still lists at the time it was taken). Use \
            `hangwatch show ID` (a unique prefix of the id is enough) to read one. Dumps still \
            waiting to be processed are not reports yet: list says how many on stderr, and \
            `hangwatch process` turns them into reports. A directory that holds no database is \
            left as it is (nothing is made to say there are no reports).

            Examples:
              hangwatch list
              hangwatch list --database /var/tmp/myapp-reports --json
            """
    )

    @OptionGroup var global: GlobalOptions

    @Flag(help: "Print JSON lines ({id, state, kind, timestamp, process, reason}) instead of a table.")
    var json = false

    /// The same command as plain values (QuickStart builds one directly).
    var request: ListRequest { ListRequest(common: global.values, json: json) }

    func run() throws { try request.run() }
}

/// What `hangwatch list` was asked, and doing it.
struct ListRequest: Equatable, RunnableCommand {
    var common: CommonOptions
    var json: Bool

    func run() throws {
        let path = try common.databasePath()
        // Nothing is made to say there is nothing: a database that does not exist has no reports.
        var info = stat()
        if lstat(path, &info) != 0 && errno == ENOENT {
            if !json { print(Text.singleLine("no reports in \(path) (no database there)")) }
            return
        }
        let database = try openDatabase(common)
        defer { if !json { hintAtUnprocessedDumps(database) } }
        let listed = try database.listReports().map { entry in
            (entry: entry, report: Result { try Report.decode(from: database.readReport(id: entry.id)) })
        }
        if listed.isEmpty && !json {
            print(Text.singleLine("no reports in \(database.path)"))
            return
        }
        // By capture time: a report's file is written when its dump is processed, maybe much later.
        let ordered = listed.sorted { lhs, rhs in
            let (left, right) = (captureTime(lhs), captureTime(rhs))
            return left != right ? left < right : lhs.entry.id < rhs.entry.id
        }
        for (entry, result) in ordered { try printLine(entry, result) }
    }

    /// The report's capture time; for one that cannot be read, when its file was written.
    private func captureTime(_ listed: (entry: StoredReport, report: Result<Report, any Error>)) -> Double {
        (try? listed.report.get().timestamp) ?? listed.entry.modificationDate.timeIntervalSince1970
    }

    private func printLine(_ entry: StoredReport, _ result: Result<Report, any Error>) throws {
        let report: Report
        switch result {
        case .success(let decoded): report = decoded
        case .failure(let error):
            if json {
                print(#"{"id":"\#(entry.id)","state":"\#(entry.state)","error":"unreadable"}"#)
            } else {
                print(Text.singleLine("\(entry.id)  \(Text.padded("\(entry.state)", to: 9))  (unreadable: \(error))"))
            }
            return
        }
        if json {
            let line: [String: String] = [
                "id": report.id, "state": "\(entry.state)", "kind": report.kind.rawValue,
                "timestamp": ReportFormatting.timestamp(report.timestamp), "process": report.process.name, "reason": ReportRenderer.reason(report),
            ]
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
            let data = try encoder.encode(line)
            print(String(decoding: data, as: UTF8.self))
        } else {
            let state = Text.padded("\(entry.state)", to: 9), kind = Text.padded(report.kind.rawValue, to: 10)
            print(Text.singleLine("\(report.id)  \(state)  \(kind)  \(ReportFormatting.timestamp(report.timestamp))  "
                + "\(report.process.name)[\(report.process.pid)]  \(ReportRenderer.reason(report))"))
        }
    }
}

/// Dumps waiting to be processed (and hangs of dead processes still staged, run records of
/// processes that ended without a clean stop) are not reports yet: `list` reports them on stderr,
/// with what turns them into reports.
private func hintAtUnprocessedDumps(_ database: CrashReportDatabase) {
    let waiting = ((try? database.claimableIntermediateDumps().count) ?? 0) + database.stagingArea.orphanCount()
        + RunVerdict.killedRunsWaiting(in: database)
    guard waiting > 0 else { return }
    warn("\(waiting) dump(s) wait to be processed into reports: run hangwatch process --database \(database.path)")
}

struct Show: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "show",
        abstract: "Print one report, from the database or from a file.",
        discussion: """
            ID is a report id or a unique prefix of one; PATH (anything with a "/", e.g. \
            ./x.json) is a report JSON file or an intermediate dump (.hwdump), which is processed \
            on the fly. A file is read only if it is a regular file and not a link.

            Names of a program replaced since its capture (a redeploy: "module mismatched"): \
            HANGWATCH_SYMBOL_STORE=DIR[:DIR…] asks Breakpad symbol stores (hangwatch symbols \
            --store), then the debuginfod servers of HANGWATCH_DEBUGINFOD_URLS="URL …" (or, with \
            --debuginfod, of DEBUGINFOD_URLS), within \
            HANGWATCH_DEBUGINFOD_TIMEOUT seconds (10) and HANGWATCH_DEBUGINFOD_MAX_MB (512) per \
            file; the report's module line says where names came from (docs/symbol-cache.md). \
            A stored report processed without them gets its names each time it is shown (the \
            stored report is not changed).

            Examples:
              hangwatch show 3fa2
              hangwatch show 3fa2 --format folded | flamegraph.pl > hang.svg
              hangwatch show 3fa2 --format html --output hang.html
              hangwatch show 3fa2 --format minidump --output 3fa2.dmp && lldb -c 3fa2.dmp
              hangwatch show 3fa2 --format pprof --output hang.pb.gz && go tool pprof -top hang.pb.gz
              hangwatch show /tmp/x.hwdump --format json
            """
    )

    @OptionGroup var global: GlobalOptions

    @Argument(help: "Report id (or unique prefix), or a path (with a \"/\") to a report or intermediate dump.")
    var report: String

    @Option(help: "Output format: text, json, folded, svg or html (flame graph), minidump or pprof (gzipped profile.proto; both need --output).")
    var format: ReportFormat = .text

    @Option(help: "Write to this file instead of stdout.")
    var output: String?

    @OptionGroup var debuginfod: DebuginfodOption

    func validate() throws {
        try format.validate(output: output)
    }

    func run() throws {
        let symbolicator = Symbolicator.commandLine(debuginfod: debuginfod.enabled)
        let (stored, snapshot, keptDump, clientID) = try loadReport(symbolicator: symbolicator)
        // Names of a program replaced before its report was processed, where the symbol stores
        // or debuginfod servers have them now; the stored report is left as it is.
        let loaded = ReportBuilder.restoringNames(of: stored, snapshot: keptDump, symbolicator: symbolicator)
        debuginfod.hint(for: loaded)
        // A hang's kept dump holds its samples' addresses: the profile's locations and mappings.
        let samples = format == .pprof ? snapshot.flatMap { PprofSource(snapshot: $0, symbolicator: symbolicator) } : nil
        try format.emit(loaded, snapshot: snapshot, samples: samples, clientID: clientID, to: output)
        symbolicator.sayNotices()
    }

    /// The report; for minidumps and pprof profiles the snapshot kept beside it, when one was;
    /// when the report has modules without names, the dump kept beside it as it was stored.
    private func loadReport(symbolicator: Symbolicator) throws -> (Report, ProcessSnapshot?, ProcessSnapshot?, UUID?) {
        let needsSnapshot = format == .minidump || format == .pprof
        // An id unless it has a "/": a file of that name in the current directory (a FIFO
        // planted there, say) is never opened in place of a report.
        if report.contains("/") {
            let loaded = try ReportFiles.load(path: report, symbolicator: symbolicator)
            let snapshot = needsSnapshot ? (try? IntermediateDumpReader.read(path: report)) : nil
            return (loaded, snapshot, nil, nil)
        }
        let database = try openDatabase(global)
        do {
            let entry = try database.findReport(report)
            let loaded = try Report.decode(from: database.readReport(id: entry.id))
            // The dump kept beside the report, read once: for the minidump or profile (its read
            // must succeed), and for the samples of a report whose names are restored (best effort).
            let unnamed = loaded.modules.contains(where: \.lacksNames)
            let dump = needsSnapshot ? try database.readReportDump(id: entry.id)
                : unnamed ? (try? database.readReportDump(id: entry.id)) ?? nil : nil
            let kept = dump.flatMap { try? IntermediateDumpReader.read(bytes: [UInt8]($0)) }
            let snapshot = needsSnapshot ? kept ?? ProcessSnapshot(report: loaded) : nil
            return (loaded, snapshot, unnamed ? kept : nil, database.clientID)
        } catch let error as DatabaseError {
            throw CLIError("\(error)")
        } catch {
            throw CLIError("report \(report) is corrupt: \(error)")
        }
    }
}

struct Prune: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "prune",
        abstract: "Delete old reports and failed files so the database stays within its size and age limits.",
        discussion: """
            What is older than --max-age-days goes; then, while the rest is over --max-megabytes, \
            the oldest goes first: what failed/ holds (dumps that could not be processed, and \
            run records and staged hangs set aside for values no monitor writes, each with its \
            .reason), then uploaded reports, then pending ones. Temporary files a killed writer \
            left (an hour old) go from every directory, runs/ and staging/ included. Sizes are \
            what files take on disk, so a sparse file counts for what it uses. Only hangwatch's \
            own files are removed: named as hangwatch names them and starting as hangwatch \
            writes them (anything else in the database is left alone). Run records in runs/ and \
            staged hangs in staging/ (their owners' while they live, then processing's) and \
            dumps waiting to be processed are never touched. The line printed counts each kind \
            removed. The user's symbol cache (HANGWATCH_SYMBOL_CACHE) is pruned to its bounds \
            too: indexes to 256 MiB, debuginfod's files to HANGWATCH_DEBUGINFOD_CACHE_MB \
            (docs/symbol-cache.md).

            Examples:
              hangwatch prune
              hangwatch prune --max-age-days 7 --max-megabytes 20
            """
    )

    @OptionGroup var global: GlobalOptions

    @Option(name: .customLong("max-age-days"), parsing: .unconditional, help: "Delete reports and failed files older than this many days.")
    var maxAgeDays: Double = 30

    @Option(name: .customLong("max-megabytes"), parsing: .unconditional, help: "Keep the total size of reports and failed files under this many MiB.")
    var maxMegabytes: Double = 100

    func validate() throws {
        guard maxAgeDays > 0, maxAgeDays.isFinite else { throw ValidationError("--max-age-days must be a positive number of days, not \(maxAgeDays)") }
        guard maxMegabytes >= 0, maxMegabytes.isFinite else { throw ValidationError("--max-megabytes must be a number of MiB, 0 or more, not \(maxMegabytes)") }
    }

    func run() throws {
        let database = try openDatabase(global)
        let result = try database.prune(policy: PrunePolicy(maxAge: maxAgeDays * 86_400, maxTotalBytes: Int64(maxMegabytes * 1_048_576)))
        CachePruning.pruneSymbolCache()
        let isReason = { (path: String) in path.hasSuffix(".reason") }
        let dumps = result.removedFailedDumps.filter { !isReason($0) }.count, records = result.removedFailedRecords.filter { !isReason($0) }.count
        let reasons = (result.removedFailedDumps + result.removedFailedRecords).filter(isReason).count
        print("removed \(result.removedReportIDs.count) report(s), \(dumps) failed dump(s), \(records) set-aside record(s), "
            + "\(reasons) .reason file(s), \(result.removedTemporaryFiles.count) temporary file(s); "
            + "freed \(result.bytesFreed) bytes, \(result.bytesRemaining) remain")
    }
}
