// A program that hangs on purpose, for HangMonitorTests. Configured like a user program:
// HANGWATCH_* environment variables (threshold, database, bundle id, …).
//
//   hang-fixture SETUP SCENARIO [SECONDS]
//   SETUP:    runloop | dispatchmain | asyncmain
//   SCENARIO: recover       sleep on the main queue SECONDS (default 3× threshold), recover, exit 0
//             forever       sleep on the main queue until killed
//             crash         hang, then store a crash report (a crash-reason capture) while hung; exit 70 after
//             crash-dump    same, left as an unprocessed crash dump
//             busy          keep the main queue busy with 5 ms items for SECONDS, exit 0
//             idle          main queue idle for SECONDS (the test stops/continues the process), exit 0
//             pause         pause(), sleep on the main queue SECONDS, resume(), idle 1 s, exit 0
//             traced        wait until a tracer attaches, sleep on the main queue SECONDS, exit 0
//             queue         block the named queue "fixture.worker" SECONDS, exit 0
//             pool          occupy every cooperative-pool thread SECONDS, exit 0
//             starve        starve the pool as a server's blocking handlers do: on each pool
//                           thread a 1.6 s blocking job, then 4 jobs of 0.3 s, each queued by
//                           the one before (pings slip in between); then, after 1.5 s of calm,
//                           an unrelated 1.6 s block in another function; exit 0
//             promote       only start the monitor (fatal-hang promotion), idle 1 s, exit 0
//             blocking      HANGWATCH_FIXTURE_CALL (BlockingCalls.swift) on the main queue for SECONDS, and
//                           on a thread of its own at the same time; prints how each ended, exit 0
//             blocking-pool the call on every cooperative-pool thread at once (a pool hang), exit 0
//             blocking-dump the call on a thread while the main thread takes five deferred dumps
//                           (DumpClient) 0.5 s apart, exit 0
//             readme        the README's start-up: `monitor.start()` then at once
//                           `DumpClient.processIntermediateDumps()`; prints the reports' kinds, exit 0
//             allocate      once in the memory cgroup HANGWATCH_FIXTURE_CGROUP names (if set), touch
//                           16 MiB more every 20 ms until killed (the OOM killer), printing "allocated"
//             exit-without-stop  idle SECONDS, then exit(0) without stopping the monitor
//             segv          with DumpClient's crash handlers, idle 0.5 s, then a real SIGSEGV
//             operation     monitor.watch("GET /users/:id", limit: SECONDS) around a handler that
//                           awaits a continuation nobody resumes, three calls deep (no thread
//                           blocked); waits to be killed
//             operation-spawned  monitor.watch("GET /api/leak", limit: SECONDS) whose task awaits a
//                           future a task it starts completes, that task stuck as `operation`'s
//                           handler (as Vapor runs a route); a detached task stuck beside it
//             operation-late  the same operation finishes after 4× its limit, exit 0
//             operation-ok    20,000 operations that finish well within the limit, exit 0
//             lock-held, lock-deadlock, rwlock-writer, swift-mutex, queue-sync, queue-deadlock:
//                           Locks.swift
//             own-tracer    (setup `vfork` only) while another thread takes captures of the process
//                           back to back (DumpClient.capture, quietly), block "fixture.worker"
//                           SECONDS three times, 1 s apart; prints how many captures, exit 0
//   setup `vfork`: the main thread stalls in vfork() (1 s at a time) instead of draining the main
//   queue: each quiet capture's helper waits 50 ms for it (D sleep) and holds it seized that long,
//   so TracerPid names a helper most of the time. The scenario runs on a thread of its own.
// HANGWATCH_FIXTURE_CWD: the working directory (where a core file would go).
// HANGWATCH_FIXTURE_SECCOMP=kill-process|kill-thread: core files allowed (RLIMIT_CORE unlimited),
//   then a seccomp filter that kills whatever calls ptrace (systemd's SystemCallFilter= default).
// Prints one JSON object per line: the monitor's events plus the fixture's own ("ready", "slept", "done").
import Foundation
import Dispatch
import HangMonitor
import HangMonitorConfiguration
import DumpWithoutCrash
import CHangwatchFixtureHangSupport
import CHangwatchFixtureCrashSupport

func emit(_ line: String) {
    let bytes = Array((line + "\n").utf8)
    _ = bytes.withUnsafeBytes { write(1, $0.baseAddress, $0.count) }
}

func monotonicSeconds() -> Double {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
}

/// Sleeps the whole time even when a capture signal interrupts the sleep (EINTR).
@Sendable func sleepFully(_ seconds: Double) {
    let end = monotonicSeconds() + seconds
    while monotonicSeconds() < end { usleep(UInt32(max(1, min(0.05, end - monotonicSeconds()) * 1e6))) }
}

/// The function a hung thread's frames must name.
@inline(never)
func hangFixtureSleepOnMainQueue(seconds: Double) {
    let start = monotonicSeconds()
    while monotonicSeconds() - start < seconds { usleep(10_000) }
    emit("{\"event\":\"slept\",\"seconds\":\(monotonicSeconds() - start)}")
}

/// The blocking function of the pool starvation: its frames must be on the hung pool threads.
@inline(never)
func hangFixtureBlockingHandler(seconds: Double) {
    let start = monotonicSeconds()
    while monotonicSeconds() - start < seconds { usleep(10_000) }
}

/// A later, unrelated pool hang: its stack differs, so it is no duplicate of the starvation.
@inline(never)
func hangFixtureUnrelatedPoolBlock(seconds: Double) {
    let start = monotonicSeconds()
    while monotonicSeconds() - start < seconds { usleep(10_000) }
}

/// One link of a chain of blocking jobs: runs, then queues the next before it ends.
@Sendable func blockingChain(remaining: Int, first: Bool, done: @escaping @Sendable () -> Void) {
    Task.detached {
        hangFixtureBlockingHandler(seconds: first ? 1.6 : 0.3)
        if remaining > 0 { blockingChain(remaining: remaining - 1, first: false, done: done) } else { done() }
    }
}

@inline(never)
func hangFixtureBlockNamedQueue(seconds: Double) {
    let start = monotonicSeconds()
    while monotonicSeconds() - start < seconds { usleep(10_000) }
    emit("{\"event\":\"slept\",\"seconds\":\(monotonicSeconds() - start)}")
}

final class AtomicCounter: @unchecked Sendable {
    private let lock = NSLock()
    private var value = 0
    func increment() -> Int { lock.lock(); defer { lock.unlock() }; value += 1; return value }
}

enum Fixture {
    static let arguments = CommandLine.arguments
    static let setup = arguments.count > 1 ? arguments[1] : ""
    static let scenario = arguments.count > 2 ? arguments[2] : ""
    static let worker = DispatchQueue(label: "fixture.worker")
    static let configuration: HangMonitor.Configuration = {
        do {
            var loaded = try HangMonitor.Configuration.load(path: ProcessInfo.processInfo.environment["HANGWATCH_CONFIG"], queues: [worker])
            loaded.eventHandler = { event in
                emit(event.jsonLine)
                if case .detected = event { emit("{\"event\":\"detected-wall\",\"wall\":\(Date().timeIntervalSince1970)}") }
            }
            return loaded
        } catch {
            emit("{\"event\":\"config-error\",\"message\":\"\(error)\"}")
            exit(78)
        }
    }()
    static let thresholdSeconds: Double = {
        let parts = configuration.threshold.components
        return Double(parts.seconds) + Double(parts.attoseconds) / 1e18
    }()
    static let seconds = arguments.count > 3 ? Double(arguments[3]) ?? 3 * thresholdSeconds : 3 * thresholdSeconds
    static let monitor: HangMonitor = {
        do { return try HangMonitor(configuration: configuration) } catch {
            emit("{\"event\":\"config-error\",\"message\":\"\(error)\"}")
            exit(78)
        }
    }()
}
guard CommandLine.arguments.count >= 3 else {
    emit("usage: hang-fixture runloop|dispatchmain|asyncmain SCENARIO [SECONDS]")
    exit(64)
}
if let directory = ProcessInfo.processInfo.environment["HANGWATCH_FIXTURE_CWD"], chdir(directory) != 0 {
    emit("{\"event\":\"cwd-error\",\"errno\":\(errno)}")
    exit(71)
}
if let filter = ProcessInfo.processInfo.environment["HANGWATCH_FIXTURE_SECCOMP"] {
    guard hwf_allow_core_files() == 0, hwf_forbid_ptrace(filter == "kill-process" ? 1 : 0) == 0 else {
        emit("{\"event\":\"seccomp-error\",\"errno\":\(errno)}")
        exit(71)
    }
}
// A test run that is killed (a CI timeout, ^C) must not leave "forever" fixtures behind:
// Tests/Support/ChildProcess.swift names the test runner, and the fixture dies with it.
if let runner = ProcessInfo.processInfo.environment["HANGWATCH_TEST_RUNNER_PID"].flatMap({ Int32($0) }), runner > 1 {
    Thread.detachNewThread {
        while kill(runner, 0) == 0 || errno != ESRCH { sleep(1) }
        kill(getpid(), SIGKILL)
    }
}
let setup = Fixture.setup, scenario = Fixture.scenario, worker = Fixture.worker
let thresholdSeconds = Fixture.thresholdSeconds, seconds = Fixture.seconds
let monitor = Fixture.monitor

@Sendable func finish(_ code: Int32, after delay: Double = 0) -> Never {
    if delay > 0 { sleepFully(delay) }
    Fixture.monitor.stop()
    emit("{\"event\":\"done\"}")
    exit(code)
}

@Sendable func tracerPid() -> Int32 {
    guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return 0 }
    for line in status.split(separator: "\n") where line.hasPrefix("TracerPid:") {
        return Int32(line.dropFirst(10).trimmingCharacters(in: .whitespaces)) ?? 0
    }
    return 0
}

/// What a fatal path leaves behind, written while the main queue is hung: a crash report
/// (a capture with a crash reason, processed at once) or an unprocessed crash dump.
@Sendable func writeCrashReportWhileHung(asUnprocessedDump: Bool) {
    let configuration = Fixture.configuration
    do {
        let client = try DumpClient(databasePath: configuration.databasePath, bundleID: configuration.bundleID)
        let crash = SignalInfo(number: SIGABRT, code: 0, address: 0, tid: getpid())  // marks the main thread crashed: the test needs only the kind
        let snapshot = try client.capture(reason: .crash(crash))
        let path: String
        if asUnprocessedDump {
            path = try client.deferProcessing(of: snapshot)
        } else {
            let report = try client.store(snapshot, id: UUID().uuidString.lowercased())
            path = client.database.pendingReportsPath + "/" + report.id + ".json"
        }
        emit("{\"event\":\"crash-report-written\",\"path\":\"\(path)\"}")
    } catch {
        emit("{\"event\":\"crash-report-failed\",\"message\":\"\(error)\"}")
    }
}

/// Waits (up to 10 s) to be moved into the cgroup HANGWATCH_FIXTURE_CGROUP names, then touches
/// 16 MiB more every 20 ms, keeping it all, until something kills the process.
@Sendable func allocateUntilKilled() {
    if let wanted = ProcessInfo.processInfo.environment["HANGWATCH_FIXTURE_CGROUP"] {
        let deadline = Date().addingTimeInterval(10)
        while !((try? String(contentsOfFile: "/proc/self/cgroup", encoding: .utf8)) ?? "").contains(wanted) {
            guard Date() < deadline else { emit("{\"event\":\"cgroup-timeout\"}"); exit(75) }
            usleep(10_000)
        }
        emit("{\"event\":\"in-cgroup\"}")
    }
    var kept: [UnsafeMutableRawPointer] = []
    while true {
        let chunk = 16 << 20
        guard let block = malloc(chunk) else { continue }
        memset(block, 0x5a, chunk)
        kept.append(block)
        emit("{\"event\":\"allocated\",\"mebibytes\":\(kept.count * 16)}")
        usleep(20_000)
    }
}

/// What a request handler that leaks its continuation looks like: it never returns.
@inline(never) func fixtureLeafWait() async {
    await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in LeakedContinuations.keep(continuation) }
}
@inline(never) func fixtureMiddle() async { await fixtureLeafWait() }
@inline(never) func fixtureHandler() async { await fixtureMiddle() }
@inline(never) func fixtureUnrelatedWait() async {
    await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in LeakedContinuations.keep(continuation) }
}

enum LeakedContinuations {
    nonisolated(unsafe) static var kept: [CheckedContinuation<Void, Never>] = []
    static let lock = NSLock()
    static func keep(_ continuation: CheckedContinuation<Void, Never>) { lock.lock(); kept.append(continuation); lock.unlock() }
}

/// `monitor.watch` around a stuck handler, a late one, or quick ones.
func runOperation(_ scenario: String) {
    let limit = Duration.milliseconds(Int64(seconds * 1000))
    Task.detached {
        emit("{\"event\":\"operation-started\",\"wall\":\(Date().timeIntervalSince1970)}")
        switch scenario {
        case "operation":
            await Fixture.monitor.watch("GET /users/:id", limit: limit) { await fixtureHandler() }
        case "operation-spawned":
            // As Vapor runs a route: the operation's own task awaits a future that a task it
            // starts completes, and that task is stuck. A detached task, stuck too, is not the
            // operation's (it gets no copy of its task-locals).
            await Fixture.monitor.watch("GET /api/leak", limit: limit) {
                Task.detached { await fixtureUnrelatedWait() }
                await withCheckedContinuation { (future: CheckedContinuation<Void, Never>) in
                    Task { await fixtureHandler(); future.resume() }
                }
            }
        case "operation-late":
            await Fixture.monitor.watch("GET /slow", limit: limit) { try? await Task.sleep(for: limit * 4) }
            emit("{\"event\":\"operation-finished\"}")
            finish(0, after: 0.5)
        default:
            // Many, back to back: an operation begun while the monitor thread judges the table
            // (its clock read before the operation's) must not count as overdue.
            for index in 0..<20_000 {
                await Fixture.monitor.watch("GET /fast/\(index % 10)", limit: limit) { await Task.yield() }
            }
            finish(0, after: max(0.5, seconds))
        }
    }
}

/// Captures of the whole process, one after the other (20 ms apart), on a thread of their own:
/// a capture by someone else than the monitor (DumpClient here; another monitor, a test).
@Sendable func captureBackToBack(count: AtomicCounter) {
    do {
        let client = try DumpClient(databasePath: Fixture.configuration.databasePath, bundleID: Fixture.configuration.bundleID)
        while true {
            let snapshot = try client.capture(reason: .dumpRequested)
            if count.increment() == 1 { emit("{\"event\":\"first-capture\",\"method\":\"\(snapshot.annotations["capture.method"] ?? "")\"}") }
            usleep(20_000)
        }
    } catch {
        emit("{\"event\":\"capture-error\",\"message\":\"\(error)\"}")
        exit(1)
    }
}

/// The `own-tracer` scenario (setup `vfork`), on a thread of its own.
@Sendable func runOwnTracer() {
    emit("{\"event\":\"ready\",\"setup\":\"\(setup)\",\"wall\":\(Date().timeIntervalSince1970),\"pid\":\(getpid())}")
    let captures = AtomicCounter()
    Thread.detachNewThread { captureBackToBack(count: captures) }
    sleepFully(1.0)
    for _ in 0..<3 {
        worker.sync { hangFixtureBlockNamedQueue(seconds: seconds) }
        sleepFully(1.0)
    }
    emit("{\"event\":\"captures\",\"count\":\(captures.increment() - 1)}")
    finish(0)
}

/// Runs on the main queue once the setup is up.
func blockingCall() -> BlockingCall {
    let name = ProcessInfo.processInfo.environment["HANGWATCH_FIXTURE_CALL"] ?? ""
    guard let call = BlockingCall(rawValue: name) else {
        emit("{\"event\":\"unknown-call\",\"call\":\"\(name)\"}")
        exit(64)
    }
    return call
}

@MainActor func runScenario() {
    emit("{\"event\":\"ready\",\"setup\":\"\(setup)\",\"wall\":\(Date().timeIntervalSince1970),\"pid\":\(getpid())}")
    switch scenario {
    case "lock-held", "lock-deadlock", "swift-mutex", "rwlock-writer", "queue-sync", "queue-deadlock":
        runLockScenario(scenario)
    case "recover":
        hangFixtureSleepOnMainQueue(seconds: seconds)
        DispatchQueue.global().async { finish(0, after: max(0.5, thresholdSeconds / 2)) }
    case "forever":
        hangFixtureSleepOnMainQueue(seconds: .infinity)
    case "crash", "crash-dump":
        Thread.detachNewThread {
            sleepFully(Fixture.thresholdSeconds * 1.5)
            writeCrashReportWhileHung(asUnprocessedDump: Fixture.scenario == "crash-dump")
            sleepFully(max(1.0, Fixture.thresholdSeconds))
            exit(70)
        }
        hangFixtureSleepOnMainQueue(seconds: .infinity)
    case "busy":
        let end = monotonicSeconds() + seconds
        @MainActor func item() {
            let stop = monotonicSeconds() + 0.005
            while monotonicSeconds() < stop {}
            if monotonicSeconds() < end { DispatchQueue.main.async { item() } } else { finish(0) }
        }
        item()
    case "idle":
        DispatchQueue.global().async { finish(0, after: seconds) }
    case "pause":
        monitor.pause()
        hangFixtureSleepOnMainQueue(seconds: seconds)
        monitor.resume()
        DispatchQueue.global().async { finish(0, after: 1) }
    case "traced":
        DispatchQueue.global().async {
            while tracerPid() == 0 { usleep(10_000) }
            emit("{\"event\":\"traced\"}")
            DispatchQueue.main.async {
                hangFixtureSleepOnMainQueue(seconds: seconds)
                DispatchQueue.global().async { finish(0, after: 0.5) }
            }
        }
    case "queue":
        worker.async { hangFixtureBlockNamedQueue(seconds: seconds) }
        DispatchQueue.global().async { finish(0, after: seconds + max(0.5, thresholdSeconds / 2)) }
    case "pool":
        // The pool is one thread per core: this many blocking tasks starve it for SECONDS.
        for _ in 0..<ProcessInfo.processInfo.activeProcessorCount {
            Task.detached { hangFixtureBlockNamedQueue(seconds: seconds) }
        }
        DispatchQueue.global().async { finish(0, after: seconds + max(1, thresholdSeconds)) }
    case "starve":
        let threads = ProcessInfo.processInfo.activeProcessorCount
        let finished = AtomicCounter()
        for _ in 0..<threads {
            blockingChain(remaining: 4, first: true) {
                guard finished.increment() == threads else { return }
                DispatchQueue.global().async {
                    sleepFully(1.5)
                    emit("{\"event\":\"unrelated-block\"}")
                    for _ in 0..<threads { Task.detached { hangFixtureUnrelatedPoolBlock(seconds: 1.6) } }
                    finish(0, after: 1.6 + max(1.5, 3 * thresholdSeconds))
                }
            }
        }
    case "blocking":
        let call = blockingCall()
        Thread.detachNewThread { emit(call.line(call.block(seconds: seconds), on: "thread")) }
        emit(call.line(call.block(seconds: seconds), on: HangTarget.mainQueue.name))
        DispatchQueue.global().async { finish(0, after: 0.5) }
    case "blocking-pool":
        let call = blockingCall()
        let threads = ProcessInfo.processInfo.activeProcessorCount
        let done = AtomicCounter()
        for _ in 0..<threads {
            Task.detached {
                emit(call.line(call.block(seconds: seconds), on: "cooperative-pool"))
                if done.increment() == threads { finish(0, after: 0.5) }
            }
        }
    case "blocking-dump":
        let call = blockingCall()
        let dumping = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            emit(call.line(call.block(seconds: seconds), on: "thread"))
            _ = dumping.wait(timeout: .now() + 60)  // a loaded machine may still be dumping
            finish(0, after: 0.2)
        }
        Thread.detachNewThread {
            defer { dumping.signal() }
            do {
                let client = try DumpClient(databasePath: Fixture.configuration.databasePath, bundleID: Fixture.configuration.bundleID)
                for _ in 0..<5 {
                    sleepFully(0.5)
                    try client.dumpWithoutCrashAndDeferProcessing()
                }
                emit("{\"event\":\"dumped\",\"count\":5}")
            } catch {
                emit("{\"event\":\"dump-error\",\"message\":\"\(error)\"}")
            }
        }
    case "promote":
        DispatchQueue.global().async { finish(0, after: 1) }
    case "operation", "operation-spawned", "operation-late", "operation-ok":
        runOperation(scenario)
    case "allocate":
        Thread.detachNewThread { allocateUntilKilled() }
    case "exit-without-stop":
        DispatchQueue.global().async {
            sleepFully(seconds)
            emit("{\"event\":\"exiting\"}")
            exit(0)
        }
    case "segv":
        do {
            let client = try DumpClient(databasePath: Fixture.configuration.databasePath, bundleID: Fixture.configuration.bundleID)
            try client.installCrashHandlers()
            Thread.detachNewThread {
                sleepFully(0.5)
                emit("{\"event\":\"crashing\"}")
                UnsafeMutablePointer<Int>(bitPattern: 8)!.pointee = 1
            }
        } catch {
            emit("{\"event\":\"crash-handler-error\",\"message\":\"\(error)\"}")
            exit(1)
        }
    default:
        emit("{\"event\":\"unknown-scenario\"}")
        exit(64)
    }
}

monitor.start()
if Fixture.scenario == "readme" {
    do {
        let client = try DumpClient(databasePath: Fixture.configuration.databasePath, bundleID: Fixture.configuration.bundleID)
        let kinds = try client.processIntermediateDumps().map { "\"\($0.kind.rawValue)\"" }
        emit("{\"event\":\"processed\",\"kinds\":[\(kinds.joined(separator: ","))]}")
        exit(0)
    } catch {
        emit("{\"event\":\"process-error\",\"message\":\"\(error)\"}")
        exit(1)
    }
}
// Let the monitor's first ping round-trip before the scenario starts.
usleep(200_000)
switch setup {
case "runloop":
    DispatchQueue.main.async { MainActor.assumeIsolated { runScenario() } }
    RunLoop.main.run()
case "dispatchmain":
    DispatchQueue.main.async { MainActor.assumeIsolated { runScenario() } }
    dispatchMain()
case "vfork":
    guard scenario == "own-tracer" else {
        emit("{\"event\":\"unknown-scenario\"}")
        exit(64)
    }
    Thread.detachNewThread { runOwnTracer() }
    while true { hwf_stall_in_vfork(1) }
case "asyncmain":
    // What an `async` main compiles to on Linux: the main task is enqueued on the main
    // actor and swift_task_asyncMainDrainQueue parks the main thread in dispatch_main().
    Task { @MainActor in runScenario() }
    dispatchMain()
default:
    emit("{\"event\":\"unknown-setup\"}")
    exit(64)
}
