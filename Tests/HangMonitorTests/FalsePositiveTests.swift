// Not hangs: a stopped process, a traced process, a paused monitor, a busy main queue on a
// saturated machine. Each runs the real fixture and expects no detection.
import Testing
import Foundation
import HangwatchTestSupport
@testable import HangMonitor

@Suite(.ownThread) struct FalsePositiveTests {
    func detections(_ output: String) -> [FixtureEvent] { events(in: output).filter { $0.name == "detected" } }

    @Test func stoppedAndContinuedProcessIsNotHung() async throws {
        let db = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(db) }
        // Idle far longer than the test needs: a busy test machine must not let it exit before the stop.
        let child = try startFixture("dispatchmain", "idle", seconds: 120, database: db, threshold: 0.5)
        try await offPool { try child.waitForOutput("\"ready\"") }
        try await Task.sleep(for: .milliseconds(300))
        child.signal(SIGSTOP)
        try await Task.sleep(for: .milliseconds(1_500)) // ≥ 3× the threshold
        child.signal(SIGCONT)
        // The monitor notices its own missed time on its first tick after SIGCONT …
        try await offPool { try child.waitForOutput("\"rebaselined\"", timeout: 60) }
        // … and, given a few thresholds more, still reports nothing.
        try await Task.sleep(for: .milliseconds(1_500))
        child.signal(SIGKILL)
        _ = try? await offPool { try child.waitForExit(timeout: 30) }
        #expect(detections(child.stdout).isEmpty, "\(child.stdout)")
        #expect(stagingFiles(db).isEmpty)
    }

    @Test func pausedMonitorReportsNothing() async throws {
        let db = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(db) }
        let child = try startFixture("runloop", "pause", seconds: 1.5, database: db, threshold: 0.5)
        #expect(try await offPool { try child.waitForExit(timeout: 30) } == 0)
        #expect(events(in: child.stdout).contains { $0.name == "slept" })
        #expect(detections(child.stdout).isEmpty, "\(child.stdout)")
    }

    @Test(arguments: [true, false])
    func tracedProcessSuspendsDetectionWhenConfigured(suspend: Bool) async throws {
        let db = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(db) }
        let child = try startFixture("runloop", "traced", seconds: 1.5, database: db, threshold: 0.5,
                                     extra: ["HANGWATCH_SUSPEND_WHEN_TRACED": suspend ? "true" : "false"])
        try await offPool { try child.waitForOutput("\"ready\"") }
        // A real tracer, strace-like: PTRACE_SEIZE (no stop), then passes every signal on
        // (capture signals the traced thread when detection is not suspended).
        let tracer = try ChildProcess("/usr/bin/env", ["python3", "-c", """
            import ctypes, os, sys
            libc = ctypes.CDLL(None, use_errno=True)
            libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
            pid = \(child.pid)
            if libc.ptrace(0x4206, pid, None, None) != 0: sys.exit("seize failed: %d" % ctypes.get_errno())
            print("attached", flush=True)
            while True:
                try: _, status = os.waitpid(pid, 0x40000000)
                except ChildProcessError: break
                if os.WIFEXITED(status) or os.WIFSIGNALED(status): break
                if os.WIFSTOPPED(status):
                    sig = 0 if (status >> 16) else os.WSTOPSIG(status)
                    libc.ptrace(7, pid, None, ctypes.c_void_p(sig))
            """])
        try await offPool { try tracer.waitForOutput("attached", timeout: 20) }
        // A traced child's exit goes to its tracer first: end the tracer once the child is done.
        try await offPool { try child.waitForOutput("\"done\"", timeout: 60) }
        tracer.signal(SIGKILL)
        #expect(try await offPool { try child.waitForExit(timeout: 60) } == 0)
        let all = events(in: child.stdout)
        #expect(all.contains { $0.name == "traced" })
        if suspend {
            #expect(all.contains { $0.name == "suspended-while-traced" })
            #expect(detections(child.stdout).isEmpty, "\(child.stdout)")
        } else {
            #expect(detections(child.stdout).count == 1, "\(child.stdout)")
        }
    }

    @Test func busyMainQueueOnASaturatedMachineIsNotHung() async throws {
        let db = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(db) }
        // Saturate every core with other processes.
        let cores = max(2, ProcessInfo.processInfo.activeProcessorCount)
        let burners = try (0..<(2 * cores)).map { _ in try ChildProcess("/bin/sh", ["-c", "while :; do :; done"]) }
        defer { for burner in burners { burner.signal(SIGKILL) } }
        let child = try startFixture("dispatchmain", "busy", seconds: 4, database: db, threshold: 1.0)
        #expect(try await offPool { try child.waitForExit(timeout: 60) } == 0)
        #expect(events(in: child.stdout).contains { $0.name == "done" })
        #expect(detections(child.stdout).isEmpty, "\(child.stdout)")
    }
}
