import HangwatchPlatform
import HangwatchSnapshot
import HangwatchSymbolication
import HangwatchDatabase
import HangwatchReport
import HangwatchProcessing
import HangwatchMinidump
import HangwatchRemoteCapture
import HangwatchSupervisorProtocol
import HangMonitorConfiguration
import ArgumentParser
import HangwatchCommandLine
import FoundationEssentials

struct ProcessDumps: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "process",
        abstract: "Turn pending intermediate dumps in the database into reports (ProcessIntermediateDumps).",
        discussion: """
            Claims each finished dump — and each .locked one whose writer died (no process holds \
            its lease): its report is marked incomplete — atomically, one at a time, right before \
            processing it, so several processes may run this on one database at once (each dump \
            becomes exactly one report) and a processor killed mid-way is charged one attempt, for \
            the dump it was on. Dumps that cannot be parsed, or are larger than a processor \
            reads (64 MiB), go to failed/ with the reason. First, hangs that a HangMonitor \
            staged before its process died hung (its lease is free) become fatal-hang dumps, \
            whatever their bundle id: a program that is never started again loses nothing. \
            Last, the run record of each HangMonitor process that ended without a clean stop, a \
            crash or a fatal hang (the OOM killer, kill -9) becomes a killed report saying what \
            ended it, as far as its memory cgroup and the kernel log tell (docs/killed.md). A \
            record whose values no monitor writes (a time that is none, a negative count) is \
            never judged: it goes to failed/ with the reason, said once.

            Names of a program replaced since its capture (a redeploy: "module mismatched"): \
            HANGWATCH_SYMBOL_STORE=DIR[:DIR…] asks Breakpad symbol stores (hangwatch symbols \
            --store), then the debuginfod servers of HANGWATCH_DEBUGINFOD_URLS="URL …" (or, with \
            --debuginfod, of DEBUGINFOD_URLS), within \
            HANGWATCH_DEBUGINFOD_TIMEOUT seconds (10) and HANGWATCH_DEBUGINFOD_MAX_MB (512) per \
            file; the report's module line says where names came from (docs/symbol-cache.md).

            Examples:
              hangwatch process
              hangwatch process --database /var/tmp/myapp-reports
              hangwatch process --redact arguments,key-values,stack-memory
            """
    )

    @OptionGroup var global: GlobalOptions
    @OptionGroup var redact: RedactionOption
    @OptionGroup var debuginfod: DebuginfodOption

    func run() throws {
        let database = try openDatabase(global)
        var setAside: [String] = []
        let symbolicator = Symbolicator.commandLine(debuginfod: debuginfod.enabled)
        let processor = DumpProcessor(database: database, redaction: try redact.redaction(global), symbolicator: symbolicator)
        let reports = try processor.processIntermediateDumps(settingAside: &setAside)
        symbolicator.sayNotices()
        for report in reports {
            print(Text.singleLine("\(report.id)  \(report.kind.rawValue)  \(report.process.name)[\(report.process.pid)]  \(ReportRenderer.reason(report))"))
        }
        for path in setAside { warn("set aside \(Text.singleLine(path)): its values are not what a monitor writes (the reason is beside it)") }
        let failed = (try? database.listFailedDumps()) ?? []
        print("processed \(reports.count) dump(s)" + (failed.isEmpty ? "" : "; \(failed.count) file(s) that cannot be processed kept in \(database.failedPath):"))
        for dump in failed { print(Text.singleLine("  \(dump.path): \(dump.reason ?? "no reason recorded")")) }
    }
}
