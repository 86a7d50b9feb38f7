// The public face of the watchdog. The work happens on one dedicated thread (HangWatcher):
// not a Dispatch worker, which the very starvation we look for could delay.
import FoundationEssentials
import Synchronization
import HangwatchCapture
import HangwatchDatabase
import HangwatchSnapshot

/// The watchdog: a thread of its own pings the configured targets and, when one does not answer
/// within the threshold, captures every thread, stages the capture and samples the hung thread
/// until the hang ends (recovered), a crash of this process supersedes it, or the process dies
/// hung (a fatal hang, reported by the next processor of the database).
public final class HangMonitor: Sendable {
    /// The configuration it was created with.
    public let configuration: Configuration
    private let capturer: any HangCapturing
    private let watcher: Mutex<HangWatcher?> = Mutex(nil)
    private let paused = PauseFlag()
    private let operations: Operations

    /// Validates the configuration (throws `ConfigurationError` naming the bad key) and opens
    /// (creating if needed) the crash-report database (throws its `DatabaseError`).
    public convenience init(configuration: Configuration) throws {
        try configuration.validate()
        self.init(validated: configuration,
                  capturer: try DatabaseHangCapture(databasePath: configuration.databasePath, bundleID: configuration.bundleID,
                                                    redaction: configuration.redaction))
    }

    /// A monitor whose hangs go to `capturer` (HangMonitorTesting keeps them in memory).
    package init(validated configuration: Configuration, capturer: any HangCapturing) {
        self.configuration = configuration
        self.capturer = capturer
        operations = Operations(traceLink: configuration.traceLink)
    }

    /// Starts the monitor thread. First, before it returns, turns hangs staged by dead
    /// processes of this bundle id into fatal-hang dumps, so that a
    /// `processIntermediateDumps()` right after it makes them reports. Calling it again while
    /// running does nothing.
    public func start() {
        watcher.withLock { current in
            guard current == nil else { return }
            let created = HangWatcher(configuration: configuration, capturer: capturer, paused: paused, operations: operations)
            created.start()
            current = created
        }
    }

    /// No new hang is detected until `resume()`; waits in progress restart on resume.
    /// A hang already detected keeps being tracked to its outcome.
    public func pause() { paused.set(true) }
    /// Detection starts again (after `pause()`).
    public func resume() { paused.set(false) }
    /// Between `pause()` and `resume()`.
    public var isPaused: Bool { paused.get() }
    /// Between `start()` and `stop()`.
    public var isRunning: Bool { watcher.withLock { $0 != nil } }

    /// Runs `body` as an operation that must finish within `limit`: one still running past it
    /// is a hang of its own (target `operation:<name>`) even when no thread is blocked — a
    /// continuation nobody resumes, a lease that never comes. Every thread and every Swift task
    /// is captured, this operation's task marked as the culprit with its await chain; the hang
    /// is staged, discarded when the operation ends, and a fatal hang if the process dies with
    /// it still running (docs/tasks.md). Where the operation waits for a task it started (Vapor
    /// runs a route's handler in a task of its own), that task is the culprit. Identical await
    /// chains are deduplicated like hangs. Costs a lock taken twice and a task-local binding per
    /// operation when nothing is stuck.
    ///
    ///     try await monitor.watch("GET /users/:id", limit: .seconds(5)) { try await handler(request) }
    @inlinable
    public func watch<Result, Failure: Error>(_ name: String, limit: Duration, isolation: isolated (any Actor)? = #isolation,
                                              _ body: () async throws(Failure) -> Result) async throws(Failure) -> Result {
        // Inlined into the caller, so the generic parts (the body's result, the Result around it)
        // are made for the caller's types: unspecialized, each watch looked up their metadata and
        // went through their value witnesses. The rest is not generic and stays here.
        let id = beginOperation(name, limit: limit)
        // Bound while the body runs: the tasks it starts carry the operation's id, so a hang of it
        // is followed to the task where its work is stuck (OperationWork.swift).
        let outcome: Swift.Result<Result, Failure> = await Operations.currentBinding.withValue(id) {
            do throws(Failure) { return .success(try await body()) } catch { return .failure(error) }
        }
        endOperation(id)
        return try outcome.get()
    }

    /// `watch`'s start: the operation entered in the table the monitor reads; its id.
    @usableFromInline
    func beginOperation(_ name: String, limit: Duration) -> UInt64 {
        operations.begin(name: name, limit: limit, now: ClockReading.monotonicNow(), trace: operations.traceLink?.currentTrace())
    }

    /// `watch`'s end: out of the table; told to the trace if the monitor had reported it hung.
    @usableFromInline
    func endOperation(_ id: UInt64) {
        let now = ClockReading.monotonicNow()
        if let hung = operations.end(id, now: now) { operations.tellTraceOfEnd(hung, now: now) }
    }

    /// Stops and joins the monitor thread. A hang still staged stays staged (it is what
    /// the next start promotes if the process dies hung).
    public func stop() {
        let running = watcher.withLock { current -> HangWatcher? in
            defer { current = nil }
            return current
        }
        running?.stopAndJoin()
    }

    deinit { watcher.withLock { $0 }?.stopAndJoin() }
}

final class PauseFlag: Sendable {
    private let value = Atomic<Bool>(false)
    func set(_ paused: Bool) { value.store(paused, ordering: .relaxed) }
    func get() -> Bool { value.load(ordering: .relaxed) }
}
