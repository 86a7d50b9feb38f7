// Threads of this process parked at different depths of Swift recursion, each blocked its own
// way until `release`: in a semaphore (futex), a pipe read, a poll and a nanosleep, in turn. For
// the tests that capture this process quietly (CFIStepperTests, SyscallFromRegistersTests).
import Foundation
import HangwatchPlatform
import Testing
@testable import HangwatchCapture
#if canImport(Glibc)
import Glibc
#endif

@inline(never) func recurseThen(_ depth: Int, _ body: () -> Void) -> Int {
    if depth == 0 {
        body()
        return 0
    }
    return recurseThen(depth - 1, body) &+ depth
}

final class ParkedThreads: @unchecked Sendable {
    /// The ways a thread is blocked, thread `i` the `i % ways`-th.
    static let ways = ["semaphore", "read", "poll", "nanosleep"]
    let lock = NSLock()
    /// In the order the threads were started (thread `i` is `tids[i]`).
    var tids: [Int32] = []
    let semaphore = DispatchSemaphore(value: 0)
    var pipe: [Int32] = [-1, -1]
    let count: Int

    /// Returns once every thread is inside its call, as its /proc syscall line shows (up to 5 s).
    init(count: Int) throws {
        self.count = count
        try #require(Glibc.pipe(&pipe) == 0)
        for index in 0..<count {
            let started = DispatchSemaphore(value: 0)
            Thread { [self] in
                _ = recurseThen(5 + index * 3) {
                    lock.withLock { tids.append(LiveCapture.currentThreadID()) }
                    started.signal()
                    switch index % Self.ways.count {
                    case 0: semaphore.wait()
                    case 1: var byte: UInt8 = 0; _ = read(pipe[0], &byte, 1)
                    case 2: var watched = pollfd(fd: pipe[0], events: Int16(POLLPRI), revents: 0); _ = poll(&watched, 1, -1)
                    default:
                        var pause = timespec(tv_sec: 600, tv_nsec: 0)
                        nanosleep(&pause, nil)  // ended by the process's exit
                    }
                }
            }.start()
            started.wait()
        }
        waitUntilInCalls()
    }

    /// Until every thread is inside its call, as its /proc syscall line shows (up to 5 s): after
    /// a capture let them go, a thread whose call the stop interrupted runs for a moment to
    /// restart it — longer on a loaded machine.
    func waitUntilInCalls() {
        let listed = lock.withLock { tids }
        guard let reader = TaskReader() else { return }
        for _ in 0..<500 where listed.contains(where: { Syscalls.number(ofLine: reader.syscallLine(tid: $0)) == nil }) {
            usleep(10_000)
        }
    }

    /// Wakes the semaphore's, the read's and the poll's threads (the nanosleep's sleeps on).
    func release() {
        for _ in 0..<count { semaphore.signal() }
        close(pipe[1])
    }
}
