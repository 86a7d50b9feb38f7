// HangMonitorNIO on a real MultiThreadedEventLoopGroup: every loop is watched on its own, a
// loop blocked by a handler is named (event-loop:N) with its own thread as the hung one, and
// the other loops stay quiet.
import Testing
import Foundation
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
}
