// The quiet capture reads each thread's system call from its registers at the stop
// (hw_interrupted_syscall in Sources/CHangwatchDump/include/hw_registers.h) instead of its /proc
// syscall line before the stop. The line it reports must be the one /proc showed: threads of
// this process blocked in a futex (semaphore), a pipe read, a poll and a nanosleep — which a
// first stop turns into restart_syscall, so the second capture checks that too — and one
// thread spinning, "running".
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
    final class Blocked: @unchecked Sendable {
        let lock = NSLock()
        var tids: [Int32] = []
        var spinner: Int32 = 0
        let semaphore = DispatchSemaphore(value: 0)
        var pipe: [Int32] = [-1, -1]
        let stop = NSLock()
        var stopped = false

        init() throws {
            try #require(Glibc.pipe(&pipe) == 0)
            for way in 0..<4 {
                let started = DispatchSemaphore(value: 0)
                Thread { [self] in
                    lock.withLock { tids.append(LiveCapture.currentThreadID()) }
                    started.signal()
                    switch way {
                    case 0: semaphore.wait()
                    case 1: var byte: UInt8 = 0; _ = read(pipe[0], &byte, 1)
                    case 2: var watched = pollfd(fd: pipe[0], events: Int16(POLLPRI), revents: 0); _ = poll(&watched, 1, -1)
                    default:
                        var pause = timespec(tv_sec: 600, tv_nsec: 0)
                        nanosleep(&pause, nil)  // ended by the process's exit
                    }
                }.start()
                started.wait()
            }
            let started = DispatchSemaphore(value: 0)
            Thread { [self] in
                lock.withLock { spinner = LiveCapture.currentThreadID() }
                started.signal()
                while !stop.withLock({ stopped }) {}
            }.start()
            started.wait()
        }

        func release() {
            stop.withLock { stopped = true }
            semaphore.signal()
            close(pipe[1])
        }
    }

    @Test func theLineFromTheStopIsTheLineProcShowedBeforeIt() throws {
        try LiveCapture.prepare()
        if let why = LiveCapture.quietCaptureUnavailable {
            print("skipped: quiet capture unavailable here (\(why))")
            return
        }
        let blocked = try Blocked()
        defer { blocked.release() }
        let (tids, spinner) = blocked.lock.withLock { (blocked.tids, blocked.spinner) }
        guard let reader = TaskReader() else { Issue.record("no /proc/self/task"); return }
        // Every thread inside its call (a loaded machine may take a while to get them there).
        for _ in 0..<500 where tids.contains(where: { Syscalls.number(ofLine: reader.syscallLine(tid: $0)) == nil }) {
            usleep(10_000)
        }
        for round in 1...2 {
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
            }
            let spinning = try #require(snapshot.threads.first { $0.tid == spinner })
            #expect(spinning.status == .captured)
            #expect(spinning.syscall == "running")
            #expect(spinning.state == .running)
        }
        // The nanosleep was turned into its restart by the first stop, and the second capture says so.
        let sleeper = try #require(tids.last)
        #expect(Syscalls.number(ofLine: reader.syscallLine(tid: sleeper)) == Syscalls.restart)
    }
}
