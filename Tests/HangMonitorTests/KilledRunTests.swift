// Processes ended from outside (docs/killed.md), with real kills: the OOM killer of a memory
// cgroup with a limit, kill -9, a clean exit, a real crash. The next processor of the database
// (here `DumpClient.processIntermediateDumps()`, as a program's next start calls it) judges
// the run records they left.
import Testing
import Foundation
import HangwatchTestSupport
import HangwatchPlatform
@testable import HangMonitor
import DumpWithoutCrash
import HangwatchDatabase
import HangwatchReport
import HangwatchProcessing

@Suite(.ownThread) struct KilledRunTests {
    static let bundle = "com.example.killed"

    func process(_ db: String) throws -> [Report] {
        try DumpClient(databasePath: db, bundleID: Self.bundle).processIntermediateDumps()
    }

    /// The records and leases in runs/ (not the `.tmp-` file of a heartbeat being rewritten right now).
    func runFiles(_ db: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: db + "/runs")) ?? []).filter { !$0.hasPrefix(".tmp-") }.sorted()
    }

    func start(_ scenario: String, seconds: Double? = nil, database db: String, extra: [String: String] = [:]) throws -> ChildProcess {
        try startFixture("dispatchmain", scenario, seconds: seconds, database: db, bundleID: Self.bundle, threshold: 2,
                         extra: ["HANGWATCH_RUN_RECORD_INTERVAL": "0.2"].merging(extra) { $1 })
    }

    /// A memory cgroup of the test's own under this process's, limited to `limit` bytes; nil
    /// (and said) where cgroups cannot be written here (not root, no delegation).
    static func makeCgroup(limit: UInt64) -> MemoryCgroup? {
        guard let own = MemoryCgroup.of(nil) else {
            print("KilledRunTests: no memory cgroup controller is mounted here: the OOM part is skipped")
            return nil
        }
        do {
            return try own.createChild(named: "hangwatch-test-" + UUID().uuidString.prefix(8).lowercased(), limitBytes: limit)
        } catch {
            print("KilledRunTests: cannot make a memory cgroup (\(error)): the OOM part is skipped")
            return nil
        }
    }

    @Test func anOOMKillInAMemoryCgroupIsOneKilledReportWithItsLastMemorySamples() async throws {
        let db = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(db) }
        guard let cgroup = Self.makeCgroup(limit: 200_000_000) else { return }
        defer { cgroup.remove() }
        let name = String(cgroup.path.split(separator: "/").last!)
        let child = try start("allocate", database: db, extra: ["HANGWATCH_FIXTURE_CGROUP": name])
        try cgroup.add(child.pid)
        let status = try await offPool { try child.waitForExit(timeout: 60) }
        #expect(status == 128 + SIGKILL, "\(child.stdout.suffix(400))")
        #expect(child.stdout.contains("\"in-cgroup\""))
        #expect(cgroup.oomKills() == 1)
        #expect(runFiles(db).count == 2, "the record and its lease stay behind: \(runFiles(db))")

        let reports = try process(db)
        #expect(reports.map(\.kind) == [.killed], "\(reports.map(\.kind))")
        let report = try #require(reports.first)
        let killed = try #require(report.killed)
        #expect(killed.cause == .oom, "\(killed.explanation) \(killed.evidence)")
        #expect(report.process.pid == child.pid)
        #expect(report.process.bundleID == Self.bundle)
        #expect(killed.memoryCgroup?.path == cgroup.path)
        #expect(killed.memoryCgroup?.limitBytes == 199_999_488 || killed.memoryCgroup?.limitBytes == 200_000_000)
        #expect(killed.memoryCgroup?.oomKillsBefore == 0 && killed.memoryCgroup?.oomKillsAfter == 1)
        #expect(killed.samples.count >= 2, "\(killed.samples)")
        // Its last memory samples show the growth that ended it.
        let last = try #require(killed.samples.last)
        #expect(last.residentBytes > 64 << 20, "\(killed.samples)")
        #expect(last.residentBytes > killed.samples[0].residentBytes)
        let alive = try #require(killed.lastSeenAlive), started = try #require(killed.startTime)
        #expect(alive >= started)
        let text = ReportRenderer.text(report)
        #expect(text.hasPrefix("*** Killed: "), "\(text)")
        #expect(text.contains("Its last states"))
        #expect(runFiles(db).isEmpty, "judged once: \(runFiles(db))")
        #expect(try process(db).isEmpty, "never a second report")
    }

    /// A real OOM kill judged as if its cgroup's counter had been read after the kill was counted
    /// but before the process was seen dead (the kernel counts, then sends SIGKILL, and the
    /// process takes a while to die: a CI run of `hangwatch run --memory-max` saw the count
    /// while "alive"). The kernel log's line puts the process in that very cgroup: OOM. The
    /// same line judged for a cgroup it does not name (this test's parent) is not taken.
    @Test func anOOMLineNamingTheProcesssOwnCgroupIsTakenWhenTheCounterRaced() async throws {
        let kmsg = open("/dev/kmsg", O_RDONLY | O_NONBLOCK | O_CLOEXEC)
        if kmsg >= 0 { close(kmsg) }
        guard kmsg >= 0 else {
            print("KilledRunTests: the kernel log cannot be read here: skipped")
            return
        }
        let db = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(db) }
        guard let cgroup = Self.makeCgroup(limit: 200_000_000), let parent = MemoryCgroup.of(nil) else { return }
        defer { cgroup.remove() }
        let name = String(cgroup.path.split(separator: "/").last!)
        let started = Date().timeIntervalSince1970
        let child = try start("allocate", database: db, extra: ["HANGWATCH_FIXTURE_CGROUP": name])
        try cgroup.add(child.pid)
        #expect(try await offPool { try child.waitForExit(timeout: 60) } == 128 + SIGKILL, "\(child.stdout.suffix(400))")
        let subject = KillJudgement.Subject(pid: child.pid, name: "hangwatch-fixture-hang",
                                            startedAt: started, deadBy: Date().timeIntervalSince1970)
        let raced = try #require(cgroup.oomKills())
        let own = KillJudgement.judge(subject, signal: SIGKILL, cgroup: cgroup, oomKillsSeen: raced)
        #expect(own.cause == .oom, "\(own.explanation) \(own.evidence)")
        #expect(own.evidence.contains { $0.contains("puts it in its own memory cgroup") }, "\(own.evidence)")
        let other = KillJudgement.judge(subject, signal: SIGKILL, cgroup: parent, oomKillsSeen: parent.oomKills())
        #expect(other.cause == .signal, "\(other.explanation) \(other.evidence)")
        #expect(other.evidence.contains { $0.contains("does not agree with: not taken") }, "\(other.evidence)")
    }

    @Test func killMinusNineIsKilledButNeverOOM() async throws {
        let db = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(db) }
        let child = try start("idle", seconds: 60, database: db)
        _ = try await offPool { try child.waitForOutput("\"ready\"") }
        try await Task.sleep(for: .milliseconds(600))  // a few heartbeats
        child.signal(SIGKILL)
        _ = try? await offPool { try child.waitForExit(timeout: 10) }

        let reports = try process(db)
        #expect(reports.map(\.kind) == [.killed], "\(reports.map(\.kind))")
        let killed = try #require(reports.first?.killed)
        #expect(killed.cause == .unknown, "\(killed.explanation) \(killed.evidence)")
        #expect(killed.signal == nil, "a run record cannot know the signal")
        #expect(killed.samples.count >= 2)
        #expect(killed.evidence.contains { $0.contains("no OOM kill") }, "\(killed.evidence)")
        #expect(runFiles(db).isEmpty)
    }

    @Test(arguments: ["idle", "exit-without-stop"])
    func aCleanEndLeavesNoReportAndNoRecord(scenario: String) async throws {
        let db = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(db) }
        let child = try start(scenario, seconds: 0.8, database: db)
        _ = try await offPool { try child.waitForOutput("\"ready\"") }
        #expect(runFiles(db).count == 2, "a record and its lease while it runs: \(runFiles(db))")
        #expect(try process(db).isEmpty, "a live process is never judged")
        #expect(try await offPool { try child.waitForExit(timeout: 30) } == 0, "\(child.stdout)")
        #expect(runFiles(db).isEmpty, "stop() or exit() removes it: \(runFiles(db))")
        #expect(try process(db).isEmpty)
    }

    @Test func aCrashIsACrashReportAndNoKilledOne() async throws {
        let db = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(db) }
        let child = try start("segv", database: db)
        #expect(try await offPool { try child.waitForExit(timeout: 30) } == 128 + SIGSEGV, "\(child.stdout)")
        #expect(runFiles(db).count == 2, "a crash handler does not close the record")
        let reports = try process(db)
        #expect(reports.map(\.kind) == [.crash], "\(reports.map(\.kind))")
        #expect(runFiles(db).isEmpty, "the crash said how it ended: the record goes")
    }

    @Test func aFatalHangIsAFatalHangReportAndNoKilledOne() async throws {
        let db = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(db) }
        let hung = try startFixture("dispatchmain", "forever", database: db, bundleID: Self.bundle, threshold: 0.5,
                                    extra: ["HANGWATCH_RUN_RECORD_INTERVAL": "0.2"])
        _ = try await offPool { try hung.waitForOutput("\"detected\"") }
        try await Task.sleep(for: .milliseconds(300))
        hung.signal(SIGKILL)
        _ = try? await offPool { try hung.waitForExit(timeout: 10) }
        let reports = try process(db)
        #expect(reports.map(\.kind) == [.fatalHang], "\(reports.map(\.kind))")
        #expect(runFiles(db).isEmpty)
        #expect(try process(db).isEmpty)
    }

    /// A record left by a process that is still running under the same pid and start time,
    /// with its lease free (it exec'd another program), is not a kill; one whose lease is held
    /// is never touched; a crafted record is left alone.
    @Test func onlyEndedRecordsOfOursAreJudged() async throws {
        let db = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(db) }
        let database = try CrashReportDatabase(path: db)
        var record = RunRecord.current(bundleID: Self.bundle, heartbeatIntervalSeconds: 1)
        let held = try database.runRecords.begin(record)
        #expect(database.runRecords.ended().isEmpty, "held by this process: alive")
        database.runRecords.release(held)
        // A child another test of this process spawns holds a copy of every descriptor until
        // its exec (the lock with it): the lease may stay locked for that long.
        let deadline = Date().addingTimeInterval(5)
        while !runFiles(db).isEmpty && Date() < deadline {
            #expect(database.runRecords.ended().isEmpty, "lease free, same pid and start time: it exec'd, not killed")
            try await Task.sleep(for: .milliseconds(10))
        }
        #expect(runFiles(db).isEmpty, "and its record is removed")

        record.pid = 1
        record.processStartTicks = 1  // no process 1 started at tick 1: ended
        let crafted = db + "/runs/\(Self.bundle)@not-a-uuid.run.json"
        try Data("{}".utf8).write(to: URL(fileURLWithPath: crafted))
        let garbage = db + "/runs/\(Self.bundle)@\(UUID().uuidString.lowercased()).run.json"
        try Data("{\"samples\": 1}".utf8).write(to: URL(fileURLWithPath: garbage))
        let ended = try database.runRecords.begin(record)
        database.runRecords.release(ended)
        // A second monitor of the same process, under another bundle id: still one report.
        var second = record
        second.bundleID = "com.example.second-monitor"
        database.runRecords.release(try database.runRecords.begin(second))
        var reports = try process(db)
        for _ in 0..<500 where reports.isEmpty {  // (the lock a spawning child may hold a moment, as above)
            try await Task.sleep(for: .milliseconds(10))
            reports = try process(db)
        }
        #expect(reports.map(\.kind) == [.killed], "one report for one process")
        #expect(reports.first?.process.pid == 1)
        #expect(runFiles(db).count == 2, "both monitors' records judged; only the two files that are no records of ours left: \(runFiles(db))")
        #expect(FileManager.default.fileExists(atPath: crafted) && FileManager.default.fileExists(atPath: garbage),
                "what is not a record of ours is never removed")
    }
}
