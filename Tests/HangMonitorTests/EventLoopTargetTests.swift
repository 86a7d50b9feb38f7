// HangMonitorNIO on a real MultiThreadedEventLoopGroup: every loop is watched on its own, a
// loop blocked by a handler is named (event-loop:N) with its own thread as the hung one, and
// the other loops stay quiet. And on a real NIOThreadPool: a starvation whose pings slip in
// between blocked jobs is one hang, with the pool's blocked threads named and sampled.
import Testing
import Foundation
import Synchronization
import NIOCore
import NIOPosix
import HangwatchTestSupport
@testable import HangMonitor
import HangMonitorNIO
import DumpWithoutCrash

@inline(never)
func eventLoopTestBlockingHandler(seconds: Double) {
    let end = Date().addingTimeInterval(seconds)
    while Date() < end { usleep(10_000) }
}

@inline(never)
func threadPoolTestBlockingWork(seconds: Double) {
    let end = Date().addingTimeInterval(seconds)
    while Date() < end { usleep(10_000) }
}

@Suite("Event loops", .ownThreadAlone)
struct EventLoopTargetTests {
    @Test func aBlockedEventLoopIsNamedWithItsOwnThread() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 3)
        do { try await blockedLoop(in: group) } catch {
            try? await group.shutdownGracefully()
            throw error
        }
        try await group.shutdownGracefully()
    }

    func blockedLoop(in group: MultiThreadedEventLoopGroup) async throws {
        let loops = Array(group.makeIterator())
        let targets = WatchTarget.eventLoops(of: group)
        #expect(targets.map(\.description) == ["event-loop:0", "event-loop:1", "event-loop:2"])
        let loopThread = try await loops[1].submit { currentThreadID() }.get()

        let db = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(db) }
        let log = EventLog()
        let monitor = try HangMonitor(configuration: .init(
            threshold: .milliseconds(400), databasePath: db, bundleID: "test.nio", targets: targets,
            keepRecoveredHangsLongerThan: .zero, dedupWindow: .zero, eventHandler: log.record))
        monitor.start()
        defer { monitor.stop() }
        try await Task.sleep(for: .milliseconds(300))

        loops[1].execute { eventLoopTestBlockingHandler(seconds: 1.2) }
        let recovered = await log.wait { event -> Double? in
            if case let .recovered(target, duration, _, _) = event, target == "event-loop:1" { return duration }
            return nil
        }
        #expect((recovered ?? 0) >= 1.0, "\(log.all)")
        let detected = log.all.compactMap { event -> (String, Int32?)? in
            if case let .detected(target, tid, _, _) = event { return (target, tid) }
            return nil
        }
        #expect(detected.map(\.0) == ["event-loop:1"], "only the blocked loop: \(log.all)")
        #expect(detected.first?.1 == loopThread)

        let report = try #require(try DumpClient(databasePath: db, bundleID: "test.nio").processIntermediateDumps().first)
        #expect(report.hang?.target == "event-loop:1")
        let hung = try #require(report.threads.first { $0.roles.contains(.hung) })
        #expect(hung.tid == loopThread)
        let frame = try #require(hung.frames.first { $0.function?.contains("eventLoopTestBlockingHandler") == true },
                                 "\(hung.frames.compactMap(\.function))")
        #expect(frame.file?.hasSuffix("EventLoopTargetTests.swift") == true && frame.line != nil)
    }

    @Test func aStarvedThreadPoolIsOneHangWithItsBlockedThreadsNamed() async throws {
        let pool = NIOThreadPool(numberOfThreads: 3)
        pool.start()
        do { try await starvedPool(pool) } catch {
            try? await pool.shutdownGracefully()
            throw error
        }
        try await pool.shutdownGracefully()
    }

    /// Three jobs of 1.2 s take every thread; three more, queued behind the pending ping, take
    /// them again right after the ping slipped through: one hang of about 2.4 s, not two.
    func starvedPool(_ pool: NIOThreadPool) async throws {
        let db = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(db) }
        let log = EventLog()
        let target = WatchTarget.threadPool(pool)
        #expect(target.description == "thread-pool")
        let monitor = try HangMonitor(configuration: .init(
            threshold: .milliseconds(400), databasePath: db, bundleID: "test.nio.pool", targets: [target],
            keepRecoveredHangsLongerThan: .zero, dedupWindow: .zero, eventHandler: log.record))
        monitor.start()
        defer { monitor.stop() }
        try await Task.sleep(for: .milliseconds(300))

        let workers = Mutex<Set<Int32>>([])
        let blockOneThread: @Sendable (NIOThreadPool.WorkItemState) -> Void = { _ in
            workers.withLock { _ = $0.insert(currentThreadID()) }
            threadPoolTestBlockingWork(seconds: 1.2)
        }
        for _ in 0..<3 { pool.submit(blockOneThread) }
        try await Task.sleep(for: .milliseconds(600))
        for _ in 0..<3 { pool.submit(blockOneThread) }

        let recovered = await log.wait { event -> Double? in
            if case let .recovered(target, duration, _, _) = event, target == "thread-pool" { return duration }
            return nil
        }
        #expect((recovered ?? 0) >= 2.0, "one hang for the whole starvation: \(log.all)")
        let detected = log.all.filter { if case .detected = $0 { return true }; return false }
        #expect(detected.count == 1, "\(log.all)")
        let poolThreads = workers.withLock { $0 }
        #expect(poolThreads.count == 3)
        let found = log.all.compactMap { event -> [Int32]? in
            if case let .hungThreadsFound(_, threads) = event { return threads }
            return nil
        }
        #expect(found.count == 1 && Set(found.first ?? []) == poolThreads, "\(found) vs \(poolThreads)")

        let report = try #require(try DumpClient(databasePath: db, bundleID: "test.nio.pool").processIntermediateDumps().first)
        #expect(report.hang?.target == "thread-pool")
        let hung = report.threads.filter { $0.roles.contains(.hung) }
        #expect(Set(hung.map(\.tid)) == poolThreads)
        #expect(hung.allSatisfy { $0.frames.contains { $0.function?.contains("threadPoolTestBlockingWork") == true } },
                "\(hung.map { $0.frames.compactMap(\.function) })")
        let stacks = report.hang?.stacks ?? []
        let atWork = stacks.filter { $0.frames.contains { $0.contains("threadPoolTestBlockingWork") } }.map(\.count).reduce(0, +)
        let total = stacks.map(\.count).reduce(0, +)
        #expect(total > 3 && Double(atWork) >= 0.95 * Double(total), "\(atWork) of \(total): \(stacks.map { "\($0.count) \($0.frames.suffix(3))" })")
    }
}
