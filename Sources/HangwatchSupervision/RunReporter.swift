// What `hangwatch run` does when the supervisor sees a hang: capture the child from outside
// (ptrace), stage the capture in the database's staging/ directory, throw it away if the
// child recovers, or turn it into a fatal-hang report if the child is killed for hanging or
// ends while hung. The hang is owned, as HangMonitor's are, by a TrackedHang (HangwatchLifecycle/
// TrackedHang.swift): this file detects, captures and reports; that type stages and ends.
import HangwatchPlatform
import HangwatchSnapshot
import HangwatchSymbolication
import HangwatchDatabase
import HangwatchLifecycle
import HangwatchReport
import HangwatchProcessing
import HangwatchRemoteCapture
import HangwatchTaskCapture
import HangwatchSupervisorProtocol
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

package final class RunReporter: SupervisorReporting {
    package struct Settings {
        package var threshold: Double
        package var keepRecovered: Bool
        package var killSignal: Int32
        /// How a report's summary is written to stderr (`--format`); nil: the text summary.
        package var renderSummary: ((Report) -> Data)?
        /// This run's id (HANGWATCH_RUN_ID for the child; an annotation of every report of the run).
        package var runID: String
        /// What the run's reports leave out (--redact).
        package var redaction: Redaction = []
        /// --tasks: each hang capture also reads the culprit's Swift tasks (docs/tasks.md).
        package var captureTasks = false
        /// The database the child's own HangMonitor uses, when its environment names another one
        /// (HANGWATCH_DATABASE_PATH): where its run record is.
        package var childDatabasePath: String?

        /// Settings; each parameter is the property of the same name.
        package init(threshold: Double, keepRecovered: Bool, killSignal: Int32, renderSummary: ((Report) -> Data)?, runID: String,
                     redaction: Redaction = [], captureTasks: Bool = false, childDatabasePath: String? = nil) {
            self.threshold = threshold
            self.keepRecovered = keepRecovered
            self.killSignal = killSignal
            self.renderSummary = renderSummary
            self.runID = runID
            self.redaction = redaction
            self.captureTasks = captureTasks
            self.childDatabasePath = childDatabasePath
        }
    }

    package let commandLine: [String]
    package let database: CrashReportDatabase
    package let settings: Settings
    private let processor: DumpProcessor
    /// `--catch-crashes`: the tracer that owns the child; hang captures go through it.
    package var tracer: ChildTracer?
    /// hangwatch's own children that are no part of the job (its watchdog): never captured.
    package var ownProcesses: Set<Int32> = []
    /// The child's threads at the delivery of its first fatal signal (`--catch-crashes`).
    private var caughtCrash: ProcessSnapshot?

    /// The hang being watched (it stays once it ended with the child: its cause says which
    /// database the child's monitor used).
    private var hang: WatchedHang?

    /// A hang of the child: the hang itself (its capture is the culprit's), what the supervisor
    /// said caused it, the whole tree of its capture, and the last look before a kill.
    private struct WatchedHang {
        var hang: TrackedHang
        var cause: HangCause
        var tree: TreeCaptureResult?
        /// The last look before the kill (`killingForHang`), and how long the hang had lasted then.
        var lastLook: (capture: Capture, duration: Double)?

        /// Its latest capture with its tree, when one was taken.
        var capture: Capture? { hang.capture.flatMap { snapshot in tree.map { Capture(snapshot: snapshot, tree: $0) } } }
    }

    /// The likely culprit's snapshot, and the tree it was found in.
    private struct Capture {
        var snapshot: ProcessSnapshot
        var tree: TreeCaptureResult
    }

    /// What a `killed` report says of the child (docs/killed.md): its memory cgroup (the job's
    /// own with --memory-max) and the OOM-kill counter seen while it ran, its identity and its
    /// last states, sampled once a second (the last `RunRecord.maxSamples`).
    package var memoryCgroup: MemoryCgroup?
    private var oomKillsSeen: UInt64?
    private var childIdentity: ProcessIdentity?
    private var childSamples: [Report.StateSample] = []
    private let startedAt = Date().timeIntervalSince1970

    /// `symbolCache`: where module indexes are kept between runs (the CLI passes the user's).
    package init(commandLine: [String], database: CrashReportDatabase, settings: Settings, symbolCache: SymbolCache? = nil) {
        self.commandLine = commandLine
        self.database = database
        self.processor = DumpProcessor(database: database, redaction: settings.redaction, symbolCache: symbolCache)
        self.settings = settings
    }

    private var name: String { URL(fileURLWithPath: commandLine[0]).lastPathComponent }

    // MARK: - SupervisorReporting

    package func hangBegan(pid: pid_t, cause: HangCause, startedAt: Date) {
        say("\(name) (pid \(pid)) \(cause.isTimeout ? "still runs" : "is hung"): \(cause.summary)")
        let began = newHang(pid: pid, cause: cause, startTime: startedAt.timeIntervalSince1970, keeper: database.stagingArea)
        hang = WatchedHang(hang: began, cause: cause)
        guard let captured = capture(pid: pid, hang: began, cause: cause, duration: 0) else { return }
        hang?.tree = captured.tree
        let snapshot = captured.snapshot
        let processes = captured.tree.members.count > 1
            ? " (pid \(snapshot.process.pid), the likely culprit of \(captured.tree.members.count) processes)" : ""
        // Staged as HangMonitor stages its own, under this process's lease, as the culprit's:
        // should hangwatch die during the hang, the next processor of this database promotes it.
        began.owner = HangOwner(bundleID: snapshot.process.bundleID, pid: snapshot.process.pid,
                                startTicks: ProcFS.startTicks(of: snapshot.process.pid) ?? 0)
        began.hungThreads = snapshot.threads.filter { $0.roles.contains(.hung) }.map(\.tid)
        do {
            _ = try began.captured(snapshot, duplicate: false)
            let path = began.staged.map { database.stagingArea.dumpPath(of: $0) } ?? "?"
            say("captured \(Text.counted(snapshot.threads.count, "thread"))\(processes); staged at \(path)")
        } catch {
            say("could not stage the capture: \(error)")
        }
    }

    /// A hang of the child, begun `startTime` (seconds since 1970); staged by `keeper`.
    private func newHang(pid: pid_t, cause: HangCause, startTime: Double, keeper: (any HangKeeping)?) -> TrackedHang {
        var operations: [RunningOperation] = []
        if case .monitorReported(let reported) = cause { operations = reported.operations }
        return TrackedHang(target: cause.target, startTime: startTime, thresholdSeconds: cause.thresholdSeconds ?? settings.threshold,
                           operations: operations, owner: HangOwner(bundleID: name, pid: pid, startTicks: 0), keeper: keeper,
                           holdsCapture: true)
    }

    package func hangEnded(pid: pid_t, cause: HangCause, duration: Double) {
        say("\(name) (pid \(pid)) recovered after \(format(duration)) s")
        guard let current = hang else { return }
        hang = nil
        _ = current.hang.end(.recovered, durationSeconds: duration, keepRecovered: settings.keepRecovered) { snapshot in
            let report = store(snapshot, tree: current.tree, context: nil)
            if let report { say("kept as report \(report.id)") }
            return report?.id
        }
    }

    package func killingForHang(pid: pid_t, cause: HangCause, duration: Double) {
        // A timeout's duration is how long the job ran (Supervisor.swift times it from the start).
        let why = cause.isTimeout ? "\(cause.summary) after \(format(duration)) s" : "hung for \(format(duration)) s"
        say("killing \(name) (pid \(pid)) with \(SignalNames.name(settings.killSignal)): \(why)")
        if hang == nil {  // the supervisor begins every hang it kills for; should it not, the kill still has one
            hang = WatchedHang(hang: newHang(pid: pid, cause: cause, startTime: Date().timeIntervalSince1970 - duration, keeper: nil),
                               cause: cause)
        }
        // A last look, so the report shows where it was when it died.
        guard let current = hang?.hang else { return }
        if let captured = capture(pid: pid, hang: current, cause: cause, duration: duration) ?? hang?.capture {
            hang?.lastLook = (captured, duration)
        }
    }

    package func crashCaught(pid: pid_t, snapshot: ProcessSnapshot?, failure: String?) {
        guard let snapshot, case .crash(let info) = snapshot.reason else {
            say("\(name) (pid \(pid)) got a fatal signal, but capturing it failed: \(failure ?? "unknown reason")")
            return
        }
        say("\(name) (pid \(pid)) got \(SignalNames.name(info.number)) on thread \(info.tid): "
            + "captured \(Text.counted(snapshot.threads.count, "thread")) before delivery")
        caughtCrash = snapshot
    }

    package func sampleChild(pid: pid_t) {
        // Dead but not reaped yet (a zombie): what the cgroup counts now is its death, not its life.
        guard let stat = ProcFS.processStat(of: pid), stat.state != .zombie else { return }
        if memoryCgroup == nil { memoryCgroup = MemoryCgroup.of(pid) }
        // The counter first, then whether the child is being killed: a count read while the
        // child still lived with no SIGKILL pending is one of its life, but for the microseconds
        // between the kernel's count and its SIGKILL (__oom_kill_process counts first). A CI run
        // read the count of the child's own OOM kill as "seen alive" while the child took its
        // time to die; where the kernel log is readable, its line settles it (KillJudgement).
        let counted = memoryCgroup?.oomKills()
        if !ProcFS.isBeingKilled(pid) { oomKillsSeen = counted ?? oomKillsSeen }
        let identity = RemoteCapture.identity(pid: pid)
        if !identity.executable.isEmpty { childIdentity = identity }
        let (resident, threads) = ProcFS.residentBytesAndThreads(of: pid)
        childSamples.append(Report.StateSample(time: Date().timeIntervalSince1970, residentBytes: resident, threads: threads))
        if childSamples.count > RunRecord.maxSamples { childSamples.removeFirst() }
    }

    /// The hung threads of a capture of the child: those its HangMonitor named; the main thread
    /// for a main-queue hang it named none of (a version 1 message); else the thread that is doing
    /// something (none when every thread only sleeps or waits: an idle job past its --timeout is
    /// not "hung" anywhere). A pool's hang whose threads the monitor had not confirmed yet (the
    /// job was killed first) is never charged to the main thread.
    package static func hungThreads(reported: MonitorHang?, pid: Int32, snapshot: ProcessSnapshot) -> Set<Int32> {
        if let reported, !reported.threads.isEmpty { return Set(reported.threads) }
        if let reported, reported.target == nil || reported.target == .mainQueue { return [pid] }
        return Set(TreeCapture.hungThread(of: snapshot).map { [$0] } ?? [])
    }

    /// Before the child runs: the cgroup it runs in and its counter.
    package func noteMemoryCgroup(_ cgroup: MemoryCgroup?) {
        memoryCgroup = cgroup
        oomKillsSeen = cgroup?.oomKills()
    }

    /// Signals a process sends itself when it faults or aborts: a crash, not a kill from outside.
    private static let crashSignals: Set<Int32> = [SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP, SIGSYS, SIGABRT]

    /// The child died of `signal`, which hangwatch did not send and which is no crash of its own:
    /// a `killed` report with what is known (KillJudgement) and what hangwatch saw of it.
    private func storeKilled(pid: pid_t, signal: Int32, stderrTail tail: String?, lastLiveness: String?,
                             unkillable: [Report.UnkillableProcess]?) {
        // hangwatch saw it die: its life ends now.
        let subject = KillJudgement.Subject(pid: pid, name: childIdentity?.name ?? name, startedAt: startedAt,
                                            deadBy: Date().timeIntervalSince1970)
        var killed = KillJudgement.judge(subject, signal: signal, cgroup: memoryCgroup, oomKillsSeen: oomKillsSeen)
        killed.lastSeenAlive = childSamples.last?.time
        killed.samples = childSamples
        killed.lastLiveness = lastLiveness
        var identity = childIdentity ?? ProcessIdentity(pid: pid, name: name, executable: commandLine[0], arguments: commandLine,
                                                        bundleID: name)
        if (try? CrashReportDatabase.validateBundleID(identity.bundleID)) == nil { identity.bundleID = "hangwatch.run" }
        // The one killed-report path (KilledReports.swift), as for the run records a processor judges.
        let process = KilledProcess(process: identity, signal: signal, time: Date().timeIntervalSince1970, runID: settings.runID,
                                    killed: killed)
        let context = Report.Context(stderrTail: tail, unkillableProcesses: unkillable)
        summarize(kept(process.snapshot, context: context, amend: process.amend) { id in
            try processor.storeKilled(process, id: id, context: context)
        })
    }

    package func childExited(pid: pid_t, status: ChildExit, killedForHang: Bool, stderrTail: [UInt8],
                     unsignalled: [ProcessTree.Unsignalled], signalsSent: Set<Int32>, lastLiveness: String?) {
        report(pid: pid, status: status, killedForHang: killedForHang, stderrTail: stderrTail, unsignalled: unsignalled,
               signalsSent: signalsSent, lastLiveness: lastLiveness)
        closeChildRunRecords(pid: pid)
    }

    /// How the child ended is reported (or it ended on its own): the run records its HangMonitor
    /// left under this run's id — in this run's database, in the one its environment or its hang
    /// messages named — must not become a second report of the same end.
    private func closeChildRunRecords(pid: pid_t) {
        database.runRecords.closeEnded(pid: pid, runID: settings.runID)
        var others = Set([settings.childDatabasePath].compactMap { $0 })
        if case .monitorReported(let reported)? = hang?.cause, let path = reported.databasePath { others.insert(path) }
        for path in others where !database.isSameDirectory(as: path) {
            (try? CrashReportDatabase(path: path))?.runRecords.closeEnded(pid: pid, runID: settings.runID)
        }
    }

    private func report(pid: pid_t, status: ChildExit, killedForHang: Bool, stderrTail: [UInt8],
                        unsignalled: [ProcessTree.Unsignalled], signalsSent: Set<Int32>, lastLiveness: String?) {
        let tail = stderrTail.isEmpty ? nil : String(decoding: stderrTail, as: UTF8.self)
        let unkillable = unsignalled.isEmpty ? nil : unsignalled.map { Report.UnkillableProcess(pid: $0.pid, name: $0.name) }
        if killedForHang, let current = hang, let (captured, duration) = current.lastLook {
            let termination = Report.Termination(current.cause.isTimeout ? .timeout : .watchdogKill,
                                                 signal: SignalNames.name(settings.killSignal), hungSeconds: duration)
            let context = Report.Context(termination: termination, stderrTail: tail, unkillableProcesses: unkillable)
            var stored: Report?
            _ = current.hang.end(.fatal, durationSeconds: duration, last: captured.snapshot) { ended in
                var snapshot = ended
                adoptChildStagedHang(into: &snapshot)
                stored = store(snapshot, tree: captured.tree, context: context)
                return stored?.id
            }
            if let stored { summarize(stored) }
            return
        }
        if case .signaled(let signal) = status {
            say("\(name) (pid \(pid)) died of \(SignalNames.name(signal))")
            // The child's own crash reports: written in this run (its run id), whatever its pid.
            let own = database.reportSubjects(after: 0).filter { $0.subject.kind == .crash && $0.subject.runID == settings.runID }
            for (report, _) in own { say("its crash report: \(report.id) (hangwatch show \(report.id))") }
            // The child's own report knows more (queues, messages): ours only when it has none.
            if own.isEmpty, let snapshot = caughtCrash,
               let report = store(snapshot, tree: nil,
                                  context: Report.Context(stderrTail: tail, unkillableProcesses: unkillable)) {
                summarize(report)
            } else if own.isEmpty, caughtCrash == nil, !Self.crashSignals.contains(signal), !signalsSent.contains(signal) {
                storeKilled(pid: pid, signal: signal, stderrTail: tail, lastLiveness: lastLiveness, unkillable: unkillable)
            }
        } else if let caught = caughtCrash, case .crash(let info) = caught.reason {
            say("\(name) handled its \(SignalNames.name(info.number)) and went on: the capture at delivery is not kept")
        }
        caughtCrash = nil
        // A hang still lasting when the child exits on its own ended with the child: keep it.
        if let current = hang, current.capture != nil {
            var stored: Report?
            _ = current.hang.end(.fatal, durationSeconds: Date().timeIntervalSince1970 - current.hang.startTime) { snapshot in
                stored = store(snapshot, tree: current.tree, context: Report.Context(stderrTail: tail, unkillableProcesses: unkillable))
                return stored?.id
            }
            if let stored { summarize(stored) }
        }
    }

    /// A HangMonitor child staged its own capture of this hang, with samples of the hung
    /// thread: they join this report, and the child's staged hang is taken over (removed), or
    /// its next start — or any processor of its database — would report the same hang again.
    /// That database is the child's: this run's own, or the one its message names (then
    /// opened by the database's rules: a directory of ours, reached through trusted ones).
    private func adoptChildStagedHang(into snapshot: inout ProcessSnapshot) {
        guard case .monitorReported(let reported)? = hang?.cause,
              let taken = takeOverStagedHang(reported) else { return }
        var context: Report.Context?  // adopting changes the capture only
        HangStitch.stitch(taken, .adopted, into: &snapshot, context: &context)
    }

    /// Version 2 messages name the staged hang by bundle id and id (and the database, when it
    /// is not this run's); version 1 sent a path, accepted only inside this run's staging/.
    private func takeOverStagedHang(_ reported: MonitorHang) -> StagedHangContents? {
        if let bundle = reported.bundleID, let id = reported.stagedID {
            guard let childDatabase = reported.databasePath, !database.isSameDirectory(as: childDatabase) else {
                return database.stagingArea.takeOver(bundleID: bundle, id: id)
            }
            return (try? CrashReportDatabase(path: childDatabase))?.stagingArea.takeOver(bundleID: bundle, id: id)
        }
        return reported.stagedPath.flatMap { database.stagingArea.takeOver(dumpPath: $0) }
    }

    // MARK: - Capture and storage

    /// Captures the whole job, the child and every descendant (TreeCapture), and picks the
    /// likely culprit: the child when its HangMonitor reported the hang, else the deepest
    /// process not merely waiting for a child.
    private func capture(pid: pid_t, hang: TrackedHang, cause: HangCause, duration: Double) -> Capture? {
        var info = hang.info(durationSeconds: duration)
        // The cause the supervisor holds now: a silent monitor's hang may have been named since.
        info.target = cause.target
        info.thresholdSeconds = cause.thresholdSeconds ?? settings.threshold
        if case .monitorReported(let reported) = cause { info.operations = reported.operations }
        let options = RemoteCaptureOptions(reason: .hang(info))
        var reported: MonitorHang?
        if case .monitorReported(let hang) = cause { reported = hang }
        // Attached for --catch-crashes: a second PTRACE_SEIZE would fail, the tracer captures.
        let tracer = self.tracer
        let tree = TreeCapture.capture(root: pid, options: options, subreaper: getpid(), excluded: ownProcesses,
                                       namedCulprit: reported == nil ? nil : pid,
                                       captureRoot: tracer.map { tracer in { try tracer.capture(options: $0) } })
        guard let culprit = tree.culpritPID, var snapshot = tree.culpritSnapshot(markingHungThread: tree.culpritPID != pid) else {
            say("could not capture pid \(pid): \(tree.members.first?.failure ?? tree.culpritReason)")
            return nil
        }
        if culprit == pid {
            snapshot.markHung(Self.hungThreads(reported: reported, pid: pid, snapshot: snapshot))
            // One bundle id throughout: the monitor's, under which it stages and reports.
            if let bundle = reported?.bundleID, (try? CrashReportDatabase.validateBundleID(bundle)) != nil {
                snapshot.process.bundleID = bundle
            }
        }
        if settings.captureTasks { snapshot.tasks = SwiftTaskCapture.capture(pid: culprit) }
        return Capture(snapshot: snapshot, tree: tree)
    }

    /// The report of `snapshot`, of the kind its reason implies (a hang's outcome says `hang` or
    /// `fatal-hang`), stored with this run's id and the job's tree.
    private func store(_ snapshot: ProcessSnapshot, tree: TreeCaptureResult?, context: Report.Context?) -> Report? {
        var snapshot = snapshot
        snapshot.annotations[RunIdentity.annotationKey] = settings.runID
        let processTree = tree?.reportTree { processor.makeReport($0, id: "", kind: .dump) }
        let amend = { [settings] (report: inout Report) in
            report.runID = settings.runID
            report.processTree = processTree
        }
        return kept(snapshot, context: context, amend: amend) { id in
            try processor.store(snapshot, id: id, context: context, amend: amend)
        }
    }

    /// The report `store` stored under a new id; when it could not be stored, said so, and the
    /// same report (`snapshot` with `context`, amended) not stored, so that it is still shown.
    private func kept(_ snapshot: ProcessSnapshot, context: Report.Context?, amend: (inout Report) -> Void,
                      store: (String) throws -> Report) -> Report {
        do {
            return try store(UUID().uuidString.lowercased())
        } catch {
            say("could not store the report: \(error)")
            return processor.unstoredReport(snapshot, id: UUID().uuidString.lowercased(), kind: ReportKind(implying: snapshot.reason),
                                            context: context, amend: amend)
        }
    }

    /// What hung, for how long, the hung thread's top frames, where the report is.
    private func summarize(_ report: Report) {
        if let render = settings.renderSummary {
            StandardStream.write(render(report), to: STDERR_FILENO)
            return
        }
        say("\(ReportRenderer.reason(report))")
        if let tree = report.processTree, tree.processes.count > 1 {
            say("the job's processes (=> the likely culprit: \(tree.culpritReason)):")
            for line in ReportRenderer.processTreeLines(tree) { say(line) }
        }
        // What the hang was doing first: a kill just after the work finished finds threads idle.
        let sampled = report.hang.flatMap { hang in hang.stacks.first.map { (hang, $0) } }
        if let (hang, top) = sampled {
            say("the hang was in (its most frequent stack, \(top.count) of \(hang.samples) samples, leaf first):")
            for name in top.frames.reversed().prefix(8) { say("  \(name)") }
        }
        if let hung = report.threads.first(where: { $0.roles.contains(.crashed) })
            ?? report.threads.first(where: { $0.roles.contains(.hung) }) ?? report.threads.first {
            let when = sampled != nil && report.context?.termination != nil ? " when it was killed" : ""
            say("thread \(hung.tid) \"\(hung.name)\" of \(report.process.name) (pid \(report.process.pid)) was in\(when):")
            for frame in hung.frames.prefix(8) { say("  \(ReportRenderer.render(frame))") }
        }
        let path = database.pendingReportsPath + "/\(report.id).json"
        say("report \(report.id) saved to \(path)")
        say("read it with: hangwatch show \(report.id) --database \(database.path)")
    }

    private func say(_ line: String) { warn(line) }
}

extension HangCause {
    package var isTimeout: Bool { if case .timeout = self { return true } else { return false } }

    /// The threshold that this cause measured against, when it has its own.
    package var thresholdSeconds: Double? {
        switch self {
        case .silence(let seconds), .watchdogMissed(let seconds), .timeout(let seconds): return seconds
        case .monitorSilent(let seconds): return seconds
        case .monitorReported(let hang): return hang.thresholdSeconds
        case .watchdogTriggered: return nil
        }
    }
}
