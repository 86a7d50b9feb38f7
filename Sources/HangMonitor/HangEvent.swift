// Every outcome the monitor reaches, for the program (eventHandler), logs and metrics.
import FoundationEssentials
import HangwatchPlatform
import Logging
import CoreMetrics

/// Every outcome the monitor reaches, as the program's `eventHandler` receives it; the same events
/// are logged and counted in metrics.
public enum HangEvent: Sendable, Equatable {
    /// A target missed its threshold; `stagedPath` is nil when the hang was a duplicate.
    case detected(target: String, hungThread: Int32?, stagedPath: String?, duplicate: Bool)
    /// A pool hang's hung threads, known from a second capture one threshold after detection:
    /// the pool threads whose stacks did not move. They are marked `hung` and sampled.
    case hungThreadsFound(target: String, threads: [Int32])
    /// The target answered again after `durationSeconds`; `reportPath` is where the hang was kept
    /// (`keepRecoveredHangsLongerThan`), nil when it was not.
    case recovered(target: String, durationSeconds: Double, sampleCount: Int, reportPath: String?)
    /// A crash report landed while hung; the staged hang was removed and its timing attached to it.
    case superseded(target: String, durationSeconds: Double, crashReport: String)
    /// At start, a hang staged by a process that died while hung became a report.
    case promotedFatalHang(target: String, atLeastSeconds: Double, reportPath: String)
    /// At start, a dead process's staged hang was dropped because a newer crash report exists.
    case discardedStaleHang(target: String, crashReport: String)
    /// The monitor's own clock stalled (process stopped, machine suspended): the wait restarted.
    case rebaselined(reason: String)
    /// A tracer is attached; detection is suspended until it leaves.
    case suspendedWhileTraced(tracerPid: Int32)
    /// Capture, staging or report writing failed; the hang is still timed.
    case failed(target: String, stage: FailedStage, message: String)

    /// What failed (`failed` events; the JSON and logs spell the raw value).
    public enum FailedStage: String, Sendable, Equatable {
        /// The monitor thread could not be started.
        case start
        /// Capturing the threads at a hang's detection.
        case capture
        /// Writing the hang into the database's staging area.
        case stage
        /// Capture had to use signals (ptrace refused): the program's blocking calls see them.
        case quietCapture = "quiet-capture"
        /// Handing a finished hang over as a report.
        case report
        /// Promoting a dead process's staged hang to a fatal-hang dump.
        case promote
    }

    /// One JSON object, for logs and for the test fixture's output.
    public var jsonLine: String {
        let object: [String: JSONValue]
        switch self {
        case let .detected(target, tid, staged, duplicate):
            object = ["event": .string("detected"), "target": .string(target), "hungThread": .integer(Int64(tid ?? -1)),
                      "stagedPath": .string(staged ?? ""), "duplicate": .bool(duplicate)]
        case let .hungThreadsFound(target, threads):
            object = ["event": .string("hung-threads-found"), "target": .string(target),
                      "threads": .array(threads.map { .integer(Int64($0)) })]
        case let .recovered(target, duration, samples, report):
            object = ["event": .string("recovered"), "target": .string(target), "durationSeconds": .number(duration),
                      "sampleCount": .integer(Int64(samples)), "reportPath": .string(report ?? "")]
        case let .superseded(target, duration, crash):
            object = ["event": .string("superseded"), "target": .string(target), "durationSeconds": .number(duration),
                      "crashReport": .string(crash)]
        case let .promotedFatalHang(target, seconds, report):
            object = ["event": .string("promoted-fatal-hang"), "target": .string(target), "atLeastSeconds": .number(seconds),
                      "reportPath": .string(report)]
        case let .discardedStaleHang(target, crash):
            object = ["event": .string("discarded-stale-hang"), "target": .string(target), "crashReport": .string(crash)]
        case let .rebaselined(reason):
            object = ["event": .string("rebaselined"), "reason": .string(reason)]
        case let .suspendedWhileTraced(pid):
            object = ["event": .string("suspended-while-traced"), "tracerPid": .integer(Int64(pid))]
        case let .failed(target, stage, message):
            object = ["event": .string("failed"), "target": .string(target), "stage": .string(stage.rawValue), "message": .string(message)]
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let data = (try? encoder.encode(object)) ?? Data("{}".utf8)
        return String(decoding: data, as: UTF8.self)
    }
}

/// Logs and counts outcomes. Metric names are documented in docs/hang-monitor.md.
struct HangTelemetry: Sendable {
    let logger: Logger
    let factory: (any MetricsFactory)?
    let handler: (@Sendable (HangEvent) -> Void)?

    func emit(_ event: HangEvent) {
        switch event {
        case let .detected(target, tid, staged, duplicate):
            logger.warning("hang detected", metadata: ["target": "\(target)", "thread": "\(tid.map(String.init) ?? "?")",
                                                       "staged": "\(staged ?? "-")", "duplicate": "\(duplicate)"])
            counter("hangwatch_hangs_total", target)
            if duplicate { counter("hangwatch_hangs_deduplicated_total", target) }
        case let .hungThreadsFound(target, threads):
            logger.warning("hung threads found", metadata: ["target": "\(target)", "threads": "\(threads.map(String.init).joined(separator: ","))"])
        case let .recovered(target, duration, samples, report):
            logger.notice("hang recovered", metadata: ["target": "\(target)", "durationSeconds": "\(duration)",
                                                       "samples": "\(samples)", "report": "\(report ?? "-")"])
            record(target, duration)
        case let .superseded(target, duration, crash):
            logger.warning("hang superseded by crash report", metadata: ["target": "\(target)", "durationSeconds": "\(duration)", "crashReport": "\(crash)"])
            record(target, duration)
        case let .promotedFatalHang(target, seconds, report):
            logger.error("fatal hang from an earlier run", metadata: ["target": "\(target)", "atLeastSeconds": "\(seconds)", "report": "\(report)"])
            counter("hangwatch_fatal_hangs_total", target)
        case let .discardedStaleHang(target, crash):
            logger.info("stale staged hang dropped: newer crash report exists", metadata: ["target": "\(target)", "crashReport": "\(crash)"])
        case let .rebaselined(reason):
            logger.debug("monitor clock stalled; waits restarted", metadata: ["reason": "\(reason)"])
        case let .suspendedWhileTraced(pid):
            logger.info("tracer attached; hang detection suspended", metadata: ["tracerPid": "\(pid)"])
        case let .failed(target, stage, message):
            logger.error("hang handling failed", metadata: ["target": "\(target)", "stage": "\(stage.rawValue)", "error": "\(message)"])
        }
        handler?(event)
    }

    private func counter(_ label: String, _ target: String) {
        let dims = [("target", target)]
        if let factory { Counter(label: label, dimensions: dims, factory: factory).increment() }
        else { Counter(label: label, dimensions: dims).increment() }
    }

    private func record(_ target: String, _ seconds: Double) {
        let dims = [("target", target)]
        if let factory {
            Recorder(label: "hangwatch_hang_duration_seconds", dimensions: dims, aggregate: true, factory: factory).record(seconds)
            FloatingPointCounter(label: "hangwatch_seconds_hung_total", dimensions: dims, factory: factory).increment(by: seconds)
        } else {
            Recorder(label: "hangwatch_hang_duration_seconds", dimensions: dims, aggregate: true).record(seconds)
            FloatingPointCounter(label: "hangwatch_seconds_hung_total", dimensions: dims).increment(by: seconds)
        }
    }
}
