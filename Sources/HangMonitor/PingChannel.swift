// The answer side of a ping: written by whatever runs the ping (main queue, a named queue,
// a detached task), read by the monitor thread. Lock-free so a ping never waits on the monitor.
import HangwatchPlatform
import HangwatchCapture
import FoundationEssentials
import Synchronization
import Dispatch

final class PingChannel: Sendable {
    private let answeredSequence = Atomic<UInt64>(0)
    private let answeredAtNanos = Atomic<UInt64>(0)
    /// The thread that ran the latest ping: a fallback for "who drains this queue".
    private let answeringThread = Atomic<Int32>(0)
    /// Runs on the target right after each answer (the main queue's pets the supervisor).
    private let onAnswer: (@Sendable (UInt64) -> Void)?

    init(onAnswer: (@Sendable (UInt64) -> Void)? = nil) { self.onAnswer = onAnswer }

    func answer(_ sequence: UInt64) {
        answeredAtNanos.store(ClockReading.monotonicNow(), ordering: .relaxed)
        answeringThread.store(currentThreadID(), ordering: .relaxed)
        answeredSequence.store(sequence, ordering: .releasing)
        onAnswer?(ClockReading.monotonicNow())
    }

    /// (sequence, time) — the time belongs to the sequence read (or a later one).
    func latest() -> (sequence: UInt64, at: UInt64) {
        let sequence = answeredSequence.load(ordering: .acquiring)
        return (sequence, answeredAtNanos.load(ordering: .relaxed))
    }
    var lastAnsweringThread: Int32? { let t = answeringThread.load(ordering: .relaxed); return t == 0 ? nil : t }

    func post(_ sequence: UInt64, to target: WatchTarget) {
        switch target {
        case .mainQueue:
            DispatchQueue.main.async { self.answer(sequence) }
        case .queue(let queue):
            queue.async { self.answer(sequence) }
        case .cooperativePool:
            // Starts only when a cooperative-pool thread is free: a starved pool is a hang.
            Task.detached { self.answer(sequence) }
        case .custom(_, let post):
            post { self.answer(sequence) }
        }
    }
}

/// The calling thread's kernel id, through the capture shim (hwc_gettid).
func currentThreadID() -> Int32 { LiveCapture.currentThreadID() }
