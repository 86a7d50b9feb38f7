// A thread's stack window ends where its own descriptor begins (hwd_stack_window_bytes in
// Sources/CHangwatchDump/include/hw_registers.h): glibc keeps it at the top of the thread's
// stack, and on x86-64 it holds the stack protector's canary and the pointer guard, which no
// dump may carry. Threads parked a few frames deep have their descriptor well inside a 16 KiB
// window from their stack pointer; both capture methods must stop short of it, and still copy
// the frames.
import Foundation
import HangwatchPlatform
import HangwatchTestSupport
import Testing
@testable import HangwatchCapture

@Suite(.serialized, .ownThread) struct StackWindowTests {
    @Test(arguments: [CaptureMethod.quiet, .signals])
    func theWindowStopsAtTheThreadsDescriptor(method: CaptureMethod) throws {
        try LiveCapture.prepare()
        if method == .quiet, let why = LiveCapture.quietCaptureUnavailable {
            print("skipped: quiet capture unavailable here (\(why))")
            return
        }
        let parked = try ParkedThreads(count: ParkedThreads.ways.count)
        defer { parked.release() }
        let tids = parked.lock.withLock { parked.tids }
        let snapshot = try LiveCapture.captureProcess(reason: .dumpRequested, bundleID: "tests",
                                                      options: CaptureOptions(stackBytes: 16384, method: method))
        var checked = 0
        for thread in snapshot.threads where thread.status == .captured && thread.tid != getpid() {
            let sp = try #require(thread.registers?.sp, "thread \(thread.tid) has registers")
            #expect(!thread.stackMemory.isEmpty && thread.stackMemory.count <= 16384, "thread \(thread.tid)")
            let offset = ownThreadDescriptorOffset(in: thread.stackMemory, copiedFrom: sp)
            #expect(offset == nil, "thread \(thread.tid) (\(thread.name)): its descriptor at +\(offset ?? 0) of its window")
            checked += 1
        }
        // Cut short, the windows still hold the frames: every return address the unwinder found.
        for tid in tids {
            let thread = try #require(snapshot.threads.first { $0.tid == tid })
            #expect(thread.frames.count >= 5, "thread \(tid) unwound")
            for address in thread.frames.dropFirst().prefix(5) {
                #expect(containsWord(thread.stackMemory, address), "thread \(tid): return address \(address) is in its window")
            }
        }
        #expect(checked >= tids.count)
    }

    private func containsWord(_ bytes: [UInt8], _ value: UInt64) -> Bool {
        bytes.withUnsafeBytes { raw in
            stride(from: 0, through: raw.count - 8, by: 8).contains { raw.loadUnaligned(fromByteOffset: $0, as: UInt64.self) == value }
        }
    }

    /// A thread draining a queue is named by the queue's label. libdispatch keeps the queue in
    /// its static TLS, just below the thread pointer: inside a window that reaches the
    /// descriptor, where the quiet capture reads it from the stop's copy; a window too short for
    /// it (512 bytes) has it read from the thread afterwards.
    @Test(arguments: [16384, 512])
    func aThreadDrainingAQueueIsNamedByItsLabel(stackBytes: Int) throws {
        try LiveCapture.prepare()
        if let why = LiveCapture.quietCaptureUnavailable {
            print("skipped: quiet capture unavailable here (\(why))")
            return
        }
        let label = "hangwatch.tests.drained-\(stackBytes)"
        let queue = DispatchQueue(label: label)
        let started = DispatchSemaphore(value: 0), blocker = DispatchSemaphore(value: 0)
        let drainer = NSLock()
        nonisolated(unsafe) var tid: Int32 = 0
        queue.async {
            drainer.withLock { tid = LiveCapture.currentThreadID() }
            started.signal()
            blocker.wait()
        }
        started.wait()
        defer { blocker.signal() }
        let snapshot = try LiveCapture.captureProcess(reason: .dumpRequested, bundleID: "tests",
                                                      options: CaptureOptions(stackBytes: stackBytes, method: .quiet))
        let expected = drainer.withLock { tid }
        let thread = try #require(snapshot.threads.first { $0.tid == expected })
        #expect(thread.status == .captured)
        #expect(thread.queueLabel == label, "thread \(expected): \(thread.queueLabel ?? "no label")")
        #expect(snapshot.threads.filter { $0.queueLabel == label }.count == 1)
    }
}
