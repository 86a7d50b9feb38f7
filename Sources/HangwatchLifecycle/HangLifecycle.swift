// One hang's way from detection to its end, for both that watch for hangs: HangMonitor's
// monitor thread inside the process (Sources/HangMonitor/HangWatcher.swift) and `hangwatch run`
// from outside (Sources/HangwatchSupervision/RunReporter.swift). Free of I/O like HangDetector:
// the hang's owner (TrackedHang.swift) stages and ends it; this type holds where the hang is
// and says which of those steps it is due for. No step goes back: a superseded or ended hang is
// never staged, sampled or reported again, and a hang ends once.
//
//   pending ──captured──▶ staged (sampled while it lasts) ──────────────┐
//      │                    ▲                                           ├──▶ ended(outcome)
//      └──captured again──▶ duplicate ──lasted 3 thresholds (once)──┘   │
//   (any of the three) ──a crash report of its process took it over──▶ superseded
import HangwatchSnapshot

/// Where one hang is on its way from detection to its end.
package struct HangLifecycle: Sendable, Equatable {
    package enum State: Sendable, Equatable {
        /// Detected; nothing of it is staged (its capture failed, or is being taken).
        case pending
        /// Its stacks repeat a hang reported within the dedup window: not staged. `mayStage`:
        /// whether it is staged after all should it last (it may be fatal).
        case duplicate(mayStage: Bool)
        /// Its capture is staged, where a fatal end finds it, and it is sampled while it lasts.
        case staged
        /// A crash report of its own process took it over (`report`, as far as it is known):
        /// nothing more of it is written.
        case superseded(report: String?)
        /// Over, and how.
        case ended(HangOutcome)
    }

    /// What the driver does with a hang that ended.
    package struct Ending: Sendable, Equatable {
        /// How it ended.
        package var outcome: HangOutcome
        /// Whether it becomes a report (a fatal or unfinished hang always; a recovered one when kept).
        package var report: Bool

        package init(outcome: HangOutcome, report: Bool) {
            self.outcome = outcome
            self.report = report
        }
    }

    /// A duplicate that lasts this many thresholds is staged after all: it may be fatal.
    package static let duplicateStagedAfterThresholds: UInt64 = 3

    package private(set) var state: State = .pending
    package let target: HangTarget

    package init(target: HangTarget) { self.target = target }

    /// Whether it still lasts as far as this watcher is concerned (not superseded, not ended).
    package var isLive: Bool {
        switch state {
        case .pending, .duplicate, .staged: true
        case .superseded, .ended: false
        }
    }

    /// Its capture was taken: true when it is to be staged (`staged()` once it is); false when it
    /// repeats a hang reported within the dedup window. `mayStageLater`: whether such a duplicate
    /// is staged after all should it last.
    package mutating func captured(duplicate: Bool, mayStageLater: Bool = true) -> Bool {
        guard state == .pending else { return false }
        if duplicate { state = .duplicate(mayStage: mayStageLater) }
        return !duplicate
    }

    /// Its capture is staged (the first time, or again after a recapture).
    package mutating func staged() {
        switch state {
        case .pending, .duplicate, .staged: state = .staged
        case .superseded, .ended: break
        }
    }

    /// A duplicate that lasted `lasted` of `threshold` (nanoseconds) is due to be recaptured and
    /// staged after all; true once, then `staged()` (or it stays an unstaged duplicate).
    package mutating func duplicateDueForStaging(lasted: UInt64, threshold: UInt64) -> Bool {
        guard case .duplicate(mayStage: true) = state, lasted >= Self.duplicateStagedAfterThresholds * threshold else { return false }
        state = .duplicate(mayStage: false)
        return true
    }

    /// A crash report of its own process took it over; false when it was over already.
    package mutating func takenOver(by report: String?) -> Bool {
        guard isLive else { return false }
        state = .superseded(report: report)
        return true
    }

    /// The hang is over: what becomes of it (its staged capture always goes); nil when it was
    /// over already (superseded, or ended before). `keepRecovered`: a recovered hang is kept
    /// as a report.
    package mutating func end(_ outcome: HangOutcome, keepRecovered: Bool = false) -> Ending? {
        guard isLive, outcome != .ongoing else { return nil }
        state = .ended(outcome)
        return Ending(outcome: outcome, report: outcome != .recovered || keepRecovered)
    }
}
