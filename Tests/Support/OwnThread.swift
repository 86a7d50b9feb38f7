// Async tests that time real processes must not wait for the cooperative pool: on a 2-core
// machine it has two threads, and Swift Testing runs the suite's ~200 synchronous tests on
// them, each blocked on a child process for up to seconds. A `Task.sleep` in an async test then
// resumes only when a pool thread frees up, which on CI was two minutes later (a child idling
// 120 s had exited before the test sent it SIGSTOP). `.ownThread` runs each test case on a
// thread of its own, through a task executor preference, so its timing depends on nothing else.
import Foundation
import Testing

/// Runs every test case of a test or suite on its own thread instead of the cooperative pool.
public struct OwnThreadTrait: TestTrait, SuiteTrait, TestScoping {
    public var isRecursive: Bool { true }

    public func provideScope(for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void) async throws {
        guard testCase != nil else { return try await function() }   // the suite itself: its test cases get a thread each
        let executor = ThreadExecutor(name: "test: \(test.name)")
        defer { executor.shutdown() }
        try await withTaskExecutorPreference(executor) { try await function() }
    }
}

extension Trait where Self == OwnThreadTrait {
    /// Every test case runs on a thread of its own (see OwnThread.swift for why).
    public static var ownThread: Self { OwnThreadTrait() }
}

/// A task executor with one thread that runs its jobs in order.
public final class ThreadExecutor: TaskExecutor, @unchecked Sendable {
    private let condition = NSCondition()
    private var jobs: [UnownedJob] = []
    private var isShutDown = false

    public init(name: String) {
        let thread = Thread { [self] in run() }
        thread.name = name
        thread.start()
    }

    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        condition.lock()
        jobs.append(job)
        condition.signal()
        condition.unlock()
    }

    /// Ends the thread once the jobs already queued have run.
    public func shutdown() {
        condition.lock()
        isShutDown = true
        condition.signal()
        condition.unlock()
    }

    private func run() {
        while true {
            condition.lock()
            while jobs.isEmpty && !isShutDown { condition.wait() }
            if jobs.isEmpty { condition.unlock(); return }
            let job = jobs.removeFirst()
            condition.unlock()
            job.runSynchronously(on: asUnownedTaskExecutor())
        }
    }
}

/// Runs a blocking wait (a child's output or exit) on a thread of its own, so the thread the
/// test runs on (`.ownThread`) stays free for the test's other tasks (a ServiceGroup, a server).
@discardableResult
public func offPool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread { continuation.resume(with: Result { try body() }) }.start()
    }
}
