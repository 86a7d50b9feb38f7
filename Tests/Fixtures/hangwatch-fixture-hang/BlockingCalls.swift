// The blocking calls a capture must not disturb (QuietCaptureTests): each blocks for a given
// time — by its own timeout, or until another thread releases it — and reports how long it
// took and how it ended, so a test can tell a call that returned when it would have from one a
// capture cut short (EINTR, an early return) or stretched.
import Foundation
import Glibc

enum BlockingCall: String, CaseIterable {
    case sleep, usleep, nanosleep, clockNanosleep = "clock_nanosleep", poll, select, epollWait = "epoll_wait"
    case semWait = "sem_wait", semTimedwait = "sem_timedwait", pipeRead = "read", accept
    case condTimedwait = "pthread_cond_timedwait", threadSleep = "Thread.sleep"

    struct Outcome {
        var seconds: Double
        var result: Int
        var error: Int32
    }

    /// Blocks for `seconds`; one attempt, never retried on EINTR (what a capture did is what shows).
    @inline(never)
    func block(seconds: Double) -> Outcome {
        let start = monotonicSeconds()
        errno = 0
        let result = run(seconds: seconds)
        let error = result < 0 ? errno : 0
        return Outcome(seconds: monotonicSeconds() - start, result: result, error: error)
    }

    private func run(seconds: Double) -> Int {
        let whole = Int(seconds), nanos = Int((seconds - Double(whole)) * 1e9)
        switch self {
        case .sleep: return Int(Glibc.sleep(UInt32(whole))) == 0 ? 0 : -2  // -2: woke with time left
        case .usleep: return Int(Glibc.usleep(UInt32(seconds * 1e6)))
        case .nanosleep:
            var wanted = timespec(tv_sec: whole, tv_nsec: nanos), left = timespec()
            return Int(Glibc.nanosleep(&wanted, &left))
        case .clockNanosleep:
            var wanted = timespec(tv_sec: whole, tv_nsec: nanos), left = timespec()
            let code = clock_nanosleep(CLOCK_MONOTONIC, 0, &wanted, &left)
            if code != 0 { errno = code; return -1 }
            return 0
        case .poll: return Int(Glibc.poll(nil, 0, Int32(seconds * 1000)))
        case .select:
            var timeout = timeval(tv_sec: whole, tv_usec: nanos / 1000)
            return Int(Glibc.select(0, nil, nil, nil, &timeout))
        case .epollWait:
            // Glibc's module map leaves sys/epoll.h out: the two functions from libc itself.
            typealias Create = @convention(c) (Int32) -> Int32
            typealias Wait = @convention(c) (Int32, UnsafeMutableRawPointer, Int32, Int32) -> Int32
            let create = unsafeBitCast(dlsym(nil, "epoll_create1"), to: Create.self)
            let wait = unsafeBitCast(dlsym(nil, "epoll_wait"), to: Wait.self)
            let epoll = create(0)
            defer { close(epoll) }
            var event = (UInt64(0), UInt64(0))  // room for one epoll_event (12 bytes, packed)
            return Int(withUnsafeMutableBytes(of: &event) { wait(epoll, $0.baseAddress!, 1, Int32(seconds * 1000)) })
        case .semWait:
            var semaphore = sem_t()
            sem_init(&semaphore, 0, 0)
            let pointer = withUnsafeMutablePointer(to: &semaphore) { UInt(bitPattern: $0) }
            release(after: seconds) { sem_post(UnsafeMutablePointer<sem_t>(bitPattern: pointer)!) }
            return Int(sem_wait(&semaphore))
        case .semTimedwait:
            var semaphore = sem_t()
            sem_init(&semaphore, 0, 0)
            var deadline = timespec()
            clock_gettime(CLOCK_REALTIME, &deadline)
            deadline.tv_sec += whole
            // Only its timeout ends it: ETIMEDOUT is the expected ending.
            let result = sem_timedwait(&semaphore, &deadline)
            return result == -1 && errno == ETIMEDOUT ? 0 : (result == 0 ? -3 : -1)
        case .pipeRead:
            var ends: [Int32] = [0, 0]
            pipe(&ends)
            let writer = ends[1]
            release(after: seconds) { var byte: UInt8 = 1; _ = write(writer, &byte, 1) }
            var byte: UInt8 = 0
            let got = read(ends[0], &byte, 1)
            close(ends[0]); close(ends[1])
            return got
        case .accept: return acceptOne(after: seconds)
        case .condTimedwait:
            var mutex = pthread_mutex_t(), condition = pthread_cond_t()
            pthread_mutex_init(&mutex, nil)
            pthread_cond_init(&condition, nil)
            var deadline = timespec()
            clock_gettime(CLOCK_REALTIME, &deadline)
            deadline.tv_sec += whole
            pthread_mutex_lock(&mutex)
            let code = pthread_cond_timedwait(&condition, &mutex, &deadline)
            pthread_mutex_unlock(&mutex)
            // Only its timeout ends it: ETIMEDOUT is the expected ending.
            return code == ETIMEDOUT ? 0 : (code == 0 ? -3 : { errno = code; return -1 }())
        case .threadSleep:
            Thread.sleep(forTimeInterval: seconds)
            return 0
        }
    }

    /// `body` on another thread once `seconds` have passed (a sleep that survives any capture).
    private func release(after seconds: Double, _ body: @escaping @Sendable () -> Void) {
        Thread.detachNewThread {
            sleepFully(seconds)
            body()
        }
    }

    /// accept(2) on a loopback listener a client connects to after `seconds`.
    private func acceptOne(after seconds: Double) -> Int {
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(listener) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, length) } }
        listen(listener, 1)
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listener, $0, &length) } }
        let bound = address
        release(after: seconds) {
            let client = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var target = bound
            _ = withUnsafeMutablePointer(to: &target) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(client, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            sleepFully(1)
            close(client)
        }
        let accepted = Glibc.accept(listener, nil, nil)
        if accepted >= 0 { close(accepted) }
        return Int(accepted)
    }

    /// The JSON line a fixture prints for one call.
    func line(_ outcome: Outcome, on target: String) -> String {
        "{\"event\":\"blocked\",\"call\":\"\(rawValue)\",\"target\":\"\(target)\",\"seconds\":\(outcome.seconds),"
            + "\"result\":\(outcome.result),\"errno\":\(outcome.error)}"
    }
}
