// Which threads `hangwatch run` marks hung in its capture of a hung child
// (RunReporter.hungThreads, Sources/HangwatchSupervision/RunReporter.swift): the threads the
// child's HangMonitor named; the main thread only for a main-queue hang it named none of; never
// the main thread for a pool's hang whose threads were not confirmed before the job was killed
// (a CI run beside two others marked the main thread, asleep in dispatch_main, for a pool hang).
import HangwatchSnapshot
import HangwatchSupervision
import HangwatchSupervisorProtocol
import Testing

@Suite struct HungThreadChoiceTests {
    /// A child of pid 100: its main thread asleep in sigsuspend, thread 101 asleep in a pool,
    /// thread 102 spinning when `spinning`.
    func snapshot(spinning: Bool) -> ProcessSnapshot {
        var threads = [
            ThreadSnapshot(tid: 100, name: "job", state: "S", syscall: "130 0x7ffd 0x8 0x0 0x0 0x0 0x0 0x7ffc 0x7f01", roles: .mainThread,
                           status: .captured, frames: [0x7f01]),
            ThreadSnapshot(tid: 101, name: "pool", state: "S", syscall: "230 0x1 0x0 0x7ffb 0x0 0x0 0x0 0x7ffa 0x7f02", status: .captured,
                           frames: [0x7f02]),
        ]
        if spinning {
            threads.append(ThreadSnapshot(tid: 102, name: "pool", state: "R", syscall: "running", userCPUSeconds: 3, status: .captured,
                                          frames: [0x5501]))
        }
        return ProcessSnapshot(reason: .dumpRequested, timestamp: 0,
                               process: ProcessIdentity(pid: 100, name: "job", executable: "/bin/job", arguments: [], bundleID: "job"),
                               threads: threads, modules: [], annotations: [:], captureDurationSeconds: 0)
    }

    @Test func theThreadsTheMonitorNamedAreTheHungOnes() {
        let named = MonitorHang(target: .cooperativePool, threads: [101, 102])
        #expect(RunReporter.hungThreads(reported: named, pid: 100, snapshot: snapshot(spinning: true)) == [101, 102])
    }

    @Test func aMainQueueHangWithoutThreadsIsTheMainThreads() {
        #expect(RunReporter.hungThreads(reported: MonitorHang(target: .mainQueue), pid: 100, snapshot: snapshot(spinning: true)) == [100])
        #expect(RunReporter.hungThreads(reported: MonitorHang(), pid: 100, snapshot: snapshot(spinning: true)) == [100], "a version 1 message")
    }

    @Test func aPoolHangWithoutConfirmedThreadsIsNeverTheMainThreads() {
        let unconfirmed = MonitorHang(target: .cooperativePool)
        #expect(RunReporter.hungThreads(reported: unconfirmed, pid: 100, snapshot: snapshot(spinning: true)) == [102],
                "the thread doing something")
        #expect(RunReporter.hungThreads(reported: unconfirmed, pid: 100, snapshot: snapshot(spinning: false)).isEmpty,
                "every thread asleep: none")
    }
}
