// `hangwatch run`'s event loop: one thread, one poll() over the child's output pipes, the
// liveness sockets and a signalfd. Deadlines (silence, watchdog, timeout, kill-after) are
// kept on the monotonic clock and turned into the poll timeout.
import HangwatchPlatform
import HangwatchSnapshot
import HangwatchDatabase
import HangwatchReport
import HangwatchRemoteCapture
import HangwatchSupervisorProtocol
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

package enum SupervisorError: Error, CustomStringConvertible {
    case socket(String, String)
    case poll(String)
    /// `hangwatch job-watchdog` could not be started (JobWatchdogLink.swift).
    case watchdog(String)

    package var description: String {
        switch self {
        case .socket(let path, let why): return "cannot create liveness socket \(path): \(why)"
        case .poll(let why): return "poll failed: \(why)"
        case .watchdog(let why): return "cannot start the job's watchdog: \(why)"
        }
    }
}

/// Why the child counts as hung.
package enum HangCause: Equatable {
    case silence(seconds: Double)
    case watchdogMissed(seconds: Double)
    case watchdogTriggered
    case monitorReported(MonitorHang)
    /// HangMonitor's heartbeats stopped without a hang message: too stuck to report.
    case monitorSilent(seconds: Double)
    case timeout(seconds: Double)

    package var summary: String {
        switch self {
        case .silence(let s): return "no output for \(format(s)) s"
        case .watchdogMissed(let s): return "no WATCHDOG=1 for \(format(s)) s"
        case .watchdogTriggered: return "the child sent WATCHDOG=trigger"
        case .monitorReported(let hang):
            let threads = hang.threads.isEmpty ? "" : " (thread\(hang.threads.count == 1 ? "" : "s") \(hang.threads.map(String.init).joined(separator: ", ")))"
            return "its HangMonitor reported \(hang.hangTarget) hung\(threads)"
        case .monitorSilent(let s): return "no HangMonitor heartbeat for \(format(s)) s"
        case .timeout(let s): return "the \(format(s)) s timeout expired"
        }
    }

    package var target: HangTarget {
        switch self {
        case .silence: return .output
        case .watchdogMissed, .watchdogTriggered: return .systemdWatchdog
        case .monitorReported(let hang): return hang.hangTarget
        case .monitorSilent: return .mainQueue
        case .timeout: return .timeout
        }
    }
}

package func format(_ seconds: Double) -> String {
    Text.fixed(seconds, decimals: seconds >= 10 ? 0 : 1)
}

package struct SupervisorOptions {
    package var threshold: Double = 2
    package var silence: Double?
    package var timeout: Double?
    package var killAfter: Double?
    package var killSignal: Int32 = SIGKILL
    /// Seconds between a signal that asks the job to end (SIGTERM, a non-KILL --kill-signal) and SIGKILL.
    package var killGrace: Double = 5
    /// End every process of the job when the child exits or is killed (--kill-tree).
    package var killTree = true
    package var stderrTailBytes = 64 * 1024

    /// The defaults above; `hangwatch run` sets each from its options.
    package init() {}
}

/// What the supervisor asks of whoever captures and stores reports (the `run` command).
package protocol SupervisorReporting: AnyObject {
    /// The child just became hung: capture it (from outside) and stage the result.
    func hangBegan(pid: pid_t, cause: HangCause, startedAt: Date)
    /// Liveness came back after `duration` seconds.
    func hangEnded(pid: pid_t, cause: HangCause, duration: Double)
    /// About to kill the child for hanging: a last capture, kept as a fatal-hang report.
    func killingForHang(pid: pid_t, cause: HangCause, duration: Double)
    /// `--catch-crashes`: a fatal signal was caught at delivery; `snapshot` is every thread
    /// at that moment (nil and `failure` when the capture failed). The signal went on unchanged.
    func crashCaught(pid: pid_t, snapshot: ProcessSnapshot?, failure: String?)
    /// The child is gone; `stderrTail` is the last bytes it wrote to stderr; `unsignalled`,
    /// the processes of the job that could not be signalled (they may outlive it).
    /// `signalsSent`, the signals hangwatch sent the job; `lastLiveness`, the child's last
    /// liveness message and when it came.
    func childExited(pid: pid_t, status: ChildExit, killedForHang: Bool, stderrTail: [UInt8],
                     unsignalled: [ProcessTree.Unsignalled], signalsSent: Set<Int32>, lastLiveness: String?)
    /// Once a second while the child runs (and is not reaped: the pid is its own).
    func sampleChild(pid: pid_t)
}

package enum ChildExit: Equatable {
    case exited(Int32)
    case signaled(Int32)

    /// Decodes a waitpid status that is not a stop.
    package init(waitStatus status: Int32) {
        let signal = status & 0x7f
        self = signal == 0 ? .exited((status >> 8) & 0xff) : .signaled(signal)
    }

    /// As a shell reports it.
    package var shellStatus: Int32 {
        switch self {
        case .exited(let code): return code
        case .signaled(let signal): return 128 + signal
        }
    }
}

/// Keeps the last `capacity` bytes written to it.
package struct TailBuffer {
    package let capacity: Int
    private(set) var bytes: [UInt8] = []

    package init(capacity: Int) { self.capacity = max(0, capacity) }

    package mutating func append(_ chunk: ArraySlice<UInt8>) {
        guard capacity > 0 else { return }
        bytes.append(contentsOf: chunk.suffix(capacity))
        if bytes.count > capacity { bytes.removeFirst(bytes.count - capacity) }
    }
}

package func monotonicNow() -> Double {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
}

package final class Supervisor {
    private let child: LaunchedChild
    private let options: SupervisorOptions
    private let notify: DatagramListener?
    private let monitor: DatagramListener?
    private weak var reporting: SupervisorReporting?
    /// `--catch-crashes`: the tracer thread owns the child and is the only one to wait for it.
    private let tracer: ChildTracer?
    private var tracedExit: ChildExit?
    private let signalFD: Int32

    private var stderrTail: TailBuffer
    private var openOutputs: [Int32]
    private let startedAt = monotonicNow()
    private var lastOutput = monotonicNow()
    private var lastWatchdog: Double?
    private var lastMonitorHeartbeat: Double?
    /// The monitor's own detection comes at the threshold; give it that long again before
    /// concluding the child is too stuck to report.
    private var monitorSilenceLimit: Double { options.threshold * 2 }
    private var hang: (cause: HangCause, since: Double, wallStart: Date)?
    /// Whether the child was killed for hanging (or for its timeout): `hangwatch run` exits 124.
    package private(set) var killedForHang = false
    private var tree: ProcessTree
    /// When the processes still alive get SIGKILL (after a signal that asks them to end).
    private var killDeadline: Double?
    /// A SIGCHLD came: an orphan hangwatch adopted may be a zombie waiting to be reaped.
    private var orphansToReap = false
    private var orphansReapedAt = 0.0
    private let stdoutRelay = OutputRelay(fd: STDOUT_FILENO, name: "hangwatch-out")
    private let stderrRelay = OutputRelay(fd: STDERR_FILENO, name: "hangwatch-err")
    /// Processes of the job that refused a signal (EPERM: e.g. setuid), each once.
    private var unsignalled: [ProcessTree.Unsignalled] = []
    /// The signals hangwatch sent the child or its job.
    private var signalsSent: Set<Int32> = []
    private var childSampledAt = -Double.infinity
    /// Ends the job if hangwatch dies (JobWatchdog.swift); told of the job's processes once a second.
    private let watchdog: JobWatchdogLink?
    private var watchdogToldAt = -Double.infinity
    /// The last liveness message the child sent, and when (shown in a `killed` report).
    private var lastLiveness: String?

    package init(child: LaunchedChild, options: SupervisorOptions, notify: DatagramListener?, monitor: DatagramListener?,
         reporting: SupervisorReporting, tracer: ChildTracer? = nil, watchdog: JobWatchdogLink? = nil) {
        self.child = child
        self.watchdog = watchdog
        self.tracer = tracer
        self.options = options
        self.notify = notify
        self.monitor = monitor
        self.reporting = reporting
        self.signalFD = SignalForwarding.startSignalPipe()
        self.stderrTail = TailBuffer(capacity: options.stderrTailBytes)
        self.openOutputs = [child.stdoutFD, child.stderrFD]
        self.tree = ProcessTree(root: getpid(), child: child.pid, childGroup: child.ownProcessGroup ? child.pid : nil)
        if let watchdog { tree.own = [watchdog.pid] }
    }

    /// Runs until the child exits (and, with `killTree`, the rest of the job is gone); returns
    /// how the child ended.
    package func run() throws -> ChildExit {
        var exit: ChildExit?
        while true {
            if exit == nil, let ended = tracer == nil ? reapChild() : tracedExit {
                exit = ended
                tree.childReaped = true
                hearLastWords()
                // What the child left behind is asked to end, then killed after the grace period.
                if options.killTree, killDeadline == nil, !tree.members().isEmpty {
                    noteUnsignalled(signalJob(SIGTERM))
                    killDeadline = monotonicNow() + options.killGrace
                }
            }
            if let exit, !options.killTree || tree.members().allSatisfy({ pid in unsignalled.contains { $0.pid == pid } }) {
                return finish(exit)
            }
            var fds = openOutputs.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
            fds.append(pollfd(fd: signalFD, events: Int16(POLLIN), revents: 0))
            if let notify { fds.append(pollfd(fd: notify.fd, events: Int16(POLLIN), revents: 0)) }
            if let monitor { fds.append(pollfd(fd: monitor.fd, events: Int16(POLLIN), revents: 0)) }
            if let tracer { fds.append(pollfd(fd: tracer.eventFD, events: Int16(POLLIN), revents: 0)) }
            let longest: Double = orphansToReap ? 100 : 1_000
            let waitMilliseconds = Int32(max(0, min(longest, (nextDeadline() - monotonicNow()) * 1_000)).rounded(.up))
            let ready = poll(&fds, nfds_t(fds.count), waitMilliseconds)
            if ready < 0 && errno != EINTR { throw SupervisorError.poll(String(cString: strerror(errno))) }
            for entry in fds where entry.revents != 0 { handleReadable(entry.fd) }
            // Adopted orphans that exited are reaped while the job runs, not only at its end
            // (a long job spawning daemons would pile up zombies); one /proc scan per 100 ms at most.
            if orphansToReap, monotonicNow() - orphansReapedAt >= 0.1 {
                orphansToReap = false
                orphansReapedAt = monotonicNow()
                reapOrphans()
            }
            checkDeadlines()
            sampleChildIfDue()
            tellWatchdogIfDue()
        }
    }

    // MARK: - Events

    private func handleReadable(_ fd: Int32) {
        switch fd {
        case signalFD:
            for signal in SignalForwarding.read(from: signalFD) {
                switch signal {
                case SIGCHLD:
                    orphansToReap = true
                    tracer?.wake()
                case SIGINT, SIGTERM, SIGHUP, SIGQUIT:
                    // Like a terminal's Ctrl-C to a shell job: the whole job hears it; what is
                    // still alive after the grace period is killed.
                    if options.killTree {
                        noteUnsignalled(signalJob(signal))
                        if killDeadline == nil { killDeadline = monotonicNow() + options.killGrace }
                    } else {
                        signalChild(signal)
                    }
                default: signalChild(signal)
                }
            }
        case tracer?.eventFD:
            for event in tracer!.takeEvents() {
                switch event {
                case .crashCaptured(let snapshot):
                    reporting?.crashCaught(pid: child.pid, snapshot: snapshot, failure: nil)
                case .crashCaptureFailed(_, _, let reason):
                    reporting?.crashCaught(pid: child.pid, snapshot: nil, failure: reason)
                case .exited(let status):
                    tracedExit = ChildExit(waitStatus: status)
                }
            }
        case child.stdoutFD, child.stderrFD:
            relay(fd)
        case notify?.fd:
            for message in notify!.receiveAll().flatMap(NotifyMessage.parse) {
                switch message {
                case .alive:
                    noteLiveness("WATCHDOG=1")
                    // HangMonitor children pet the watchdog too; their heartbeats say more.
                    if lastMonitorHeartbeat == nil { lastWatchdog = monotonicNow() }
                    if case .watchdogMissed = hang?.cause { endHang() }
                    if case .watchdogTriggered = hang?.cause { endHang() }
                case .hangTriggered: beginHang(.watchdogTriggered)
                case .other: break
                }
            }
        case monitor?.fd:
            for message in monitor!.receiveAll().compactMap(SupervisorMessage.init(datagram:)) {
                switch message {
                case .heartbeat:
                    noteLiveness("HangMonitor heartbeat")
                    // A HangMonitor child detects its own hangs and says so; missing
                    // heartbeats are only the fallback for a child too stuck to tell.
                    lastMonitorHeartbeat = monotonicNow()
                    if case .monitorSilent = hang?.cause { endHang() }
                case .hang(let reported):
                    noteLiveness("HangMonitor hang: \(Text.singleLine(reported.hangTarget.name))")
                    if case .monitorSilent = hang?.cause { hang?.cause = .monitorReported(reported) }
                    // The same hang again, with what the monitor learnt since (a pool hang's
                    // threads, a duplicate now staged): the kill's capture and report use it.
                    if case .monitorReported(let known)? = hang?.cause, known.hangTarget == reported.hangTarget {
                        hang?.cause = .monitorReported(reported)
                    }
                    beginHang(.monitorReported(reported), startedAt: reported.startTime)
                case .recovered(let seconds):
                    lastMonitorHeartbeat = monotonicNow()
                    if case .monitorReported = hang?.cause { endHang(lasted: seconds) }
                }
            }
        default:
            break
        }
    }

    /// What the child said before it ended is heard before its end is acted on: a capture keeps
    /// this loop busy, and a child that recovered and exited meanwhile (its "recovered" queued,
    /// then its exit) was reported as having ended while hung (a CI run, RunWithHangMonitorTests).
    /// A hang it tells of now begins nothing: there is nothing left to capture.
    private func hearLastWords() {
        if let notify { handleReadable(notify.fd) }
        if let monitor { handleReadable(monitor.fd) }
    }

    private func relay(_ fd: Int32) {
        var buffer = [UInt8](repeating: 0, count: 65_536)
        let count = read(fd, &buffer, buffer.count)
        if count <= 0 {
            if count == 0 || (errno != EINTR && errno != EAGAIN) {
                close(fd)
                openOutputs.removeAll { $0 == fd }
            }
            return
        }
        let chunk = buffer[0..<count]
        if fd == child.stderrFD {
            stderrTail.append(chunk)
            stderrRelay.send(chunk)
        } else {
            stdoutRelay.send(chunk)
        }
        lastOutput = monotonicNow()
        if case .silence = hang?.cause { endHang() }
    }

    private func drainOutputs(until deadline: Double) {
        while !openOutputs.isEmpty, monotonicNow() < deadline {
            var fds = openOutputs.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
            guard poll(&fds, nfds_t(fds.count), 50) > 0 else { continue }
            for entry in fds where entry.revents != 0 { relay(entry.fd) }
        }
        openOutputs.forEach { close($0) }
        openOutputs.removeAll()
    }

    private func reapChild() -> ChildExit? {
        var status: Int32 = 0
        guard waitpid(child.pid, &status, WNOHANG) == child.pid else { return nil }
        return ChildExit(waitStatus: status)
    }

    /// Processes of the job that hangwatch adopted (as child subreaper) and that have exited.
    private func reapOrphans() {
        for pid in ProcFS.processIDs() where pid != child.pid {
            guard let stat = ProcFS.processStat(of: pid), stat.parent == tree.root, stat.state == .zombie else { continue }
            var status: Int32 = 0
            _ = waitpid(pid, &status, WNOHANG)
        }
    }

    /// The child by its pid: ours as long as we have not reaped it (a zombie keeps its pid), and
    /// never signalled after, when the pid may be another process's.
    private func signalChild(_ signal: Int32) {
        signalsSent.insert(signal)
        if !tree.childReaped { kill(child.pid, signal) }
    }

    /// Every signal hangwatch sends the job is noted: the child dying of another is a kill from
    /// outside (RunReporter's `killed` report).
    private func signalJob(_ signal: Int32) -> [ProcessTree.Unsignalled] {
        signalsSent.insert(signal)
        return tree.signalAll(signal)
    }

    private func killJob() -> [ProcessTree.Unsignalled] {
        signalsSent.formUnion([SIGKILL, SIGSTOP])
        return tree.killRemaining(reapOrphans: reapOrphans)
    }

    /// A sample of the child (resident memory, threads) once a second while it runs, for the
    /// report of a kill from outside.
    private func sampleChildIfDue() {
        let now = monotonicNow()
        guard !tree.childReaped, now - childSampledAt >= 1 else { return }
        childSampledAt = now
        reporting?.sampleChild(pid: child.pid)
    }

    /// The job's processes as one scan finds them, for the watchdog to end if hangwatch dies
    /// (with `--kill-tree no` it is told of the child alone).
    private func tellWatchdogIfDue() {
        let now = monotonicNow()
        guard let watchdog, options.killTree, now - watchdogToldAt >= 1 else { return }
        watchdogToldAt = now
        watchdog.tell(tree.descendants().map { ($0.pid, $0.startTicks) })
    }

    /// Keeps each process that refused a signal once, whichever signal it refused.
    private func noteUnsignalled(_ refused: [ProcessTree.Unsignalled]) {
        for process in refused where !unsignalled.contains(where: { $0.pid == process.pid }) { unsignalled.append(process) }
    }

    /// The child is gone and so is its job: the last output, the report, the note of what
    /// could not be ended or written.
    private func finish(_ exit: ChildExit) -> ChildExit {
        drainOutputs(until: monotonicNow() + 0.5)
        reapOrphans()
        reporting?.childExited(pid: child.pid, status: exit, killedForHang: killedForHang, stderrTail: stderrTail.bytes,
                               unsignalled: unsignalled, signalsSent: signalsSent, lastLiveness: lastLiveness)
        // A reader that stopped reading gets two seconds in all, then hangwatch exits anyway.
        let deadline = monotonicNow() + 2
        let droppedOut = stdoutRelay.finish(timeout: deadline - monotonicNow())
        let droppedErr = stderrRelay.finish(timeout: deadline - monotonicNow())
        if droppedOut + droppedErr > 0 {
            warn("\(droppedOut + droppedErr) bytes of the child's output were dropped: the reader of hangwatch's output did not keep up")
        }
        for process in unsignalled {
            warn("process \(process.pid) (\(process.name)) of the job could not be signalled (not ours to signal) and may still run")
        }
        return exit
    }

    // MARK: - Hang state

    private func nextDeadline() -> Double {
        var deadlines: [Double] = []
        if let killDeadline { deadlines.append(killDeadline) }
        // Once the child is reaped, only what is left of the job is waited for (checkDeadlines).
        if !tree.childReaped {
            if let silence = options.silence, hang == nil { deadlines.append(lastOutput + silence) }
            if let lastWatchdog, hang == nil { deadlines.append(lastWatchdog + options.threshold) }
            if let lastMonitorHeartbeat, hang == nil { deadlines.append(lastMonitorHeartbeat + monitorSilenceLimit) }
            if let timeout = options.timeout, !killedForHang { deadlines.append(startedAt + timeout) }
            if let hang, let killAfter = options.killAfter, !killedForHang { deadlines.append(hang.since + killAfter) }
        }
        return deadlines.min() ?? monotonicNow() + 1
    }

    private func noteLiveness(_ what: String) {
        lastLiveness = "\(what) at \(Timestamp.iso8601(Date().timeIntervalSince1970))"
    }

    private func checkDeadlines() {
        let now = monotonicNow()
        if let deadline = killDeadline, now >= deadline {
            // Everything of the job still alive after the grace period.
            noteUnsignalled(killJob())
            killDeadline = nil
        }
        // Once the child is reaped, what is left of the job has only its `killDeadline`: a hang
        // begun or a kill for one now would capture by a pid that may be another process's.
        guard !tree.childReaped else { return }
        if hang == nil {
            if let silence = options.silence, now - lastOutput >= silence {
                beginHang(.silence(seconds: silence))
            } else if lastMonitorHeartbeat == nil, let lastWatchdog, now - lastWatchdog >= options.threshold {
                beginHang(.watchdogMissed(seconds: options.threshold))
            } else if let lastMonitorHeartbeat, now - lastMonitorHeartbeat >= monitorSilenceLimit {
                beginHang(.monitorSilent(seconds: monitorSilenceLimit))
            }
        }
        if let timeout = options.timeout, now - startedAt >= timeout, !killedForHang {
            // A timeout is not a hang of the moment it expires: it is timed from the job's start,
            // so its duration (the kill message, the report, `hangwatch list`) is how long the job ran.
            if hang == nil { beginHang(.timeout(seconds: timeout), ago: now - startedAt) }
            killForHang()
        } else if let hang, let killAfter = options.killAfter, now - hang.since >= killAfter, !killedForHang {
            killForHang()
        }
    }

    /// `startedAt` (seconds since 1970): when the child's monitor saw the hang start; the
    /// hang is timed from then (within the last day), not from the message.
    private func beginHang(_ cause: HangCause, startedAt: Double?) {
        beginHang(cause, ago: startedAt.map { min(max(0, Date().timeIntervalSince1970 - $0), 86_400) } ?? 0)
    }

    /// A hang that began `ago` seconds before now (0: now; a timeout: at the job's start).
    private func beginHang(_ cause: HangCause, ago: Double = 0) {
        // Once reaped, the child's pid may be another process's: never captured by it.
        guard hang == nil, !tree.childReaped else { return }
        hang = (cause, monotonicNow() - ago, Date().addingTimeInterval(-ago))
        reporting?.hangBegan(pid: child.pid, cause: cause, startedAt: hang!.wallStart)
    }

    /// `lasted`: how long the child's monitor says the hang lasted (its "recovered" may be read
    /// late, after a capture); within the day, else the hang is timed here.
    private func endHang(lasted: Double? = nil) {
        guard let current = hang, !killedForHang else { return }
        hang = nil
        let timedHere = monotonicNow() - current.since
        let duration = lasted.flatMap { $0.isFinite && $0 >= 0 && $0 <= 86_400 ? $0 : nil } ?? timedHere
        reporting?.hangEnded(pid: child.pid, cause: current.cause, duration: duration)
    }

    private func killForHang() {
        guard let current = hang else { return }
        killedForHang = true
        reporting?.killingForHang(pid: child.pid, cause: current.cause, duration: monotonicNow() - current.since)
        guard options.killTree else {
            signalChild(options.killSignal)
            return
        }
        if options.killSignal == SIGKILL {
            noteUnsignalled(killJob())
        } else {
            noteUnsignalled(signalJob(options.killSignal))
            killDeadline = monotonicNow() + options.killGrace
        }
    }
}
