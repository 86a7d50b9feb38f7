// The one owner of a hang (Sources/HangwatchLifecycle/TrackedHang.swift), driven by hand against a
// keeper that records what it is asked to write: what is staged and with what, what a duplicate
// writes (nothing), how the sidecar and samples are kept current, a hang taken over by a crash
// report, and in which order an ending reports and removes. HangMonitor's and `hangwatch run`'s
// own suites drive it with the real staging area.
@testable import HangwatchDatabase
import HangwatchLifecycle
import HangwatchSnapshot
import Synchronization
import Testing

/// A keeper that writes nothing and notes every call, in order.
final class RecordingKeeper: HangKeeping {
    let calls = Mutex<[String]>([])
    let sidecars = Mutex<[HangSidecar]>([])
    let snapshots = Mutex<[ProcessSnapshot]>([])
    let takenOver = Atomic<Bool>(false)
    let failWrites = Atomic<Bool>(false)

    private func note(_ call: String) { calls.withLock { $0.append(call) } }

    func begin(_ sidecar: HangSidecar) throws -> StagedHang {
        note("begin")
        return StagedHang(name: RecordName(bundleID: sidecar.bundleID, id: "0a0b0c0d-0000-4000-8000-000000000001"), sidecar: sidecar)
    }
    func write(_ snapshot: ProcessSnapshot, of hang: StagedHang) throws {
        if failWrites.load(ordering: .relaxed) { throw DatabaseError.noSuchReport("planted") }
        note("write")
        snapshots.withLock { $0.append(snapshot) }
        sidecars.withLock { $0.append(hang.sidecar) }
    }
    func writeSidecar(_ hang: StagedHang) throws {
        note("sidecar")
        sidecars.withLock { $0.append(hang.sidecar) }
    }
    func writeSamples(_ samples: [StackSample], of hang: StagedHang) throws { note("samples \(samples.count)") }
    func wasTakenOver(_ hang: StagedHang) -> Bool { takenOver.load(ordering: .relaxed) }
    func supersedingReport(of hang: StagedHang) -> String? { "crash-report" }
    func remove(_ hang: StagedHang) { note("remove") }
}

@Suite("tracked hang")
struct TrackedHangTests {
    static let owner = HangOwner(bundleID: "com.example.app", pid: 4242, startTicks: 7)

    static func snapshot(threads: [Int32] = [1, 2, 3]) -> ProcessSnapshot {
        ProcessSnapshot(reason: .dumpRequested, timestamp: 1_000,
                        process: ProcessIdentity(pid: 4242, name: "app", executable: "/app", arguments: [], bundleID: "com.example.app"),
                        threads: threads.map { ThreadSnapshot(tid: $0, name: "t\($0)", state: "S", roles: [], status: .captured,
                                                              frames: [0x1000 + UInt64($0)]) }, modules: [])
    }

    static func hang(_ keeper: RecordingKeeper?, holdsCapture: Bool = false) -> TrackedHang {
        TrackedHang(target: .mainQueue, startTime: 1_000, thresholdSeconds: 2, owner: owner, keeper: keeper, holdsCapture: holdsCapture)
    }

    @Test func aCaptureIsStagedWithItsHungThreadsMarkedAndNamed() throws {
        let keeper = RecordingKeeper()
        let hang = Self.hang(keeper)
        hang.hungThreads = [2]
        hang.signature = "main-queue:1002"
        hang.traceparents = (0..<12).map { String(format: "00-%032x-%016x-01", $0 + 1, $0 + 1) }
        #expect(try hang.captured(Self.snapshot(), duplicate: false))
        #expect(hang.lifecycle.state == .staged)
        #expect(keeper.calls.withLock { $0 } == ["begin", "write"])
        let staged = try #require(keeper.snapshots.withLock { $0.first })
        #expect(staged.threads.filter { $0.roles.contains(.hung) }.map(\.tid) == [2], "marked where it is kept")
        let sidecar = try #require(keeper.sidecars.withLock { $0.first })
        #expect(sidecar.pid == 4242 && sidecar.processStartTicks == 7 && sidecar.bundleID == "com.example.app")
        #expect(sidecar.hungThreads == [2] && sidecar.hungThread == 2 && sidecar.signature == "main-queue:1002")
        #expect(sidecar.thresholdSeconds == 2 && sidecar.startTime == 1_000)
        #expect(sidecar.traceparents?.count == HangSidecar.maximumTraceparents, "at most the sidecar's bound")
        #expect(hang.capture == nil, "held on disk only")
        let info = hang.info(durationSeconds: 3)
        #expect(info.target == .mainQueue && info.durationSeconds == 3 && info.outcome == .ongoing && info.startTime == 1_000)
    }

    @Test func aDuplicateWritesNothingUntilItLastsThreeThresholds() throws {
        let keeper = RecordingKeeper()
        let hang = Self.hang(keeper)
        #expect(try !hang.captured(Self.snapshot(), duplicate: true))
        #expect(keeper.calls.withLock { $0 }.isEmpty)
        #expect(!hang.dueForStaging(lasted: 5_000_000_000, threshold: 2_000_000_000))
        #expect(hang.dueForStaging(lasted: 6_000_000_000, threshold: 2_000_000_000))
        #expect(!hang.dueForStaging(lasted: 9_000_000_000, threshold: 2_000_000_000), "once")
        try hang.keep(Self.snapshot())
        #expect(hang.lifecycle.state == .staged && keeper.calls.withLock { $0 } == ["begin", "write"])
    }

    @Test func theSidecarAndSamplesAreKeptCurrentAtTheirOwnPace() throws {
        let keeper = RecordingKeeper()
        let hang = Self.hang(keeper)
        hang.keepCurrent(now: 1)
        #expect(keeper.calls.withLock { $0 }.isEmpty, "nothing staged, nothing written")
        _ = try hang.captured(Self.snapshot(), duplicate: false)
        hang.add(StackSample(tid: 2, frames: [1, 2], count: 1))
        hang.add(StackSample(tid: 2, frames: [1, 2], count: 1))
        hang.add(StackSample(tid: 2, frames: [3], count: 1))
        #expect(hang.sampleCount == 3 && hang.samples.map(\.count) == [2, 1], "aggregated by stack")
        hang.keepCurrent(now: 1_000_000_000)
        hang.keepCurrent(now: 1_050_000_000)
        #expect(keeper.calls.withLock { $0 } == ["begin", "write", "sidecar", "samples 2"], "100 and 250 ms apart at most")
        #expect(keeper.sidecars.withLock { $0.last?.sampleCount } == 3)
        hang.keepCurrent(now: 1_150_000_000)
        #expect(keeper.calls.withLock { $0.suffix(1) } == ["sidecar"], "samples unchanged: not written again")
    }

    @Test func aHangTakenOverByACrashIsNeitherWrittenNorReportedAgain() throws {
        let keeper = RecordingKeeper()
        let hang = Self.hang(keeper, holdsCapture: true)
        #expect(hang.takenOver() == nil)
        _ = try hang.captured(Self.snapshot(), duplicate: false)
        #expect(hang.takenOver() == nil, "its lease is still there")
        keeper.takenOver.store(true, ordering: .relaxed)
        #expect(hang.takenOver() == .some("crash-report"))
        #expect(hang.lifecycle.state == .superseded(report: "crash-report") && hang.staged == nil)
        try hang.keep(Self.snapshot())
        hang.keepCurrent(now: 1_000_000_000)
        var reported = 0
        #expect(hang.end(.fatal, durationSeconds: 9) { _ in reported += 1; return "r" } == nil)
        #expect(reported == 0)
        #expect(keeper.calls.withLock { $0 } == ["begin", "write", "remove"])
    }

    /// A fatal end reports before its files go (a watcher that dies in between leaves it to be
    /// promoted); a recovered one removes them first (it must never be promoted).
    @Test func anEndingReportsOnceInTheOrderThatLosesNothing() throws {
        for (outcome, keep) in [(HangOutcome.fatal, false), (.recovered, true), (.recovered, false)] {
            let keeper = RecordingKeeper()
            let hang = Self.hang(keeper, holdsCapture: true)
            hang.hungThreads = [3]
            _ = try hang.captured(Self.snapshot(), duplicate: false)
            hang.add(StackSample(tid: 3, frames: [9], count: 1))
            var sunk: ProcessSnapshot?
            let ended = hang.end(outcome, durationSeconds: 4.5, keepRecovered: keep) { snapshot in
                keeper.calls.withLock { $0.append("report") }
                sunk = snapshot
                return "report-id"
            }
            let calls = keeper.calls.withLock { Array($0.dropFirst(2)) }
            switch (outcome, keep) {
            case (.fatal, _): #expect(calls == ["report", "remove"])
            case (_, true): #expect(calls == ["remove", "report"])
            default: #expect(calls == ["remove"])
            }
            #expect(ended?.report == (keep || outcome == .fatal ? "report-id" : nil))
            if let sunk {
                guard case .hang(let info) = sunk.reason else { Issue.record("\(sunk.reason)"); continue }
                #expect(info.outcome == outcome && info.durationSeconds == 4.5 && info.samples.map(\.frames) == [[9]])
                #expect(sunk.threads.filter { $0.roles.contains(.hung) }.map(\.tid) == [3])
            }
            #expect(hang.end(.fatal, durationSeconds: 5) { _ in "again" } == nil, "a hang ends once")
        }
    }

    /// With no keeper (a monitor whose hangs stay in memory), the capture is held and an
    /// unfinished hang is reported from it; `last` (a look taken for the ending) is reported
    /// with its own reason told the outcome.
    @Test func withoutAKeeperTheCaptureIsHeldAndReported() throws {
        let hang = Self.hang(nil)
        _ = try hang.captured(Self.snapshot(), duplicate: false)
        #expect(hang.lifecycle.state == .staged && hang.capture != nil)
        var outcome: HangOutcome?
        _ = hang.end(.unfinished, durationSeconds: 1) { snapshot in
            if case .hang(let info) = snapshot.reason { outcome = info.outcome }
            return nil
        }
        #expect(outcome == .unfinished)

        let killed = Self.hang(nil)
        var look = Self.snapshot(threads: [7])
        look.reason = .hang(HangInfo(target: .queue(label: "db"), thresholdSeconds: 5, durationSeconds: 30, outcome: .ongoing, startTime: 999))
        var seen: HangInfo?
        _ = killed.end(.fatal, durationSeconds: 30, last: look) { snapshot in
            if case .hang(let info) = snapshot.reason { seen = info }
            #expect(snapshot.threads.map(\.tid) == [7])
            return nil
        }
        #expect(seen?.target == .queue(label: "db") && seen?.thresholdSeconds == 5 && seen?.outcome == .fatal, "the look's own reason, ended")
    }

    @Test func aCaptureThatCannotBeStagedLeavesTheHangLiveAndUnstaged() {
        let keeper = RecordingKeeper()
        keeper.failWrites.store(true, ordering: .relaxed)
        let hang = Self.hang(keeper)
        #expect(throws: DatabaseError.self) { try hang.captured(Self.snapshot(), duplicate: false) }
        #expect(hang.lifecycle.state == .pending && hang.lifecycle.isLive)
    }
}
