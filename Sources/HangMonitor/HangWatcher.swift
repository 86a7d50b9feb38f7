// The monitor thread: posts pings every threshold/40 and wakes exactly at a pending ping's
// deadline (so a hang is seen by ~1.03× the threshold), and drives each hang to its outcome: staged + sampled while
// it lasts, then recovered, superseded by a crash report, or (next start) a fatal hang.
import FoundationEssentials
import Glibc
import HangwatchPlatform
import Synchronization
import HangwatchCapture
import HangwatchDatabase
import HangwatchSnapshot

final class HangWatcher: @unchecked Sendable {
    // Immutable after init, or touched only on the monitor thread (hence @unchecked).
    private let configuration: HangMonitor.Configuration
    private let capturer: any HangCapturing
    private let paused: PauseFlag
    private let telemetry: HangTelemetry
    private let staging: HangStagingArea
    private let threshold: UInt64
    private let pollInterval: UInt64
    private let sampleInterval: UInt64
    private let stopping = Atomic<Bool>(false)
    private var thread: PlatformThread?

    private var targets: [(target: WatchTarget, channel: PingChannel, watch: TargetWatch)]
    private var active: [Int: ActiveHang] = [:]
    private var stallGuard: StallGuard
    private var lastDumpBySignature: [String: UInt64] = [:]
    private var tracerReported: Int32 = 0
    private var tracerCheckedAt: UInt64?
    private let processStartTicks: UInt64
    /// `hangwatch run` or systemd, when one is watching this process.
    private let supervisor: SupervisorLink?

    init(configuration: HangMonitor.Configuration, capturer: any HangCapturing, paused: PauseFlag) {
        self.configuration = configuration
        self.capturer = capturer
        self.paused = paused
        telemetry = HangTelemetry(logger: configuration.logger, factory: configuration.metricsFactory, handler: configuration.eventHandler)
        staging = HangStagingArea(directory: capturer.stagingDirectory)
        threshold = configuration.threshold.nanoseconds
        // A hang that starts just after a ping was answered is timed from the next ping, up to
        // one interval later: threshold/40 bounds that to 2.5 % of the threshold.
        pollInterval = min(max(threshold / 40, 1_000_000), 250_000_000)
        sampleInterval = max(configuration.sampleInterval.nanoseconds, 1_000_000)
        let link = SupervisorLink(threshold: threshold)
        supervisor = link
        targets = configuration.targets.map { target in
            guard case .mainQueue = target, let link else { return (target, PingChannel(), TargetWatch()) }
            return (target, PingChannel(onAnswer: { link.mainQueueAnswered(now: $0) }), TargetWatch())
        }
        stallGuard = StallGuard(pollInterval: pollInterval, threshold: threshold)
        processStartTicks = ProcFS.startTicks(of: getpid()) ?? 0
    }

    /// Starts the monitor thread, named `hangwatch-mon` (what /proc, ps and reports show).
    func start() {
        do {
            thread = try PlatformThread(name: "hangwatch-mon") { [self] in run() }
        } catch {
            emit(.failed(target: "monitor", stage: "start", message: "\(error)"))
        }
    }

    func stopAndJoin() {
        guard !stopping.exchange(true, ordering: .relaxed) else { return }
        thread?.join()
    }

    private func run() {
        promoteOrphanedHangs()
        while !stopping.load(ordering: .relaxed) {
            tick()
            sleep(until: nextWake(after: ClockReading.monotonicNow()))
        }
    }

    /// The next fixed tick, or sooner: the exact deadline of a pending ping, so that a hang
    /// is judged when it reaches the threshold rather than on the tick after.
    private func nextWake(after now: UInt64) -> UInt64 {
        var wake = now + (active.isEmpty ? pollInterval : min(pollInterval, sampleInterval))
        for entry in targets where !entry.watch.hung {
            guard let sent = entry.watch.sentAt else { continue }
            let deadline = sent &+ threshold
            if deadline > now && deadline < wake { wake = deadline }
        }
        return wake
    }

    private func sleep(until deadline: UInt64) {
        var request = timespec(tv_sec: Int(deadline / 1_000_000_000), tv_nsec: Int(deadline % 1_000_000_000))
        while clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &request, nil) == EINTR {}
    }

    // MARK: one tick

    private func tick() {
        let now = ClockReading.now()
        let stall = stallGuard.check(now)
        if let stall { emit(.rebaselined(reason: stall.reason)) }
        let traced = tracerBlocksDetection(now: now.monotonic)
        let suspended = stall != nil && stall?.excusedNanoseconds == nil
        let allowed = !suspended && !traced && !paused.get()
        for index in targets.indices {
            let answer = targets[index].channel.latest()
            let step = targets[index].watch.step(now: now.monotonic, answered: answer.sequence, answeredAt: answer.at,
                                                 threshold: threshold, detectionAllowed: allowed,
                                                 excused: stall?.excusedNanoseconds ?? 0)
            switch step {
            case .post(let sequence):
                targets[index].channel.post(sequence, to: targets[index].target)
            case .waiting:
                break
            case .hangStarted(let sentAt):
                beginHang(index, sentAt: sentAt, now: now.monotonic)
            case .stillHung:
                continueHang(index, now: now.monotonic)
            case let .recovered(sentAt, answeredAt, next):
                endHang(index, durationNanos: answeredAt - sentAt)
                targets[index].channel.post(next, to: targets[index].target)
            }
        }
    }

    /// Logs, metrics, the program's handler, and the supervisor if one is listening.
    private func emit(_ event: HangEvent) {
        telemetry.emit(event)
        supervisor?.forward(event)
    }

    /// Reads TracerPid when it matters: when a pending ping is due to be judged this tick,
    /// while a tracer is attached, and otherwise once a second (to report a new tracer).
    private func tracerBlocksDetection(now: UInt64) -> Bool {
        guard configuration.suspendWhenTraced else { return false }
        let due = targets.contains { entry in
            guard !entry.watch.hung, let sent = entry.watch.sentAt else { return false }
            return now >= sent && now - sent >= threshold
        }
        if !due, tracerReported == 0, let checked = tracerCheckedAt, now - checked < 1_000_000_000 { return false }
        tracerCheckedAt = now
        let tracer = ProcFS.tracerPID(of: nil)
        if tracer != 0 && tracer != tracerReported { emit(.suspendedWhileTraced(tracerPid: tracer)) }
        tracerReported = tracer
        return tracer != 0
    }

    // MARK: hang lifecycle

    private func beginHang(_ index: Int, sentAt: UInt64, now: UInt64) {
        let target = targets[index].target
        let name = target.description
        let startWall = Date().timeIntervalSince1970 - Double(now - sentAt) / 1e9
        let hang = ActiveHang(target: name, sentAt: sentAt, startWall: startWall)
        active[index] = hang
        let info = HangInfo(target: name, thresholdSeconds: configuration.threshold.seconds,
                            durationSeconds: Double(now - sentAt) / 1e9, recovered: false, startTime: startWall)
        var snapshot: ProcessSnapshot
        do { snapshot = try capturer.captureAll(reason: .hang(info)) } catch {
            emit(.failed(target: name, stage: "capture", message: "\(error)"))
            hang.hungThread = hungThreadFallback(index)
            emit(.detected(target: name, hungThread: hang.hungThread, stagedPath: nil, duplicate: false))
            return
        }
        hang.hungThread = hungThread(in: snapshot, for: target) ?? hungThreadFallback(index)
        if let tid = hang.hungThread, let at = snapshot.threads.firstIndex(where: { $0.tid == tid }) {
            snapshot.threads[at].roles.insert(.hung)
        }
        let signature = stackSignature(snapshot, hung: hang.hungThread, target: name)
        if let last = lastDumpBySignature[signature], now - last < configuration.dedupWindow.nanoseconds {
            hang.duplicate = true
            emit(.detected(target: name, hungThread: hang.hungThread, stagedPath: nil, duplicate: true))
            return
        }
        lastDumpBySignature[signature] = now
        if configuration.keepRecoveredHangsLongerThan != nil { hang.snapshot = snapshot }
        do {
            var staged = try staging.newHang(HangSidecar(
                bundleID: configuration.bundleID, pid: getpid(), processStartTicks: processStartTicks, target: name,
                thresholdSeconds: info.thresholdSeconds, startTime: startWall, lastSeenTime: Date().timeIntervalSince1970,
                sampleCount: 0, hungThread: hang.hungThread, signature: signature))
            try capturer.stage(snapshot, atPath: staged.dumpPath)
            // The sidecar goes last: a sidecar always names a dump that exists.
            staged.sidecar.lastSeenTime = Date().timeIntervalSince1970
            try staging.writeSidecar(staged)
            hang.staged = staged
        } catch {
            emit(.failed(target: name, stage: "stage", message: "\(error)"))
        }
        emit(.detected(target: name, hungThread: hang.hungThread, stagedPath: hang.staged?.dumpPath, duplicate: false))
        takeSample(hang, now: now)
    }

    private func continueHang(_ index: Int, now: UInt64) {
        guard let hang = active[index], !hang.superseded else { return }
        if now - hang.lastSampleAt >= sampleInterval { takeSample(hang, now: now) }
        guard var staged = hang.staged else { return }
        if now - hang.lastSidecarWrite >= 100_000_000 {
            staged.sidecar.lastSeenTime = Date().timeIntervalSince1970
            staged.sidecar.sampleCount = hang.sampleCount
            try? staging.writeSidecar(staged)
            hang.staged = staged
            hang.lastSidecarWrite = now
        }
        if hang.samplesDirty && now - hang.lastSamplesWrite >= 250_000_000 {
            try? staging.writeSamples(hang.samples, of: staged)
            hang.samplesDirty = false
            hang.lastSamplesWrite = now
        }
        if now - hang.lastSupersedeCheck >= 250_000_000 {
            hang.lastSupersedeCheck = now
            checkSupersession(hang, staged: staged, now: now)
        }
    }

    private func takeSample(_ hang: ActiveHang, now: UInt64) {
        hang.lastSampleAt = now
        guard let tid = hang.hungThread, hang.sampleCount < configuration.maxSamples,
              let frames = try? capturer.sample(tid: tid), !frames.isEmpty else { return }
        hang.add(StackSample(tid: tid, frames: frames, count: 1))
    }

    private func checkSupersession(_ hang: ActiveHang, staged: StagedHang, now: UInt64) {
        guard let crash = (try? capturer.crashReports(bundleID: configuration.bundleID, newerThan: hang.startWall))?.first else { return }
        let duration = Double(now - hang.sentAt) / 1e9
        let context = SupersededHangContext(target: hang.target, thresholdSeconds: configuration.threshold.seconds,
                                            durationSeconds: duration, startTime: hang.startWall, sampleCount: hang.sampleCount)
        do { try capturer.attachContext(context, to: crash) } catch {
            emit(.failed(target: hang.target, stage: "attach-context", message: "\(error)"))
        }
        staging.remove(staged)
        hang.staged = nil
        hang.superseded = true
        emit(.superseded(target: hang.target, durationSeconds: duration, crashReport: crash.location))
    }

    private func endHang(_ index: Int, durationNanos: UInt64) {
        guard let hang = active.removeValue(forKey: index) else { return }
        if hang.superseded { return }
        let duration = Double(durationNanos) / 1e9
        if let staged = hang.staged { staging.remove(staged) }
        var reportPath: String?
        if let keep = configuration.keepRecoveredHangsLongerThan, duration >= keep.seconds, var snapshot = hang.snapshot {
            snapshot.reason = .hang(HangInfo(target: hang.target, thresholdSeconds: configuration.threshold.seconds,
                                             durationSeconds: duration, recovered: true, startTime: hang.startWall, samples: hang.samples))
            snapshot.annotations["hang.outcome"] = "recovered"
            do { reportPath = try capturer.submit(snapshot) } catch {
                emit(.failed(target: hang.target, stage: "report", message: "\(error)"))
            }
        }
        emit(.recovered(target: hang.target, durationSeconds: duration, sampleCount: hang.sampleCount, reportPath: reportPath))
    }

    // MARK: fatal hangs of earlier runs

    private func promoteOrphanedHangs() {
        for staged in staging.orphanedHangs(bundleID: configuration.bundleID) {
            let sidecar = staged.sidecar
            if let crash = (try? capturer.crashReports(bundleID: configuration.bundleID, newerThan: sidecar.startTime))?.first {
                staging.remove(staged)
                emit(.discardedStaleHang(target: sidecar.target, crashReport: crash.location))
                continue
            }
            let atLeast = max(sidecar.lastSeenTime - sidecar.startTime, sidecar.thresholdSeconds)
            do {
                var snapshot = try capturer.loadStaged(atPath: staged.dumpPath)
                snapshot.reason = .hang(HangInfo(target: sidecar.target, thresholdSeconds: sidecar.thresholdSeconds,
                                                 durationSeconds: atLeast, recovered: false, startTime: sidecar.startTime,
                                                 samples: staging.readSamples(at: staged.samplesPath)))
                snapshot.annotations["hang.outcome"] = "fatal-hang"
                snapshot.annotations["hang.durationIsLowerBound"] = "true"
                snapshot.annotations["hang.lastSeenTime"] = String(sidecar.lastSeenTime)
                let report = try capturer.submit(snapshot)
                staging.remove(staged)
                emit(.promotedFatalHang(target: sidecar.target, atLeastSeconds: atLeast, reportPath: report))
            } catch {
                // Kept in staging: a later start may manage (nothing is lost).
                emit(.failed(target: sidecar.target, stage: "promote", message: "\(error)"))
            }
        }
    }

    // MARK: helpers

    private func hungThread(in snapshot: ProcessSnapshot, for target: WatchTarget) -> Int32? {
        switch target {
        case .mainQueue: return snapshot.threads.first { $0.roles.contains(.mainQueue) }?.tid
        case .queue(let queue): return snapshot.threads.first { $0.queueLabel == queue.label }?.tid
        case .cooperativePool: return nil
        }
    }

    /// The thread that last ran a ping of this target (for a serial queue, usually the one now stuck).
    private func hungThreadFallback(_ index: Int) -> Int32? {
        if case .cooperativePool = targets[index].target { return nil }
        return targets[index].channel.lastAnsweringThread
    }

    private func stackSignature(_ snapshot: ProcessSnapshot, hung: Int32?, target: String) -> String {
        let frames = snapshot.threads.first { $0.tid == hung }?.frames.prefix(16) ?? []
        return target + ":" + frames.map { String($0, radix: 16) }.joined(separator: ",")
    }
}

final class ActiveHang {
    let target: String
    let sentAt: UInt64
    let startWall: Double
    var hungThread: Int32?
    var staged: StagedHang?
    var snapshot: ProcessSnapshot?
    var duplicate = false
    var superseded = false
    var sampleCount = 0
    var samples: [StackSample] = []
    private var sampleIndex: [[UInt64]: Int] = [:]
    var samplesDirty = false
    var lastSampleAt: UInt64 = 0
    var lastSidecarWrite: UInt64 = 0
    var lastSamplesWrite: UInt64 = 0
    var lastSupersedeCheck: UInt64 = 0

    init(target: String, sentAt: UInt64, startWall: Double) {
        self.target = target
        self.sentAt = sentAt
        self.startWall = startWall
    }

    func add(_ sample: StackSample) {
        sampleCount += 1
        samplesDirty = true
        if let at = sampleIndex[sample.frames] { samples[at].count += 1; return }
        sampleIndex[sample.frames] = samples.count
        samples.append(sample)
    }
}
