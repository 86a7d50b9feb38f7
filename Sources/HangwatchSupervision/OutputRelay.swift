// The child's output on its way to hangwatch's stdout or stderr. The event loop must never wait
// on a reader: a pipe whose reader stopped reading would block it, no deadline would fire, and
// back-pressure into the child would make a busy child look silent. So each destination has
// its own writer thread and a bounded queue; the event loop only queues (never blocks), and
// what does not fit is dropped and counted. A reader that went away (EPIPE; SIGPIPE is
// ignored) drops the rest.
import HangwatchPlatform
#if canImport(Glibc)
import Glibc
#endif

package final class OutputRelay: @unchecked Sendable {
    /// Bytes held for a slow reader before output is dropped.
    package static let defaultCapacity = 4 << 20

    private let fd: Int32
    private let capacity: Int
    private let state = ConditionLock()
    // Guarded by `state`.
    private var queued: [[UInt8]] = []
    private var queuedBytes = 0
    private var dropped = 0
    private var closed = false
    private var writing = false
    private var broken = false
    private var thread: PlatformThread?

    package init(fd: Int32, name: String, capacity: Int = OutputRelay.defaultCapacity) {
        self.fd = fd
        self.capacity = capacity
        thread = try? PlatformThread(name: name) { [self] in writeLoop() }
        thread?.detach()
    }

    /// Queues `chunk` without blocking; drops it (counted) when the queue is full or the reader gone.
    package func send(_ chunk: ArraySlice<UInt8>) {
        guard !chunk.isEmpty else { return }
        state.withLock {
            if broken || thread == nil || queuedBytes + chunk.count > capacity {
                dropped += chunk.count
                return
            }
            queued.append(Array(chunk))
            queuedBytes += chunk.count
            state.signal()
        }
    }

    /// Bytes dropped so far (a full queue or a reader that went away).
    package var droppedBytes: Int { state.withLock { dropped } }

    /// No more output; waits up to `timeout` seconds for what is queued to be written, then
    /// drops (and counts) the rest. Returns the bytes dropped in all.
    @discardableResult
    package func finish(timeout: Double) -> Int {
        let deadline = monotonicNow() + timeout
        return state.withLock {
            closed = true
            state.broadcast()
            while (!queued.isEmpty || writing) && !broken {
                let left = deadline - monotonicNow()
                if left <= 0 || !state.wait(seconds: left) && monotonicNow() >= deadline { break }
            }
            dropped += queuedBytes
            queued.removeAll()
            queuedBytes = 0
            return dropped
        }
    }

    private func writeLoop() {
        while true {
            let chunk: [UInt8]? = state.withLock {
                while queued.isEmpty && !closed { state.wait() }
                guard !queued.isEmpty else { return nil }
                let next = queued.removeFirst()
                queuedBytes -= next.count
                writing = true
                return next
            }
            guard let chunk else { return }
            let ok = chunk.withUnsafeBytes { StandardStream.write($0, to: fd) }
            state.withLock {
                writing = false
                if !ok {
                    broken = true
                    dropped += queuedBytes
                    queued.removeAll()
                    queuedBytes = 0
                }
                state.broadcast()
            }
            if !ok { return }
        }
    }
}
