// An in-process hang on a lock (docs/locks.md): HangMonitor's own capture of a real program
// (hangwatch-fixture-hang's lock scenarios, Tests/Fixtures/hangwatch-fixture-hang/Locks.swift)
// says on the hung thread who holds what it waits for, and the headline where the chain ends.
import Foundation
import HangwatchTestSupport
import Testing
import HangwatchReport
import HangwatchSnapshot

@Suite(.ownThread) struct LockHangTests {
    /// The recovered hang's report, and the tids the fixture said hold its locks.
    func run(_ scenario: String) async throws -> (report: Report, holders: [Int32]) {
        let db = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(db) }
        let child = try startFixture("dispatchmain", scenario, seconds: 2, database: db, threshold: 0.5,
                                     extra: ["HANGWATCH_KEEP_RECOVERED_HANGS_LONGER_THAN": "0"])
        let status = try await offPool { try child.waitForExit(timeout: 60) }
        #expect(status == 0, "\(child.stdout) \(child.stderr)")
        let all = events(in: child.stdout)
        let holders = (all.first { $0.name == "locked" }?.fields["holders"] as? [Int] ?? []).map(Int32.init)
        let recovered = try #require(all.first { $0.name == "recovered" }, "\(child.stdout)")
        return (try readReport(try #require(recovered.string("reportPath"), "\(child.stdout)")), holders)
    }

    @Test func theHungThreadSaysWhoHoldsItsMutex() async throws {
        let (report, holders) = try await run("lock-held")
        let hung = try #require(report.threads.first { $0.roles.contains(.hung) })
        let holder = try #require(holders.first)
        #expect(hung.lockWait?.kind == .mutex && hung.lockWait?.holder == holder, "\(hung.syscall ?? "")")
        #expect(ReportRenderer.reason(report).contains("held by thread \(holder) \"export-worker\" (in "), "\(ReportRenderer.reason(report))")
        #expect(ReportRenderer.text(report).contains("  waits for mutex "))
    }

    @Test func aSyncOntoABusyQueueNamesTheThreadRunningIt() async throws {
        let (report, holders) = try await run("queue-sync")
        let hung = try #require(report.threads.first { $0.roles.contains(.hung) })
        let holder = try #require(holders.first)
        #expect(hung.lockWait?.kind == .queue && hung.lockWait?.holder == holder, "\(hung.syscall ?? "")")
        #expect(ReportRenderer.reason(report).contains("waits for queue \"fixture.store\" "), "\(ReportRenderer.reason(report))")
        #expect(ReportRenderer.reason(report).contains(" run by thread \(holder) \"store-worker\" (in "), "\(ReportRenderer.reason(report))")
    }

    /// The hung main queue waits for a mutex whose holder waits for the main queue.
    @Test func aHangIntoALockAndQueueDeadlockNamesIt() async throws {
        let (report, holders) = try await run("queue-deadlock")
        let hung = try #require(report.threads.first { $0.roles.contains(.hung) })
        let caller = try #require(holders.first)
        #expect(report.lockCycles == [[min(hung.tid, caller), max(hung.tid, caller)]], "\(report.threads.map { ($0.tid, $0.name, $0.syscall ?? "") })")
        let reason = ReportRenderer.reason(report)
        #expect(reason.contains("deadlock: ") && reason.contains("\"sync-caller\" waits for queue \"com.apple.main-thread\" "), "\(reason)")
    }

    @Test func aHangIntoADeadlockNamesIt() async throws {
        let (report, holders) = try await run("lock-deadlock")
        #expect(report.lockCycles == [holders.sorted()], "\(report.threads.map { ($0.tid, $0.name, $0.syscall ?? "") })")
        let reason = ReportRenderer.reason(report)
        #expect(reason.contains(", in a deadlock: thread \(holders.min()!) \"lock-"), "\(reason)")
    }
}
