// The background worker behind `DumpClient.startProcessingPendingReports`: turns intermediate
// dumps into reports and uploads pending reports, then sleeps until the next report is due
// (its backoff), a poll interval passes, or `wake()` is called. One thread, so at most one
// upload is ever in flight from it.
import HangwatchMinidump
import HangwatchReport
import HangwatchDatabase
import Foundation

/// Processes dumps and uploads pending reports in the background, on one thread of its own
/// (`DumpClient.startProcessingPendingReports`).
public final class UploadScheduler: @unchecked Sendable {
    package let uploader: ReportUploader
    /// Longest sleep between passes, seconds.
    public let pollInterval: Double

    private let condition = NSCondition()
    private var stopped = false
    private var woken = false
    private var passes = 0
    private var lastOutcomes: [UploadOutcome] = []
    private var thread: Thread?
    private let process: @Sendable () throws -> Void

    package init(uploader: ReportUploader, pollInterval: Double, process: @escaping @Sendable () throws -> Void) {
        self.uploader = uploader
        self.pollInterval = pollInterval
        self.process = process
    }

    package func start() {
        let thread = Thread { [self] in run() }
        thread.name = "hangwatch-upload"
        self.thread = thread
        thread.start()
    }

    /// Runs a pass now (e.g. the network came back, or a report was just written).
    public func wake() {
        condition.withLock {
            woken = true
            condition.broadcast()
        }
    }

    /// Stops after the current pass; no request is cut off half-way.
    public func stop() {
        condition.withLock {
            stopped = true
            condition.broadcast()
        }
    }

    /// Completed passes and the last pass's outcomes (for status displays and tests).
    package var status: (passes: Int, outcomes: [UploadOutcome]) {
        condition.withLock { (passes, lastOutcomes) }
    }

    /// Waits until at least `count` passes completed or `timeout` seconds passed.
    @discardableResult
    public func waitForPasses(_ count: Int, timeout: Double) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        return condition.withLock {
            while passes < count {
                if !condition.wait(until: deadline) { return passes >= count }
            }
            return true
        }
    }

    private func run() {
        while !condition.withLock({ stopped }) {
            try? process()
            let outcomes = (try? uploader.uploadPending()) ?? []
            let nextDue = outcomes.compactMap { outcome -> Date? in
                switch outcome.result {
                case .waiting(let until): return until
                case .failed(_, _, let retryAt, _): return retryAt
                case .rateLimited: return Date().addingTimeInterval(60)
                default: return nil
                }
            }.min()
            condition.withLock {
                passes += 1
                lastOutcomes = outcomes
                condition.broadcast()
                var deadline = Date().addingTimeInterval(pollInterval)
                if let nextDue, nextDue < deadline { deadline = nextDue }
                while !stopped && !woken {
                    if !condition.wait(until: deadline) { break }
                }
                woken = false
            }
        }
    }
}
