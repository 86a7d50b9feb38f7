// Hangs the way servers have them: a custom executor (an event loop's stand-in: one thread
// running posted closures), a cooperative pool starved by blocking handlers whose pings slip
// in between jobs, an unrelated pool hang after it, and a fatal hang whose process is a
// zombie, promoted by another monitor that is running — all with real processes and threads.
import Testing
import Foundation
import Dispatch
import HangwatchTestSupport
@testable import HangMonitor
import DumpWithoutCrash
import HangwatchReport

/// A serial executor on a thread of its own, like a NIO event loop.
final class TestExecutorThread: @unchecked Sendable {
    private let condition = NSCondition()
    private var jobs: [@Sendable () -> Void] = []
    private(set) var tid: Int32 = 0

    init(name: String) {
        let thread = Thread { [self] in
            condition.lock()
            tid = currentThreadID()
            condition.broadcast()
            condition.unlock()
            while true {
                condition.lock()
                while jobs.isEmpty { condition.wait() }
                let job = jobs.removeFirst()
                condition.unlock()
                job()
            }
        }
        thread.name = name
        thread.start()
        condition.lock()
        while tid == 0 { condition.wait() }
        condition.unlock()
    }

    func execute(_ job: @escaping @Sendable () -> Void) {
        condition.lock()
        jobs.append(job)
        condition.signal()
        condition.unlock()
    }
}

/// How many pings a custom target has run. A test waits for the first before it blocks the
/// loop: the monitor knows a custom target's thread only from the pings it ran (a fixed sleep
/// was not always enough on a busy machine, and without it the loop could block before its
/// first ping: no hung thread, so no "while serving").
final class PingCount: @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0
    func add() { lock.withLock { count += 1 } }
    var value: Int { lock.withLock { count } }

    func waitForFirst() async throws {
        let deadline = Date().addingTimeInterval(60)
        while value == 0 && Date() < deadline { try await Task.sleep(for: .milliseconds(10)) }
        #expect(value > 0, "the loop answered no ping in 60 s")
    }
}

/// As an event loop of a newer NIO is: a task that prefers it runs its jobs on the loop's thread.
extension TestExecutorThread: TaskExecutor {
    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        execute { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }
}

@inline(never)
func serverTestBlockingRoute(seconds: Double) {
    let end = Date().addingTimeInterval(seconds)
    while Date() < end { usleep(10_000) }
}

@inline(never)
func serverTestBlockExecutor(seconds: Double) {
    let end = Date().addingTimeInterval(seconds)
    while Date() < end { usleep(10_000) }
}

@Suite("Server hangs", .ownThreadAlone)
struct ServerHangTests {
    @Test func aCustomExecutorIsWatchedAndItsOwnThreadIsTheHungOne() async throws {
        let db = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(db) }
        let log = EventLog()
        let loop = TestExecutorThread(name: "test-loop")
        let answered = PingCount()
        let monitor = try HangMonitor(configuration: .init(
            threshold: .milliseconds(400), databasePath: db, bundleID: "test.custom",
            targets: [.custom(name: "event-loop:0", post: { ping in loop.execute { ping(); answered.add() } })],
            keepRecoveredHangsLongerThan: .zero, dedupWindow: .zero, eventHandler: log.record))
        monitor.start()
        defer { monitor.stop() }
        try await answered.waitForFirst()
        loop.execute { serverTestBlockExecutor(seconds: 1.2) }

        let detected = await log.wait { event -> Int32?? in
            if case let .detected(target, tid, _, _) = event, target == "event-loop:0" { return .some(tid) }
            return nil
        }
        #expect(detected == .some(loop.tid), "the loop's own thread: \(log.all)")
        let report = await log.wait { event -> String? in
            if case let .recovered(target, _, _, path) = event, target == "event-loop:0" { return path }
            return nil
        }
        let client = try DumpClient(databasePath: db, bundleID: "test.custom")
        let kept = try #require(try client.processIntermediateDumps().first, "report \(String(describing: report))")
        #expect(kept.hang?.target == "event-loop:0")
        let hung = try #require(kept.threads.first { $0.roles.contains(.hung) })
        // Foundation's Thread.name set before start() never reaches the kernel (docs/hang-monitor.md):
        // reports show the kernel's name, which here is the process's.
        #expect(hung.tid == loop.tid)
        #expect(hung.frames.contains { $0.function?.contains("serverTestBlockExecutor") == true })
        #expect((kept.hang?.samples ?? 0) > 1)
    }

    /// The request behind a blocked executor: a route that blocks the loop inside
    /// `monitor.watch` is the one the hang was serving; another request, awaiting elsewhere, is
    /// listed as running. Both with their tasks.
    @Test func aBlockedExecutorsHangSaysWhichRequestItWasServing() async throws {
        let db = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(db) }
        let log = EventLog()
        let loop = TestExecutorThread(name: "test-loop")
        let answered = PingCount()
        let monitor = try HangMonitor(configuration: .init(
            threshold: .milliseconds(400), databasePath: db, bundleID: "test.serving",
            targets: [.custom(name: "event-loop:0", post: { ping in loop.execute { ping(); answered.add() } })],
            keepRecoveredHangsLongerThan: .zero, dedupWindow: .zero, eventHandler: log.record))
        monitor.start()
        defer { monitor.stop() }
        try await answered.waitForFirst()
        // The other request is inside its watch before the loop blocks (a fixed sleep was not
        // enough beside the parallel suite: the task had not run yet), and waits until cancelled.
        let (started, startedSignal) = AsyncStream<Void>.makeStream()
        let waiting = Task {
            await monitor.watch("GET /slow\nforged line", limit: .seconds(60)) {
                startedSignal.yield()
                try? await Task.sleep(for: .seconds(60))
            }
        }
        for await _ in started { break }
        let blocking = Task(executorPreference: loop) {
            await monitor.watch("GET /block/:id", limit: .seconds(60)) { serverTestBlockingRoute(seconds: 1.2) }
        }
        _ = await log.wait { event -> Bool? in
            if case let .recovered(target, _, _, _) = event, target == "event-loop:0" { return true }
            return nil
        }
        await blocking.value
        waiting.cancel()

        let report = try #require(try DumpClient(databasePath: db, bundleID: "test.serving").processIntermediateDumps().first)
        let operations = report.hang?.operations ?? []
        #expect(operations.map(\.name) == ["GET /slow\nforged line", "GET /block/:id"], "\(operations)")
        let served = try #require(operations.last)
        #expect(served.onHungThread && served.thread == loop.tid, "\(served)")
        #expect(served.limitSeconds == 60)
        let other = try #require(operations.first)
        #expect(!other.onHungThread)
        // Their tasks, named after them: the blocked one running, the other suspended — when the
        // reading was whole (it is bounded to 0.5 s and 1 GiB: beside the parallel suite, this
        // test process's heap may not all be read, and the report says so).
        let reading = try #require(report.tasks)
        if reading.unread == nil && !reading.truncated {
            let servedTask = try #require(reading.tasks.first { $0.id == served.taskID },
                                          "\(reading.tasks.map(\.id)) \(operations) error \(reading.error ?? "none"), scanned \(reading.scannedBytes) B in \(reading.durationSeconds) s")
            #expect(servedTask.operation == "GET /block/:id" && servedTask.state == .running)
            let otherTask = try #require(reading.tasks.first { $0.id == other.taskID })
            #expect(otherTask.state == .suspended)
        }

        let reason = ReportRenderer.reason(report)
        #expect(reason.hasPrefix("event-loop:0 hung for "), "\(reason)")
        #expect(reason.contains(" while serving GET /block/:id (started "), "\(reason)")
        let text = ReportRenderer.text(report)
        #expect(text.contains("Watched operations running when the hang was detected (2):"), "\(text)")
        #expect(text.contains("  GET /slow\\nforged line: started "), "a name cannot start a line of its own")
        #expect(text.contains("; the hung thread was serving it"))
        #expect(try Report.decode(from: ReportRenderer.json(report)) == report)
    }

    @Test func customTargetNamesAreCheckedAndNeverWatchedTwice() throws {
        let post: @Sendable (@escaping @Sendable () -> Void) -> Void = { $0() }
        for bad in ["", "has space", String(repeating: "x", count: 65), "a/b"] {
            #expect(throws: ConfigurationError.self) {
                try HangMonitor.Configuration(databasePath: "/tmp/x", bundleID: "b", targets: [.custom(name: bad, post: post)]).validate()
            }
        }
        #expect(throws: ConfigurationError.self) {
            try HangMonitor.Configuration(databasePath: "/tmp/x", bundleID: "b",
                                          targets: [.custom(name: "event-loop:1", post: post), .custom(name: "event-loop:1", post: post)]).validate()
        }
        try HangMonitor.Configuration(databasePath: "/tmp/x", bundleID: "b", targets: [.custom(name: "event-loop:1", post: post)]).validate()
    }

    /// Blocking handlers starve the pool for ~2.8 s while pings slip in between jobs: one hang,
    /// not several; its hung threads are the pool threads in the blocking handler (two
    /// captures one threshold apart agree). An unrelated pool hang right after is a hang of
    /// its own, not a duplicate.
    @Test func aStarvedPoolIsOneHangWithItsBlockedThreadsNamed() async throws {
        let db = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(db) }
        let fixture = try startFixture("dispatchmain", "starve", database: db, bundleID: "com.example.starve", threshold: 0.5,
                                       extra: ["HANGWATCH_TARGETS": "cooperative-pool", "HANGWATCH_KEEP_RECOVERED_HANGS_LONGER_THAN": "0"])
        #expect(try await offPool { try fixture.waitForExit(timeout: 60) } == 0, "\(fixture.stderr)")
        let all = events(in: fixture.stdout)
        let detected = all.filter { $0.name == "detected" }
        #expect(detected.count == 2, "\(fixture.stdout)")
        #expect(detected.allSatisfy { $0.fields["duplicate"] as? Bool == false }, "\(fixture.stdout)")
        let recovered = all.filter { $0.name == "recovered" }
        try #require(recovered.count == 2, "\(fixture.stdout)")
        let starvation = (recovered[0].fields["durationSeconds"] as? Double) ?? 0
        #expect(starvation >= 2.0, "one hang for the whole starvation, got \(starvation) s: \(fixture.stdout)")
        #expect(all.filter { $0.name == "hung-threads-found" }.count == 2, "\(fixture.stdout)")

        let reports = try DumpClient(databasePath: db, bundleID: "com.example.starve").processIntermediateDumps()
            .sorted { ($0.hang?.startTime ?? 0) < ($1.hang?.startTime ?? 0) }
        try #require(reports.count == 2)
        for (report, function) in zip(reports, ["hangFixtureBlockingHandler", "hangFixtureUnrelatedPoolBlock"]) {
            let hung = report.threads.filter { $0.roles.contains(.hung) }
            #expect(!hung.isEmpty && hung.allSatisfy { !$0.roles.contains(.mainThread) }, "\(report.threads.map(\.roles))")
            #expect(hung.allSatisfy { $0.frames.contains { $0.function?.contains(function) == true } },
                    "\(function): \(hung.map { $0.frames.compactMap(\.function) })")
            #expect((report.hang?.samples ?? 0) > 1, "the hung pool threads were sampled")
            // The samples follow the work: a pool thread whose job ended is not sampled idle
            // while the work goes on on another one (PoolHangThreads.isAtWork).
            let stacks = report.hang?.stacks ?? []
            let atWork = stacks.filter { $0.frames.contains { $0.contains(function) } }.map(\.count).reduce(0, +)
            let total = stacks.map(\.count).reduce(0, +)
            #expect(Double(atWork) >= 0.95 * Double(total), "\(atWork) of \(total) samples in \(function): \(stacks.map { "\($0.count) \($0.frames.suffix(4))" })")
            // The report is the capture taken at detection (about one threshold in), not the
            // second one that named the hung threads (two thresholds in).
            let capturedAfter = report.timestamp - (report.hang?.startTime ?? 0)
            #expect(capturedAfter > 0.4 && capturedAfter < 1.0, "captured \(capturedAfter) s after the hang began")
        }
    }

    /// A process killed while hung and not yet reaped (a zombie) is dead: its staged hang's
    /// lease is gone, and a monitor of the same bundle id that is already running promotes it
    /// within its periodic check — no restart needed.
    @Test func aZombiesHangIsPromotedByARunningMonitor() async throws {
        let db = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(db) }
        // Long enough for a loaded CI machine; ended by the test once the hang was promoted.
        let survivor = try startFixture("dispatchmain", "idle", seconds: 120, database: db, bundleID: "com.example.zombie", threshold: 0.5)
        try await offPool { try survivor.waitForOutput("\"ready\"") }
        let hung = try startFixture("dispatchmain", "forever", database: db, bundleID: "com.example.zombie", threshold: 0.5)
        try await offPool { try hung.waitForOutput("\"detected\"") }
        try await Task.sleep(for: .milliseconds(300))
        hung.signal(SIGKILL)
        // Not reaped: the test does not wait for it until the hang was promoted.
        try await Task.sleep(for: .milliseconds(300))
        let state = try String(contentsOfFile: "/proc/\(hung.pid)/stat", encoding: .utf8).split(separator: ")").last?.dropFirst().first
        #expect(state == "Z", "the killed fixture is a zombie")
        let promoted = try await offPool { try survivor.waitForOutput("promoted-fatal-hang", timeout: 30) }
        #expect(promoted.contains("\"target\":\"main-queue\""))
        _ = try hung.waitForExit(timeout: 10)
        survivor.signal(SIGKILL)
        _ = try await offPool { try survivor.waitForExit(timeout: 30) }
        let reports = try DumpClient(databasePath: db, bundleID: "com.example.zombie").processIntermediateDumps()
        #expect(reports.filter { $0.kind == .fatalHang }.count == 1)
        #expect(stagingFiles(db).isEmpty)
    }
}
