// The one owner of a hang while it lasts, for both that watch for hangs: HangMonitor's monitor
// thread (Sources/HangMonitor/HangWatcher.swift) and `hangwatch run` (Sources/HangwatchSupervision/
// RunReporter.swift). Those two detect a hang, capture the process and say when it ended; this
// type stages it, samples it, notices when a crash report took it over and ends it, moving its
// HangLifecycle as it goes. It writes through two small interfaces: `HangKeeping`, where a hang is
// kept while it lasts (a database's staging area), and `HangEndingSink`, where its ending goes
// (a report).
import FoundationEssentials
import HangwatchDatabase
import HangwatchSnapshot

/// Where a hang is kept while it lasts, so that a fatal end finds it: a database's staging
/// area (StagingArea.swift, which is one).
package protocol HangKeeping: Sendable {
    /// A new staged hang for `sidecar`, its lease taken.
    func begin(_ sidecar: HangSidecar) throws -> StagedHang
    /// Writes the hang's capture, then its sidecar.
    func write(_ snapshot: ProcessSnapshot, of hang: StagedHang) throws
    /// Writes the hang's sidecar as it is now.
    func writeSidecar(_ hang: StagedHang) throws
    /// Writes the hang's aggregated samples.
    func writeSamples(_ samples: [StackSample], of hang: StagedHang) throws
    /// Whether a crash report of this process took the hang over (and removed its files).
    func wasTakenOver(_ hang: StagedHang) -> Bool
    /// The crash report that took `hang` over, when known.
    func supersedingReport(of hang: StagedHang) -> String?
    /// Removes every file of the hang.
    func remove(_ hang: StagedHang)
}

extension StagingArea: HangKeeping {}

/// Where a hang's ending goes: the sink turns the hang's last capture (its reason records how
/// the hang ended) into a report. It returns the report's id or path, or nil when the report
/// could not be made; the sink reports that failure itself.
package typealias HangEndingSink = (ProcessSnapshot) -> String?

/// The process a hang is of, as its sidecar names it.
package struct HangOwner: Sendable {
    package var bundleID: String
    package var pid: Int32
    /// /proc/PID/stat start time (a reused pid is not the owner).
    package var startTicks: UInt64

    package init(bundleID: String, pid: Int32, startTicks: UInt64) {
        self.bundleID = bundleID
        self.pid = pid
        self.startTicks = startTicks
    }
}

/// One hang while it lasts: its lifecycle, its latest capture, its staged files and its samples.
package final class TrackedHang {
    package private(set) var lifecycle: HangLifecycle
    package var target: HangTarget { lifecycle.target }
    /// When it started, wall clock, seconds since 1970.
    package let startTime: Double
    /// How late an answer had to be to count as a hang, seconds.
    package let thresholdSeconds: Double
    /// The watched operations running when it was detected.
    package let operations: [RunningOperation]
    /// The threads it is charged to: the detector names them; every capture kept gets them marked.
    package var hungThreads: [Int32] = []
    /// What makes two hangs the same one (the detector's dedup key), kept in the sidecar.
    package var signature = ""
    /// The W3C traceparents of the operations it involves, kept in the sidecar for a fatal end.
    package var traceparents: [String] = []
    /// Its latest capture, hung threads marked: held in memory when there is no keeper or when the
    /// detector asked to hold it (a recovered hang may become a report; `hangwatch run` reports it).
    package private(set) var capture: ProcessSnapshot?
    /// Its staged files, while they are this hang's.
    package private(set) var staged: StagedHang?
    /// Its samples, aggregated by identical stack.
    package private(set) var samples: [StackSample] = []
    /// How many samples were taken.
    package private(set) var sampleCount = 0

    /// The process it is of, as its sidecar names it: the detector may name it until the hang's
    /// first capture is kept (`hangwatch run` learns the culprit of the job from that capture).
    package var owner: HangOwner
    private let keeper: (any HangKeeping)?
    private let holdsCapture: Bool
    private var sampleIndex: [[UInt64]: Int] = [:]
    private var samplesDirty = false
    private var sidecarWrittenAt: UInt64 = 0
    private var samplesWrittenAt: UInt64 = 0

    /// A hang just detected. `keeper`: where it is staged (nil: it is held in memory only).
    /// `holdsCapture`: its latest capture is held in memory as well as staged.
    package init(target: HangTarget, startTime: Double, thresholdSeconds: Double, operations: [RunningOperation] = [],
                 owner: HangOwner, keeper: (any HangKeeping)?, holdsCapture: Bool) {
        lifecycle = HangLifecycle(target: target)
        self.startTime = startTime
        self.thresholdSeconds = thresholdSeconds
        self.operations = operations
        self.owner = owner
        self.keeper = keeper
        self.holdsCapture = holdsCapture || keeper == nil
    }

    /// The hang as a capture's reason records it, after `durationSeconds` with `outcome`; the
    /// samples are included for the ending's capture.
    package func info(durationSeconds: Double, outcome: HangOutcome = .ongoing, withSamples: Bool = false) -> HangInfo {
        HangInfo(target: target, thresholdSeconds: thresholdSeconds, durationSeconds: durationSeconds, outcome: outcome,
                 startTime: startTime, samples: withSamples ? samples : [], operations: operations)
    }

    /// Its first capture was taken: kept (`keep`) unless it repeats a hang reported within the
    /// dedup window (`duplicate`); false then. `mayStageLater`: such a duplicate is kept after
    /// all should it last (`dueForStaging`). Throws when keeping it failed.
    package func captured(_ snapshot: ProcessSnapshot, duplicate: Bool, mayStageLater: Bool = true) throws -> Bool {
        guard lifecycle.captured(duplicate: duplicate, mayStageLater: mayStageLater) else { return false }
        try keep(snapshot)
        return true
    }

    /// A duplicate that lasted `lasted` of `threshold` (nanoseconds) is due to be captured again
    /// and kept after all; true once.
    package func dueForStaging(lasted: UInt64, threshold: UInt64) -> Bool {
        lifecycle.duplicateDueForStaging(lasted: lasted, threshold: threshold)
    }

    /// Keeps `snapshot` as the hang's capture, its hung threads marked: staged (the first time, its
    /// lease taken: while this process lives nobody promotes it), replacing an earlier one.
    package func keep(_ snapshot: ProcessSnapshot) throws {
        var marked = snapshot
        marked.markHung(hungThreads)
        if holdsCapture { capture = marked }
        if let keeper, lifecycle.isLive {
            var hang = try staged ?? keeper.begin(HangSidecar(
                bundleID: owner.bundleID, pid: owner.pid, processStartTicks: owner.startTicks, target: target,
                thresholdSeconds: thresholdSeconds, startTime: startTime, lastSeenTime: Date().timeIntervalSince1970,
                sampleCount: sampleCount, hungThread: nil, hungThreads: nil, signature: signature))
            staged = hang
            hang.sidecar.hungThread = hungThreads.first
            hang.sidecar.hungThreads = hungThreads
            hang.sidecar.traceparents = traceparents.isEmpty ? nil : Array(traceparents.prefix(HangSidecar.maximumTraceparents))
            hang.sidecar.lastSeenTime = Date().timeIntervalSince1970
            try keeper.write(marked, of: hang)
            staged = hang
        }
        lifecycle.staged()
    }

    /// A better capture of the moment already kept (a pool hang's hung threads now known):
    /// replaces it where it is, staged only if the hang was.
    package func amend(_ snapshot: ProcessSnapshot) throws {
        if staged != nil {
            try keep(snapshot)
        } else if capture != nil {
            var marked = snapshot
            marked.markHung(hungThreads)
            capture = marked
        }
    }

    /// One more sample of a hung thread.
    package func add(_ sample: StackSample) {
        sampleCount += 1
        samplesDirty = true
        if let at = sampleIndex[sample.frames] { samples[at].count += 1; return }
        sampleIndex[sample.frames] = samples.count
        samples.append(sample)
    }

    /// Keeps the staged sidecar (last seen, samples taken) and samples current, at most every 100
    /// and 250 ms of `now` (monotonic nanoseconds).
    package func keepCurrent(now: UInt64) {
        guard var hang = staged, let keeper else { return }
        if now &- sidecarWrittenAt >= 100_000_000 {
            hang.sidecar.lastSeenTime = Date().timeIntervalSince1970
            hang.sidecar.sampleCount = sampleCount
            try? keeper.writeSidecar(hang)
            staged = hang
            sidecarWrittenAt = now
        }
        if samplesDirty && now &- samplesWrittenAt >= 250_000_000 {
            try? keeper.writeSamples(samples, of: hang)
            samplesDirty = false
            samplesWrittenAt = now
        }
    }

    /// Whether a crash report of its own process took it over (DumpProcessor with HangStitch
    /// unlinked its lease): then nothing of it is written again. The report, when known, as
    /// `.some`; nil when it was not taken over (or was over already).
    package func takenOver() -> String?? {
        guard let hang = staged, let keeper, keeper.wasTakenOver(hang) else { return nil }
        keeper.remove(hang)  // its files are gone already: this lets go of the lease
        staged = nil
        let report = keeper.supersedingReport(of: hang)
        guard lifecycle.takenOver(by: report) else { return nil }
        return .some(report)
    }

    /// The hang is over (`outcome`, after `durationSeconds`): its staged files go, and when it is
    /// to be reported (fatal or unfinished; recovered with `keepRecovered`) its last capture goes
    /// to `sink`, its reason set to how the hang ended, with its samples. That capture is `last`
    /// when given (a look taken for the ending: its reason, as the detector saw the hang then,
    /// stays, with the outcome set), else the one held in memory. A fatal hang's files are
    /// removed only after its report is made, so a watcher that dies in between leaves it to be
    /// promoted; a recovered hang's files are removed first, so it is never promoted. Returns nil
    /// when the hang was over already; else the ending and what the sink returned.
    package func end(_ outcome: HangOutcome, durationSeconds: Double, keepRecovered: Bool = false,
                     last: ProcessSnapshot? = nil, sink: HangEndingSink) -> (ending: HangLifecycle.Ending, report: String?)? {
        guard let ending = lifecycle.end(outcome, keepRecovered: keepRecovered) else { return nil }
        let recovered = outcome == .recovered
        if recovered { removeStaged() }
        var report: String?
        if ending.report, var snapshot = last ?? capture {
            if last != nil, case .hang(var seen) = snapshot.reason {
                seen.outcome = outcome
                seen.samples = samples
                snapshot.reason = .hang(seen)
            } else {
                snapshot.reason = .hang(info(durationSeconds: durationSeconds, outcome: outcome, withSamples: true))
            }
            report = sink(snapshot)
        }
        if !recovered { removeStaged() }
        return (ending, report)
    }

    private func removeStaged() {
        if let hang = staged { keeper?.remove(hang) }
        staged = nil
    }
}
