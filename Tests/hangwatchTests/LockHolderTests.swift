// Who holds what a hung thread waits for (docs/locks.md), read from outside: real programs
// (hangwatch-fixture-hang's lock scenarios, Tests/Fixtures/hangwatch-fixture-hang/Locks.swift)
// whose main queue blocks on a lock a named thread holds, or runs into an AB-BA deadlock,
// captured by `hangwatch dump --pid` and by `hangwatch run --kill-after`.
import HangwatchReport
import HangwatchSnapshot
import Foundation
import HangwatchTestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

@Suite("lock holders from outside", .ownThread)
struct LockHolderTests {
    struct Started {
        var child: ChildProcess
        var holders: [Int32]
    }

    /// The fixture once its locks are held and its main queue waits (SECONDS: how long).
    func start(_ scenario: String, seconds: Int = 60, database: TemporaryDatabase) throws -> Started {
        let child = try ChildProcess(product: "hangwatch-fixture-hang", ["dispatchmain", scenario, String(seconds)],
                                     environment: ["HANGWATCH_THRESHOLD": "30", "HANGWATCH_DATABASE_PATH": database.path])
        let line = try child.waitForOutput("\"locked\"", timeout: 60)
        let object = try JSONSerialization.jsonObject(with: Data(line.split(separator: "\n").first { $0.contains("\"locked\"") }!.utf8))
        let holders = ((object as? [String: Any])?["holders"] as? [Int]) ?? []
        usleep(400_000)  // the waiters are asleep by now
        return Started(child: child, holders: holders.map(Int32.init))
    }

    func dump(_ pid: Int32, format: String, database: TemporaryDatabase) throws -> String {
        let result = try runHangwatch(["dump", "--pid", "\(pid)", "--format", format], database: database)
        #expect(result.status == 0, "\(result.stderr)")
        return result.stdout
    }

    /// The thread draining the main queue (a dispatch worker under dispatchMain): from outside,
    /// the one blocked on a lock that none of the fixture's named lock threads is.
    /// `hangwatch dump --pid` of the started fixture, as JSON.
    func dumpReport(_ started: Started, database: TemporaryDatabase) throws -> Report {
        try Report.decode(from: Data(try dump(started.child.pid, format: "json", database: database).utf8))
    }

    func mainQueueThread(_ report: Report) throws -> Report.Thread {
        try #require(report.threads.first { $0.lockWait != nil && !["lock-a", "lock-b"].contains($0.name) },
                     "\(report.threads.map { ($0.name, $0.syscall ?? "") })")
    }

    @Test func aMutexHeldByANamedThreadIsSaidOnTheWaiter() throws {
        let database = try TemporaryDatabase()
        let started = try start("lock-held", database: database)
        defer { started.child.signal(SIGKILL) }
        let holder = try #require(started.holders.first)
        let report = try dumpReport(started, database: database)
        let waiter = try mainQueueThread(report)
        let wait = try #require(waiter.lockWait, "\(waiter.syscall ?? "")")
        #expect(wait.kind == .mutex && wait.holder == holder && wait.unknown == nil, "\(wait)")
        #expect(report.lockCycles == nil)
        let text = try dump(started.child.pid, format: "text", database: database)
        #expect(text.contains("waits for mutex \(ReportFormatting.address(wait.address)) held by thread \(holder) \"export-worker\" (in "),
                "\(text.prefix(3000))")
    }

    @Test func anABBADeadlockIsSaidAsOne() throws {
        let database = try TemporaryDatabase()
        let started = try start("lock-deadlock", database: database)
        defer { started.child.signal(SIGKILL) }
        let report = try dumpReport(started, database: database)
        let (a, b) = (started.holders.min()!, started.holders.max()!)
        #expect(report.lockCycles == [[a, b]], "\(report.threads.map { ($0.tid, $0.lockWait as Any) })")
        let byTID = Dictionary(uniqueKeysWithValues: report.threads.map { ($0.tid, $0) })
        #expect(byTID[a]?.lockWait?.holder == b && byTID[b]?.lockWait?.holder == a)
        // The main queue waits (a timed lock) for the first lock-thread's mutex.
        let waiter = try mainQueueThread(report)
        #expect(started.holders.contains(waiter.lockWait?.holder ?? 0), "\(waiter.syscall ?? "")")
        let text = try dump(started.child.pid, format: "text", database: database)
        #expect(text.contains("DEADLOCK: thread \(a) \"lock-"), "\(text.prefix(2000))")
    }

    @Test func aSwiftMutexNamesItsHolder() throws {
        let database = try TemporaryDatabase()
        let started = try start("swift-mutex", database: database)
        defer { started.child.signal(SIGKILL) }
        let report = try dumpReport(started, database: database)
        let wait = try #require(try mainQueueThread(report).lockWait)
        #expect(wait.kind == .piMutex && wait.holder == started.holders.first, "\(wait)")
    }

    @Test func anRwlockNamesItsWriter() throws {
        let database = try TemporaryDatabase()
        let started = try start("rwlock-writer", database: database)
        defer { started.child.signal(SIGKILL) }
        let report = try dumpReport(started, database: database)
        let wait = try #require(try mainQueueThread(report).lockWait)
        #expect(wait.kind == .rwlock && wait.holder == started.holders.first, "\(wait)")
        let text = try dump(started.child.pid, format: "text", database: database)
        #expect(text.contains("waits for rwlock \(ReportFormatting.address(wait.address)) held for writing by thread "
            + "\(started.holders[0]) \"export-writer\""), "\(text.prefix(3000))")
    }

    /// A `sync` onto a queue that targets a serial queue a block runs on: the block's thread.
    @Test func aSyncOntoABusySerialQueueNamesTheThreadRunningIt() throws {
        let database = try TemporaryDatabase()
        let started = try start("queue-sync", database: database)
        defer { started.child.signal(SIGKILL) }
        let report = try dumpReport(started, database: database)
        let holder = try #require(started.holders.first)
        let wait = try #require(try mainQueueThread(report).lockWait)
        #expect(wait.kind == .queue && wait.holder == holder && wait.label == "fixture.store", "\(wait)")
        let text = try dump(started.child.pid, format: "text", database: database)
        #expect(text.contains("waits for queue \"fixture.store\" \(ReportFormatting.address(wait.address)) run by thread "
            + "\(holder) \"store-worker\" (in "), "\(text.prefix(3000))")
    }

    /// A thread holds a mutex and syncs onto the main queue, whose block waits for that mutex:
    /// one deadlock, a lock and a queue.
    @Test func aLockAndTheMainQueueThatWaitForEachOtherAreOneDeadlock() throws {
        let database = try TemporaryDatabase()
        let started = try start("queue-deadlock", database: database)
        defer { started.child.signal(SIGKILL) }
        let report = try dumpReport(started, database: database)
        let caller = try #require(started.holders.first)
        let mainQueue = try mainQueueThread(report)
        #expect(mainQueue.lockWait?.kind == .mutex && mainQueue.lockWait?.holder == caller, "\(mainQueue.lockWait as Any)")
        let callerWait = try #require(report.threads.first { $0.tid == caller }?.lockWait)
        #expect(callerWait.kind == .queue && callerWait.holder == mainQueue.tid && callerWait.label == "com.apple.main-thread", "\(callerWait)")
        #expect(report.lockCycles == [[min(caller, mainQueue.tid), max(caller, mainQueue.tid)]])
        let text = try dump(started.child.pid, format: "text", database: database)
        #expect(text.contains("DEADLOCK: ") && text.contains("\"sync-caller\" waits for queue \"com.apple.main-thread\" "), "\(text.prefix(2000))")
    }

    /// The bundled demo: its fatal hang's headline and its main thread name the background
    /// thread that holds the NSLock the main queue waits for. Killed after 10 s of one hang, not
    /// scripts/demo's 5: the demo's first, recovering hang (3 s) must never be the one killed on
    /// a loaded machine (a test with 5 s was dropped for that in 5220caf).
    @Test func theDemosReportSaysWhoHoldsItsLock() throws {
        let database = try TemporaryDatabase()
        let run = try hangwatch(["run", "--kill-after", "10", "--", productPath("hangwatch-demo")], database: database)
        #expect(try run.waitForExit(timeout: 90) == 124, "\(run.stderr)")
        let report = try #require(try database.reports().first { $0.kind == .fatalHang }, "\(run.stderr)")
        let holder = try #require(report.threads.first { $0.name == "export-worker" }, "\(report.threads.map(\.name))")
        let headline = ReportRenderer.reason(report)
        #expect(headline.contains("waits for mutex ") && headline.contains("held by thread \(holder.tid) \"export-worker\" (in "), "\(headline)")
        #expect(report.threads.contains { $0.lockWait?.holder == holder.tid && $0.roles.contains(.mainThread) })
    }

    /// `hangwatch run` kills the hung program; its fatal hang's headline names the holder. The
    /// program's own monitor names the hung thread (the main queue's): with `--silence` the run
    /// guesses it, and under load it guessed a running thread of the program instead.
    @Test func aFatalHangsHeadlineNamesTheHolder() throws {
        let database = try TemporaryDatabase()
        let run = try hangwatch(["run", "--kill-after", "2", "--", productPath("hangwatch-fixture-hang"),
                                 "dispatchmain", "lock-held", "60"], database: database,
                                environment: ["HANGWATCH_THRESHOLD": "1"])
        #expect(try run.waitForExit(timeout: 60) == 124, "\(run.stderr)")
        let report = try #require(try database.reports().first { $0.kind == .fatalHang }, "\(run.stderr)")
        let holder = try #require(report.threads.first { $0.name == "export-worker" })
        #expect(try mainQueueThread(report).lockWait?.holder == holder.tid)
        let headline = ReportRenderer.reason(report)
        #expect(headline.contains("waits for mutex") && headline.contains("held by thread \(holder.tid) \"export-worker\" (in "), "\(headline)")
        #expect(!headline.contains("deadlock"), "\(headline)")
    }
}
