// The decision logic, free of threads and I/O so it can be driven by hand in tests:
// per-target ping bookkeeping, and the guard that refuses to trust a tick after the
// monitor itself was not running (process stopped, machine suspended, monitor starved).
import FoundationEssentials
import Glibc

struct ClockReading: Equatable, Sendable {
    /// CLOCK_MONOTONIC: stops while the machine is suspended.
    var monotonic: UInt64
    /// CLOCK_BOOTTIME: keeps counting through suspend.
    var boottime: UInt64

    static func now() -> ClockReading {
        var mono = timespec(), boot = timespec()
        clock_gettime(CLOCK_MONOTONIC, &mono)
        clock_gettime(CLOCK_BOOTTIME, &boot)
        return ClockReading(monotonic: mono.nanoseconds, boottime: boot.nanoseconds)
    }
    static func monotonicNow() -> UInt64 {
        var mono = timespec()
        clock_gettime(CLOCK_MONOTONIC, &mono)
        return mono.nanoseconds
    }
}

extension timespec {
    var nanoseconds: UInt64 { UInt64(tv_sec) * 1_000_000_000 + UInt64(tv_nsec) }
}

/// A hang is "the target did not answer while the monitor was watching". If the monitor
/// itself missed time — its tick came much later than it asked for (SIGSTOP/SIGCONT, a
/// frozen cgroup, starvation) or CLOCK_BOOTTIME ran ahead of CLOCK_MONOTONIC (suspend) —
/// the missing time is nobody's hang.
struct Stall: Equatable {
    /// Oversleep: how much longer than asked the monitor slept; pending waits are excused
    /// that much (a real hang around it still counts the time that was watched).
    /// Suspend: nil; pending waits restart from now (everything is slow just after resume).
    var excusedNanoseconds: UInt64?
    var reason: String
}

struct StallGuard {
    let pollInterval: UInt64
    let oversleepTolerance: UInt64
    let suspendTolerance: UInt64
    private(set) var last: ClockReading?

    init(pollInterval: UInt64, threshold: UInt64) {
        self.pollInterval = pollInterval
        // Large enough that scheduler jitter on a loaded 2-core machine never trips it,
        // small enough that a stop of a fraction of the threshold is noticed.
        oversleepTolerance = max(threshold / 4, 150_000_000)
        suspendTolerance = 50_000_000
    }

    /// nil when the tick can be trusted.
    mutating func check(_ now: ClockReading) -> Stall? {
        defer { last = now }
        guard let last else { return nil }
        let monoGap = now.monotonic &- last.monotonic
        let bootGap = now.boottime &- last.boottime
        if bootGap > monoGap && bootGap - monoGap > suspendTolerance {
            return Stall(excusedNanoseconds: nil,
                         reason: "machine suspended for \(Double(bootGap - monoGap) / 1e9) s (CLOCK_BOOTTIME ran ahead of CLOCK_MONOTONIC)")
        }
        if monoGap > pollInterval + oversleepTolerance {
            return Stall(excusedNanoseconds: monoGap - pollInterval,
                         reason: "monitor overslept by \(Double(monoGap - pollInterval) / 1e9) s (process stopped or starved)")
        }
        return nil
    }
}

/// One target's ping cycle: at most one ping in flight; late by the threshold = hung.
/// A hang ends when the target answers again — for a pool (`promptAnswersToRecover` > 1)
/// only once that many pings in a row were answered within a quarter of the threshold, so a
/// starved pool that lets one ping slip between two blocked jobs is still one hang.
struct TargetWatch {
    enum Step: Equatable {
        /// Post ping number `sequence` now.
        case post(sequence: UInt64)
        case waiting
        case hangStarted(sentAt: UInt64)
        case stillHung(sentAt: UInt64)
        /// Answered after a hang; post ping `next` now.
        case recovered(sentAt: UInt64, answeredAt: UInt64, next: UInt64)
        /// Still hung (recovering, not yet prompt enough); post ping `next` now.
        case stillHungPost(sentAt: UInt64, next: UInt64)
    }

    /// Pings in a row answered within threshold/4 that end a hang (1: the first answer does).
    let promptAnswersToRecover: Int

    private(set) var sequence: UInt64 = 0
    private(set) var sentAt: UInt64?
    private(set) var hung = false
    /// While a hung pool recovers: when the hang began, and the prompt answers so far.
    private var hangSentAt: UInt64 = 0
    private var promptAnswers = 0
    private var promptStreakStart: UInt64 = 0

    init(promptAnswersToRecover: Int = 1) { self.promptAnswersToRecover = max(1, promptAnswersToRecover) }

    /// `answered` / `answeredAt`: the latest ping sequence the target ran and when.
    /// `detectionAllowed` false (paused, traced, machine suspended) restarts the wait of a
    /// pending ping instead of judging it; `excused` (monitor oversleep) is time the monitor
    /// did not watch, taken off a pending wait.
    mutating func step(now: UInt64, answered: UInt64, answeredAt: UInt64, threshold: UInt64,
                       detectionAllowed: Bool, excused: UInt64 = 0) -> Step {
        guard let sent = sentAt else { return post(now) }
        if answered >= sequence {
            if hung {
                let prompt = answeredAt >= sent && answeredAt - sent <= threshold / 4
                if prompt {
                    if promptAnswers == 0 { promptStreakStart = sent }
                    promptAnswers += 1
                } else {
                    promptAnswers = 0
                }
                let next = post(now)
                guard case .post(let n) = next else { return next }
                if promptAnswersToRecover == 1 || promptAnswers >= promptAnswersToRecover {
                    hung = false
                    promptAnswers = 0
                    // A pool is free again from the first prompt ping of the streak on.
                    let end = promptAnswersToRecover > 1 ? promptStreakStart : max(answeredAt, sent)
                    return .recovered(sentAt: hangSentAt, answeredAt: max(end, hangSentAt), next: n)
                }
                return .stillHungPost(sentAt: hangSentAt, next: n)
            }
            return post(now)
        }
        if hung { return .stillHung(sentAt: hangSentAt) }
        if !detectionAllowed { sentAt = now; return .waiting }
        var watchedSince = sent
        if excused > 0 { watchedSince = min(now, sent &+ excused); sentAt = watchedSince }
        if now >= watchedSince && now - watchedSince >= threshold {
            hung = true
            hangSentAt = watchedSince
            promptAnswers = 0
            return .hangStarted(sentAt: watchedSince)
        }
        return .waiting
    }

    private mutating func post(_ now: UInt64) -> Step {
        sequence += 1
        sentAt = now
        return .post(sequence: sequence)
    }
}
