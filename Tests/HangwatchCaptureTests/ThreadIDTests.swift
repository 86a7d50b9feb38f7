// LiveCapture.currentThreadID reads the kernel's thread id once per thread and keeps it
// (Sources/CHangwatchCapture/hw_capture.c): it must be each thread's own, and right in a fork's
// child, whose one thread is the forking thread with the parent's id kept.
import Foundation
import Glibc
import Synchronization
import HangwatchTestSupport
import Testing
@testable import HangwatchCapture

@Suite("Thread ids", .ownThread)
struct ThreadIDTests {
    @Test func eachThreadHasItsOwn() throws {
        let kernel = Self.kernelThreadID
        #expect(LiveCapture.currentThreadID() == kernel())
        #expect(LiveCapture.currentThreadID() == kernel(), "asked again, from what it kept")
        let seen = Mutex<(Int32, Int32)?>(nil)
        let done = DispatchSemaphore(value: 0)
        let thread = Thread {
            _ = LiveCapture.currentThreadID()
            seen.withLock { $0 = (LiveCapture.currentThreadID(), kernel()) }
            done.signal()
        }
        thread.start()
        #expect(done.wait(timeout: .now() + 30) == .success)
        let (kept, actual) = try #require(seen.withLock { $0 })
        #expect(kept == actual && kept != kernel())
    }

    @Test func aForksChildHasItsOwn() throws {
        _ = LiveCapture.currentThreadID()   // kept in this thread before the fork
        let child = fork()
        if child == 0 {
            // The child's only thread: its id is the child's pid. Only raw calls until _exit.
            _exit(LiveCapture.currentThreadID() == getpid() ? 0 : 1)
        }
        try #require(child > 0, "fork: errno \(errno)")
        var status: Int32 = 0
        while waitpid(child, &status, 0) < 0 && errno == EINTR {}
        #expect(status == 0, "the child saw its parent's thread id (wait status \(status))")
        #expect(LiveCapture.currentThreadID() == Self.kernelThreadID())
    }

    /// The caller's id as the kernel names it: /proc/thread-self links to PID/task/TID.
    static func kernelThreadID() -> Int32 {
        var buffer = [CChar](repeating: 0, count: 64)
        let length = readlink("/proc/thread-self", &buffer, buffer.count - 1)
        guard length > 0 else { return -1 }
        let link = String(decoding: buffer[..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return link.split(separator: "/").last.flatMap { Int32($0) } ?? -1
    }
}
