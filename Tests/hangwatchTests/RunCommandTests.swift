// `hangwatch run`: the child's exit status, signals, stdio, and hangs from every liveness source.
import Foundation
import HangwatchDatabase
import HangwatchReport
import HangwatchTestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

@Suite("hangwatch run", .ownThread)
struct RunCommandTests {
    @Test func passesThroughOutputAndExitStatus() throws {
        let database = try TemporaryDatabase()
        let result = try runHangwatch(["run", "--", "/bin/sh", "-c", "echo to-stdout; echo to-stderr >&2; exit 3"], database: database)
        #expect(result.status == 3)
        #expect(result.stdout == "to-stdout\n")
        #expect(result.stderr.contains("to-stderr"))
        #expect(try database.reports().isEmpty)
    }

    @Test func reportsDeathBySignalAsAShellDoes() throws {
        let database = try TemporaryDatabase()
        let result = try runHangwatch(["run", "--", "/bin/sh", "-c", "kill -SEGV $$"], database: database)
        #expect(result.status == 128 + SIGSEGV)
        #expect(result.stderr.contains("died of SIGSEGV"))
    }

    /// A child whose own crash report is stored in the run (its run id in the report's
    /// subject) is named, and hangwatch stores none of its own; the report is found by the
    /// subject kept beside it, whatever its JSON says (here made unreadable after the fact).
    @Test func namesTheChildsOwnCrashReportFromItsSubject() throws {
        let database = try TemporaryDatabase()
        let hangwatchPath = try productPath("hangwatch"), crasher = try productPath("hangwatch-fixture-crash")
        let script = "\"$1\" null \"$3\" 2>/dev/null; \"$2\" process --database \"$3\" >/dev/null 2>&1; "
            + "for f in \"$3\"/reports/pending/*.json; do printf '{}' > \"$f\"; done; kill -SEGV $$"
        let result = try runHangwatch(["run", "--", "/bin/sh", "-c", script, "sh", crasher, hangwatchPath, database.path],
                                      database: database)
        #expect(result.status == 128 + SIGSEGV, "stderr: \(result.stderr)")
        let stored = try CrashReportDatabase(path: database.path).listReports()
        try #require(stored.count == 1, "stderr: \(result.stderr)")
        #expect(result.stderr.contains("its crash report: \(stored[0].id)"), "stderr: \(result.stderr)")
    }

    @Test func missingAndUnexecutableCommandsExitLikeAShell() throws {
        let database = try TemporaryDatabase()
        let missing = try runHangwatch(["run", "--", "hangwatch-no-such-command"], database: database)
        #expect(missing.status == 127)
        #expect(missing.stderr.contains("hangwatch-no-such-command: command not found"))
        let directory = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(directory) }
        let plainFile = directory + "/not-a-program"
        _ = FileManager.default.createFile(atPath: plainFile, contents: Data("data\n".utf8), attributes: [.posixPermissions: 0o644])
        let notExecutable = try runHangwatch(["run", "--", plainFile], database: database)
        #expect(notExecutable.status == 126)
        #expect(notExecutable.stderr.contains("cannot execute"))
        let noCommand = try runHangwatch(["run"], database: database)
        #expect(noCommand.status != 0)
        #expect(noCommand.stderr.contains("missing command"))
        let unknownFlag = try runHangwatch(["run", "--no-such-flag", "--", "true"], database: database)
        #expect(unknownFlag.status != 0)
        #expect(unknownFlag.stderr.contains("--no-such-flag"))
        let badNumber = try runHangwatch(["run", "--silence", "-1", "--", "true"], database: database)
        #expect(badNumber.status != 0)
        #expect(badNumber.stderr.contains("--silence"))
    }

    @Test(arguments: [SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2, SIGQUIT])
    func forwardsSignalsToTheChild(signal: Int32) throws {
        let database = try TemporaryDatabase()
        let script = "trap 'echo got-\(signal); exit 7' \(signal); echo READY; while :; do sleep 0.05; done"
        let child = try hangwatch(["run", "--", "/bin/sh", "-c", script], database: database)
        try child.waitForOutput("READY")
        child.signal(signal)
        #expect(try child.waitForExit(timeout: 20) == 7)
        #expect(child.stdout.contains("got-\(signal)"))
    }

    @Test func silentChildIsCapturedFromOutsideAndKilled() throws {
        let database = try TemporaryDatabase()
        let child = try hangwatch(["run", "--silence", "1", "--kill-after", "1", "--",
                                   try productPath("hangwatch-fixture-remote"), "deadlock"], database: database)
        #expect(try child.waitForExit(timeout: 60) == 124)
        #expect(child.stderr.contains("is hung: no output for 1.0 s"))
        #expect(child.stderr.contains("report "))

        let reports = try database.reports()
        try #require(reports.count == 1)
        let report = reports[0]
        #expect(report.kind == .fatalHang)
        #expect(report.hang?.target == "output")
        #expect(report.context?.termination?.code == "0x8badf00d")
        #expect(report.context?.termination?.signal == "SIGKILL")
        // Both deadlocked threads: inside the mutex lock, called from the fixture's lock-order functions.
        let locked = report.threads.filter { thread in
            functionNames(thread).contains { $0.contains("mutex_lock") }
                && functionNames(thread).contains { $0.contains("deadlockTake") }
        }
        #expect(locked.count == 2, "threads: \(report.threads.map { functionNames($0).prefix(4) })")
        #expect(report.threads.contains { $0.roles.contains(.hung) && $0.roles.contains(.mainThread) })
        #expect(try database.stagingFiles().isEmpty)
    }

    /// Issue 45: `--timeout 2 -- sleep 10` said "killing sleep … hung for 0.0 s" and its report
    /// "timeout hung for 18 ms (threshold 2 s)": the hang was timed from the kill. A timeout's
    /// duration is how long the job ran, in every place it is said; one thread is "1 thread".
    @Test func aTimeoutSaysHowLongTheJobRan() throws {
        let database = try TemporaryDatabase()
        let run = try runHangwatch(["run", "--timeout", "2", "--", "/bin/sleep", "10"], database: database)
        #expect(run.status == 124, "\(run.stderr)")
        func seconds(after prefix: String, in text: String) -> Double? {
            guard let match = text.firstMatch(of: try! Regex(prefix + "([0-9.]+) (ms|s)\\b")),
                  let value = Double(match.output[1].substring ?? "") else { return nil }
            return match.output[2].substring == "ms" ? value / 1000 : value
        }
        let ran = 1.9...6.0  // 2 s, and what a busy 2-core machine adds to the kill
        let killed = seconds(after: "timeout expired after ", in: run.stderr)
        #expect(killed.map(ran.contains) == true, "\(run.stderr)")
        #expect(!run.stderr.contains("hung for 0.0 s") && !run.stderr.contains(" 1 threads"), "\(run.stderr)")
        #expect(run.stderr.contains("captured 1 thread;"), "\(run.stderr)")

        let report = try #require(try database.reports().first)
        let shown = try runHangwatch(["show", report.id], database: database)
        #expect(seconds(after: "timeout hung for ", in: shown.stdout).map(ran.contains) == true, "\(shown.stdout.prefix(800))")
        let json = try Report.decode(from: Data(try runHangwatch(["show", report.id, "--format", "json"], database: database).stdout.utf8))
        #expect(json.hang.map { ran.contains($0.durationSeconds) } == true, "\(String(describing: json.hang))")
        #expect(json.context?.termination.map { ran.contains($0.hungSeconds) } == true)
        let listed = try runHangwatch(["list"], database: database)
        #expect(seconds(after: "timeout hung for ", in: listed.stdout).map(ran.contains) == true, "\(listed.stdout)")
    }

    /// `--timeout` on a job that only waits (its main thread in sigsuspend, nothing blocked or
    /// running) used to mark that idle thread "(main-thread, hung)" under 0x8badf00d: no thread
    /// is called hung when none is doing anything; the report still has every stack.
    @Test func aTimeoutOfAnIdleJobCallsNoThreadHung() throws {
        let database = try TemporaryDatabase()
        let child = try hangwatch(["run", "--timeout", "1", "--", "/usr/bin/python3", "-c", "import signal; signal.pause()"],
                                  database: database)
        #expect(try child.waitForExit(timeout: 60) == 124, "\(child.stderr)")
        let report = try #require(try database.reports().first)
        #expect(report.kind == .fatalHang)
        #expect(!report.threads.isEmpty)
        #expect(!report.threads.contains { $0.roles.contains(.hung) }, "\(report.threads.map { ($0.tid, $0.roles, $0.syscall ?? "") })")
    }

    /// Once the child has ended and been reaped, its pid may be another process's: while what is
    /// left of the job (here a process that ignores SIGTERM) gets its grace period, the silence
    /// and timeout deadlines that pass find no hang and capture nothing by that pid.
    @Test func deadlinesAfterTheChildEndedCaptureNothing() throws {
        let database = try TemporaryDatabase()
        let started = Date()
        let run = try hangwatch(["run", "--silence", "0.5", "--timeout", "1", "--kill-grace", "3", "--",
                                 "/bin/sh", "-c", "(trap '' TERM; exec sleep 60) & exit 0"], database: database)
        #expect(try run.waitForExit(timeout: 30) == 0, "\(run.stderr)")
        #expect(!run.stderr.contains("is hung"), "\(run.stderr)")
        #expect(!run.stderr.contains("killing"), "\(run.stderr)")
        #expect(try database.reports().isEmpty)
        #expect(Date().timeIntervalSince(started) >= 2.5, "the grace period was cut short")
        // Waited for, not polled: a deadline that has passed and stays so is no busy loop.
        #expect(try #require(run.cpuSeconds) < 1, "hangwatch used \(run.cpuSeconds ?? 0) s of CPU in the grace period")
    }

    @Test func recoveredHangIsDiscardedUnlessKept() throws {
        let script = "echo start; sleep 2; echo back; exit 0"
        let database = try TemporaryDatabase()
        let discarded = try runHangwatch(["run", "--silence", "0.7", "--", "/bin/sh", "-c", script], database: database)
        #expect(discarded.status == 0)
        #expect(discarded.stderr.contains("recovered after"))
        #expect(try database.reports().isEmpty)
        #expect(try database.stagingFiles().isEmpty)

        let kept = try runHangwatch(["run", "--silence", "0.7", "--keep-recovered", "--", "/bin/sh", "-c", script], database: database)
        #expect(kept.status == 0)
        // On a loaded machine the shell itself may start slower than 0.7 s: a second, short
        // silence before "start" is a real (recovered) hang too. The 2 s sleep must be one.
        let reports = try database.reports()
        try #require(!reports.isEmpty)
        #expect(reports.allSatisfy { $0.kind == .hang && $0.hang?.recovered == true })
        let longest = reports.compactMap { $0.hang?.durationSeconds }.max() ?? 0
        #expect(longest > 0.7 && longest < 2.5)
    }

    @Test func timeoutKillsWithStacksAndKeepsStderrTail() throws {
        let database = try TemporaryDatabase()
        let script = "echo 'last words before the hang' >&2; while :; do echo tick; sleep 0.1; done"
        let result = try runHangwatch(["run", "--timeout", "1", "--kill-signal", "TERM", "--", "/bin/sh", "-c", script], database: database)
        #expect(result.status == 124)
        let reports = try database.reports()
        try #require(reports.count == 1)
        #expect(reports[0].kind == .fatalHang)
        #expect(reports[0].context?.termination?.reason == "timeout")
        #expect(reports[0].context?.termination?.signal == "SIGTERM")
        #expect(reports[0].context?.stderrTail?.contains("last words before the hang") == true)
        #expect(!reports[0].threads.isEmpty)
    }

    /// A systemd-style watchdog client in another language: python3's socket module.
    static let watchdogClient = """
    import os, socket, sys, time
    assert os.environ["WATCHDOG_PID"] == str(os.getpid()), "WATCHDOG_PID is not my pid"
    usec = int(os.environ["WATCHDOG_USEC"])
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    def notify(text): s.sendto(text.encode(), os.environ["NOTIFY_SOCKET"])
    notify("READY=1")
    for _ in range(5):
        notify("WATCHDOG=1"); time.sleep(usec / 1e6 / 4)
    print("stopped petting", flush=True)
    if sys.argv[1] == "trigger":
        notify("WATCHDOG=trigger")
    time.sleep(30)
    """

    @Test(arguments: ["silent", "trigger"])
    func systemdWatchdogClientThatStopsIsAHang(mode: String) throws {
        let database = try TemporaryDatabase()
        let result = try runHangwatch(["run", "--threshold", "1", "--kill-after", "0.5", "--",
                                       "/usr/bin/python3", "-c", Self.watchdogClient, mode], database: database)
        #expect(result.status == 124, "stderr: \(result.stderr)")
        #expect(result.stdout.contains("stopped petting"))
        #expect(result.stderr.contains(mode == "trigger" ? "WATCHDOG=trigger" : "no WATCHDOG=1 for 1.0 s"))
        let reports = try database.reports()
        try #require(reports.count == 1)
        #expect(reports[0].hang?.target == "systemd-watchdog")
        #expect(reports[0].threads.contains { functionNames($0).contains { $0.contains("sleep") || $0.contains("select") || $0.contains("nanosleep") } })
    }
}
