// The decision logic driven by hand: what a hang is, and the clock stalls that are not hangs
// (a machine suspend cannot be produced in a test, so the clocks are given here).
import Testing
@testable import HangMonitor
import HangwatchSnapshot

@Suite struct DetectorTests {
    let second: UInt64 = 1_000_000_000

    @Test func pingLateByThresholdIsAHangAndTheAnswerEndsIt() {
        var watch = TargetWatch()
        #expect(watch.step(now: 0, answered: 0, answeredAt: 0, threshold: second, detectionAllowed: true) == .post(sequence: 1))
        #expect(watch.step(now: second / 2, answered: 0, answeredAt: 0, threshold: second, detectionAllowed: true) == .waiting)
        #expect(watch.step(now: second, answered: 0, answeredAt: 0, threshold: second, detectionAllowed: true) == .hangStarted(sentAt: 0))
        #expect(watch.step(now: 2 * second, answered: 0, answeredAt: 0, threshold: second, detectionAllowed: true) == .stillHung(sentAt: 0))
        #expect(watch.step(now: 3 * second, answered: 1, answeredAt: 2 * second + 5, threshold: second, detectionAllowed: true)
                == .recovered(sentAt: 0, answeredAt: 2 * second + 5, next: 2))
    }

    @Test func promptAnswerPostsTheNextPing() {
        var watch = TargetWatch()
        _ = watch.step(now: 0, answered: 0, answeredAt: 0, threshold: second, detectionAllowed: true)
        #expect(watch.step(now: 10, answered: 1, answeredAt: 5, threshold: second, detectionAllowed: true) == .post(sequence: 2))
        #expect(watch.step(now: second + 9, answered: 1, answeredAt: 5, threshold: second, detectionAllowed: true) == .waiting)
        #expect(watch.step(now: second + 10, answered: 1, answeredAt: 5, threshold: second, detectionAllowed: true) == .hangStarted(sentAt: 10))
    }

    @Test func disallowedDetectionRestartsTheWait() {
        var watch = TargetWatch()
        _ = watch.step(now: 0, answered: 0, answeredAt: 0, threshold: second, detectionAllowed: true)
        // Paused (or traced, or stalled) past the threshold: no hang, the wait restarts.
        #expect(watch.step(now: 5 * second, answered: 0, answeredAt: 0, threshold: second, detectionAllowed: false) == .waiting)
        #expect(watch.step(now: 5 * second + second / 2, answered: 0, answeredAt: 0, threshold: second, detectionAllowed: true) == .waiting)
        #expect(watch.step(now: 6 * second, answered: 0, answeredAt: 0, threshold: second, detectionAllowed: true) == .hangStarted(sentAt: 5 * second))
    }

    @Test func pollingAtAFractionOfTheThresholdDetectsBy105Percent() {
        // The watcher polls at threshold/20: the first tick at or past the threshold is at most 1.05×.
        let threshold = 2 * second
        let poll = threshold / 20
        var watch = TargetWatch()
        _ = watch.step(now: 7, answered: 0, answeredAt: 0, threshold: threshold, detectionAllowed: true)
        var now: UInt64 = 7
        while true {
            now += poll
            if case .hangStarted = watch.step(now: now, answered: 0, answeredAt: 0, threshold: threshold, detectionAllowed: true) { break }
        }
        #expect(Double(now - 7) <= 1.05 * Double(threshold))
    }

    @Test func monitorOversleepIsAStallNotAHang() {
        var guardian = StallGuard(pollInterval: 50_000_000, threshold: second)
        #expect(guardian.check(ClockReading(monotonic: 0, boottime: 0)) == nil)
        #expect(guardian.check(ClockReading(monotonic: 60_000_000, boottime: 60_000_000)) == nil)
        // SIGSTOP'ed for 3 s: both clocks moved, but the monitor's tick came 3 s late.
        let stalled = guardian.check(ClockReading(monotonic: 3 * second, boottime: 3 * second))
        #expect(stalled?.reason.contains("overslept") == true)
        #expect(stalled?.excusedNanoseconds == 3 * second - 60_000_000 - 50_000_000)
        #expect(guardian.check(ClockReading(monotonic: 3 * second + 50_000_000, boottime: 3 * second + 50_000_000)) == nil)
    }

    @Test func boottimeRunningAheadOfMonotonicIsASuspend() {
        var guardian = StallGuard(pollInterval: 50_000_000, threshold: second)
        _ = guardian.check(ClockReading(monotonic: 10 * second, boottime: 10 * second))
        // Suspended for 20 s: CLOCK_MONOTONIC did not move, CLOCK_BOOTTIME did.
        let stalled = guardian.check(ClockReading(monotonic: 10 * second + 50_000_000, boottime: 30 * second))
        #expect(stalled?.reason.contains("suspended") == true)
        #expect(stalled?.excusedNanoseconds == nil)
    }

    @Test func oversleptTimeIsTakenOffAPendingWaitOnly() {
        var watch = TargetWatch()
        _ = watch.step(now: 0, answered: 0, answeredAt: 0, threshold: second, detectionAllowed: true)
        // Stopped for 5 s at 0.2 s into the wait: the 5 s are excused, the watched 0.3 s still count.
        #expect(watch.step(now: 5 * second + second / 2, answered: 0, answeredAt: 0, threshold: second,
                           detectionAllowed: true, excused: 5 * second) == .waiting)
        #expect(watch.step(now: 6 * second, answered: 0, answeredAt: 0, threshold: second, detectionAllowed: true)
                == .hangStarted(sentAt: 5 * second))
        // An already-detected hang is not shortened.
        #expect(watch.step(now: 9 * second, answered: 0, answeredAt: 0, threshold: second, detectionAllowed: true,
                           excused: 2 * second) == .stillHung(sentAt: 5 * second))
    }

    @Test func schedulerJitterIsNotAStall() {
        var guardian = StallGuard(pollInterval: 50_000_000, threshold: second)
        _ = guardian.check(ClockReading(monotonic: 0, boottime: 0))
        #expect(guardian.check(ClockReading(monotonic: 150_000_000, boottime: 150_000_000)) == nil)
    }
}

/// Which threads are a `.pool` target's (PoolHangThreads.Members), driven by hand: the threads
/// that ran a ping, and those named as they are but for a trailing number.
@Suite struct PoolMembersTests {
    func snapshot(_ threads: [(Int32, String)]) -> ProcessSnapshot {
        ProcessSnapshot(reason: .dumpRequested, timestamp: 0,
                        process: ProcessIdentity(pid: 1, name: "server", executable: "/server", arguments: [], bundleID: "b"),
                        threads: threads.map { tid, name in
                            ThreadSnapshot(tid: tid, name: name, state: .sleeping, roles: tid == 1 ? [.mainThread] : [], status: .captured)
                        }, modules: [])
    }

    @Test func threadsNamedAsTheAnsweringOnesButForTheirNumberArePoolThreads() {
        let threads = snapshot([(1, "server"), (2, "TP-#0"), (3, "TP-#1"), (4, "TP-#12"), (5, "NIO-ELT-0-#0"), (6, "server"), (7, "TP-#")])
        #expect(PoolHangThreads.Members(answering: [3], in: threads).threads == [2, 3, 4, 7])
        #expect(PoolHangThreads.Members.stem("NIO-SGLTN-BLK-#") == "NIO-SGLTN-BLK-#")
        #expect(PoolHangThreads.Members.stem("TP-#12") == "TP-#")
    }

    @Test func anUnnamedThreadCountsOnlyForItself() {
        // Threads never named carry the process's name: the others of that name are not the pool's.
        let threads = snapshot([(1, "server"), (2, "server"), (3, "server"), (4, "worker-1")])
        #expect(PoolHangThreads.Members(answering: [2], in: threads).threads == [2])
        #expect(PoolHangThreads.Members(answering: [], in: threads).threads == [])
        // A ping answered by a thread that has gone (its tid not in the capture) adds nothing.
        #expect(PoolHangThreads.Members(answering: [99], in: threads).threads == [])
    }
}

/// Where an operation's work is stuck (OperationWork), driven by hand over task readings.
@Suite struct OperationWorkTests {
    func task(_ address: UInt64, id: UInt64, _ state: TaskState = .suspended, awaits: UInt64? = nil,
              continuation: Bool = false) -> TaskSnapshot {
        let wait = awaits.map { TaskWait(kind: .task, address: $0) } ?? (continuation ? TaskWait(kind: .continuation, address: 0x99) : nil)
        return TaskSnapshot(address: address, id: id, state: state, frames: [0x1000 + address], waitingOn: wait)
    }

    @Test func theChainOfAwaitedTasksIsFollowedToItsEnd() {
        let tasks = [task(0xA, id: 1, awaits: 0xB), task(0xB, id: 2, awaits: 0xC), task(0xC, id: 3, continuation: true)]
        #expect(OperationWork.stuckTask(own: 0xA, tasks: tasks, ofOperation: [0xA, 0xB, 0xC]) == 0xC)
        // Followed also through a task that does not carry the id (awaiting is link enough).
        #expect(OperationWork.stuckTask(own: 0xA, tasks: tasks, ofOperation: [0xA]) == 0xC)
    }

    @Test func anOwnTaskWaitingOnAContinuationIsFollowedToTheEarliestTaskItStarted() {
        let tasks = [task(0xA, id: 10, continuation: true), task(0xD, id: 14, continuation: true),
                     task(0xB, id: 11, awaits: 0xC), task(0xC, id: 12, continuation: true), task(0xE, id: 5, continuation: true)]
        // 0xB awaits 0xC; of 0xC and 0xD, which await none of its tasks, 0xC is the earlier;
        // 0xE, earlier still, carries no id.
        #expect(OperationWork.stuckTask(own: 0xA, tasks: tasks, ofOperation: [0xA, 0xB, 0xC, 0xD]) == 0xC)
        #expect(OperationWork.stuckTask(own: 0xA, tasks: tasks, ofOperation: [0xA]) == 0xA)
    }

    @Test func aCopyOfTheOwnTaskIsNeverTheCulprit() {
        // An in-process reading may find a copy of a task's bytes: same id, same chain.
        let tasks = [task(0xA, id: 7, continuation: true), task(0x5, id: 7, continuation: true), task(0xB, id: 9, continuation: true)]
        #expect(OperationWork.stuckTask(own: 0xA, tasks: tasks, ofOperation: [0xA, 0x5, 0xB]) == 0xB)
        #expect(OperationWork.stuckTask(own: 0xA, tasks: Array(tasks.prefix(2)), ofOperation: [0xA, 0x5]) == 0xA)
    }

    @Test func anOwnTaskThatRunsIsTheCulpritItself() {
        let tasks = [task(0xA, id: 1, .running), task(0xB, id: 2, continuation: true)]
        #expect(OperationWork.stuckTask(own: 0xA, tasks: tasks, ofOperation: [0xA, 0xB]) == 0xA)
    }

    @Test func tasksAwaitingEachOtherEndTheChainWithoutLooping() {
        let tasks = [task(0xA, id: 1, awaits: 0xB), task(0xB, id: 2, awaits: 0xA)]
        #expect(OperationWork.stuckTask(own: 0xA, tasks: tasks, ofOperation: [0xA, 0xB]) == 0xB)
        #expect(OperationWork.stuckTask(own: 0xA, tasks: [], ofOperation: []) == 0xA)
    }
}
