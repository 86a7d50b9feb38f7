// The monitor thread: posts pings every threshold/40 and wakes exactly at a pending ping's
// deadline (so a hang is seen by ~1.03× the threshold). It detects, captures and samples each
// hang and hands it to its owner, a TrackedHang (HangwatchLifecycle/TrackedHang.swift, which
// `hangwatch run` feeds too): staged while it lasts (StagingArea), then recovered, superseded by
// a crash report of this process (built while the hang lasted: it took the staged hang over),
// or a fatal hang (promoted at the next start, or by a running monitor of the same bundle id
// that finds it orphaned: its owner's lease is gone).
import FoundationEssentials
import Glibc
import HangwatchPlatform
import Synchronization
import HangwatchCapture
import HangwatchDatabase
import HangwatchLifecycle
import HangwatchPromotion
import HangwatchSnapshot
import HangwatchSupervisorProtocol
import HangwatchTaskCapture

final class HangWatcher: @unchecked Sendable {
    // Immutable after init, or touched only on the monitor thread (hence @unchecked).
    private let configuration: HangMonitor.Configuration
    private let capturer: any HangCapturing
    private let paused: PauseFlag
    private let telemetry: HangTelemetry
    /// nil: hangs stay in memory (HangCapturing.staging).
    private let staging: StagingArea?
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
    /// The monitor thread's own tid: never a hung pool thread.
    private var monitorThread: Int32 = 0
    private var orphansCheckedAt: UInt64 = 0
    /// This process's run record (docs/killed.md); nil for a monitor whose hangs stay in memory.
    private var runRecord: RunRecordKeeper?
    /// Operations run through `HangMonitor.watch`, and those of them reported hung (by id).
    private let operations: Operations
    private var operationHangs: [UInt64: ActiveHang] = [:]
    /// Whether a capture by signals was reported already (noteCaptureMethod).
    private var toldSignalCapture = false
    /// How often a running monitor looks for hangs staged by dead processes.
    private static let orphanCheckInterval: UInt64 = 5_000_000_000
    /// How long the tasks of the operations running in a target's hang are read at most (a
    /// reading that stops says what it left).
    static let runningOperationsTaskScan = TaskScanOptions(maxBytes: 1 << 30, seconds: 0.5)
    /// Pings in a row answered within threshold/4 that end a pool hang.
    static let promptAnswersToRecoverPool = 3

    init(configuration: HangMonitor.Configuration, capturer: any HangCapturing, paused: PauseFlag,
         operations: Operations = Operations()) {
        self.operations = operations
        self.configuration = configuration
        self.capturer = capturer
        self.paused = paused
        telemetry = HangTelemetry(logger: configuration.logger, factory: configuration.metricsFactory, handler: configuration.eventHandler)
        staging = capturer.staging
        threshold = configuration.threshold.nanoseconds
        // A hang that starts just after a ping was answered is timed from the next ping, up to
        // one interval later: threshold/40 bounds that to 2.5 % of the threshold.
        pollInterval = min(max(threshold / 40, 1_000_000), 250_000_000)
        sampleInterval = max(configuration.sampleInterval.nanoseconds, 1_000_000)
        // Hangs kept in memory are the program's own business (a test's limit), not the process's.
        let link = staging == nil ? nil : SupervisorLink(threshold: threshold)
        supervisor = link
        targets = configuration.targets.map { target in
            let watch = TargetWatch(promptAnswersToRecover: target.isPool ? Self.promptAnswersToRecoverPool : 1)
            if case .pool = target { return (target, PingChannel(recordsAnsweringThreads: true), watch) }
            guard case .mainQueue = target, let link else { return (target, PingChannel(), watch) }
            return (target, PingChannel(onAnswer: { link.mainQueueAnswered(now: $0) }), watch)
        }
        stallGuard = StallGuard(pollInterval: pollInterval, threshold: threshold)
        processStartTicks = ProcFS.startTicks(of: getpid()) ?? 0
    }

    /// Promotes what dead processes left staged (so a caller that processes the database right
    /// after `start()` finds their fatal hangs), then starts the monitor thread, named
    /// `hangwatch-mon` (what /proc, ps and reports show).
    func start() {
        promoteOrphanedHangs()
        orphansCheckedAt = ClockReading.monotonicNow()
        beginRunRecord()
        do {
            thread = try PlatformThread(name: "hangwatch-mon") { [self] in run() }
        } catch {
            emit(.failed(target: "monitor", stage: .start, message: "\(error)"))
        }
    }

    func stopAndJoin() {
        guard !stopping.exchange(true, ordering: .relaxed) else { return }
        thread?.join()
        runRecord?.close()
    }

    private func beginRunRecord() {
        guard let staging, configuration.runRecordInterval > .zero else { return }
        do {
            runRecord = try RunRecordKeeper(records: staging.runRecords, bundleID: configuration.bundleID,
                                            interval: configuration.runRecordInterval, now: ClockReading.monotonicNow())
        } catch {
            emit(.failed(target: "monitor", stage: .start, message: "the run record could not be written: \(error)"))
        }
    }

    private func run() {
        monitorThread = currentThreadID()
        while !stopping.load(ordering: .relaxed) {
            tick()
            let now = ClockReading.monotonicNow()
            runRecord?.heartbeatIfDue(now: now) { active.values.map(\.tracked.target.name).sorted() }
            if now - orphansCheckedAt >= Self.orphanCheckInterval {
                orphansCheckedAt = now
                promoteOrphanedHangs()
            }
            sleep(until: nextWake(after: now))
        }
        finishEndedOperations()
        if staging == nil { submitUnfinishedHangs(now: ClockReading.monotonicNow()) }
    }

    /// The next fixed tick, or sooner: the exact deadline of a pending ping, so that a hang
    /// is judged when it reaches the threshold rather than on the tick after.
    private func nextWake(after now: UInt64) -> UInt64 {
        var wake = now + (active.isEmpty ? pollInterval : min(pollInterval, sampleInterval))
        if let deadline = operations.nextDeadline(), deadline > now, deadline < wake { wake = deadline }
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
            case let .stillHungPost(_, next):
                continueHang(index, now: now.monotonic)
                targets[index].channel.post(next, to: targets[index].target)
            }
        }
        checkOperations(now: now.monotonic, detectionAllowed: allowed)
    }

    // MARK: operations (HangMonitor.watch)

    /// Operations past their limit become hangs; reported ones that ended recover; the others
    /// go on (their sidecars kept current).
    private func checkOperations(now: UInt64, detectionAllowed: Bool) {
        finishEndedOperations()
        for hang in operationHangs.values { continueHang(hang, now: now) }
        guard detectionAllowed else { return }
        for (id, operation) in operations.overdue(now: now) { beginOperationHang(id, operation, now: now) }
    }

    /// Reported operations that have ended since: recovered (also when the monitor stops: an
    /// operation that ended while its capture was being taken is not left staged).
    private func finishEndedOperations() {
        for (id, end) in operations.takeEnded() {
            guard let hang = operationHangs.removeValue(forKey: id) else { continue }
            finish(hang, durationNanos: end &- hang.sentAt)
        }
    }

    /// Every thread and every task, the operation's task marked as the culprit; deduplicated by
    /// that task's await chain.
    private func beginOperationHang(_ id: UInt64, _ operation: Operations.Running, now: UInt64) {
        let target = HangTarget.operation(name: operation.name)
        let name = target.name
        // The operation as a hang lists it: its start's wall time, worked out once, is the hang's.
        let listed = Operations.Listed(listing: operation, link: operations.traceLink)
        let hang = newHang(target, sentAt: operation.start, startTime: listed.operation.startTime,
                           thresholdSeconds: Double(operation.limit) / 1e9)
        hang.traces = listed.trace.map {
            [TracedOperation(thread: operation.thread, trace: $0, traceparent: listed.operation.traceparent, always: true)]
        } ?? []
        operationHangs[id] = hang
        var snapshot: ProcessSnapshot
        do { snapshot = try capturer.captureAll(reason: .hang(hangInfo(hang, now: now))) } catch {
            emit(.failed(target: name, stage: .capture, message: "\(error)"))
            emit(.detected(target: name, hungThread: nil, stagedPath: nil, duplicate: false))
            tellTraces(hang, .began, now: now)
            return
        }
        noteCaptureMethod(snapshot, target: name)
        let tasks = SwiftTaskCapture.capture(pid: getpid())
        snapshot.tasks = tasks
        snapshot.annotations[OperationAnnotation.name] = operation.name
        if let traceparent = listed.operation.traceparent { snapshot.annotations[OperationAnnotation.traceparent] = traceparent }
        var culprit = UInt64(operation.task)
        if operation.task != 0 {
            snapshot.annotations[OperationAnnotation.task] = String(operation.task, radix: 16)
            // The tasks that carry its id are its work: the culprit is where their awaits end.
            let ids = SwiftTaskCapture.taskLocalValues(key: Operations.currentKey, in: tasks, pid: getpid())
            culprit = OperationWork.stuckTask(own: culprit, tasks: tasks.tasks, ofOperation: Set(ids.filter { $0.value == id }.keys))
            if culprit != UInt64(operation.task) { snapshot.annotations[OperationAnnotation.culprit] = String(culprit, radix: 16) }
        }
        let chain = tasks.tasks.first { $0.address == culprit }?.frames ?? []
        hang.tracked.signature = name + ":" + chain.prefix(16).map { String($0, radix: 16) }.joined(separator: ",")
        // A duplicate is never staged later: a recapture would have no task to name (the first
        // of these, staged, is what a fatal end reports).
        guard captured(hang, snapshot, duplicate: isDuplicate(hang.tracked.signature, now: now), mayStageLater: false) else {
            emit(.detected(target: name, hungThread: nil, stagedPath: nil, duplicate: true))
            tellTraces(hang, .began, now: now)
            return
        }
        emit(.detected(target: name, hungThread: nil, stagedPath: hang.tracked.staged.flatMap { staging?.dumpPath(of: $0) }, duplicate: false))
        tellTraces(hang, .began, now: now)
    }

    /// Logs, metrics and the program's handler.
    private func emit(_ event: HangEvent) { telemetry.emit(event) }

    /// Tells the traces of the operations this hang involves (TraceLink.swift): an operation
    /// hang's own operation; for a target's hang, the operations that began on a hung thread.
    /// `began` once per operation (a pool's hung threads are known a threshold later); the
    /// other kinds only to the traces told it began. On the monitor thread, which has no trace
    /// of its own: the hang's own work never shows in the application's spans.
    private func tellTraces(_ hang: ActiveHang, _ kind: HangTraceEvent.Kind, now: UInt64, reportID: String? = nil) {
        guard let link = operations.traceLink, !hang.traces.isEmpty else { return }
        // An operation's own hang that recovered was told on its task as it returned
        // (Operations.tellTraceOfEnd), while the request's span was still open.
        if kind == .recovered && hang.traces.contains(where: \.always) { return }
        let event = HangTraceEvent(kind: kind, target: hang.tracked.target.name, durationSeconds: Double(now &- hang.sentAt) / 1e9,
                                   hungThread: hang.tracked.hungThreads.first,
                                   reportID: reportID ?? (kind == .began ? hang.tracked.staged.map { $0.id.lowercased() } : nil))
        for index in hang.traces.indices {
            let traced = hang.traces[index]
            if kind == .began {
                guard !traced.told, hang.involves(traced) else { continue }
                hang.traces[index].told = true
            } else if !traced.told {
                continue
            }
            link.record(event, in: traced.trace)
        }
    }

    /// A hang of a process that is gone, promoted here: the traces its staged files named are
    /// told it was fatal, continued from their traceparents.
    private func tellTracesOfFatalHang(_ sidecar: HangSidecar, atLeastSeconds: Double, reportID: String) {
        guard let link = operations.traceLink else { return }
        let event = HangTraceEvent(kind: .fatal, target: sidecar.target.name, durationSeconds: atLeastSeconds,
                                   hungThread: sidecar.hungThreads?.first ?? sidecar.hungThread, reportID: reportID)
        for traceparent in (sidecar.traceparents ?? []).prefix(HangSidecar.maximumTraceparents) {
            if let trace = link.trace(continuing: traceparent) { link.record(event, in: trace) }
        }
    }

    /// The id of the report a submitted dump becomes: the UUID of its `<bundle>@<UUID>.hwdump`
    /// name, lowercased (DumpProcessor names reports so).
    private static func reportID(ofPath path: String) -> String {
        let name = path.split(separator: "/").last.map(String.init) ?? path
        let id = name.split(separator: "@", maxSplits: 1).last ?? Substring(name)
        return String(id.prefix { $0 != "." }).lowercased()
    }

    /// Tells `hangwatch run` (when it is listening) what hangs, since when, and which threads.
    private func tellSupervisor(_ hang: ActiveHang) {
        supervisor?.hangDetected(MonitorHang(
            target: hang.tracked.target, threads: hang.tracked.hungThreads, startTime: hang.tracked.startTime, bundleID: configuration.bundleID,
            stagedID: hang.tracked.staged?.id, databasePath: staging.map { Self.absolute($0.databasePath) },
            thresholdSeconds: hang.tracked.thresholdSeconds, operations: hang.tracked.operations))
    }

    /// `path` from the root (the supervisor may run in another directory).
    private static func absolute(_ path: String) -> String {
        if path.hasPrefix("/") { return path }
        guard let cwd = getcwd(nil, 0) else { return path }
        defer { free(cwd) }
        return String(cString: cwd) + "/" + path
    }

    /// Reads TracerPid when it matters: when a pending ping is due to be judged this tick,
    /// while a tracer is attached, and otherwise once a second (to report a new tracer).
    /// A quiet capture's helper of this process (another monitor's, a DumpClient's) is no
    /// debugger: it holds the main thread for microseconds and must neither shorten nor hide a
    /// hang (LiveCapture.isOwnCaptureHelper).
    private func tracerBlocksDetection(now: UInt64) -> Bool {
        guard configuration.suspendWhenTraced else { return false }
        let due = targets.contains { entry in
            guard !entry.watch.hung, let sent = entry.watch.sentAt else { return false }
            return now >= sent && now - sent >= threshold
        }
        if !due, tracerReported == 0, let checked = tracerCheckedAt, now - checked < 1_000_000_000 { return false }
        tracerCheckedAt = now
        var tracer = ProcFS.tracerPID(of: nil)
        if tracer != 0 && LiveCapture.isOwnCaptureHelper(tracer) { tracer = 0 }
        if tracer != 0 && tracer != tracerReported { emit(.suspendedWhileTraced(tracerPid: tracer)) }
        tracerReported = tracer
        return tracer != 0
    }

    // MARK: hang lifecycle

    private func beginHang(_ index: Int, sentAt: UInt64, now: UInt64) {
        let target = targets[index].target
        let name = target.description
        let startWall = Date().timeIntervalSince1970 - Double(now - sentAt) / 1e9
        let running = operations.running()
        let hang = newHang(target.hangTarget, sentAt: sentAt, startTime: startWall, operations: running.map(\.operation))
        hang.traces = running.compactMap { listed in
            listed.trace.map { TracedOperation(thread: listed.operation.thread, trace: $0, traceparent: listed.operation.traceparent) }
        }
        active[index] = hang
        let info = hangInfo(hang, now: now)
        var snapshot: ProcessSnapshot
        do { snapshot = try capturer.captureAll(reason: .hang(info)) } catch {
            emit(.failed(target: name, stage: .capture, message: "\(error)"))
            hang.tracked.hungThreads = hungThreadFallback(index).map { [$0] } ?? []
            emit(.detected(target: name, hungThread: hang.tracked.hungThreads.first, stagedPath: nil, duplicate: false))
            tellSupervisor(hang)
            tellTraces(hang, .began, now: now)
            return
        }
        noteCaptureMethod(snapshot, target: name)
        // The tasks of the operations running: where each of them waits. A shorter reading than
        // an operation's own hang gets: the monitor thread samples the hang meanwhile.
        if !hang.tracked.operations.isEmpty { snapshot.tasks = SwiftTaskCapture.capture(pid: getpid(), options: Self.runningOperationsTaskScan) }
        let signature: String
        if target.isPool {
            // Its hung threads are those whose stacks have not moved by the next capture, a
            // threshold later.
            let pool = PoolState(channel: target == .cooperativePool ? nil : targets[index].channel, modules: snapshot.modules)
            hang.pool = pool
            hang.poolCandidates = PoolHangThreads.candidates(in: snapshot, excluding: [monitorThread], members: pool.members(in: snapshot))
            hang.detectionSnapshot = snapshot
            signature = name + ":" + PoolHangThreads.signature(hang.poolCandidates)
        } else {
            hang.tracked.hungThreads = (hungThread(in: snapshot, for: target) ?? hungThreadFallback(index)).map { [$0] } ?? []
            signature = stackSignature(snapshot, hung: hang.tracked.hungThreads.first, target: name)
        }
        hang.tracked.signature = signature
        guard captured(hang, snapshot, duplicate: isDuplicate(signature, now: now)) else {
            emit(.detected(target: name, hungThread: hang.tracked.hungThreads.first, stagedPath: nil, duplicate: true))
            tellSupervisor(hang)
            tellTraces(hang, .began, now: now)
            return
        }
        emit(.detected(target: name, hungThread: hang.tracked.hungThreads.first, stagedPath: hang.tracked.staged.flatMap { staging?.dumpPath(of: $0) }, duplicate: false))
        tellSupervisor(hang)
        tellTraces(hang, .began, now: now)
        takeSample(hang, now: now)
    }

    /// A hang of `target` the monitor drives, owned by a TrackedHang (staged in this database, its
    /// capture held in memory too when a recovered hang may be kept); `thresholdSeconds`: an
    /// operation's own limit, else the configuration's threshold.
    private func newHang(_ target: HangTarget, sentAt: UInt64, startTime: Double, thresholdSeconds: Double? = nil,
                         operations: [RunningOperation] = []) -> ActiveHang {
        let owner = HangOwner(bundleID: configuration.bundleID, pid: getpid(), startTicks: processStartTicks)
        return ActiveHang(TrackedHang(target: target, startTime: startTime,
                                      thresholdSeconds: thresholdSeconds ?? configuration.threshold.seconds, operations: operations,
                                      owner: owner, keeper: staging, holdsCapture: configuration.keepRecoveredHangsLongerThan != nil),
                          sentAt: sentAt)
    }

    /// The hang's first capture: kept (staged) unless it repeats a hang reported within the dedup
    /// window, false then (TrackedHang.captured); a capture that could not be staged is said.
    private func captured(_ hang: ActiveHang, _ snapshot: ProcessSnapshot, duplicate: Bool, mayStageLater: Bool = true) -> Bool {
        hang.tracked.traceparents = hang.traces.filter { hang.involves($0) }.compactMap(\.traceparent)
        do { return try hang.tracked.captured(snapshot, duplicate: duplicate, mayStageLater: mayStageLater) } catch {
            emit(.failed(target: hang.tracked.target.name, stage: .stage, message: "\(error)"))
            return true
        }
    }

    /// Keeps a later capture of the hang (`amending`: a better one of the moment already kept),
    /// with the traceparents of the operations it involves now; a failure to stage it is said.
    private func stage(_ hang: ActiveHang, _ snapshot: ProcessSnapshot, amending: Bool = false) {
        hang.tracked.traceparents = hang.traces.filter { hang.involves($0) }.compactMap(\.traceparent)
        do { try amending ? hang.tracked.amend(snapshot) : hang.tracked.keep(snapshot) } catch {
            emit(.failed(target: hang.tracked.target.name, stage: .stage, message: "\(error)"))
        }
    }

    /// Captures that had to use signals (ptrace refused: a debugger, Yama, seccomp) interrupt the
    /// program's blocking calls: said once per process life of the monitor, as a failure of the
    /// quiet capture, and in every such report (`capture.method`).
    private func noteCaptureMethod(_ snapshot: ProcessSnapshot, target: String) {
        guard !toldSignalCapture, let method = snapshot.annotations[LiveCapture.methodAnnotation],
              LiveCapture.StopMethod(annotation: method)?.fellBackToSignals == true else { return }
        toldSignalCapture = true
        emit(.failed(target: target, stage: .quietCapture,
                     message: "captured with \(method): the signals interrupt the program's blocking calls (docs/hang-monitor.md, \"How capture works\")"))
    }

    private func continueHang(_ index: Int, now: UInt64) {
        guard let hang = active[index] else { return }
        continueHang(hang, now: now)
    }

    private func continueHang(_ hang: ActiveHang, now: UInt64) {
        guard hang.tracked.lifecycle.isLive else { return }
        let lasted = now - hang.sentAt
        // Taken over by a crash report of this process: nothing of it is written again.
        if let report = hang.tracked.takenOver() {
            emit(.superseded(target: hang.tracked.target.name, durationSeconds: Double(lasted) / 1e9, crashReport: report ?? "unknown"))
            tellTraces(hang, .superseded, now: now, reportID: report)
            return
        }
        // A pool hang's threads: those whose stacks did not move in one threshold.
        if !hang.poolCandidates.isEmpty, lasted >= 2 * threshold { confirmPoolThreads(hang, now: now) }
        // A duplicate that goes on may be fatal: staged after all, so it can be promoted.
        if hang.tracked.dueForStaging(lasted: lasted, threshold: threshold) {
            if let snapshot = recapture(hang, now: now) {
                stage(hang, snapshot)
                tellSupervisor(hang)
            }
        }
        if now - hang.lastSampleAt >= sampleInterval { takeSample(hang, now: now) }
        hang.tracked.keepCurrent(now: now)
    }

    /// The second capture of a pool hang (once): the candidates with unchanged stacks are its
    /// hung threads. They get the role in the capture taken when the hang was detected, which
    /// stays the report (its time is the detection's; the hung threads' top frames are the
    /// same in both), and sampling starts.
    private func confirmPoolThreads(_ hang: ActiveHang, now: UInt64) {
        let candidates = hang.poolCandidates
        hang.poolCandidates = [:]
        let detectionSnapshot = hang.detectionSnapshot
        hang.detectionSnapshot = nil
        guard let second = recapture(hang, now: now), let pool = hang.pool else { return }
        pool.modules = second.modules
        hang.tracked.hungThreads = PoolHangThreads.confirmed(candidates, in: second, excluding: [monitorThread], members: pool.members(in: second))
        guard !hang.tracked.hungThreads.isEmpty else { return }
        stage(hang, detectionSnapshot ?? second, amending: true)
        emit(.hungThreadsFound(target: hang.tracked.target.name, threads: hang.tracked.hungThreads))
        tellSupervisor(hang)
        tellTraces(hang, .began, now: now)
    }

    private func takeSample(_ hang: ActiveHang, now: UInt64) {
        hang.lastSampleAt = now
        if let pool = hang.pool { return samplePool(hang, pool, now: now) }
        for tid in hang.tracked.hungThreads where hang.tracked.sampleCount < configuration.maxSamples {
            guard let frames = try? capturer.sample(tid: tid), !frames.isEmpty else { continue }
            hang.tracked.add(StackSample(tid: tid, frames: frames, count: 1))
        }
    }

    /// A pool hang's samples follow the blocked work: a hung thread still at work is sampled; one
    /// gone idle (its job ended and the work went on on another thread) is not, and a capture
    /// of every thread, at most once per `threshold/4`, finds the threads now at work to sample
    /// instead (PoolHangThreads.isAtWork).
    private func samplePool(_ hang: ActiveHang, _ pool: PoolState, now: UInt64) {
        var idle: Set<Int32> = []
        for tid in hang.tracked.hungThreads where hang.tracked.sampleCount < configuration.maxSamples {
            guard let frames = try? capturer.sample(tid: tid), !frames.isEmpty,
                  PoolHangThreads.isAtWork(frames, modules: pool.modules, cooperative: pool.channel == nil)
            else { idle.insert(tid); continue }
            hang.tracked.add(StackSample(tid: tid, frames: frames, count: 1))
        }
        guard !idle.isEmpty, now &- pool.lookedForWorkAt >= max(threshold / 4, sampleInterval),
              hang.tracked.sampleCount < configuration.maxSamples else { return }
        pool.lookedForWorkAt = now
        guard let snapshot = recapture(hang, now: now) else { return }
        pool.modules = snapshot.modules
        let atWork = PoolHangThreads.candidates(in: snapshot, excluding: [monitorThread], members: pool.members(in: snapshot))
        let kept = hang.tracked.hungThreads.filter { !idle.contains($0) }
        let added = atWork.keys.filter { !kept.contains($0) }.sorted().prefix(max(0, PoolHangThreads.maximumThreads - kept.count))
        guard !kept.isEmpty || !added.isEmpty else { return }  // nothing at work: look again later
        hang.tracked.hungThreads = kept + added
        for thread in snapshot.threads where added.contains(thread.tid) && hang.tracked.sampleCount < configuration.maxSamples {
            hang.tracked.add(StackSample(tid: thread.tid, frames: thread.frames, count: 1))
        }
    }

    /// Every thread again, while the hang goes on.
    private func recapture(_ hang: ActiveHang, now: UInt64) -> ProcessSnapshot? {
        try? capturer.captureAll(reason: .hang(hangInfo(hang, now: now)))
    }

    private func hangInfo(_ hang: ActiveHang, now: UInt64) -> HangInfo {
        hang.tracked.info(durationSeconds: Double(now > hang.sentAt ? now - hang.sentAt : 0) / 1e9)
    }

    /// Where a hang's ending goes (TrackedHang.end): its last capture handed over as a report;
    /// the report's path, nil when that failed (the failure is emitted).
    private func reports(of hang: ActiveHang) -> HangEndingSink {
        { [self] snapshot in
            do { return try capturer.submit(snapshot) } catch {
                emit(.failed(target: hang.tracked.target.name, stage: .report, message: "\(error)"))
                return nil
            }
        }
    }

    private func endHang(_ index: Int, durationNanos: UInt64) {
        guard let hang = active.removeValue(forKey: index) else { return }
        finish(hang, durationNanos: durationNanos)
    }

    /// A hang that ended: its staged capture goes (or becomes a report, past
    /// keepRecoveredHangsLongerThan), and the end is told.
    private func finish(_ hang: ActiveHang, durationNanos: UInt64) {
        let duration = Double(durationNanos) / 1e9
        let keep = configuration.keepRecoveredHangsLongerThan.map { duration >= $0.seconds } ?? false
        guard let (_, reportPath) = hang.tracked.end(.recovered, durationSeconds: duration, keepRecovered: keep,
                                                     sink: reports(of: hang)) else { return }
        emit(.recovered(target: hang.tracked.target.name, durationSeconds: duration, sampleCount: hang.tracked.sampleCount, reportPath: reportPath))
        tellTraces(hang, .recovered, now: hang.sentAt &+ durationNanos, reportID: reportPath.map(Self.reportID(ofPath:)))
        supervisor?.hangRecovered(seconds: duration)
    }

    /// In memory, a hang still going when the monitor stops is handed over as it stands (in
    /// a database it stays staged, for the next start to promote).
    private func submitUnfinishedHangs(now: UInt64) {
        for hang in active.values {
            guard hang.tracked.capture != nil,
                  let (ending, path) = hang.tracked.end(.unfinished, durationSeconds: Double(now - hang.sentAt) / 1e9, sink: reports(of: hang)),
                  ending.report else { continue }
            tellTraces(hang, .unfinished, now: now, reportID: path.map(Self.reportID(ofPath:)))
        }
        active.removeAll()
    }

    // MARK: fatal hangs of earlier runs

    /// Hangs this bundle's dead processes left staged become fatal-hang dumps (HangPromotion).
    private func promoteOrphanedHangs() {
        guard let staging else { return }
        for outcome in HangPromotion(database: staging.database).promoteOrphans(bundleID: configuration.bundleID) {
            switch outcome {
            case let .promoted(sidecar, atLeast, path, dump):
                emit(.promotedFatalHang(target: sidecar.target.name, atLeastSeconds: atLeast, reportPath: path))
                // DumpProcessor names a report by its dump's uuid, lowercased.
                tellTracesOfFatalHang(sidecar, atLeastSeconds: atLeast, reportID: dump.uuid.uuidString.lowercased())
            case let .supersededByCrash(sidecar, crash):
                emit(.discardedStaleHang(target: sidecar.target.name, crashReport: crash))
            case .awaitingCrashDump:
                break  // the crash dump's processor stitches it into the crash report
            case let .failed(sidecar, error):
                emit(.failed(target: sidecar.target.name, stage: .promote, message: "\(error)"))
            }
        }
    }

    // MARK: helpers

    private func hungThread(in snapshot: ProcessSnapshot, for target: WatchTarget) -> Int32? {
        switch target {
        case .mainQueue: return snapshot.threads.first { $0.roles.contains(.mainQueue) }?.tid
        case .queue(let queue): return snapshot.threads.first { $0.queueLabel == queue.label }?.tid
        case .cooperativePool, .custom, .pool: return nil
        }
    }

    /// The thread that last ran a ping of this target (for a serial queue, usually the one now stuck).
    private func hungThreadFallback(_ index: Int) -> Int32? {
        if targets[index].target.isPool { return nil }
        return targets[index].channel.lastAnsweringThread
    }

    /// Whether a hang with `signature` was reported within the dedup window (else it is noted
    /// as reported now).
    private func isDuplicate(_ signature: String, now: UInt64) -> Bool {
        if let last = lastDumpBySignature[signature], now - last < configuration.dedupWindow.nanoseconds { return true }
        lastDumpBySignature[signature] = now
        return false
    }

    private func stackSignature(_ snapshot: ProcessSnapshot, hung: Int32?, target: String) -> String {
        let frames = snapshot.threads.first { $0.tid == hung }?.frames.prefix(16) ?? []
        return target + ":" + frames.map { String($0, radix: 16) }.joined(separator: ",")
    }
}

/// A hang the monitor thread drives: the hang itself (TrackedHang, which stages, samples and
/// ends it) and what detecting it needs: when its ping was sent, the traces it may involve, and
/// a pool hang's search for its hung threads.
final class ActiveHang {
    let tracked: TrackedHang
    /// When the ping that went unanswered was sent (monotonic nanoseconds): the hang's start.
    let sentAt: UInt64
    /// The traces of the operations it may involve (HangWatcher.tellTraces).
    var traces: [TracedOperation] = []
    /// A pool hang's pool (nil for other hangs).
    var pool: PoolState?
    /// A pool hang's first capture: threads that may be stuck, with their top frames; emptied
    /// once the second capture has judged them.
    var poolCandidates: [Int32: [UInt64]] = [:]
    /// A pool hang's capture at detection, held until its hung threads are known (one
    /// threshold) so they can be marked in it.
    var detectionSnapshot: ProcessSnapshot?
    var lastSampleAt: UInt64 = 0

    init(_ tracked: TrackedHang, sentAt: UInt64) {
        self.tracked = tracked
        self.sentAt = sentAt
    }

    /// Whether the hang involves the operation: its own hang, or one of a thread it began on.
    func involves(_ traced: TracedOperation) -> Bool {
        traced.always || tracked.hungThreads.contains(traced.thread)
    }
}

/// A watched operation's trace, as a hang that may involve it keeps it.
struct TracedOperation {
    /// The thread the operation began on: a hang of that thread involves it.
    var thread: Int32
    var trace: any Sendable
    /// Its W3C traceparent, asked of the link when the hang began.
    var traceparent: String?
    /// The hang is this operation's own (past its limit): involved whatever the threads.
    var always = false
    /// Whether its trace was told the hang began.
    var told = false
}

/// What a pool hang knows of its pool: how its threads are told, the modules its stacks are
/// judged against, and when the threads at work were last looked for (HangWatcher.samplePool).
final class PoolState {
    /// A `.pool` target's ping channel (the threads that answered); nil for the cooperative pool.
    let channel: PingChannel?
    var modules: [ModuleSnapshot]
    var lookedForWorkAt: UInt64 = 0

    init(channel: PingChannel?, modules: [ModuleSnapshot]) {
        self.channel = channel
        self.modules = modules
    }

    /// The pool's threads in `snapshot` (PoolHangThreads.Members); nil: the cooperative pool's rule.
    func members(in snapshot: ProcessSnapshot) -> PoolHangThreads.Members? {
        channel.map { PoolHangThreads.Members(answering: $0.answeringThreads, in: snapshot) }
    }
}
