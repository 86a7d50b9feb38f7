// Threads and locks for the pipeline's own background work, on pthreads: Foundation's Thread,
// NSLock and NSCondition live in the full Foundation, which nothing the CLI or a watchdog-only
// server links (they use FoundationEssentials; docs/architecture.md).
#if canImport(Glibc)
import Glibc
#endif

/// A mutex that may be locked and unlocked in separate places (unlike `Mutex`'s closure form).
package final class Lock: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)

    package init() { pthread_mutex_init(mutex, nil) }
    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    package func lock() { pthread_mutex_lock(mutex) }
    package func unlock() { pthread_mutex_unlock(mutex) }
    /// false when another thread holds it.
    package func tryLock() -> Bool { pthread_mutex_trylock(mutex) == 0 }

    package func withLock<T>(_ body: () throws -> T) rethrows -> T {
        lock()
        defer { unlock() }
        return try body()
    }

    fileprivate var raw: UnsafeMutablePointer<pthread_mutex_t> { mutex }
}

/// A lock with a condition variable (waits measured on CLOCK_MONOTONIC).
package final class ConditionLock: @unchecked Sendable {
    private let lockStorage = Lock()
    private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)

    package init() {
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        pthread_cond_init(condition, &attributes)
        pthread_condattr_destroy(&attributes)
    }
    deinit {
        pthread_cond_destroy(condition)
        condition.deallocate()
    }

    package func lock() { lockStorage.lock() }
    package func unlock() { lockStorage.unlock() }
    package func withLock<T>(_ body: () throws -> T) rethrows -> T { try lockStorage.withLock(body) }

    /// With the lock held: releases it until signalled (or spuriously woken), then re-takes it.
    package func wait() { pthread_cond_wait(condition, lockStorage.raw) }

    /// Like `wait()`, giving up after `seconds`; false on timeout.
    @discardableResult
    package func wait(seconds: Double) -> Bool {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        let wanted = max(0, seconds.isFinite ? seconds : 1e9)
        var total = Double(now.tv_sec) + Double(now.tv_nsec) / 1e9 + wanted
        total = min(total, Double(Int32.max))
        var deadline = timespec(tv_sec: Int(total), tv_nsec: Int((total - total.rounded(.down)) * 1e9))
        return pthread_cond_timedwait(condition, lockStorage.raw, &deadline) != ETIMEDOUT
    }

    package func signal() { pthread_cond_signal(condition) }
    package func broadcast() { pthread_cond_broadcast(condition) }
}

/// A named thread running a closure.
package final class PlatformThread: @unchecked Sendable {
    private var handle = pthread_t()
    private var joined = false

    private final class Start {
        let name: String
        let body: () -> Void
        init(name: String, body: @escaping () -> Void) { self.name = name; self.body = body }
    }

    /// Starts `body` on a new thread. `name` becomes the kernel's name of the thread (what
    /// /proc, ps, gdb and our own reports show), cut to the 15 bytes the kernel keeps; it is set
    /// from inside the thread, so it is in place before `body` runs.
    package init(name: String, _ body: @escaping @Sendable () -> Void) throws(PlatformThreadError) {
        let start = Unmanaged.passRetained(Start(name: name, body: body)).toOpaque()
        let result = pthread_create(&handle, nil, { argument in
            let start = Unmanaged<Start>.fromOpaque(argument!).takeRetainedValue()
            _ = PlatformThread.setCurrentName(start.name)
            start.body()
            return nil
        }, start)
        if result != 0 {
            Unmanaged<Start>.fromOpaque(start).release()
            throw PlatformThreadError(errno: result)
        }
    }

    /// Waits for the thread to end (once).
    package func join() {
        guard !joined else { return }
        joined = true
        pthread_join(handle, nil)
    }

    /// Lets the thread end on its own; `join()` is no longer possible.
    package func detach() {
        guard !joined else { return }
        joined = true
        pthread_detach(handle)
    }

    /// Sets the calling thread's kernel name (≤ 15 bytes kept). Returns false on failure.
    @discardableResult
    package static func setCurrentName(_ name: String) -> Bool {
        var bytes = Array(name.utf8.prefix(15))
        // Do not cut a multi-byte character in half.
        while !bytes.isEmpty && String(validating: bytes, as: UTF8.self) == nil { bytes.removeLast() }
        // /proc/thread-self/comm is the calling thread's name (what prctl(PR_SET_NAME) sets;
        // neither it nor pthread_setname_np is callable from Swift's Glibc module).
        let fd = open("/proc/thread-self/comm", O_WRONLY | O_CLOEXEC)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        return bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) } == bytes.count
    }

    /// Sleeps the calling thread (restarting after signals until the time is over).
    package static func sleep(seconds: Double) {
        guard seconds > 0 else { return }
        var request = timespec(tv_sec: Int(seconds), tv_nsec: Int((seconds - seconds.rounded(.down)) * 1e9))
        var remaining = timespec()
        while nanosleep(&request, &remaining) != 0 && errno == EINTR { request = remaining }
    }
}

package struct PlatformThreadError: Error, CustomStringConvertible {
    package let errno: Int32
    package var description: String { "cannot start a thread: \(String(cString: strerror(errno)))" }
}
