// `hangwatch run --catch-crashes`: real children under a real long-lived ptrace tracer.
import Foundation
import HangwatchTestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

@Suite("hangwatch run --catch-crashes", .ownThread)
struct CatchCrashesTests {
    /// Swift's runtime backtracer on, whatever the environment running the tests says.
    static let backtracerOn = ["SWIFT_BACKTRACE": "enable=yes,interactive=no"]

    @Test func uninstrumentedCrashIsCapturedAtTheFaultingInstructionAndStillDies() throws {
        let database = try TemporaryDatabase()
        let child = try hangwatch(["run", "--catch-crashes", "--", try productPath("hangwatch-fixture-remote"), "crash"],
                                  database: database, environment: Self.backtracerOn)
        #expect(try child.waitForExit(timeout: 60) == 128 + SIGSEGV)
        // The signal went on unchanged: the child's own handler (Swift's backtracer) still ran.
        #expect(child.stderr.contains("Program crashed"), "stderr: \(child.stderr)")
        #expect(child.stderr.contains("died of SIGSEGV"))
        #expect(child.stderr.contains("captured") && child.stderr.contains("before delivery"))

        let reports = try database.reports()
        try #require(reports.count == 1, "reports: \(reports.map(\.kind))")
        let report = reports[0]
        #expect(report.kind == .crash)
        let signal = try #require(report.signal)
        #expect(signal.number == SIGSEGV)
        #expect(signal.codeName == "SEGV_MAPERR")
        #expect(signal.address == 0x8)
        let crashed = report.threads.filter { $0.roles.contains(.crashed) }
        try #require(crashed.count == 1)
        #expect(crashed[0].tid == signal.tid)
        #expect(crashed[0].name == "crasher")
        // frames[0] is the faulting instruction itself, with its file and line.
        let top = try #require(crashed[0].frames.first)
        #expect(top.function?.contains("crashByNullWriteOnNamedThread") == true, "frames: \(functionNames(crashed[0]))")
        #expect(top.file?.hasSuffix("hangwatch-fixture-remote/main.swift") == true)
        #expect((top.line ?? 0) > 0)
        // Every thread, not only the crashed one: the main thread was stopped and read too.
        #expect(report.threads.contains { $0.roles.contains(.mainThread) && $0.status == .ptrace && !$0.frames.isEmpty })
        // The stderr tail holds what the child wrote, including what its handler wrote after delivery.
        #expect(report.context?.stderrTail?.contains("Program crashed") == true)
        #expect(child.stderr.contains("crashByNullWriteOnNamedThread"))
    }

    @Test func signalTheChildHandlesItselfIsDeliveredAndNotACrash() throws {
        let database = try TemporaryDatabase()
        let child = try hangwatch(["run", "--catch-crashes", "--", try productPath("hangwatch-fixture-remote"), "handled-usr1"],
                                  database: database)
        try child.waitForOutput("READY handled-usr1")
        child.signal(SIGUSR1)  // forwarded by hangwatch, then injected by the tracer
        #expect(try child.waitForExit(timeout: 30) == 0)
        #expect(child.stdout.contains("handled SIGUSR1"))
        #expect(try database.reports().isEmpty)
    }

    @Test func exitStatusAndStopContinueBehaveAsWithoutATracer() throws {
        let database = try TemporaryDatabase()
        let plain = try runHangwatch(["run", "--catch-crashes", "--", "/bin/sh", "-c", "echo out; exit 5"], database: database)
        #expect(plain.status == 5)
        #expect(plain.stdout == "out\n")
        // A group-stop stays a stop (PTRACE_LISTEN) until SIGCONT, then the child goes on.
        let child = try hangwatch(["run", "--catch-crashes", "--", "/bin/sh", "-c",
                                   "echo stopping; kill -STOP $$; echo resumed; exit 4"], database: database)
        try child.waitForOutput("stopping")
        var stopped = false
        for _ in 0..<500 where !stopped {
            // "t" while the tracer listens (PTRACE_LISTEN), "T" untraced: stopped either way.
            stopped = ["t", "T"].contains(threadState(child: child))
            if !stopped { usleep(10_000) }
        }
        #expect(stopped, "the child should sit in a group-stop")
        usleep(300_000)
        #expect(["t", "T"].contains(threadState(child: child)), "still stopped: nothing but SIGCONT may wake it")
        #expect(!child.stdout.contains("resumed"))
        if let pid = childPID(of: child.pid) { kill(pid, SIGCONT) }
        #expect(try child.waitForExit(timeout: 30) == 4)
        #expect(child.stdout.contains("resumed"))
        #expect(try database.reports().isEmpty)
    }

    @Test func hangIsCapturedThroughTheTracerAndKilled() throws {
        let database = try TemporaryDatabase()
        let child = try hangwatch(["run", "--catch-crashes", "--silence", "1", "--kill-after", "1", "--",
                                   try productPath("hangwatch-fixture-remote"), "deadlock"], database: database)
        #expect(try child.waitForExit(timeout: 60) == 124)
        let reports = try database.reports()
        try #require(reports.count == 1)
        #expect(reports[0].kind == .fatalHang)
        let locked = reports[0].threads.filter { thread in
            functionNames(thread).contains { $0.contains("mutex_lock") }
                && functionNames(thread).contains { $0.contains("deadlockTake") }
        }
        #expect(locked.count == 2, "threads: \(reports[0].threads.map { functionNames($0).prefix(4) })")
        #expect(try database.stagingFiles().isEmpty)
    }

    /// State letter of hangwatch's child (the watched program).
    private func threadState(child: ChildProcess) -> String? {
        guard let pid = childPID(of: child.pid),
              let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let paren = text.lastIndex(of: ")") else { return nil }
        return text[text.index(paren, offsetBy: 2)...].split(separator: " ").first.map(String.init)
    }

    /// hangwatch's child running the job (each thread lists the children it created; its job's
    /// watchdog, `hangwatch job-watchdog`, is the other one).
    private func childPID(of parent: Int32) -> Int32? {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(parent)/task")) ?? []
        for task in tasks {
            guard let text = try? String(contentsOfFile: "/proc/\(parent)/task/\(task)/children", encoding: .utf8) else { continue }
            for pid in text.split(separator: " ").compactMap({ Int32($0) }) {
                let commandLine = FileManager.default.contents(atPath: "/proc/\(pid)/cmdline") ?? Data()
                if !String(decoding: commandLine, as: UTF8.self).contains("job-watchdog") { return pid }
            }
        }
        return nil
    }
}
