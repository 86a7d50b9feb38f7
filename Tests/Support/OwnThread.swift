// Tests that wait on real processes, sleep or time something must not wait on the cooperative
// pool: on a 2-core machine it has two threads, and a synchronous test blocked on a child for
// seconds holds one of them; with both held, every other test — unit tests that wait for
// nothing included — stalls (a CI run saw a `Task.sleep` resume two minutes late, and unit
// tests "pass after 102 s"). `.ownThread` runs each test case on a thread of its own, through a
// task executor preference, so the pool stays free.
//
// Threads of their own would let every such test run at once and bury a 2-core machine in
// child processes: at most `TestSlots.capacity` run together (HANGWATCH_TEST_CONCURRENCY,
// default twice the cores), waiting for a slot asynchronously. `.ownThreadAlone` is for the
// tests that measure time inside this process (an in-process monitor timing a block): they
// take every slot, so no other process-spawning test runs beside them.
import Foundation
import Testing

/// Runs every test case of a test or suite on its own thread instead of the cooperative pool,
/// with at most `TestSlots.capacity` such test cases at once.
public struct OwnThreadTrait: TestTrait, SuiteTrait, TestScoping {
    /// Whether the test case runs with no other `.ownThread` test case beside it.
    public var alone = false

    public var isRecursive: Bool { true }

    @TaskLocal static var inScope = false

    public func provideScope(for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void) async throws {
        // The suite itself: its test cases get a thread each. A test case already in a scope
        // (the trait on its suite and on itself) gets no second one.
        guard testCase != nil, !Self.inScope else { return try await function() }
        let weight = alone ? TestSlots.capacity : 1
        await TestSlots.shared.acquire(weight)
        let executor = ThreadExecutor(name: "test: \(test.name)")
        defer { executor.shutdown() }
        do {
            try await Self.$inScope.withValue(true) {
                try await Self.run(function, on: executor, limit: TestSlots.timeLimitSeconds)
            }
        } catch {
            await TestSlots.shared.release(weight)
            throw error
        }
        await TestSlots.shared.release(weight)
    }

    /// Runs `function` on `executor`; past `limit` seconds (counted from here, so not the wait
    /// for a slot, which Swift Testing's .timeLimit would count) an issue is recorded, and the
    /// test case goes on to its end (a test stuck for good is the suite's deadline's, which
    /// captures every thread: scripts/test).
    private static func run(_ function: @Sendable () async throws -> Void, on executor: ThreadExecutor, limit: Double) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                try? await Task.sleep(for: .seconds(limit))
                if !Task.isCancelled {
                    Issue.record("Time limit was exceeded: \(Int(limit)) s after the test case got its slot (HANGWATCH_TEST_TIME_LIMIT)")
                }
            }
            try await withTaskExecutorPreference(executor) { try await function() }
            group.cancelAll()
        }
    }
}

extension Trait where Self == OwnThreadTrait {
    /// Every test case runs on a thread of its own (see OwnThread.swift for why).
    public static var ownThread: Self { OwnThreadTrait() }
    /// Every test case runs on a thread of its own, with no other `.ownThread` test case beside
    /// it: for tests that measure time inside the test process.
    public static var ownThreadAlone: Self { OwnThreadTrait(alone: true) }
}

/// How many `.ownThread` test cases run at once; waiters queue in order (one that wants every
/// slot is not overtaken by later ones).
public actor TestSlots {
    public static let shared = TestSlots()
    /// HANGWATCH_TEST_CONCURRENCY, else twice the cores (at least 2).
    public static let capacity: Int = {
        if let text = ProcessInfo.processInfo.environment["HANGWATCH_TEST_CONCURRENCY"], let value = Int(text), value > 0 { return value }
        return max(2, 2 * ProcessInfo.processInfo.activeProcessorCount)
    }()

    /// How long a test case may run once it has its slot: HANGWATCH_TEST_TIME_LIMIT seconds, else 240.
    public static let timeLimitSeconds: Double = {
        if let text = ProcessInfo.processInfo.environment["HANGWATCH_TEST_TIME_LIMIT"], let value = Double(text), value > 0 { return value }
        return 240
    }()

    private var free = TestSlots.capacity
    private var waiters: [(weight: Int, continuation: CheckedContinuation<Void, Never>)] = []

    public func acquire(_ weight: Int) async {
        if waiters.isEmpty && free >= weight {
            free -= weight
            return
        }
        await withCheckedContinuation { waiters.append((weight, $0)) }
    }

    public func release(_ weight: Int) {
        free += weight
        while let first = waiters.first, free >= first.weight {
            waiters.removeFirst()
            free -= first.weight
            first.continuation.resume()
        }
    }
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
