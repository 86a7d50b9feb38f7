import HangwatchSnapshot
import HangwatchDatabase
import HangwatchReport
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
            Claims every finished dump (and abandoned .locked ones: same bundle id after 24 h, any \
            after 60 days) atomically, so several processes may run this on one database at once: \
            each dump becomes exactly one report. Dumps that cannot be parsed go to failed/.

            Examples:
              hangwatch process
              hangwatch process --database /var/tmp/myapp-reports --bundle-id com.example.myapp
            """
    )

    @OptionGroup var global: GlobalOptions

    @Option(name: .customLong("bundle-id"), help: "Whose abandoned .locked dumps count after 24 h (others' after 60 days).")
    var bundleID = "hangwatch"

    func run() throws {
        let database = try openDatabase(global)
        let reports = try DumpProcessor(database: database).processIntermediateDumps(bundleID: bundleID)
        for report in reports {
            print("\(report.id)  \(report.kind.rawValue)  \(report.process.name)[\(report.process.pid)]  \(ReportRenderer.reason(report))")
        }
        let failed = (try? database.listFailedDumps()) ?? []
        print("processed \(reports.count) dump(s)" + (failed.isEmpty ? "" : "; \(failed.count) unreadable dump(s) kept in \(database.failedPath)"))
    }
}
