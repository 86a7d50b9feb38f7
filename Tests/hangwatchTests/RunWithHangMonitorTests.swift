// `hangwatch run` with a child that links HangMonitor: the child names the hung thread and
// where it staged its own dump; hangwatch captures from outside, and on a kill adopts the
// child's samples and removes its staged files (no second report on the child's next start).
import HangwatchSnapshot
import Foundation
import HangwatchTestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

@Suite("hangwatch run + HangMonitor", .ownThread)
struct RunWithHangMonitorTests {
    static func childEnvironment(_ database: TemporaryDatabase) -> [String: String] {
        ["HANGWATCH_DATABASE_PATH": database.path, "HANGWATCH_THRESHOLD": "1", "HANGWATCH_BUNDLE_ID": "com.example.hang-fixture"]
    }

    /// A liveness message names a staged file by path: a path outside hangwatch's own database
    /// (here a planted staged hang with its sidecar) is never read nor removed.
    @Test func stagedPathOutsideTheDatabaseIsIgnored() throws {
        let database = try TemporaryDatabase()
        let elsewhere = try makeTemporaryDirectory("hangwatch-victim")
        defer { removeTemporaryDirectory(elsewhere) }
        let base = elsewhere + "/com.example.victim@00000000-0000-0000-0000-000000000001"
        // A well-formed staged hang: taken over (and removed), were its path accepted.
        let sidecar = #"{"version":1,"bundleID":"com.example.victim","pid":1,"processStartTicks":1,"target":"main-queue","#
            + #""thresholdSeconds":1,"startTime":1,"lastSeenTime":1,"sampleCount":0,"signature":"s"}"#
        try Data("keep".utf8).write(to: URL(fileURLWithPath: base + ".hang.dump"))
        try Data(sidecar.utf8).write(to: URL(fileURLWithPath: base + ".hang.json"))
        try Data("[]".utf8).write(to: URL(fileURLWithPath: base + ".hang.samples.json"))
        let child = """
            import os, socket, time
            s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            path = os.environ["HANGWATCH_MONITOR_SOCKET"]
            s.sendto(b"hangwatch/1 heartbeat", path)
            s.sendto(("hangwatch/1 hang tid=%d staged=%s.hang.dump" % (os.getpid(), os.environ["VICTIM"])).encode(), path)
            time.sleep(60)
            """
        let run = try hangwatch(["run", "--kill-after", "1", "--", "/usr/bin/python3", "-c", child], database: database,
                                environment: ["VICTIM": base])
        #expect(try run.waitForExit(timeout: 30) == 124, "\(run.stderr)")
        for suffix in [".hang.dump", ".hang.json", ".hang.samples.json"] {
            #expect(FileManager.default.fileExists(atPath: base + suffix), "\(suffix) was removed")
        }
    }

    /// Version 2 names the staged hang by bundle id and id, resolved in hangwatch's own
    /// database: a bundle id or id that could climb out of staging/ is refused, and the
    /// message's target, threads and start time reach the summary and the report.
    @Test func versionTwoMessagesGiveTargetThreadsAndStartAndNeverAPath() throws {
        let database = try TemporaryDatabase()
        let child = """
            import os, socket, time
            s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            path = os.environ["HANGWATCH_MONITOR_SOCKET"]
            s.sendto(b"hangwatch/2 heartbeat", path)
            start = time.time() - 5
            s.sendto(("hangwatch/2 hang target=event-loop:3 threads=%d start=%f bundle=..%%2F..%%2Fvictim staged=00000000-0000-0000-0000-000000000001 threshold=0.75"
                      % (os.getpid(), start)).encode(), path)
            time.sleep(60)
            """
        let run = try hangwatch(["run", "--kill-after", "6", "--", "/usr/bin/python3", "-c", child], database: database)
        #expect(try run.waitForExit(timeout: 30) == 124, "\(run.stderr)")
        #expect(run.stderr.contains("its HangMonitor reported event-loop:3 hung (thread "), "\(run.stderr)")
        // Timed from the monitor's start, 5 s before the message: killed ~1 s after it.
        let report = try #require(try database.reports().first)
        #expect(report.hang?.target == "event-loop:3")
        let hang = try #require(report.hang)
        #expect(hang.startTime < report.timestamp - 4, "\(hang.startTime) vs \(report.timestamp)")
        #expect(report.threads.first { $0.roles.contains(.hung) }?.tid == report.process.pid)
        #expect(report.process.bundleID != "../../victim")
        // The monitor's threshold, not hangwatch run's (2 s), and the target as reports spell it.
        #expect(hang.thresholdSeconds == 0.75)
        #expect(run.stderr.contains("event-loop:3 hung for ") && run.stderr.contains(" (threshold 0.75 s)"), "\(run.stderr)")
    }

    /// The operations the monitor names (`operations=`, docs/hang-monitor.md) reach the run's
    /// report with their traceparents (docs/traces.md), and `show` prints the trace id; an
    /// item of another form, or a traceparent of another form, is dropped.
    @Test func theOperationsAMonitorNamesReachTheReportWithTheirTraces() throws {
        let database = try TemporaryDatabase()
        let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        let child = """
            import os, socket, time, urllib.parse
            s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            path = os.environ["HANGWATCH_MONITOR_SOCKET"]
            s.sendto(b"hangwatch/2 heartbeat", path)
            now = time.time()
            ops = ",".join([
                "%d/%f/5/\(traceparent)/GET%%20%%2Fusers%%2F:id" % (os.getpid(), now - 2),
                "%d/%f/5/00-XYZ-00f067aa0ba902b7-01/GET%%20%%2Fbad-trace" % (os.getpid(), now - 1),
                "%d/nan/5/-/GET%%20%%2Fbad-start" % os.getpid(),
                "garbage"])
            s.sendto(("hangwatch/2 hang target=main-queue threads=%d start=%f threshold=1 operations=%s"
                      % (os.getpid(), now - 1, urllib.parse.quote(ops, safe=":@"))).encode(), path)
            time.sleep(60)
            """
        let run = try hangwatch(["run", "--kill-after", "3", "--", "/usr/bin/python3", "-c", child], database: database)
        #expect(try run.waitForExit(timeout: 30) == 124, "\(run.stderr)")
        let report = try #require(try database.reports().first)
        let operations = try #require(report.hang?.operations)
        #expect(operations.map(\.name) == ["GET /users/:id", "GET /bad-trace"], "\(operations)")
        #expect(operations.map(\.traceparent) == [traceparent, nil])
        let show = try runHangwatch(["show", report.id], database: database)
        #expect(show.status == 0, "\(show.stderr)")
        #expect(show.stdout.contains("while serving GET /users/:id (started "), "\(show.stdout)")
        #expect(show.stdout.contains("trace 4bf92f3577b34da6a3ce929d0e0e4736 span 00f067aa0ba902b7"), "\(show.stdout)")
    }

    @Test func hangOnAPoolThreadThatRecoversLeavesNothing() throws {
        let database = try TemporaryDatabase()
        let child = try hangwatch(["run", "--threshold", "1", "--", try productPath("hangwatch-fixture-hang"), "dispatchmain", "recover", "2.5"],
                                  database: database, environment: Self.childEnvironment(database))
        #expect(try child.waitForExit(timeout: 60) == 0, "stderr: \(child.stderr)")
        let line = try #require(child.stderr.split(separator: "\n").first { $0.contains("its HangMonitor reported main-queue hung") })
        // Under dispatchMain() the main queue runs on a pool thread, and the monitor says which.
        let ready = try #require(child.stdout.split(separator: "\n").first { $0.contains("\"ready\"") })
        let pid = try #require(ready.split(separator: ":").last.flatMap { Int32($0.dropLast().trimmingCharacters(in: .whitespaces)) })
        #expect(!line.contains("(thread \(pid))"), "\(line) vs pid \(pid)")
        #expect(child.stderr.contains("recovered after"))
        #expect(try database.reports().isEmpty)
        #expect(try database.stagingFiles().isEmpty)
    }

    /// A child that recovers and ends while hangwatch is still capturing its hang (200 threads
    /// make the capture long): its "recovered" is heard before its end, so nothing is kept and
    /// the hang lasted what the monitor says; and its end is seen at all. A CI run under load
    /// kept such a hang as one the process ended in; a capture's wait once reaped the child, and
    /// `hangwatch run` then never ended.
    @Test func aChildThatRecoversAndEndsDuringTheCaptureLeavesNothing() throws {
        let child = """
            import os, socket, sys, threading, time
            stop = threading.Event()
            for _ in range(200): threading.Thread(target=stop.wait, daemon=True).start()
            s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            path = os.environ["HANGWATCH_MONITOR_SOCKET"]
            s.sendto(b"hangwatch/2 heartbeat", path)
            time.sleep(0.2)
            s.sendto(("hangwatch/2 hang target=main-queue threads=%d start=%f threshold=1" % (os.getpid(), time.time() - 1.5)).encode(), path)
            time.sleep(float(sys.argv[1]))
            s.sendto(b"hangwatch/2 recovered seconds=1.625", path)
            os._exit(0)
            """
        for gap in ["0", "0.01", "0.03"] {
            let database = try TemporaryDatabase()
            let run = try hangwatch(["run", "--threshold", "1", "--", "/usr/bin/python3", "-c", child, gap], database: database)
            #expect(try run.waitForExit(timeout: 30) == 0, "gap \(gap): \(run.stderr)")
            #expect(run.stderr.contains("recovered after 1.6 s"), "gap \(gap): \(run.stderr)")
            #expect(!run.stderr.contains("ended while hung"), "gap \(gap): \(run.stderr)")
            #expect(try database.reports().isEmpty, "gap \(gap)")
            #expect(try database.stagingFiles().isEmpty, "gap \(gap)")
        }
    }

    /// A real pool hang of a HangMonitor child: hangwatch names the pool, not the main queue,
    /// and tells the hung pool threads once the monitor has found them.
    @Test func aPoolHangOfTheChildIsNamedAsSuch() throws {
        let database = try TemporaryDatabase()
        var environment = Self.childEnvironment(database)
        environment["HANGWATCH_THRESHOLD"] = "0.5"
        environment["HANGWATCH_TARGETS"] = "cooperative-pool"
        let child = try hangwatch(["run", "--threshold", "0.5", "--", try productPath("hangwatch-fixture-hang"), "dispatchmain", "starve"],
                                  database: database, environment: environment)
        #expect(try child.waitForExit(timeout: 60) == 0, "stderr: \(child.stderr)")
        #expect(child.stderr.contains("its HangMonitor reported cooperative-pool hung"), "\(child.stderr)")
        #expect(!child.stderr.contains("main-queue hung"), "\(child.stderr)")
        #expect(child.stderr.contains("recovered after"))
    }

    /// A pool hang that never ends: the report hangwatch keeps names the pool, the hang's
    /// start is when the pool was blocked (not when hangwatch heard of it), and the blocked
    /// pool threads are the hung ones. The child's monitor names pool threads only once two of
    /// its captures a threshold apart agree (Sources/HangMonitor/PoolHangThreads.swift): the kill
    /// comes 5 s after the hang was heard of, so a loaded machine still has that second capture
    /// (at 1.5 s a run beside the whole suite was killed first, and at 3 s one beside two other
    /// suites; the main thread was marked then, which RunReporter.hungThreads no longer does:
    /// HungThreadChoiceTests).
    @Test func anUnendingPoolHangIsReportedWithItsTargetAndStart() throws {
        let database = try TemporaryDatabase()
        var environment = Self.childEnvironment(database)
        environment["HANGWATCH_THRESHOLD"] = "0.5"
        environment["HANGWATCH_TARGETS"] = "cooperative-pool"
        let child = try hangwatch(["run", "--threshold", "0.5", "--kill-after", "5", "--",
                                   try productPath("hangwatch-fixture-hang"), "dispatchmain", "pool", "60"],
                                  database: database, environment: environment)
        #expect(try child.waitForExit(timeout: 60) == 124, "stderr: \(child.stderr)")
        let ready = try #require(child.stdout.split(separator: "\n").first { $0.contains("\"ready\"") })
        let object = try #require(JSONSerialization.jsonObject(with: Data(ready.utf8)) as? [String: Any])
        let blockedAt = try #require(object["wall"] as? Double)   // the pool is blocked right after

        let report = try #require(try database.reports().first)
        #expect(report.kind == .fatalHang)
        #expect(report.hang?.target == "cooperative-pool")
        let start = try #require(report.hang?.startTime)
        // Heard of one threshold later, through the liveness message: the start must be the pool's.
        #expect(start >= blockedAt - 0.05 && start < blockedAt + 0.35, "hang start \(start - blockedAt) s after the pool was blocked")
        let hung = report.threads.filter { $0.roles.contains(.hung) }
        #expect(!hung.isEmpty && hung.allSatisfy { functionNames($0).contains { $0.contains("hangFixtureBlockNamedQueue") } },
                "\(hung.map(functionNames))")
    }

    @Test func permanentHangIsKilledAndReportedOnce() throws {
        let database = try TemporaryDatabase()
        let child = try hangwatch(["run", "--threshold", "1", "--kill-after", "1.5", "--",
                                   try productPath("hangwatch-fixture-hang"), "runloop", "forever"],
                                  database: database, environment: Self.childEnvironment(database))
        #expect(try child.waitForExit(timeout: 60) == 124, "stderr: \(child.stderr)")
        #expect(child.stderr.contains("its HangMonitor reported main-queue hung"))

        let reports = try database.reports()
        try #require(reports.count == 1)
        let report = reports[0]
        #expect(report.kind == .fatalHang)
        #expect(report.hang?.target == HangTarget.mainQueue)
        #expect((report.hang?.samples ?? 0) > 1, "the child's samples were adopted")
        #expect(report.hang?.stacks.contains { $0.frames.contains { $0.contains("hangFixtureSleepOnMainQueue") } } == true)
        let hung = try #require(report.threads.first { $0.roles.contains(.hung) })
        #expect(functionNames(hung).contains { $0.contains("hangFixtureSleepOnMainQueue") })
        // The child's staged hang was handed over: its next start finds nothing to promote.
        #expect(try database.stagingFiles().isEmpty)
        let restart = try ChildProcess(product: "hangwatch-fixture-hang", ["runloop", "promote"], environment: Self.childEnvironment(database))
        #expect(try restart.waitForExit(timeout: 30) == 0)
        #expect(try database.reports().count == 1)
    }

    /// `hangwatch run --database A` around a child whose HangMonitor uses database B (the
    /// README's `run` example with a server configured as the README shows): the run's report
    /// in A is the one report of the event; B's staged hang is taken over, not promoted later.
    @Test func aChildWithADatabaseOfItsOwnGetsOneReportForOneHang() throws {
        let runs = try TemporaryDatabase()
        let childs = try TemporaryDatabase()
        // HANGWATCH_DATABASE_PATH is the child's (B): the run is told A on its command line.
        let child = try hangwatch(["run", "--database", runs.path, "--threshold", "1", "--kill-after", "1.5", "--",
                                   try productPath("hangwatch-fixture-hang"), "runloop", "forever"],
                                  database: runs, environment: Self.childEnvironment(childs))
        #expect(try child.waitForExit(timeout: 60) == 124, "stderr: \(child.stderr)")
        let reports = try runs.reports()
        try #require(reports.count == 1)
        #expect(reports[0].kind == .fatalHang)
        #expect((reports[0].hang?.samples ?? 0) > 1, "the child's samples were adopted from its own database")
        #expect(try childs.stagingFiles().isEmpty)
        // Neither its next start nor a processor of its database makes a second report of it.
        let restart = try ChildProcess(product: "hangwatch-fixture-hang", ["runloop", "promote"], environment: Self.childEnvironment(childs))
        #expect(try restart.waitForExit(timeout: 30) == 0)
        let processed = try runHangwatch(["process", "--database", childs.path], database: childs)
        #expect(processed.stdout.contains("processed 0 dump(s)"), "\(processed.stdout)")
        #expect(try childs.reports().isEmpty)
    }
}
