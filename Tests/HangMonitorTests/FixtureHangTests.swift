// Real child programs that hang on purpose (hangwatch-fixture-hang), in every main-queue setup.
import Testing
import Foundation
import HangwatchTestSupport
@testable import HangMonitor
import DumpWithoutCrash
import HangwatchDatabase
import HangwatchReport
import HangwatchSnapshot

@Suite(.ownThread) struct FixtureHangTests {
    @Test(arguments: ["runloop", "dispatchmain", "asyncmain"])
    func mainQueueHangIsDetectedTimedSampledAndDiscardedOnRecovery(setup: String) async throws {
        let db = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(db) }
        let child = try startFixture(setup, "recover", seconds: 1.5, database: db, threshold: 0.5,
                                     extra: ["HANGWATCH_KEEP_RECOVERED_HANGS_LONGER_THAN": "1"])
        let detectedOutput = try await offPool { try child.waitForOutput("\"detected\"") }
        let detected = try #require(events(in: detectedOutput).first { $0.name == "detected" })
        #expect(detected.string("target") == HangTarget.mainQueue.name)
        let staged = try #require(detected.string("stagedPath"))
        #expect(!staged.isEmpty)
        // (What is staged while hung is checked in processKilledWhileHung…: this hang may be over already.)
        #expect(try await offPool { try child.waitForExit(timeout: 30) } == 0)
        let all = events(in: child.stdout)
        let slept = try #require(all.first { $0.name == "slept" }?.double("seconds"))
        let recovered = try #require(all.first { $0.name == "recovered" })
        let duration = try #require(recovered.double("durationSeconds"))
        #expect(abs(duration - slept) <= 0.1 * slept, "hang \(duration) s vs sleep \(slept) s")
        #expect((recovered.int("sampleCount") ?? 0) > 1)
        #expect(all.filter { $0.name == "detected" }.count == 1, "one report per hang")
        #expect(stagingFiles(db).isEmpty, "recovery deletes the staged dump and sidecar: \(stagingFiles(db))")

        // Kept (≥ 1 s) as a symbolicated report.
        let report = try readReport(try #require(recovered.string("reportPath")))
        #expect(report.kind == .hang)
        let hang = try #require(report.hang)
        #expect(hang.recovered)
        #expect(hang.target == HangTarget.mainQueue)
        #expect(abs(hang.durationSeconds - slept) <= 0.1 * slept)
        #expect(hang.samples > 1)
        #expect(hang.stacks.contains { $0.frames.contains { $0.contains("hangFixtureSleepOnMainQueue") } }, "\(hang.stacks)")
        expectHungThreadNamesSleeper(report, setup: setup)
    }

    /// The thread that ran the main queue is marked hung, and its frames name the sleeping function.
    func expectHungThreadNamesSleeper(_ report: Report, setup: String) {
        let hung = report.threads.filter { $0.roles.contains(.hung) }
        #expect(hung.count == 1, "\(report.threads.map { ($0.tid, $0.roles) })")
        guard let thread = hung.first else { return }
        #expect(thread.roles.contains(.mainQueue))
        if setup == "runloop" { #expect(thread.tid == report.process.pid, "RunLoop.main.run() drains the main queue on the main thread") }
        #expect(thread.frames.contains { $0.function?.contains("hangFixtureSleepOnMainQueue") == true },
                "\(thread.frames.map { $0.function ?? ReportFormatting.address($0.address) })")
    }

    @Test func namedQueueAndCooperativePoolAreTargetsToo() async throws {
        let db = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(db) }
        let queue = try startFixture("dispatchmain", "queue", seconds: 1.5, database: db, threshold: 0.5,
                                     extra: ["HANGWATCH_TARGETS": "main-queue,queue:fixture.worker"])
        let pool = try startFixture("dispatchmain", "pool", seconds: 1.5, database: db, bundleID: "com.example.pool", threshold: 0.5,
                                    extra: ["HANGWATCH_TARGETS": "main-queue,cooperative-pool"])
        #expect(try await offPool { try queue.waitForExit(timeout: 30) } == 0)
        #expect(try await offPool { try pool.waitForExit(timeout: 30) } == 0)
        let queueEvents = events(in: queue.stdout)
        #expect(queueEvents.filter { $0.name == "detected" }.map { $0.string("target") } == ["queue:fixture.worker"], "\(queue.stdout)")
        #expect(queueEvents.contains { $0.name == "recovered" && $0.string("target") == "queue:fixture.worker" })
        let poolEvents = events(in: pool.stdout)
        #expect(poolEvents.filter { $0.name == "detected" }.map { $0.string("target") } == ["cooperative-pool"], "\(pool.stdout)")
        #expect(poolEvents.contains { $0.name == "recovered" && $0.string("target") == "cooperative-pool" })
    }

    @Test func processKilledWhileHungBecomesAFatalHangOnNextStart() async throws {
        let db = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(db) }
        let hung = try startFixture("dispatchmain", "forever", database: db, threshold: 0.5)
        let detected = try #require(events(in: try await offPool { try hung.waitForOutput("\"detected\"") }).first { $0.name == "detected" })
        let sidecarPath = try #require(detected.string("stagedPath")).replacingOccurrences(of: ".hang.dump", with: ".hang.json")
        let early = try #require(readJSON(sidecarPath))
        try await Task.sleep(for: .microseconds(1_000_000)) // let it hang (and sample) a while before the supervisor kills it
        // The sidecar is kept current while the hang lasts.
        let late = try #require(readJSON(sidecarPath))
        #expect((late["lastSeenTime"] as? Double ?? 0) > (early["lastSeenTime"] as? Double ?? 0))
        #expect((late["sampleCount"] as? Int ?? 0) >= (early["sampleCount"] as? Int ?? 0))
        #expect((late["sampleCount"] as? Int ?? 0) > 1)
        #expect(late["target"] as? String == HangTarget.mainQueue.name)
        #expect(late["bundleID"] as? String == "com.example.fixture")
        #expect(late["startTime"] as? Double == early["startTime"] as? Double)
        hung.signal(SIGKILL)
        _ = try? await offPool { try hung.waitForExit(timeout: 10) }
        let staged = stagingFiles(db)
        #expect(staged.contains { $0.hasSuffix(".hang.json") } && staged.contains { $0.hasSuffix(".hang.dump") })

        // Another bundle id sharing the database leaves it alone.
        let other = try startFixture("dispatchmain", "promote", database: db, bundleID: "com.example.other", threshold: 0.5)
        #expect(try await offPool { try other.waitForExit(timeout: 30) } == 0)
        #expect(!events(in: other.stdout).contains { $0.name == "promoted-fatal-hang" })
        #expect(stagingFiles(db) == staged)

        let next = try startFixture("runloop", "promote", database: db, threshold: 0.5)
        #expect(try await offPool { try next.waitForExit(timeout: 30) } == 0)
        let promoted = try #require(events(in: next.stdout).first { $0.name == "promoted-fatal-hang" }, "\(next.stdout)")
        #expect(promoted.string("target") == HangTarget.mainQueue.name)
        #expect((promoted.double("atLeastSeconds") ?? 0) >= 1.0)
        let report = try readReport(try #require(promoted.string("reportPath")))
        #expect(report.kind == .fatalHang)
        let hang = try #require(report.hang)
        #expect(!hang.recovered)
        #expect(hang.target == HangTarget.mainQueue)
        #expect(hang.durationSeconds >= 1.0)
        #expect(hang.samples > 1)
        #expect(report.process.bundleID == "com.example.fixture")
        expectHungThreadNamesSleeper(report, setup: "dispatchmain")
        #expect(stagingFiles(db).isEmpty)
    }

    /// A program killed while hung, staged hang and all (SIGKILL: the OOM killer, a stop timeout).
    private func killedWhileHung(database db: String) async throws {
        let hung = try startFixture("dispatchmain", "forever", database: db, threshold: 0.5)
        _ = try await offPool { try hung.waitForOutput("\"detected\"") }
        try await Task.sleep(for: .milliseconds(300))
        hung.signal(SIGKILL)
        _ = try? await offPool { try hung.waitForExit(timeout: 10) }
        #expect(stagingFiles(db).contains { $0.hasSuffix(".hang.dump") })
    }

    /// What README and `start()`'s doc comment describe — `monitor.start()`, then at once
    /// `client.processIntermediateDumps()` — returns the run before's fatal hang (it used to be
    /// promoted later, on the monitor thread, and found only at the start after that).
    @Test func theReadmesStartUpReturnsTheFatalHangOfTheRunBefore() async throws {
        let db = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(db) }
        try await killedWhileHung(database: db)
        // A long threshold: processing (symbolication) on the main queue of a loaded machine must
        // not count as a hang of its own and stage a new one.
        let next = try startFixture("runloop", "readme", database: db, threshold: 10)
        #expect(try await offPool { try next.waitForExit(timeout: 30) } == 0, "\(next.stdout)")
        let processed = try #require(events(in: next.stdout).first { $0.name == "processed" }, "\(next.stdout)")
        #expect(processed.fields["kinds"] as? [String] == ["fatal-hang"], "\(next.stdout)")
        #expect(stagingFiles(db).isEmpty)
    }

    /// A program that is never started again (a server that died, a CI job): `hangwatch process`
    /// promotes its fatal hang itself, whatever the bundle id, and `list` shows it.
    @Test func aProgramNeverRestartedHasItsFatalHangProcessedByHangwatch() async throws {
        let db = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(db) }
        try await killedWhileHung(database: db)
        // Not a report yet: `list` says what waits and what to run.
        let before = try ChildProcess(product: "hangwatch", ["list", "--database", db])
        #expect(try await offPool { try before.waitForExit(timeout: 60) } == 0)
        #expect(before.stderr.contains("1 dump(s) wait to be processed into reports: run hangwatch process --database \(db)"),
                "\(before.stderr)")
        let process = try ChildProcess(product: "hangwatch", ["process", "--database", db])
        #expect(try await offPool { try process.waitForExit(timeout: 60) } == 0, "\(process.stderr)")
        #expect(process.stdout.contains("fatal-hang"), "\(process.stdout)")
        #expect(process.stdout.contains("processed 1 dump(s)"), "\(process.stdout)")
        let list = try ChildProcess(product: "hangwatch", ["list", "--database", db])
        #expect(try await offPool { try list.waitForExit(timeout: 60) } == 0)
        #expect(list.stdout.contains("fatal-hang"), "\(list.stdout)")
        #expect(!list.stderr.contains("wait to be processed"), "\(list.stderr)")
        #expect(stagingFiles(db).isEmpty)
        // A live monitor's staged hang is not an orphan: its lease is held, nothing is promoted.
        let live = try startFixture("dispatchmain", "forever", database: db, threshold: 0.5)
        defer { live.signal(SIGKILL); _ = try? live.waitForExit(timeout: 10) }
        _ = try await offPool { try live.waitForOutput("\"detected\"") }
        let again = try ChildProcess(product: "hangwatch", ["process", "--database", db])
        #expect(try await offPool { try again.waitForExit(timeout: 60) } == 0)
        #expect(again.stdout.contains("processed 0 dump(s)"), "\(again.stdout)")
        #expect(stagingFiles(db).contains { $0.hasSuffix(".hang.dump") })
    }

    @Test func crashReportWrittenWhileHungSupersedesTheHang() async throws {
        let db = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(db) }
        let child = try startFixture("asyncmain", "crash", database: db, threshold: 0.5)
        #expect(try await offPool { try child.waitForExit(timeout: 30) } == 70)
        let all = events(in: child.stdout)
        let crash = try #require(all.first { $0.name == "crash-report-written" }?.string("path"), "\(child.stdout)")
        let superseded = try #require(all.first { $0.name == "superseded" }, "\(child.stdout)")
        #expect(superseded.string("crashReport") == crash)
        #expect(stagingFiles(db).isEmpty)
        // The hang's timing travels with the crash report.
        let report = try readReport(crash)
        #expect(report.kind == .crash)
        let context = try #require(report.context?.supersededHang)
        #expect(context.target == HangTarget.mainQueue)
        #expect(context.durationSeconds >= 0.5)

        // And a later start finds nothing to promote.
        let next = try startFixture("runloop", "promote", database: db, threshold: 0.5)
        #expect(try await offPool { try next.waitForExit(timeout: 30) } == 0)
        #expect(!events(in: next.stdout).contains { $0.name == "promoted-fatal-hang" })
    }

    /// A crash dump the hung process wrote but nobody processed yet: the hang stays staged
    /// while the process lives (it may still recover); when the process has died, the dump's
    /// processor stitches the hang into the crash report — it is not promoted as well.
    @Test func unprocessedCrashDumpWrittenWhileHungSupersedesTheHang() async throws {
        let db = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(db) }
        let child = try startFixture("dispatchmain", "crash-dump", database: db, threshold: 0.5)
        #expect(try await offPool { try child.waitForExit(timeout: 30) } == 70)
        let all = events(in: child.stdout)
        #expect(all.contains { $0.name == "crash-report-written" }, "\(child.stdout)")
        #expect(!all.contains { $0.name == "superseded" }, "\(child.stdout)")
        #expect(stagingFiles(db).contains { $0.hasSuffix(".hang.dump") })
        // The next start of the program does not promote it: the crash dump waits for its processor.
        let next = try startFixture("runloop", "promote", database: db, threshold: 0.5)
        #expect(try await offPool { try next.waitForExit(timeout: 30) } == 0)
        #expect(!events(in: next.stdout).contains { $0.name == "promoted-fatal-hang" }, "\(next.stdout)")
        #expect(stagingFiles(db).contains { $0.hasSuffix(".hang.dump") })
        let client = try DumpClient(databasePath: db, bundleID: "com.example.fixture")
        let reports = try client.processIntermediateDumps()
        let crash = try #require(reports.first { $0.kind == .crash }, "\(reports.map(\.kind))")
        #expect(crash.context?.supersededHang?.target == HangTarget.mainQueue)
        #expect((crash.context?.supersededHang?.durationSeconds ?? 0) >= 0.5)
        #expect(!reports.contains { $0.kind == .fatalHang }, "\(reports.map(\.kind))")
        #expect(stagingFiles(db).isEmpty)
    }

    /// Only a crash of the hung process itself supersedes its hang: a crash report of another
    /// process of the same bundle (a restarted instance, say) leaves it a fatal hang.
    @Test func aFatalHangIsDroppedOnlyForACrashOfItsOwnProcess() async throws {
        for sameProcess in [false, true] {
            let db = try makeTemporaryDirectory()
            defer { removeTemporaryDirectory(db) }
            let hung = try startFixture("runloop", "forever", database: db, threshold: 0.5)
            try await offPool { try hung.waitForOutput("\"detected\"") }
            hung.signal(SIGKILL)
            _ = try? await offPool { try hung.waitForExit(timeout: 10) }
            let crash = try writeCrashReport(database: db, bundleID: "com.example.fixture", pid: sameProcess ? hung.pid : 1)
            let next = try startFixture("runloop", "promote", database: db, threshold: 0.5)
            #expect(try await offPool { try next.waitForExit(timeout: 30) } == 0)
            let all = events(in: next.stdout)
            if sameProcess {
                #expect(all.first { $0.name == "discarded-stale-hang" }?.string("crashReport") == crash, "\(next.stdout)")
                #expect(!all.contains { $0.name == "promoted-fatal-hang" })
            } else {
                #expect(all.contains { $0.name == "promoted-fatal-hang" }, "\(next.stdout)")
                #expect(!all.contains { $0.name == "discarded-stale-hang" })
                // The promoted dump's sidecar waits for its processor.
                let reports = try DumpClient(databasePath: db, bundleID: "com.example.fixture").processIntermediateDumps()
                #expect(reports.filter { $0.kind == .fatalHang }.count == 1, "\(reports.map(\.kind))")
            }
            #expect(stagingFiles(db).isEmpty)
        }
    }
}
