// One hang limit around one piece of test code: a HangMonitor whose threshold is the limit
// runs while the code runs, its hangs kept in memory (MemoryHangCapture); afterwards each
// hang is symbolicated and charged to the code only if its hung stack runs that code
// (HangLimitOwner), so a block in a test running in parallel fails nobody but its own test.
import Dispatch
import Glibc
import Logging
import CoreMetrics
import Synchronization
import HangMonitor
import HangwatchPlatform
import HangwatchReport
import HangwatchSnapshot
import HangwatchSymbolication

/// What a limit found: hangs charged to the code, and why a miss may have gone unseen.
struct HangLimitOutcome: Sendable {
    var exceeded: [HangLimitExceeded.Hang] = []
    /// The monitor's own thread woke late (machine load) and forgave that time: a hang in it
    /// may have gone unnoticed.
    var warnings: [String] = []
}

enum HangLimitScope {
    /// Runs `body` under the limit: the body's result or error, and what the limit found.
    static func run<T>(limit: Duration, targets: [WatchTarget], owner: HangLimitOwner, logger: Logger?,
                       isolation: isolated (any Actor)? = #isolation,
                       _ body: () async throws -> T) async throws -> (result: Result<T, any Error>, outcome: HangLimitOutcome) {
        let capture = try MemoryHangCapture(bundleID: "hang-limit")
        let events = LimitEvents()
        let configuration = HangMonitor.Configuration(
            threshold: limit, databasePath: "(memory)", bundleID: "hang-limit", targets: targets,
            sampleInterval: sampleInterval(for: limit), maxSamples: 4_000,
            keepRecoveredHangsLongerThan: .zero, dedupWindow: .zero, suspendWhenTraced: suspendWhenTraced,
            eventHandler: { events.record($0) },
            logger: logger ?? Logger(label: "hangwatch.hang-limit", factory: { _ in SwiftLogNoOpLogHandler() }),
            metricsFactory: NOOPMetricsHandler.instance)
        try configuration.validate()
        let monitor = HangMonitor(validated: configuration, capturer: capture)
        monitor.start()
        let result: Result<T, any Error>
        do { result = .success(try await body()) } catch { result = .failure(error) }
        // A hang seen while the body ran ends once its target answers: wait for that (bounded:
        // a block elsewhere may go on), so the report carries its whole duration.
        let deadline = ContinuousClock.now + max(limit, .seconds(1))
        while events.unfinishedHangs > 0 && ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(2))
        }
        let outcome = await onOwnThread {
            monitor.stop()   // hands over a hang still going, as it stands
            return judge(capture.takeSubmitted(), events: events, owner: owner, limit: limit)
        }
        return (result, outcome)
    }

    /// Stopping the monitor (a join) and symbolicating (tens of milliseconds) must not block
    /// the caller's executor, which is often the main actor another test is timing.
    private static func onOwnThread<R: Sendable>(_ work: @escaping @Sendable () -> R) async -> R {
        await withCheckedContinuation { continuation in
            do {
                try PlatformThread(name: "hangwatch-limit") { continuation.resume(returning: work()) }.detach()
            } catch {
                continuation.resume(returning: work())
            }
        }
    }

    private static func judge(_ snapshots: [ProcessSnapshot], events: LimitEvents, owner: HangLimitOwner, limit: Duration) -> HangLimitOutcome {
        var outcome = HangLimitOutcome()
        outcome.warnings = events.rebaselines.map {
            "the hang monitor's own thread woke late (\($0)) and did not count that time: a hang in it may have gone unnoticed"
        } + events.tracers.map {
            "a tracer (pid \($0)) is attached to this process, so the hang limit was suspended; "
                + "HANGWATCH_SUSPEND_WHEN_TRACED=false enforces it under strace or a debugger"
        }
        guard !snapshots.isEmpty else { return outcome }
        let symbolicator = Symbolicator()
        for snapshot in snapshots {
            if let exceeded = charge(snapshot, to: owner, limit: limit, symbolicator: symbolicator) { outcome.exceeded.append(exceeded) }
        }
        return outcome
    }

    /// Under a debugger a stopped program would fail every limit: suspended unless
    /// HANGWATCH_SUSPEND_WHEN_TRACED=false (the variable HangMonitorConfiguration reads too).
    static var suspendWhenTraced: Bool {
        guard let value = getenv("HANGWATCH_SUSPEND_WHEN_TRACED") else { return true }
        return !["false", "off", "0"].contains(String(cString: value))
    }

    /// Samples of the hung thread, taken from detection on: 20 per limit, so the time the
    /// owner's code spent on a hung stack is known to about 5 % of the limit.
    static func sampleInterval(for limit: Duration) -> Duration { max(limit / 20, .milliseconds(2)) }

    /// The hang, if it is the owner's: its code was on the hung stack when the limit was crossed
    /// (the capture), or it was on the hung stack for longer than the limit in all (the samples;
    /// when a block of another test's came first in the same hang, the capture shows that one).
    static func charge(_ snapshot: ProcessSnapshot, to owner: HangLimitOwner, limit: Duration,
                       symbolicator: Symbolicator) -> HangLimitExceeded.Hang? {
        let report = ReportBuilder.makeReport(from: snapshot, id: "hang-limit", kind: .hang, symbolicator: symbolicator)
        guard let hang = report.hang, case .hang(let info) = snapshot.reason else { return nil }
        let hung = report.threads.filter { $0.roles.contains(.hung) }
        // No hung thread named yet (a pool hang shorter than two limits): any thread but the monitor's.
        let candidates = hung.isEmpty ? report.threads.filter { $0.name != "hangwatch-mon" } : hung
        var shown = candidates.first { $0.frames.contains(where: owner.runs) }.map { (stack: $0.frames, thread: $0) }

        var ownSamples = 0
        var allSamples = 0
        var mostFrequent: (frames: [Report.Frame], count: Int)?
        for sample in info.samples {
            allSamples += sample.count
            let frames = ReportBuilder.frames(of: sample.frames, modules: snapshot.modules, symbolicator: symbolicator)
            guard frames.contains(where: owner.runs) else { continue }
            ownSamples += sample.count
            if sample.count > mostFrequent?.count ?? 0 { mostFrequent = (frames, sample.count) }
        }
        // The samples span the hang from its detection (one limit in) to its end; on a loaded
        // machine fewer are taken than asked for, so the owner's time is its share of that span.
        let sampledSpan = max(0, hang.durationSeconds - limit.seconds)
        let ownSeconds = allSamples == 0 ? 0 : Double(ownSamples) / Double(allSamples) * sampledSpan
        if shown == nil, ownSeconds >= limit.seconds, let mostFrequent, let thread = report.threads.first(where: { $0.roles.contains(.hung) }) ?? candidates.first {
            shown = (mostFrequent.frames, thread)
        }
        guard let shown else { return nil }
        return HangLimitExceeded.Hang(target: hang.target.name, durationSeconds: hang.durationSeconds, limitSeconds: limit.seconds,
                                      recovered: hang.recovered, stack: stackText(shown.stack, of: shown.thread, owner: owner),
                                      location: shown.stack.first(where: owner.runs).flatMap(SourceLine.init))
    }

    /// A stack of the thread, the first frame from the owner's module marked with `→`, down to
    /// two frames past it (the test runner's frames below say nothing about the hang).
    static func stackText(_ frames: [Report.Frame], of thread: Report.Thread, owner: HangLimitOwner) -> String {
        let marked = frames.firstIndex(where: owner.isInOwnModule)
        let shown = min(frames.count, marked.map { $0 + 3 } ?? 16)
        var lines = [ReportRenderer.title(of: thread)]
        for (position, frame) in frames.prefix(shown).enumerated() {
            lines.append((position == marked ? " → " : "   ") + ReportRenderer.render(frame))
        }
        if shown < frames.count { lines.append("   … \(frames.count - shown) more frames") }
        return lines.joined(separator: "\n")
    }
}

/// A file and line a hang's stack points at in the owner's code.
struct SourceLine: Sendable, Equatable {
    var filePath: String
    var line: Int

    init?(_ frame: Report.Frame) {
        guard let file = frame.file, let line = frame.line else { return nil }
        self.filePath = file
        self.line = line
    }
}

/// The monitor's events during one limit (called on the monitor thread).
final class LimitEvents: Sendable {
    private struct State {
        var unfinished = 0
        var rebaselines: [String] = []
        var tracers: [Int32] = []
    }
    private let state = Mutex(State())

    func record(_ event: HangEvent) {
        state.withLock { state in
            switch event {
            case .detected: state.unfinished += 1
            case .recovered: state.unfinished = max(0, state.unfinished - 1)
            case .rebaselined(let reason): state.rebaselines.append(reason)
            case .suspendedWhileTraced(let tracer): state.tracers.append(tracer)
            default: break
            }
        }
    }

    var unfinishedHangs: Int { state.withLock { $0.unfinished } }
    var rebaselines: [String] { state.withLock { $0.rebaselines } }
    var tracers: [Int32] { state.withLock { $0.tracers } }
}
