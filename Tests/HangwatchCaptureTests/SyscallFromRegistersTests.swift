// The quiet capture reads each thread's system call from its registers at the stop
// (hwd_interrupted_syscall in Sources/CHangwatchDump/include/hw_registers.h) instead of its /proc
// syscall line before the stop. The line it reports must be the one /proc showed: threads of
// this process blocked in a futex (semaphore), a pipe read, a poll and a nanosleep
// (ParkedThreads.swift) — which a first stop turns into restart_syscall, so the second
// capture checks that too — and one thread spinning, "running".
import CHangwatchCapture
import Foundation
import HangwatchPlatform
import HangwatchTestSupport
import Testing
@testable import HangwatchCapture
#if canImport(Glibc)
import Glibc
#endif

@Suite(.serialized, .ownThread) struct SyscallFromRegistersTests {
    /// A thread spinning in user space until `stop`.
    final class Spinner: @unchecked Sendable {
        let lock = NSLock()
        var stopped = false
        var tid: Int32 = 0

        init() {
            let started = DispatchSemaphore(value: 0)
            Thread { [self] in
                lock.withLock { tid = LiveCapture.currentThreadID() }
                started.signal()
                while !lock.withLock({ stopped }) {}
            }.start()
            started.wait()
        }

        func stop() { lock.withLock { stopped = true } }
    }

    @Test func theLineFromTheStopIsTheLineProcShowedBeforeIt() throws {
        try LiveCapture.prepare()
        if let why = LiveCapture.quietCaptureUnavailable {
            print("skipped: quiet capture unavailable here (\(why))")
            return
        }
        let parked = try ParkedThreads(count: ParkedThreads.ways.count)
        let spinning = Spinner()
        defer {
            parked.release()
            spinning.stop()
        }
        let tids = parked.lock.withLock { parked.tids }
        let spinner = spinning.lock.withLock { spinning.tid }
        guard let reader = TaskReader() else { Issue.record("no /proc/self/task"); return }
        let sleeper = tids[try #require(ParkedThreads.ways.firstIndex(of: "nanosleep"))]
        var secondSleeperLine: String?
        for round in 1...2 {
            parked.waitUntilInCalls()  // the first capture's stops had them restart their calls
            let before = Dictionary(uniqueKeysWithValues: tids.map { ($0, reader.syscallLine(tid: $0)) })
            let snapshot = try LiveCapture.captureProcess(reason: .dumpRequested, bundleID: "tests", options: CaptureOptions(method: .quiet))
            #expect(snapshot.annotations[LiveCapture.methodAnnotation] == "ptrace")
            for tid in tids {
                let thread = try #require(snapshot.threads.first { $0.tid == tid })
                #expect(thread.status == .captured)
                #expect(thread.state == .sleeping)
                let line = try #require(before[tid] ?? nil)
                #expect(Syscalls.number(ofLine: line) != nil, "round \(round): blocked in a call: \(line)")
                #expect(thread.syscall == line, "round \(round), thread \(tid): /proc before the stop said \(line)")
                if round == 2 && tid == sleeper { secondSleeperLine = thread.syscall }
            }
            let running = try #require(snapshot.threads.first { $0.tid == spinner })
            #expect(running.status == .captured)
            #expect(running.syscall == "running")
            #expect(running.state == .running)
        }
        // The nanosleep was turned into its restart by the first stop, and the second capture
        // says so. (Read from the snapshot, not from /proc afterwards: let go by the second
        // stop, the thread runs to restart its call again, later on a loaded machine.)
        #expect(Syscalls.number(ofLine: secondSleeperLine) == Syscalls.restart, "\(secondSleeperLine ?? "no line")")
    }
}
