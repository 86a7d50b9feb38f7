// The answer side of a ping: written by whatever runs the ping (main queue, a named queue,
// a detached task), read by the monitor thread. Lock-free so a ping never waits on the monitor —
// but for a `.pool` target, whose answering threads are kept under a lock the monitor takes
// only while the pool hangs (a few microseconds, to copy them).
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
    /// A pool's threads that have run a ping (at most `maximumAnswering`); nil for other targets.
    /// Taken once per ping by the pool thread, and by the monitor only when a pool hangs.
    private let answering: Mutex<Set<Int32>>?
    static let maximumAnswering = 256

    init(onAnswer: (@Sendable (UInt64) -> Void)? = nil, recordsAnsweringThreads: Bool = false) {
        self.onAnswer = onAnswer
        answering = recordsAnsweringThreads ? Mutex([]) : nil
    }

    func answer(_ sequence: UInt64) {
        let thread = currentThreadID()
        answering?.withLock { threads in
            if threads.count < Self.maximumAnswering { threads.insert(thread) }
        }
        answeredAtNanos.store(ClockReading.monotonicNow(), ordering: .relaxed)
        answeringThread.store(thread, ordering: .relaxed)
        answeredSequence.store(sequence, ordering: .releasing)
        onAnswer?(ClockReading.monotonicNow())
    }

    /// (sequence, time) — the time belongs to the sequence read (or a later one).
    func latest() -> (sequence: UInt64, at: UInt64) {
        let sequence = answeredSequence.load(ordering: .acquiring)
        return (sequence, answeredAtNanos.load(ordering: .relaxed))
    }
    var lastAnsweringThread: Int32? { let t = answeringThread.load(ordering: .relaxed); return t == 0 ? nil : t }
    /// The pool threads that ran a ping so far (empty unless `recordsAnsweringThreads`).
    var answeringThreads: Set<Int32> { answering?.withLock { $0 } ?? [] }

    func post(_ sequence: UInt64, to target: WatchTarget) {
        switch target {
        case .mainQueue:
            DispatchQueue.main.async { self.answer(sequence) }
        case .queue(let queue):
            queue.async { self.answer(sequence) }
        case .cooperativePool:
            // Starts only when a cooperative-pool thread is free: a starved pool is a hang.
            Task.detached { self.answer(sequence) }
        case .custom(_, let post), .pool(_, let post):
            post { self.answer(sequence) }
        }
    }
}

/// The calling thread's kernel id, through the capture shim (hwc_gettid).
func currentThreadID() -> Int32 { LiveCapture.currentThreadID() }
