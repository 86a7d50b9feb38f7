// The monitor inside this test process, watching a DispatchQueue the test blocks for real.
import Testing
import Foundation
import Dispatch
import MetricsTestKit
import ServiceLifecycle
import Logging
import HangwatchTestSupport
@testable import HangMonitor
@testable import HangMonitorConfiguration
import HangMonitorService
import HangwatchDatabase

@Suite(.ownThreadAlone) struct InProcessMonitorTests {
    /// Blocks `queue` for `seconds` (one sleep call site, so every capture sees the same stack;
    /// resumed when a capture signal interrupts it); returns how long it really was.
    func block(_ queue: DispatchQueue, seconds: Double) async -> Double {
        await withCheckedContinuation { continuation in
            queue.async {
                let start = Date()
                let end = start.addingTimeInterval(seconds)
                while Date() < end { usleep(UInt32(max(1, end.timeIntervalSinceNow * 1e6))) }
                continuation.resume(returning: Date().timeIntervalSince(start))
            }
        }
    }

    @Test func namedQueueHangIsTimedCountedKeptAndDeduplicated() async throws {
        let db = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(db) }
        let metrics = TestMetrics()
        let log = EventLog()
        let queue = DispatchQueue(label: "test.blocked")
        let monitor = try HangMonitor(configuration: .init(
            threshold: .milliseconds(500), databasePath: db, bundleID: "test.inprocess", targets: [.queue(queue)],
            keepRecoveredHangsLongerThan: .seconds(1), eventHandler: log.record, metricsFactory: metrics))
        monitor.start()
        defer { monitor.stop() }
        try await Task.sleep(for: .milliseconds(200))

        let slept = await block(queue, seconds: 2)
        let recovered = await log.wait { event -> (Double, Int, String?)? in
            if case let .recovered(target, duration, samples, report) = event, target == "queue:test.blocked" { return (duration, samples, report) }
            return nil
        }
        let (duration, samples, report) = try #require(recovered, "\(log.all)")
        #expect(abs(duration - slept) <= 0.1 * slept, "slept \(slept) s: \(log.all)")
        #expect(samples > 1, "\(log.all)")
        #expect(stagingFiles(db).isEmpty, "recovered hang leaves nothing staged")
        let reportPath = try #require(report, "recovered hang ≥ 1 s is kept as a report")
        let kept = try readReport(reportPath)
        #expect(kept.kind == .hang)
        #expect(kept.hang?.recovered == true)
        #expect(kept.hang?.target == "queue:test.blocked")
        #expect(abs((kept.hang?.durationSeconds ?? 0) - duration) < 1e-6)

        #expect(metrics.counterTotal(label: "hangwatch_hangs_total", dimensions: [("target", "queue:test.blocked")]) == 1)
        let durations = try metrics.expectRecorder("hangwatch_hang_duration_seconds", [("target", "queue:test.blocked")])
        #expect(abs((durations.lastValue ?? 0) - duration) < 1e-6)

        // Same stack again inside the dedup window: counted, not re-dumped. Four thresholds: a
        // monitor starved on a loaded machine excuses the time it overslept, which can delay a
        // detection by a threshold or more.
        _ = await block(queue, seconds: 2)
        let duplicate = await log.wait { event -> Bool? in
            if case let .detected(_, _, staged, duplicate) = event, duplicate { return staged == nil }
            return nil
        }
        #expect(duplicate == true, "\(log.all)")
        #expect(metrics.counterTotal(label: "hangwatch_hangs_deduplicated_total", dimensions: [("target", "queue:test.blocked")]) == 1)
        #expect(metrics.counterTotal(label: "hangwatch_hangs_total", dimensions: [("target", "queue:test.blocked")]) == 2)
    }

    @Test func pauseSuppressesDetectionAndResumeRestoresIt() async throws {
        let db = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(db) }
        let log = EventLog()
        let queue = DispatchQueue(label: "test.paused")
        let monitor = try HangMonitor(configuration: .init(threshold: .milliseconds(500), databasePath: db, bundleID: "test.pause",
                                                           targets: [.queue(queue)], dedupWindow: .zero, eventHandler: log.record))
        monitor.start()
        defer { monitor.stop() }
        monitor.pause()
        #expect(monitor.isPaused)
        _ = await block(queue, seconds: 1.5)
        try await Task.sleep(for: .milliseconds(300))
        #expect(!log.all.contains { if case .detected = $0 { return true }; return false }, "\(log.all)")
        monitor.resume()
        _ = await block(queue, seconds: 2)
        let detected = await log.wait { event -> Bool? in if case .detected = event { return true }; return nil }
        #expect(detected == true, "\(log.all)")
    }

    @Test func serviceRunsTheMonitorUntilShutdown() async throws {
        let db = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(db) }
        let log = EventLog()
        let queue = DispatchQueue(label: "test.service")
        let service = try HangMonitorService(configuration: .init(threshold: .milliseconds(500), databasePath: db, bundleID: "test.service",
                                                                  targets: [.queue(queue)], eventHandler: log.record))
        let group = ServiceGroup(configuration: .init(services: [service], logger: Logger(label: "test")))
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            // The group starts the service when the (shared, possibly busy) pool gets to it.
            let deadline = Date().addingTimeInterval(120)
            while !service.monitor.isRunning && Date() < deadline { try await Task.sleep(for: .milliseconds(20)) }
            try #require(service.monitor.isRunning)
            try await Task.sleep(for: .milliseconds(200))
            _ = await block(queue, seconds: 2)
            let recovered = await log.wait(timeout: 60) { event -> Bool? in if case .recovered = event { return true }; return nil }
            #expect(recovered == true, "\(log.all)")
            await group.triggerGracefulShutdown()
            try await tasks.waitForAll()
            #expect(!service.monitor.isRunning, "graceful shutdown stops the monitor")
        }
    }
}
