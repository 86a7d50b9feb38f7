// Capture that does not change the program (docs/hang-monitor.md, "How capture works"): a
// thread blocked in a call through a whole hang — the detection capture and every 50 ms sample
// — comes back when it would have without the monitor, with no EINTR; likewise a thread blocked
// beside it, the pool, and a thread blocked while DumpClient takes dumps. Each call runs for
// 4 s in a real hangwatch-fixture-hang child (Tests/Fixtures/hangwatch-fixture-hang/BlockingCalls.swift).
import Foundation
import HangwatchTestSupport
import Testing
@testable import HangMonitor
import HangwatchDatabase
import HangwatchSnapshot

/// The calls of the matrix, as BlockingCalls.swift names them.
private let calls = ["sleep", "usleep", "nanosleep", "clock_nanosleep", "poll", "select", "epoll_wait", "sem_wait",
                     "sem_timedwait", "read", "accept", "pthread_cond_timedwait", "Thread.sleep"]

/// The kernel ends these with EINTR after any stop, ptrace's included (signal(7), "Interruption
/// of system calls and library functions by stop signals"): no capture that stops the thread
/// can keep them whole. docs/hang-monitor.md names them.
private let endedByAnyStop: Set<String> = ["epoll_wait"]

private let blockSeconds = 4.0

private struct Blocked {
    var call: String
    var target: String
    var seconds: Double
    var result: Int
    var errno: Int

    init?(_ event: FixtureEvent) {
        guard event.name == "blocked", let call = event.string("call"), let target = event.string("target"),
              let seconds = event.double("seconds"), let result = event.int("result"), let code = event.int("errno") else { return nil }
        (self.call, self.target, self.seconds, self.result, self.errno) = (call, target, seconds, result, code)
    }

    /// Returned when it would have (`blockSeconds`, give or take the scheduler on a busy machine), and as it would have.
    var undisturbed: Bool { seconds >= blockSeconds - 0.02 && seconds < blockSeconds + 0.5 && errno == 0 && result >= 0 }
}

private func runFixture(_ scenario: String, call: String, method: String = "quiet", database: String,
                        extra: [String: String] = [:]) async throws -> (events: [FixtureEvent], blocked: [Blocked], stdout: String) {
    let child = try startFixture("dispatchmain", scenario, seconds: blockSeconds, database: database, threshold: 0.5,
                                 extra: ["HANGWATCH_FIXTURE_CALL": call, "HANGWATCH_CAPTURE": method, "HANGWATCH_SAMPLE_INTERVAL": "0.05",
                                         "HANGWATCH_KEEP_RECOVERED_HANGS_LONGER_THAN": "0", "HANGWATCH_DEDUP_WINDOW": "0"].merging(extra) { $1 })
    let status = try await offPool { try child.waitForExit(timeout: 60) }
    #expect(status == 0, "\(child.stdout) \(child.stderr)")
    let all = events(in: child.stdout)
    return (all, all.compactMap(Blocked.init), child.stdout)
}

@Suite(.ownThread) struct QuietCaptureTests {
    /// The main queue hung in the call (detection + ~50 samples of that very thread) and a
    /// thread of its own in it at the same time (stopped by the detection capture).
    @Test(arguments: calls)
    func aCallBlockedThroughAWholeHangReturnsWhenItWould(_ call: String) async throws {
        let db = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(db) }
        let run = try await runFixture("blocking", call: call, database: db)
        let recovered = try #require(run.events.first { $0.name == "recovered" }, "\(run.stdout)")
        #expect(run.blocked.count == 2, "\(run.stdout)")
        for blocked in run.blocked {
            if endedByAnyStop.contains(call) {
                #expect(blocked.errno == Int(EINTR), "\(call) on \(blocked.target): the named exception")
            } else {
                #expect(blocked.undisturbed, "\(call) on \(blocked.target): \(blocked.seconds) s, result \(blocked.result), errno \(blocked.errno)")
            }
        }
        guard !endedByAnyStop.contains(call) else { return }
        // The hang lasted what the call did, sampled all along (~70 samples of 50 ms on an idle
        // machine; a loaded one takes fewer, each sample waiting for CPUs), and its profile is
        // the call, not an idle stack.
        #expect((recovered.int("sampleCount") ?? 0) >= 15, "\(run.stdout)")
        #expect((recovered.double("durationSeconds") ?? 0) >= blockSeconds - 0.2, "\(run.stdout)")
        let report = try readReport(try #require(recovered.string("reportPath"), "\(run.stdout)"))
        let hang = try #require(report.hang)
        let inCall = hang.stacks.filter { $0.frames.contains { $0.contains("BlockingCall.block") } }.reduce(0) { $0 + $1.count }
        #expect(Double(inCall) >= 0.95 * Double(hang.samples), "\(inCall) of \(hang.samples) samples in the call: \(hang.stacks)")
        #expect(report.annotations["capture.method"] == "ptrace")
    }

    /// Every pool thread in the call at once: the pool target's hang, its detection capture
    /// and the samples of each hung pool thread.
    @Test(arguments: ["nanosleep", "poll", "sem_timedwait", "pthread_cond_timedwait"])
    func thePoolTargetsCallsReturnWhenTheyWould(_ call: String) async throws {
        let db = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(db) }
        let run = try await runFixture("blocking-pool", call: call, database: db,
                                       extra: ["HANGWATCH_TARGETS": "main-queue,cooperative-pool"])
        #expect(run.events.contains { $0.name == "detected" && $0.string("target") == "cooperative-pool" }, "\(run.stdout)")
        #expect(!run.blocked.isEmpty && run.blocked.allSatisfy(\.undisturbed), "\(run.blocked)")
    }

    /// `dumpWithoutCrashAndDeferProcessing()` five times while a thread is blocked: all five
    /// calls used to return at the first dump.
    @Test(arguments: ["sleep", "usleep", "nanosleep", "poll", "select", "read", "pthread_cond_timedwait"])
    func dumpsTakenWhileAThreadIsBlockedLeaveItBe(_ call: String) async throws {
        let db = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(db) }
        let run = try await runFixture("blocking-dump", call: call, database: db)
        #expect(run.events.contains { $0.name == "dumped" }, "\(run.stdout)")
        let blocked = try #require(run.blocked.first, "\(run.stdout)")
        #expect(blocked.undisturbed, "\(call): \(blocked.seconds) s, result \(blocked.result), errno \(blocked.errno)")
    }

    /// The control that shows the matrix can fail: with signals (HANGWATCH_CAPTURE=signals) the
    /// same hang cuts the sleep short, as every capture did before.
    @Test func withSignalsTheSameHangCutsTheSleepShort() async throws {
        let db = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(db) }
        let run = try await runFixture("blocking", call: "nanosleep", method: "signals", database: db)
        let main = try #require(run.blocked.first { $0.target == HangTarget.mainQueue.name }, "\(run.stdout)")
        #expect(!main.undisturbed && main.errno == Int(EINTR), "\(main)")
    }
}
