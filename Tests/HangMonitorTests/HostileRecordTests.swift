// What a processor reads back from the database may have been written by anyone of the same
// user (docs/database.md, "What is read back"): a record of ±1e300, a FIFO where a lease goes,
// a planted cgroup, a forged record, an OOM line about another process that got the same pid.
// Each case starts from what a real monitored process left (killed with SIGKILL), changes it
// as an attacker would, and runs the real `hangwatch process` (or a monitored program's start)
// over it: nothing traps, nothing that is not ours is taken or removed, no report is hidden.
import Testing
import Foundation
import HangwatchTestSupport
import HangwatchPlatform
@testable import HangMonitor
import HangwatchDatabase
import HangwatchReport

@Suite(.ownThread) struct HostileRecordTests {
    static let bundle = "com.example.hostile"

    /// A monitored fixture killed with SIGKILL after a few heartbeats: its run record (and lease) stay.
    func killedMonitoredProcess(database db: String, scenario: String = "idle") async throws -> ChildProcess {
        let child = try startFixture("dispatchmain", scenario, seconds: 60, database: db, bundleID: Self.bundle, threshold: 0.5,
                                     extra: ["HANGWATCH_RUN_RECORD_INTERVAL": "0.2"])
        _ = try await offPool { try child.waitForOutput("\"ready\"") }
        try await Task.sleep(for: .milliseconds(700))
        child.signal(SIGKILL)
        _ = try? await offPool { try child.waitForExit(timeout: 10) }
        return child
    }

    func files(_ db: String, _ directory: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: db + "/" + directory)) ?? []).sorted()
    }

    func recordPath(_ db: String) throws -> String {
        db + "/runs/" + (try #require(files(db, "runs").first { $0.hasSuffix(".run.json") }))
    }

    /// Rewrites the JSON object at `path` (keys as a monitor writes them).
    func rewrite(_ path: String, _ change: (inout [String: Any]) -> Void) throws {
        var object = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: path))) as? [String: Any])
        change(&object)
        try JSONSerialization.data(withJSONObject: object).write(to: URL(fileURLWithPath: path))
    }

    /// `hangwatch process ARGS` to its end: (status, stdout, stderr).
    func hangwatchProcess(_ db: String, _ extra: [String] = []) async throws -> (status: Int32, stdout: String, stderr: String) {
        let child = try ChildProcess(product: "hangwatch", ["process", "--database", db] + extra)
        let status = try await offPool { try child.waitForExit(timeout: 120) }
        return (status, child.stdout, child.stderr)
    }

    func reports(_ db: String) throws -> [Report] {
        let database = try CrashReportDatabase(path: db)
        return try database.listReports().map { try Report.decode(from: database.readReport(id: $0.id)) }
    }

    @Test(arguments: [("lastHeartbeat", 1e300), ("startTime", -1e300), ("heartbeatIntervalSeconds", -5.0)])
    func aPoisonedRunRecordIsSetAsideOnceAndTrapsNoProcessor(key: String, value: Double) async throws {
        let db = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(db) }
        _ = try await killedMonitoredProcess(database: db)
        let record = try recordPath(db)
        try rewrite(record) { $0[key] = value }

        let first = try await hangwatchProcess(db)
        #expect(first.status == 0, "\(first.stderr.suffix(1500))")
        #expect(first.stderr.contains("set aside"), "\(first.stderr)")
        let name = (record as NSString).lastPathComponent
        #expect(files(db, "failed").contains(name), "\(files(db, "failed"))")
        let reason = try String(contentsOfFile: db + "/failed/" + name + ".reason", encoding: .utf8)
        #expect(reason.contains("implausible \(key)"), "\(reason)")
        #expect(!files(db, "runs").contains(name))
        #expect(try reports(db).isEmpty, "a record that cannot be judged makes no report")

        let second = try await hangwatchProcess(db)
        #expect(second.status == 0)
        #expect(!second.stderr.contains("set aside"), "said once: \(second.stderr)")
    }

    @Test func aPoisonedSidecarNeitherStopsTheNextStartNorTrapsTheProcessor() async throws {
        let db = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(db) }
        let hung = try startFixture("dispatchmain", "forever", database: db, bundleID: Self.bundle, threshold: 0.5)
        let staged = try await offPool { () -> String in
            let deadline = Date().addingTimeInterval(30)
            while Date() < deadline {
                let names = (try? FileManager.default.contentsOfDirectory(atPath: db + "/staging")) ?? []
                if let sidecar = names.first(where: { $0.hasSuffix(".hang.json") }), names.contains(where: { $0.hasSuffix(".hang.dump") }) {
                    return db + "/staging/" + sidecar
                }
                usleep(50_000)
            }
            throw TestSupportError.timedOut("a staged hang")
        }
        hung.signal(SIGKILL)
        _ = try? await offPool { try hung.waitForExit(timeout: 10) }
        try rewrite(staged) { $0["startTime"] = -1e300; $0["lastSeenTime"] = 1e300 }

        // The program's next start promotes its dead processes' hangs (HangWatcher).
        let next = try startFixture("runloop", "promote", database: db, bundleID: Self.bundle, threshold: 0.5)
        #expect(try await offPool { try next.waitForExit(timeout: 30) } == 0, "\(next.stdout.suffix(1500))")
        #expect(!next.stdout.contains("promoted-fatal-hang"))
        let failed = files(db, "failed")
        #expect(failed.contains { $0.hasSuffix(".hang.json") } && failed.contains { $0.hasSuffix(".hang.dump") }, "\(failed)")
        #expect(!files(db, "staging").contains { $0.hasSuffix(".hang.json") || $0.hasSuffix(".hang.dump") }, "\(files(db, "staging"))")

        let processed = try await hangwatchProcess(db)
        #expect(processed.status == 0, "\(processed.stderr.suffix(1500))")
        #expect(try reports(db).allSatisfy { $0.kind != .fatalHang })
    }

    @Test func aFIFOInPlaceOfALeaseIsNeitherTakenNorRemoved() async throws {
        let db = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(db) }
        _ = try await killedMonitoredProcess(database: db)
        let record = try recordPath(db)
        let lease = String(record.dropLast(".json".count)) + ".lease"
        try FileManager.default.removeItem(atPath: lease)
        #expect(mkfifo(lease, 0o600) == 0)

        let processed = try await hangwatchProcess(db)
        #expect(processed.status == 0, "\(processed.stderr.suffix(1500))")
        var info = stat()
        #expect(lstat(lease, &info) == 0 && (info.st_mode & S_IFMT) == S_IFIFO, "the FIFO is still there, untouched")
        #expect(FileManager.default.fileExists(atPath: record), "its record is left for a human, not judged")
        #expect(try reports(db).isEmpty)
    }

    @Test func aPlantedCgroupGivesNoOOMVerdict() async throws {
        let db = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(db) }
        _ = try await killedMonitoredProcess(database: db)
        let planted = db + "/planted-cgroup"
        try FileManager.default.createDirectory(atPath: planted, withIntermediateDirectories: false)
        try "low 0\nhigh 0\nmax 0\noom 9\noom_kill 9\n".write(toFile: planted + "/memory.events", atomically: true, encoding: .utf8)
        try "9\n".write(toFile: planted + "/memory.peak", atomically: true, encoding: .utf8)
        try rewrite(try recordPath(db)) {
            $0["memoryCgroup"] = ["hierarchy": "v2", "path": planted]
            $0["oomKillsSeen"] = 0
        }

        let processed = try await hangwatchProcess(db)
        #expect(processed.status == 0, "\(processed.stderr.suffix(1500))")
        let killed = try #require(try reports(db).first?.killed)
        #expect(killed.cause != .oom, "\(killed.explanation) \(killed.evidence)")
        #expect(killed.memoryCgroup == nil)
        #expect(killed.evidence.contains { $0.contains("not one") }, "\(killed.evidence)")
    }

    @Test func aForgedRecordOfTheSamePidAndStartTimeHidesNoReport() async throws {
        let db = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(db) }
        let child = try await killedMonitoredProcess(database: db)
        let real = try recordPath(db)
        let forged = db + "/runs/\(Self.bundle)@\(UUID().uuidString.lowercased()).run.json"
        try FileManager.default.copyItem(atPath: real, toPath: forged)
        try rewrite(forged) { record in
            let start = record["startTime"] as? Double ?? 0
            record["startTime"] = start - 10  // judged first
            record["lastHeartbeat"] = start - 5
            record["samples"] = []
            record["name"] = "forged"
            record["executable"] = "/forged"
        }

        let processed = try await hangwatchProcess(db)
        #expect(processed.status == 0, "\(processed.stderr.suffix(1500))")
        let found = try reports(db)
        let genuine = found.filter { $0.process.name != "forged" }
        #expect(genuine.count == 1, "the real process's report is made: \(found.map(\.process.name))")
        #expect(genuine.first?.process.pid == child.pid)
        #expect((genuine.first?.killed?.samples.count ?? 0) >= 2, "with its own samples")
    }

    /// A real OOM kill of one process; a run record of another program that had the same pid
    /// before (pid reuse, as after a kill -9): the kernel's line is the other process's, and never
    /// copied into its report. The OOM victim's own report keeps its line unless redacted.
    @Test func anOOMLineOfAnotherProcessWithTheSamePidIsNeverCopied() async throws {
        guard let cgroup = KilledRunTests.makeCgroup(limit: 150_000_000) else { return }
        defer { cgroup.remove() }
        let victimDB = try makeTemporaryDirectory(), db = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(victimDB); removeTemporaryDirectory(db) }
        // The other program runs while the victim is killed, so only its name and its cgroup tell them apart.
        let other = try startFixture("dispatchmain", "idle", seconds: 60, database: db, bundleID: Self.bundle, threshold: 0.5,
                                     extra: ["HANGWATCH_RUN_RECORD_INTERVAL": "0.2"])
        _ = try await offPool { try other.waitForOutput("\"ready\"") }
        let victim = try startFixture("dispatchmain", "allocate", database: victimDB, bundleID: Self.bundle, threshold: 2,
                                      extra: ["HANGWATCH_FIXTURE_CGROUP": String(cgroup.path.split(separator: "/").last!),
                                              "HANGWATCH_RUN_RECORD_INTERVAL": "0.2"])
        try cgroup.add(victim.pid)
        #expect(try await offPool { try victim.waitForExit(timeout: 60) } == 128 + SIGKILL)
        #expect(cgroup.oomKills() == 1)
        try await Task.sleep(for: .milliseconds(500))
        other.signal(SIGKILL)
        _ = try? await offPool { try other.waitForExit(timeout: 10) }

        // Its record, as if it had had the victim's pid: same name (the fixture's), its own cgroup counted nothing.
        let record = try recordPath(db)
        try rewrite(record) { $0["pid"] = Int(victim.pid) }
        let copy = db + "/runs/\(Self.bundle)@\(UUID().uuidString.lowercased()).run.json"
        try FileManager.default.copyItem(atPath: record, toPath: copy)
        // And a program of another name with no cgroup to ask.
        try rewrite(copy) { $0["name"] = "other-program"; $0["memoryCgroup"] = nil; $0["oomKillsSeen"] = nil }

        let processed = try await hangwatchProcess(db)
        #expect(processed.status == 0, "\(processed.stderr.suffix(1500))")
        let found = try reports(db)
        #expect(found.count == 2, "\(found.map(\.process.name))")
        for report in found {
            let killed = try #require(report.killed)
            #expect(killed.cause != .oom, "\(report.process.name): \(killed.explanation) \(killed.evidence)")
            #expect(!killed.evidence.contains { $0.contains("Killed process") }, "\(killed.evidence)")
        }

        // The victim's own record: its line, when the kernel log can be read here; redacted with --redact all.
        let own = try await hangwatchProcess(victimDB, ["--redact", "all"])
        #expect(own.status == 0, "\(own.stderr.suffix(1500))")
        let killed = try #require(try reports(victimDB).first?.killed)
        #expect(killed.cause == .oom, "\(killed.explanation) \(killed.evidence)")
        #expect(!killed.evidence.contains { $0.contains("Killed process") }, "\(killed.evidence)")
        let kmsg = open("/dev/kmsg", O_RDONLY | O_NONBLOCK)
        if kmsg >= 0 {
            close(kmsg)
            #expect(killed.evidence.contains("kernel: <redacted>"), "\(killed.evidence)")
        }
    }
}
