// Staying attached to a child for its whole life (`hangwatch run --catch-crashes`): one
// long-lived tracer thread PTRACE_SEIZEs the child right after spawn, follows its threads
// (PTRACE_O_TRACECLONE) and answers every ptrace-stop. A fatal signal is caught at its
// signal-delivery-stop, before the program sees it: every thread is stopped and unwound at
// the faulting instruction, then the signal is injected unchanged, so the program's own
// handlers run and it dies as it would have. Every other signal is injected unchanged and
// group-stops are left to job control with PTRACE_LISTEN.
//
// ptrace requests for a tracee must come from the thread that attached, and the tracer is
// notified of stops through waitpid. So this thread is also the only one that waits for the
// child (it reaps it and hands over the exit status), and captures of a hang go through it
// (a second PTRACE_SEIZE would fail: the child is already traced by us).
import HangwatchPlatform
import Dispatch
import HangwatchSnapshot
import HangwatchTaskCapture
#if canImport(Glibc)
import Glibc
#endif
import CHangwatchPtrace
import FoundationEssentials

package final class ChildTracer: @unchecked Sendable {
    package enum Event: Sendable, Equatable {
        /// A fatal signal reached a thread and every thread was captured before delivery
        /// (reason `.crash`, that thread marked `.crashed`); the signal then went on unchanged.
        case crashCaptured(ProcessSnapshot)
        /// A fatal signal was caught but the capture failed; the signal went on unchanged.
        case crashCaptureFailed(signal: Int32, tid: Int32, reason: String)
        /// The child is gone; `status` as waitpid reports it.
        case exited(status: Int32)
    }

    /// Signals caught at delivery as a crash. Only the first delivery is captured: a runtime's
    /// crash handler that re-raises (Swift's backtracer does) must not overwrite it.
    package static let fatalSignals: Set<Int32> = [SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGTRAP]

    package let pid: Int32
    /// Readable when `takeEvents()` has something to return.
    package let eventFD: Int32
    private let eventWriteFD: Int32
    private let wakeReadFD: Int32
    private let wakeWriteFD: Int32
    private let crashOptions: RemoteCaptureOptions

    private let lock = Lock()
    private var events: [Event] = []
    private var request: CaptureRequest?
    private var finished = false
    private let captureLock = Lock()

    /// Tracer-thread state only.
    private var crashCaptured = false
    private var childGone = false

    /// Seizes `pid` (which must be this process's child) on a new tracer thread; returns once
    /// the child is traced. Throws `RemoteCaptureError` when it cannot be (already traced,
    /// Yama, seccomp, gone).
    package init(attachingTo pid: Int32, crashCaptureOptions: RemoteCaptureOptions = .init()) throws {
        self.pid = pid
        self.crashOptions = crashCaptureOptions
        var events: [Int32] = [0, 0], wake: [Int32] = [0, 0]
        guard pipe(&events) == 0 else { throw RemoteCaptureError.tracerThreadFailed(errno: errno) }
        guard pipe(&wake) == 0 else {
            let failure = errno
            close(events[0]); close(events[1])
            throw RemoteCaptureError.tracerThreadFailed(errno: failure)
        }
        for fd in events + wake {
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            _ = fcntl(fd, F_SETFL, O_NONBLOCK)
        }
        (eventFD, eventWriteFD, wakeReadFD, wakeWriteFD) = (events[0], events[1], wake[0], wake[1])

        let started = DispatchSemaphore(value: 0)
        let seizeResult = SeizeResult()
        // ptrace ties the tracee to this one thread, so the thread runs until the child is gone.
        let thread: PlatformThread
        do {
            thread = try PlatformThread(name: "hangwatch-tracer") { [self] in
                seizeResult.errno = hwp_seize_with_options(pid, HWP_FOLLOW_OPTIONS)
                started.signal()
                if seizeResult.errno == 0 { traceUntilExit() }
            }
        } catch {
            throw RemoteCaptureError.tracerThreadFailed(errno: error.errno)
        }
        thread.detach()
        started.wait()
        switch seizeResult.errno {
        case 0: break
        case ESRCH: throw RemoteCaptureError.noSuchProcess(pid: pid)
        case EPERM: throw RemoteCapture.diagnosePermission(pid: pid)
        case let code: throw RemoteCaptureError.ptraceFailed(pid: pid, operation: "PTRACE_SEIZE", errno: code, hint: "")
        }
    }

    deinit {
        // The tracer thread holds `self` until the child is gone; only then can this run.
        [eventFD, eventWriteFD, wakeReadFD, wakeWriteFD].forEach { close($0) }
    }

    /// Events since the last call, oldest first.
    package func takeEvents() -> [Event] {
        var drain = [UInt8](repeating: 0, count: 64)
        while read(eventFD, &drain, drain.count) > 0 {}
        lock.lock()
        defer { lock.unlock() }
        let taken = events
        events.removeAll()
        return taken
    }

    /// Something may have changed for the child (the caller saw SIGCHLD): look now rather
    /// than at the next periodic check.
    package func wake() {
        var byte: UInt8 = 1
        _ = write(wakeWriteFD, &byte, 1)
    }

    /// Captures every thread of the child now, through the tracer thread (a hang capture while
    /// attached). Threads are stopped with PTRACE_INTERRUPT and resumed exactly as they were.
    package func capture(options: RemoteCaptureOptions = .init()) throws -> RemoteCaptureResult {
        captureLock.lock()
        defer { captureLock.unlock() }
        let pending = CaptureRequest(options: options)
        lock.lock()
        if finished {
            lock.unlock()
            throw RemoteCaptureError.noSuchProcess(pid: pid)
        }
        request = pending
        lock.unlock()
        wake()
        pending.done.wait()
        return try (pending.result ?? .failure(RemoteCaptureError.noSuchProcess(pid: pid))).get()
    }

    private final class SeizeResult: @unchecked Sendable { var errno: Int32 = 0 }

    private final class CaptureRequest: @unchecked Sendable {
        let options: RemoteCaptureOptions
        var result: Result<RemoteCaptureResult, any Error>?
        let done = DispatchSemaphore(value: 0)
        init(options: RemoteCaptureOptions) { self.options = options }
    }

    private func post(_ event: Event) {
        lock.lock()
        events.append(event)
        lock.unlock()
        var byte: UInt8 = 1
        _ = write(eventWriteFD, &byte, 1)
    }

    // MARK: - The tracer thread

    /// How a thread in a ptrace-stop is let go again.
    enum Resume: Equatable {
        /// PTRACE_CONT, delivering this signal (0: none).
        case proceed(signal: Int32)
        /// A group-stop: stay stopped until SIGCONT, as without a tracer.
        case listen
    }

    private func traceUntilExit() {
        while !childGone {
            // SIGCHLD reaches hangwatch's signal thread, not this one: the caller's wake() and
            // a short poll interval make sure no stop waits long.
            var wakeFD = pollfd(fd: wakeReadFD, events: Int16(POLLIN), revents: 0)
            _ = poll(&wakeFD, 1, 20)
            var drain = [UInt8](repeating: 0, count: 64)
            while read(wakeReadFD, &drain, drain.count) > 0 {}

            while !childGone {
                var status: Int32 = 0
                let tid = hwp_wait_any(&status)
                if tid == 0 { break }
                if tid < 0 {
                    // ECHILD: nothing left to wait for, yet the child's end was never seen.
                    childEnded(status: 0)
                    break
                }
                handle(tid: tid, status: status)
            }
            if !childGone { serveRequest() }
        }
        lock.lock()
        finished = true
        let unanswered = request
        request = nil
        lock.unlock()
        if let unanswered {
            unanswered.result = .failure(RemoteCaptureError.noSuchProcess(pid: pid))
            unanswered.done.signal()
        }
    }

    private func childEnded(status: Int32) {
        childGone = true
        post(.exited(status: status))
    }

    private func handle(tid: Int32, status: Int32) {
        guard Self.isStopped(status) else {
            if tid == pid { childEnded(status: status) }  // else: another thread ended
            return
        }
        let signal = (status >> 8) & 0xff
        if status >> 16 == 0, Self.fatalSignals.contains(signal), !crashCaptured {
            crashCaptured = true
            captureCrash(tid: tid, signal: signal)  // resumes `tid` with the signal
            return
        }
        apply(resumption(of: tid, status: status), to: tid)
    }

    private func captureCrash(tid: Int32, signal: Int32) {
        var number: Int32 = 0, code: Int32 = 0, address: UInt64 = 0
        if hwp_get_signal_info(tid, &number, &code, &address) != 0 { number = signal }
        let info = SignalInfo(number: signal, code: code, address: address, tid: tid)
        var options = crashOptions
        options.reason = .crash(info)
        do {
            // Read the modules while stopped: once the signal is delivered, /proc/PID/maps may be gone.
            let result = try captureAll(options: options, alreadyStopped: [tid: .proceed(signal: signal)], crashedTID: tid)
            post(.crashCaptured(result.snapshot))
        } catch {
            post(.crashCaptureFailed(signal: signal, tid: tid, reason: "\(error)"))
        }
    }

    private func serveRequest() {
        lock.lock()
        let pending = request
        request = nil
        lock.unlock()
        guard let pending else { return }
        pending.result = Result { try captureAll(options: pending.options, alreadyStopped: [:], crashedTID: nil) }
        pending.done.signal()
    }

    /// How to let `tid` go after this stop; records threads it learns about on the way.
    private func resumption(of tid: Int32, status: Int32) -> Resume {
        let signal = (status >> 8) & 0xff
        switch status >> 16 {
        case 0:
            return .proceed(signal: signal)  // signal-delivery-stop: deliver it unchanged
        case HWP_EVENT_STOP where [SIGSTOP, SIGTSTP, SIGTTIN, SIGTTOU].contains(signal):
            return .listen
        default:
            // PTRACE_EVENT_CLONE (the new thread is traced already and reports its own first
            // stop), _EXEC, or the PTRACE_EVENT_STOP of an interrupt or a new thread.
            return .proceed(signal: 0)
        }
    }

    private func apply(_ resume: Resume, to tid: Int32) {
        switch resume {
        case .proceed(let signal): _ = hwp_continue(tid, signal)
        case .listen: _ = hwp_listen(tid)
        }
    }

    static func isStopped(_ status: Int32) -> Bool { status & 0xff == 0x7f }

    // MARK: - Capture of already-traced threads

    /// Stops every thread not yet stopped (PTRACE_INTERRUPT), reads and unwinds them all, then
    /// resumes each exactly as its stop requires (the crashed thread with its signal).
    private func captureAll(options: RemoteCaptureOptions, alreadyStopped: [Int32: Resume],
                            crashedTID: Int32?) throws -> RemoteCaptureResult {
        let began = RemoteCapture.monotonicSeconds()
        let timestamp = RemoteCapture.wallClockSeconds()
        var stopped = alreadyStopped
        defer { for (tid, resume) in stopped { apply(resume, to: tid) } }
        let session = try RemoteCapture.Session(pid: pid, options: options)
        let identity = RemoteCapture.identity(pid: pid)
        let tasks = TaskReader(pid: pid)

        var order: [Int32] = []
        var infos: [Int32: RemoteCapture.ThreadInfo] = [:]
        var gone: Set<Int32> = [], timedOut: Set<Int32> = []
        for tid in alreadyStopped.keys.sorted() {
            order.append(tid)
            infos[tid] = RemoteCapture.threadInfo(pid: pid, tid: tid, reader: tasks)
        }
        let pauseStart = RemoteCapture.monotonicSeconds()
        let deadline = pauseStart + options.stopTimeoutSeconds
        for _ in 0..<64 {
            let fresh = RemoteCapture.threadIDs(of: pid).filter { infos[$0] == nil }
            if fresh.isEmpty { break }
            for tid in fresh {
                order.append(tid)
                infos[tid] = RemoteCapture.threadInfo(pid: pid, tid: tid, reader: tasks)
                if hwp_interrupt(tid) != 0 { gone.insert(tid) }
            }
            for tid in fresh where !gone.contains(tid) {
                let remaining = Int32(clamping: Int(max(0, (deadline - RemoteCapture.monotonicSeconds()) * 1000)))
                var status: Int32 = 0
                switch hwp_wait_thread(tid, remaining, &status) {
                case 0 where Self.isStopped(status):
                    // Whatever stopped it (our interrupt, or a signal already on its way, which
                    // is then delivered when it resumes); a still-pending interrupt shows up later
                    // as one more event stop, which the main loop continues.
                    stopped[tid] = resumption(of: tid, status: status)
                case 0:
                    gone.insert(tid)
                    if tid == pid { childEnded(status: status) }
                case 1: timedOut.insert(tid)  // stops later; the main loop continues it then
                default: gone.insert(tid)
                }
            }
        }

        var threads: [ThreadSnapshot] = []
        for tid in order {
            let info = infos[tid] ?? RemoteCapture.ThreadInfo()
            var read = RemoteCapture.Session.StoppedThread()
            var status: ThreadCaptureStatus = gone.contains(tid) ? .exited : .timedOut
            if stopped[tid] != nil {
                read = session.readStoppedThread(tid, copyStack: true)
                status = read.registers == nil ? .exited : .ptrace
            }
            var roles: ThreadRoles = tid == pid ? .mainThread : []
            if tid == crashedTID { roles.insert(.crashed) }
            threads.append(ThreadSnapshot(tid: tid, name: info.name, state: info.state, syscall: info.syscall,
                                          userCPUSeconds: info.userCPUSeconds, systemCPUSeconds: info.systemCPUSeconds,
                                          roles: roles, status: status, registers: read.registers,
                                          frames: read.frames, stackMemory: read.stack))
        }
        LockCapture.attach(pid: pid, to: &threads)  // before they resume
        // Main thread first, as in every other capture.
        threads.sort { ($0.tid == pid ? 0 : 1, $0.tid) < ($1.tid == pid ? 0 : 1, $1.tid) }
        var modules: [ModuleSnapshot] = []
        if crashedTID != nil, options.includeModules { modules = RemoteCapture.Modules.read(pid: pid) }
        for (tid, resume) in stopped { apply(resume, to: tid) }
        stopped.removeAll()
        let pause = RemoteCapture.monotonicSeconds() - pauseStart
        if crashedTID == nil, options.includeModules { modules = RemoteCapture.Modules.read(pid: pid) }
        let snapshot = ProcessSnapshot(reason: options.reason, timestamp: timestamp, process: identity, threads: threads,
                                       modules: modules, annotations: options.annotations,
                                       captureDurationSeconds: RemoteCapture.monotonicSeconds() - began)
        return RemoteCaptureResult(snapshot: snapshot, pauseSeconds: pause)
    }
}
