// `hangwatch run` with a child that links HangMonitor: the child names the hung thread and
// where it staged its own dump; hangwatch captures from outside, and on a kill adopts the
// child's samples and removes its staged files (no second report on the child's next start).
import DumpWithoutCrash
import Foundation
import HangwatchTestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

@Suite("hangwatch run + HangMonitor", .timeLimit(.minutes(3)))
struct RunWithHangMonitorTests {
    static func childEnvironment(_ database: TemporaryDatabase) -> [String: String] {
        ["HANGWATCH_DATABASE_PATH": database.path, "HANGWATCH_THRESHOLD": "1", "HANGWATCH_BUNDLE_ID": "com.example.hang-fixture"]
    }

    @Test func hangOnAPoolThreadThatRecoversLeavesNothing() throws {
        let database = try TemporaryDatabase()
        let child = try hangwatch(["run", "--threshold", "1", "--", try productPath("hangwatch-fixture-hang"), "dispatchmain", "recover", "2.5"],
                                  database: database, environment: Self.childEnvironment(database))
        #expect(try child.waitForExit(timeout: 60) == 0, "stderr: \(child.stderr)")
        let line = try #require(child.stderr.split(separator: "\n").first { $0.contains("its HangMonitor reported the main queue hung") })
        // Under dispatchMain() the main queue runs on a pool thread, and the monitor says which.
        let ready = try #require(child.stdout.split(separator: "\n").first { $0.contains("\"ready\"") })
        let pid = try #require(ready.split(separator: ":").last.flatMap { Int32($0.dropLast().trimmingCharacters(in: .whitespaces)) })
        #expect(!line.contains("(thread \(pid))"), "\(line) vs pid \(pid)")
        #expect(child.stderr.contains("recovered after"))
        #expect(try database.reports().isEmpty)
        #expect(try database.stagingFiles().isEmpty)
    }

    @Test func permanentHangIsKilledAndReportedOnce() throws {
        let database = try TemporaryDatabase()
        let child = try hangwatch(["run", "--threshold", "1", "--kill-after", "1.5", "--",
                                   try productPath("hangwatch-fixture-hang"), "runloop", "forever"],
                                  database: database, environment: Self.childEnvironment(database))
        #expect(try child.waitForExit(timeout: 60) == 124, "stderr: \(child.stderr)")
        #expect(child.stderr.contains("its HangMonitor reported the main queue hung"))

        let reports = try database.reports()
        try #require(reports.count == 1)
        let report = reports[0]
        #expect(report.kind == .fatalHang)
        #expect(report.hang?.target == "main-queue")
        #expect((report.hang?.samples ?? 0) > 1, "the child's samples were adopted")
        #expect(report.hang?.foldedStacks.contains { $0.contains("hangFixtureSleepOnMainQueue") } == true)
        let hung = try #require(report.threads.first { $0.roles.contains("hung") })
        #expect(functionNames(hung).contains { $0.contains("hangFixtureSleepOnMainQueue") })
        // The child's staged hang was handed over: its next start finds nothing to promote.
        #expect(try database.stagingFiles().isEmpty)
        let restart = try ChildProcess(product: "hangwatch-fixture-hang", ["runloop", "promote"], environment: Self.childEnvironment(database))
        #expect(try restart.waitForExit(timeout: 30) == 0)
        #expect(try database.reports().count == 1)
    }
}
