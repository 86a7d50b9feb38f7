// Samples of a thread that has not run since the last one are not taken again
// (LiveCapture.sampleStack, docs/hang-monitor.md "How capture works", step 6). Alone: a whole
// capture by another test would stop the parked thread too, and its context switches are how
// this test sees a stop.
import Foundation
import HangwatchPlatform
import HangwatchTestSupport
import Testing
@testable import HangwatchCapture

@Suite(.ownThreadAlone) struct UnmovedSampleTests {
    /// A stop makes the thread run (to stop, then to restart its call), so the sample taken
    /// after a stop must compare later ones with the thread back asleep: a thread that has not
    /// run since is then not stopped at all (a stop shows as two voluntary context switches).
    @Test("a thread asleep in the same call since its last sample is not stopped again")
    func anUnmovedThreadIsNotStoppedAgain() throws {
        try LiveCapture.prepare()
        if let why = LiveCapture.quietCaptureUnavailable {
            print("skipped: quiet capture unavailable here (\(why))")
            return
        }
        let ready = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let moved = DispatchSemaphore(value: 0)
        let tidBox = TidBox()
        Thread {
            tidBox.set(LiveCapture.currentThreadID())
            ready.signal()
            release.wait()
            _ = recurseThen(8) { moved.wait() }  // then asleep elsewhere, deeper
        }.start()
        ready.wait()
        defer {  // the thread ends whatever the test reached
            release.signal()
            moved.signal()
        }
        let tid = tidBox.tid
        func switches() throws -> Int {
            let status = try String(contentsOfFile: "/proc/self/task/\(tid)/status", encoding: .utf8)
            let line = try #require(status.split(separator: "\n").first { $0.hasPrefix("voluntary_ctxt_switches:") })
            return try #require(Int(line.split(separator: "\t").last?.trimmingCharacters(in: .whitespaces) ?? ""))
        }
        let reader = try #require(TaskReader())
        func waitUntilAsleep() {
            for _ in 0..<500 where Syscalls.number(ofLine: reader.syscallLine(tid: tid)) == nil { usleep(10_000) }
        }
        waitUntilAsleep()
        let options = CaptureOptions(method: .quiet)
        let first = try LiveCapture.sampleStack(tid: tid, options: options)
        #expect(first.count >= 3)
        // Each sample that stops the thread costs it two voluntary switches. On a loaded machine
        // the thread may not be back asleep when a sample looks (that sample keeps nothing and
        // the next stops it again), so: three samples in a row that did not stop it, within 12.
        var quietInARow = 0
        for _ in 0..<12 where quietInARow < 3 {
            waitUntilAsleep()
            let before = try switches()
            #expect(try LiveCapture.sampleStack(tid: tid, options: options) == first)
            quietInARow = try switches() == before ? quietInARow + 1 : 0
        }
        #expect(quietInARow == 3, "every sample stopped the thread again")
        // Once it has run, it is stopped again: its new stack, not the one kept.
        let line = reader.syscallLine(tid: tid)
        release.signal()
        for _ in 0..<500 where reader.syscallLine(tid: tid) == line { usleep(10_000) }
        waitUntilAsleep()
        let elsewhere = try LiveCapture.sampleStack(tid: tid, options: options)
        #expect(elsewhere != first && elsewhere.count >= first.count + 8, "\(first.count) frames, then \(elsewhere.count)")
    }
}
