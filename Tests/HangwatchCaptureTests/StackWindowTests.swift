// A thread's stack window ends where its own descriptor begins (hw_stack_window_bytes in
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
}
