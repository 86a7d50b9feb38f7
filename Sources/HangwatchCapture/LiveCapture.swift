// In-process capture of every thread (the core of DumpWithoutCrash). Quietly by default: a
// helper process stops the threads with ptrace, copies their registers and stacks and lets them
// go, and they are unwound from the copies (hw_quiet.c), so no blocking call of the program is
// cut short. With signals where ptrace is refused, or when asked (CaptureMethod): each thread
// is asked with a signal it does not block to record its own registers, stack and Dispatch
// queue (C handler in CHangwatchCapture). Either way the requester records itself directly and
// /proc supplies what a thread cannot report about itself (its syscall — except where a quiet
// stop's registers reveal it, x86-64 — and everything of a thread that does not answer); a
// signal's answer brings the thread's name, CPU clocks and signal mask, which chooses the next
// capture's signal without reading /proc status.
import HangwatchPlatform
import HangwatchDatabase
import HangwatchSnapshot
import HangwatchTaskCapture
import CHangwatchCapture
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

package enum LiveCapture {
    /// One capture at a time: the C slots and sequence are process-wide.
    private static let gate = Mutex<State>(State())

    private struct State {
        var initialised = false
        /// Each thread's blocked signals as its last answer showed them (the mask it had when
        /// the signal came): the next capture chooses its signal without reading /proc status.
        var blockedMasks: [Int32: UInt64] = [:]
        /// nil until the quiet capture was set up; then why it cannot be used ("" when it can).
        var quietUnavailable: String?
        /// The last sample of each thread sampled: reused while the thread has not run since.
        var lastSamples: [Int32: LastSample] = [:]
    }

    /// A thread's last sample, with what shows whether it moved since: its /proc syscall line
    /// (system call, arguments, stack pointer, pc) and its CPU time, which grows whenever it runs.
    struct LastSample {
        var syscall: String
        var cpuSeconds: Double
        var frames: [UInt64]
    }

    /// Loads libunwind and installs the handlers now instead of at the first capture, so that
    /// the first capture is not slower and a missing libunwind is reported early. The slot
    /// reservation (`maxThreads`, `maxFramesLimit`, `stackBytesLimit`, `ordinarySignal`) of the
    /// first call wins for the life of the process.
    package static func prepare(options: CaptureOptions = CaptureOptions()) throws {
        try gate.withLock { state in try ensureInitialised(&state, options) }
    }

    /// Why the quiet capture cannot be used in this process (its captures then use signals),
    /// nil when it can, or before the first `prepare` or capture.
    package static var quietCaptureUnavailable: String? {
        gate.withLock { state in state.quietUnavailable.flatMap { $0.isEmpty ? nil : $0 } }
    }

    /// Captures every thread of this process. Concurrent callers are serialised, not failed.
    package static func captureProcess(reason: CaptureReason, bundleID: String,
                                      annotations: [String: String] = [:],
                                      options: CaptureOptions = CaptureOptions()) throws -> ProcessSnapshot {
        let (tids, statuses, syscalls, outcome) = try gate.withLock { state in
            try ensureInitialised(&state, options)
            guard let reader = TaskReader() else { throw CaptureError.cannotEnumerateThreads(errno: errno) }
            let tids = try reader.threadIDsOrThrow()
            let survey = Survey(tids: tids, reader: reader, details: true, masks: state.blockedMasks)
            let outcome = try captureLocked(survey, frames: options.maxFrames, stackBytes: options.stackBytes,
                                            timeout: options.timeout, method: options.method, state: &state, everyThread: true)
            // Samples of threads that are gone are not kept (their tids may come back as others).
            let listed = Set(tids)
            state.lastSamples = state.lastSamples.filter { listed.contains($0.key) }
            return (tids, survey.statuses, survey.syscalls, outcome)
        }
        let pid = getpid()
        let requester = hwc_gettid()
        var threads: [ThreadSnapshot] = []
        threads.reserveCapacity(tids.count)
        for (index, tid) in tids.enumerated() {
            let status = statuses[index]
            let recorded = outcome.threads[index].recorded
            // An answer carries the thread's own name and CPU clocks; /proc the rest.
            let cpu = recorded?.cpu ?? (status?.userCPUSeconds ?? 0, status?.systemCPUSeconds ?? 0)
            var thread = ThreadSnapshot(
                tid: tid, name: recorded?.name ?? status?.name ?? "", state: status?.state ?? .unknown,
                syscall: syscalls[index], userCPUSeconds: cpu.user, systemCPUSeconds: cpu.system,
                status: status == nil ? .exited : outcome.threads[index].status)
            // `thread.info.…`, not `thread.…`: the dynamic-member key paths cost a capture of
            // 512 threads about a millisecond.
            if tid == pid { thread.info.roles.insert(.mainThread) }
            if tid == requester { thread.info.roles.insert(.requester) }
            if let recorded {
                thread.registers = recorded.registers
                thread.frames = recorded.frames
                thread.info.queueLabel = recorded.queueLabel
                thread.stackMemory = recorded.stack
                if recorded.onMainQueue { thread.info.roles.insert(.mainQueue) }
            }
            threads.append(thread)
        }
        resolveMainQueueClaims(&threads, mainThread: pid)
        LockCapture.attach(pid: pid, to: &threads)
        var annotated = annotations
        annotated[methodAnnotation] = outcome.method.annotation
        var snapshot = ProcessSnapshot(reason: reason, timestamp: wallClockNow(), process: ProcessIdentity.current(bundleID: bundleID),
                                       threads: threads, modules: LoadedModules.list(), annotations: annotated,
                                       captureDurationSeconds: Double(outcome.elapsedNanoseconds) / 1e9)
        if options.includeTasks { snapshot.tasks = SwiftTaskCapture.capture(pid: pid) }
        return snapshot
    }

    /// The annotation that records how a snapshot's threads were stopped (`StopMethod.annotation`).
    package static let methodAnnotation = "capture.method"

    /// How a capture's threads were stopped: what the `capture.method` annotation spells, here only.
    package enum StopMethod: Equatable, Sendable {
        /// Quietly, by the ptrace helper: "ptrace".
        case ptrace
        /// With signals, as asked (`CaptureMethod.signals`): "signals".
        case signals
        /// With signals where the quiet capture was asked for and could not be had: "signals (why)".
        case signalsInstead(why: String)
        /// Quietly, but with signals for the threads ptrace refused: "ptrace; signals for N thread(s) (why)".
        case ptraceAndSignals(threads: Int, why: String)

        package var annotation: String {
            switch self {
            case .ptrace: return "ptrace"
            case .signals: return "signals"
            case .signalsInstead(let why): return "signals (\(why))"
            case .ptraceAndSignals(let threads, let why): return "ptrace; signals for \(threads) thread(s) (\(why))"
            }
        }

        /// The quiet capture was asked for, and signals interrupted some of the program's
        /// blocking calls all the same.
        package var fellBackToSignals: Bool {
            switch self {
            case .ptrace, .signals: return false
            case .signalsInstead, .ptraceAndSignals: return true
            }
        }

        /// The method an annotation names; nil for text `annotation` never gives.
        package init?(annotation text: String) {
            if text == "ptrace" { self = .ptrace; return }
            if text == "signals" { self = .signals; return }
            if text.hasPrefix("signals ("), text.hasSuffix(")") {
                self = .signalsInstead(why: String(text.dropFirst(9).dropLast()))
                return
            }
            // "ptrace; signals for N thread(s) (why)"
            let prefix = "ptrace; signals for ", middle = " thread(s) ("
            guard text.hasPrefix(prefix), text.hasSuffix(")") else { return nil }
            let rest = text.dropFirst(prefix.count)
            guard let space = rest.firstIndex(of: " "), let threads = Int(rest[..<space]), rest[space...].hasPrefix(middle) else { return nil }
            self = .ptraceAndSignals(threads: threads, why: String(rest[space...].dropFirst(middle.count).dropLast()))
        }
    }

    /// One thread's stack (frames[0] is its pc), for a hang monitor's periodic samples.
    /// A thread blocked in a system call that has not run since its last sample has the same
    /// stack: that sample is returned again, and the thread is not stopped at all (quiet
    /// capture; docs/hang-monitor.md, "How capture works").
    package static func sampleStack(tid: Int32, options: CaptureOptions = CaptureOptions()) throws -> [UInt64] {
        let (status, outcome, unmovedFrames) = try gate.withLock { state -> (TaskReader.ThreadStatus?, Outcome?, [UInt64]?) in
            try ensureInitialised(&state, options)
            guard let reader = TaskReader() else { throw CaptureError.cannotEnumerateThreads(errno: errno) }
            let quiet = options.method == .quiet
            let syscall = quiet ? reader.syscallLine(tid: tid) : nil
            let cpu = quiet ? TaskReader.threadClock(tid: tid, kind: 2) : nil
            if let syscall, let cpu, let last = state.lastSamples[tid], Self.unmoved(last, syscall: syscall, cpuSeconds: cpu) {
                return (nil, nil, last.frames)
            }
            let survey = Survey(tids: [tid], reader: reader, details: false, masks: state.blockedMasks)
            let outcome = try captureLocked(survey, frames: options.maxFrames, stackBytes: 0, timeout: options.timeout,
                                            method: options.method, state: &state, everyThread: false)
            state.lastSamples[tid] = nil
            if let syscall, cpu != nil, let frames = outcome.threads[0].recorded?.frames, syscall != "running" {
                state.lastSamples[tid] = Self.asleepAgain(tid: tid, in: syscall, reader: reader).map {
                    LastSample(syscall: $0.syscall, cpuSeconds: $0.cpuSeconds, frames: frames)
                }
            }
            return (survey.statuses[0], outcome, nil)
        }
        guard let outcome else { return unmovedFrames ?? [] }
        guard let recorded = outcome.threads[0].recorded else {
            throw CaptureError.threadNotCaptured(tid: tid, status: "\(status == nil ? .exited : outcome.threads[0].status)")
        }
        return recorded.frames
    }

    /// In the same system call with the same arguments, stack pointer and pc, and no CPU time
    /// used since (the clock grows with every instant the thread runs): its stack is unchanged.
    static func unmoved(_ last: LastSample, syscall: String, cpuSeconds: Double) -> Bool {
        syscall != "running" && !syscall.hasPrefix("-1") && syscall == last.syscall && cpuSeconds == last.cpuSeconds
    }

    /// The stop made the sampled thread run: woken into the stop, then restarting its call. What
    /// the next sample compares with is the thread once back asleep in the call it was stopped
    /// in (`before`, or its restart_syscall), with its clock then; nil when it is not back
    /// within a few yields and 200 µs (the next sample stops it again) or went elsewhere.
    static func asleepAgain(tid: Int32, in before: String, reader: TaskReader) -> (syscall: String, cpuSeconds: Double)? {
        for attempt in 0..<8 {
            guard let line = reader.syscallLine(tid: tid) else { return nil }
            if line != "running" {
                guard sameCall(before, line), let cpu = TaskReader.threadClock(tid: tid, kind: 2) else { return nil }
                return (line, cpu)
            }
            if attempt < 4 { sched_yield() } else { usleep(50) }
        }
        return nil
    }

    /// Two syscall lines of one call: the same arguments, stack pointer and pc, and the same
    /// number or the second one restart_syscall (how a stop resumes a call with a timeout).
    static func sameCall(_ before: String, _ after: String) -> Bool {
        guard let number = Syscalls.number(ofLine: before), let then = Syscalls.number(ofLine: after),
              then == number || then == Syscalls.restart else { return false }
        return before.utf8.drop { $0 != UInt8(ascii: " ") }.elementsEqual(after.utf8.drop { $0 != UInt8(ascii: " ") })
    }

    /// The thread draining the main Dispatch queue right now, or nil when no thread is (the
    /// queue is idle) or libdispatch is not loaded. Asks every thread for its queue only.
    package static func mainQueueThread(options: CaptureOptions = CaptureOptions()) throws -> Int32? {
        let (tids, outcome) = try gate.withLock { state in
            try ensureInitialised(&state, options)
            guard let reader = TaskReader() else { throw CaptureError.cannotEnumerateThreads(errno: errno) }
            let tids = try reader.threadIDsOrThrow()
            let survey = Survey(tids: tids, reader: reader, details: false, masks: state.blockedMasks)
            return (tids, try captureLocked(survey, frames: 0, stackBytes: 0, timeout: options.timeout,
                                            method: options.method, state: &state, everyThread: true))
        }
        let claims = tids.indices.filter { outcome.threads[$0].recorded?.onMainQueue == true }.map { tids[$0] }
        return claims.first { $0 != getpid() } ?? claims.first
    }

    /// A serial queue is drained by one thread at a time. The main thread names the main queue
    /// as current from libdispatch's start, and keeps doing so when `dispatchMain()` (or an async
    /// `main`) has parked it for good while pool threads drain the queue: any other claimant wins.
    static func resolveMainQueueClaims(_ threads: inout [ThreadSnapshot], mainThread: Int32) {
        guard threads.contains(where: { $0.info.tid != mainThread && $0.info.roles.contains(.mainQueue) }),
              let index = threads.firstIndex(where: { $0.info.tid == mainThread && $0.info.roles.contains(.mainQueue) })
        else { return }
        threads[index].info.roles.remove(.mainQueue)
        threads[index].info.queueLabel = nil
    }

    /// The unwinder the capture handlers use, "libgcc" or "libunwind" (docs/platform-facts.md
    /// fact 4); "" before the first `prepare` or capture.
    package static var handlerUnwinder: String { String(cString: hwc_handler_unwinder()) }

    /// Kernel thread id of the calling thread (what /proc/self/task lists and `sampleStack` takes).
    package static func currentThreadID() -> Int32 { hwc_gettid() }

    // MARK: - Internals

    struct Recorded {
        var registers: Registers
        var frames: [UInt64]
        var queueLabel: String?
        var onMainQueue: Bool
        var stack: [UInt8]
        var name: String?
        var cpu: (user: Double, system: Double)?
        /// The /proc syscall line, from the registers at a quiet capture's stop (x86-64).
        var syscall: String?
    }

    struct ThreadOutcome {
        var status: ThreadCaptureStatus
        var recorded: Recorded?
    }

    struct Outcome {
        var threads: [ThreadOutcome]
        var elapsedNanoseconds: UInt64
        var method: StopMethod
    }

    private static func ensureInitialised(_ state: inout State, _ options: CaptureOptions) throws {
        try ensureSignalCapture(&state.initialised, options)
        if state.quietUnavailable == nil {
            var message = [CChar](repeating: 0, count: 512)
            state.quietUnavailable = hwc_quiet_init(&message, message.count) == 0 ? ""
                : String(decoding: message.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        }
    }

    private static func ensureSignalCapture(_ initialised: inout Bool, _ options: CaptureOptions) throws {
        if initialised { return }
        guard options.maxThreads > 0, options.maxThreads <= Int(HWC_MAX_THREADS_LIMIT) else {
            throw CaptureError.invalidOptions("maxThreads must be 1...\(HWC_MAX_THREADS_LIMIT)")
        }
        guard options.maxFramesLimit > 0, options.maxFramesLimit <= Int(HWC_MAX_FRAMES_LIMIT) else {
            throw CaptureError.invalidOptions("maxFramesLimit must be 1...\(HWC_MAX_FRAMES_LIMIT)")
        }
        guard options.stackBytesLimit >= 0, options.stackBytesLimit <= Int(HWC_MAX_STACK_BYTES_LIMIT) else {
            throw CaptureError.invalidOptions("stackBytesLimit must be 0...\(HWC_MAX_STACK_BYTES_LIMIT)")
        }
        var message = [CChar](repeating: 0, count: 512)
        let result = options.unwindLibrary.withCString { library in
            var config = hwc_config(max_threads: UInt32(options.maxThreads), max_frames: UInt32(options.maxFramesLimit),
                                    max_stack_bytes: UInt32(options.stackBytesLimit),
                                    ordinary_signal: options.ordinarySignal ?? 0, unwind_library: library)
            return hwc_init(&config, &message, message.count)
        }
        if result != 0 {
            throw CaptureError.unavailable(String(decoding: message.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
        }
        initialised = true
    }

    /// Which signal can reach a thread with this blocked mask (docs/platform-facts.md fact 2); 0 if none.
    static func signal(forBlockedMask blocked: UInt64, ordinary: Int32) -> Int32 {
        if ordinary != 0 && accepts(ordinary, blocked: blocked) { return ordinary }
        if accepts(SIGPROF, blocked: blocked) { return SIGPROF }
        return 0
    }

    static func accepts(_ signal: Int32, blocked: UInt64) -> Bool { bit(of: signal) != 0 && blocked & bit(of: signal) == 0 }

    /// Signal n's bit in a /proc or ucontext mask (bit n-1); 0 for anything but 1...64.
    static func bit(of signal: Int32) -> UInt64 { signal > 0 && signal <= 64 ? 1 << UInt64(signal - 1) : 0 }

    /// Runs inside `hwc_capture`, on the requesting thread, as its hooks: reads each thread's
    /// /proc files before any is signalled — the syscall line must be read while the thread
    /// still sleeps (an interrupted sleep restarts as restart_syscall, hiding what it was) — and
    /// chooses its signal, from the mask its last answer showed or, for a thread not seen
    /// before, from `SigBlk` in its status.
    private final class Survey {
        let tids: [Int32]
        let reader: TaskReader
        /// Name, state, CPU times and syscall (a queue-only capture needs the mask alone).
        let details: Bool
        let ordinary = hwc_ordinary_signal()
        /// Choosing for the quiet capture: no signal to choose, the syscall line is all to read.
        var quiet = false
        var masks: [Int32: UInt64]
        var statuses: [TaskReader.ThreadStatus?]
        var syscalls: [String?]

        init(tids: [Int32], reader: TaskReader, details: Bool, masks: [Int32: UInt64]) {
            self.tids = tids
            self.reader = reader
            self.details = details
            self.masks = masks
            statuses = Array(repeating: nil, count: tids.count)
            syscalls = Array(repeating: nil, count: tids.count)
            // A thread still finishing its answer to the previous capture blocks both signals.
            _ = hwc_wait_for_handlers(2_000_000)
            // The requester records itself without a signal: C does not ask `choose` about it.
            // It is running, in no system call, as /proc would say.
            let requester = hwc_gettid()
            for index in tids.indices where tids[index] == requester {
                statuses[index] = reader.callingThreadStatus(tid: requester)
                syscalls[index] = details ? "running" : nil
            }
        }

        func choose(_ index: Int) -> Int32 {
            let tid = tids[index]
            if quiet { return chooseQuietly(index) }
            if details { syscalls[index] = reader.syscallLine(tid: tid) }
            // No syscall line: the thread is gone, or its process is not dumpable (root owns its
            // syscall files). /proc status, which anyone may read, shows which one.
            if let blocked = masks[tid], LiveCapture.signal(forBlockedMask: blocked, ordinary: ordinary) != 0,
               !(details && syscalls[index] == nil) {
                // The answer brings the name and CPU times. The state is the syscall line's: a
                // thread in D sleep does not answer until it wakes, and one still unanswered when
                // answers stop is read again (`recheck`), state and all. A thread that is gone
                // fails the signal (ESRCH).
                statuses[index] = TaskReader.ThreadStatus(name: "", state: syscalls[index] == "running" ? "R" : "S", blocked: blocked)
            } else {
                statuses[index] = reader.status(tid: tid)
                // Blocking both may be a moment's state (an answer to the previous capture
                // finishing, pthread_create): look again once before calling it unreachable.
                if let status = statuses[index], signal(for: status) == 0 {
                    usleep(200)
                    guard let blocked = reader.blockedSignals(tid: tid) else { statuses[index] = nil; return 0 }
                    statuses[index]?.blocked = blocked
                }
                if let status = statuses[index] { masks[tid] = status.blocked }
            }
            return statuses[index].map(signal(for:)) ?? 0
        }

        /// Where registers cannot reveal a stopped thread's system call (arm64,
        /// HWC_SYSCALL_FROM_REGISTERS), before the quiet capture stops anything: the syscall
        /// line (read after the stop, it would show the restart_syscall the thread resumes
        /// with); the state is that line's until the capture shows otherwise
        /// (`settleUnanswered`). 0 for a thread that is gone.
        private func chooseQuietly(_ index: Int) -> Int32 {
            guard details else { return 1 }
            if let line = reader.syscallLine(tid: tids[index]) {
                settle(index, syscall: line)
                return 1
            }
            // Gone, or hidden: a process that is not dumpable cannot read its threads' syscall
            // files (root owns them) but can read their status.
            statuses[index] = reader.status(tid: tids[index])
            return statuses[index] == nil ? 0 : 1
        }

        /// A thread whose syscall line is known (read before the stop, or taken from the stop's
        /// registers): asleep in the call, or running.
        func settle(_ index: Int, syscall line: String) {
            syscalls[index] = line
            statuses[index] = TaskReader.ThreadStatus(name: "", state: line == "running" ? "R" : "S", blocked: masks[tids[index]] ?? 0)
        }

        /// A thread the quiet capture could not stop in time (D sleep, or it exited): what /proc reports now.
        func settleUnanswered(_ index: Int) {
            guard tids[index] != hwc_gettid() else { return }
            statuses[index] = reader.status(tid: tids[index])
        }

        /// The thread has not answered although answers stopped coming. If our signal is pending
        /// and blocked, its mask changed since it was remembered: ask again with one it accepts.
        /// Otherwise it is only slow — waiting for a CPU (R: its state before the signal stands),
        /// in D sleep or stopped (it answers when it can: that state is what it was doing).
        func recheck(_ index: Int, sent: Int32) -> Int32 {
            let tid = tids[index]
            guard let now = reader.status(tid: tid) else {  // gone: reported exited
                statuses[index] = nil
                return 0
            }
            masks[tid] = now.blocked
            let stuck = now.pending & now.blocked & LiveCapture.bit(of: sent) != 0
            guard stuck else {
                if now.state != .running && now.state != .sleeping { statuses[index]?.state = now.state }
                return sent
            }
            statuses[index]?.blocked = now.blocked
            return signal(for: statuses[index] ?? now)
        }

        /// Running with every signal blocked is what pthread_create (around clone) and a new
        /// thread's first instructions look like: ask with both signals, which stay pending and
        /// are answered on unblocking (or the thread times out, never hangs us).
        private func signal(for status: TaskReader.ThreadStatus) -> Int32 {
            let chosen = LiveCapture.signal(forBlockedMask: status.blocked, ordinary: ordinary)
            return chosen == 0 && status.state == .running ? HWC_SIGNAL_EITHER : chosen
        }
    }

    /// Must run inside `gate`. Quietly when `method` asks for it and the quiet capture works
    /// here; with signals otherwise, and for the threads ptrace refused. The outcome's `method`
    /// records which, and why.
    private static func captureLocked(_ survey: Survey, frames: Int, stackBytes: Int, timeout: Double, method: CaptureMethod,
                                      state: inout State, everyThread: Bool) throws -> Outcome {
        guard timeout >= 0, timeout.isFinite else { throw CaptureError.invalidOptions("timeout must be >= 0 seconds") }
        guard frames >= 0, stackBytes >= 0 else { throw CaptureError.invalidOptions("maxFrames and stackBytes must be >= 0") }
        guard method == .quiet, let unavailable = state.quietUnavailable, unavailable.isEmpty else {
            var outcome = try captureWithSignals(survey, frames: frames, stackBytes: stackBytes, timeout: timeout,
                                                 masks: &state.blockedMasks, everyThread: everyThread)
            outcome.method = method == .signals ? .signals : .signalsInstead(why: "quiet capture unavailable: \(state.quietUnavailable ?? "?")")
            return outcome
        }
        let quiet: QuietOutcome
        switch captureQuietly(survey, frames: frames, stackBytes: stackBytes, timeout: timeout) {
        case .success(let captured): quiet = captured
        case .failure(let why):
            survey.quiet = false
            var outcome = try captureWithSignals(survey, frames: frames, stackBytes: stackBytes, timeout: timeout,
                                                 masks: &state.blockedMasks, everyThread: everyThread)
            outcome.method = .signalsInstead(why: "\(why)")
            return outcome
        }
        // A helper killed by a signal it was not sent (a seccomp filter that kills ptrace) would
        // be killed again: this process's later captures use signals, and report why.
        if let helper = quiet.helper, helper.died { state.quietUnavailable = helper.description }
        var outcome = quiet.outcome
        let leftover = (quiet.refused + quiet.lost).sorted()
        guard !leftover.isEmpty else { return outcome }
        // ptrace refused (a debugger or `hangwatch run --catch-crashes` attached, Yama, seccomp),
        // or the helper is gone without them: those threads are asked with signals, now, so
        // that no stack is lost.
        let retry = Survey(tids: leftover.map { survey.tids[$0] }, reader: survey.reader, details: survey.details,
                           masks: state.blockedMasks)
        let again = try captureWithSignals(retry, frames: frames, stackBytes: stackBytes, timeout: timeout,
                                           masks: &state.blockedMasks, everyThread: false)
        for (position, index) in leftover.enumerated() {
            outcome.threads[index] = again.threads[position]
            survey.statuses[index] = retry.statuses[position]
            if survey.syscalls[index] == nil { survey.syscalls[index] = retry.syscalls[position] }
        }
        outcome.elapsedNanoseconds += again.elapsedNanoseconds
        let why = quiet.helper.map(\.description) ?? ptraceRefusal()
        outcome.method = leftover.count == survey.tids.count - (survey.tids.contains(hwc_gettid()) ? 1 : 0)
            ? .signalsInstead(why: why) : .ptraceAndSignals(threads: leftover.count, why: why)
        return outcome
    }

    /// Whether `pid` is one of this process's own quiet-capture helpers (hw_quiet.c): the tracer
    /// that TracerPid names while a capture stops the main thread, which is no debugger.
    package static func isOwnCaptureHelper(_ pid: Int32) -> Bool { hwc_quiet_is_own_helper(pid) != 0 }

    /// Why ptrace refused to stop our threads, as far as /proc shows.
    private static func ptraceRefusal() -> String {
        let tracer = ProcFS.tracerPID(of: nil)
        if tracer != 0 {
            return "ptrace refused: the process is traced by pid \(tracer)"
        }
        return "ptrace refused (Yama ptrace_scope, seccomp, or a process that is not dumpable)"
    }

    private enum QuietFailure: Error, CustomStringConvertible {
        case noHelper(errno: Int32)
        case notInitialised
        var description: String {
            switch self {
            case .noHelper(let code): return "no capture helper could be started: \(String(cString: strerror(code)))"
            case .notInitialised: return "quiet capture not initialised"
            }
        }
    }

    /// A helper that did not finish its capture (hwc_capture_quiet's -3 and -4).
    struct HelperFailure: CustomStringConvertible {
        /// Killed by a signal it was not sent (-3); otherwise ended at its deadline.
        var died: Bool
        var signal: Int32 = 0
        var coreDumped = false
        var notGone = false

        var description: String {
            guard died else { return "the capture helper did not finish within its deadline (stopped or starved) and was ended" }
            if notGone { return "the capture helper did not end after SIGKILL" }
            let by = signal == 0 ? "a signal" : SignalNames.name(signal)
            let seccomp = signal == SIGSYS ? ", a seccomp filter forbids ptrace" : ""
            return "the capture helper was killed by \(by)\(seccomp)\(coreDumped ? " (core dumped)" : "")"
        }
    }

    /// What a quiet capture brought: the threads' outcomes, the indexes of those ptrace refused and
    /// of those a failed helper never got to, and how it failed.
    struct QuietOutcome {
        var outcome: Outcome
        var refused: [Int]
        var lost: [Int]
        var helper: HelperFailure?
    }

    /// hwc_capture_quiet for every thread of the survey.
    private static func captureQuietly(_ survey: Survey, frames: Int, stackBytes: Int,
                                       timeout: Double) -> Result<QuietOutcome, QuietFailure> {
        let tids = survey.tids
        survey.quiet = true
        var results = [Int32](repeating: 0, count: tids.count)
        var slots = [Int32](repeating: -1, count: tids.count)
        var elapsed: UInt64 = 0
        var failure: Int32 = 0
        // Where the stop's registers reveal each thread's system call, nothing is read before the stop.
        let readsBeforeStop = survey.details && HWC_SYSCALL_FROM_REGISTERS == 0
        var hooks = hwc_capture_hooks(
            context: Unmanaged.passUnretained(survey).toOpaque(),
            choose: readsBeforeStop ? { context, index in Unmanaged<Survey>.fromOpaque(context!).takeUnretainedValue().choose(Int(index)) } : nil,
            recheck: nil, stall_ns: 0)
        let called = withExtendedLifetime(survey) {
            hwc_capture_quiet(tids, UInt32(tids.count), UInt32(min(frames, Int(UInt32.max))), UInt32(min(stackBytes, Int(UInt32.max))),
                              UInt64(min(timeout, 3600) * 1e9), &hooks, &results, &slots, &elapsed, &failure)
        }
        survey.quiet = false
        if called == -2 { return .failure(.noHelper(errno: failure)) }
        var helper: HelperFailure?
        switch called {
        case 0: break
        case -3: helper = HelperFailure(died: true, signal: failure & 0x7f, coreDumped: failure & Int32(HWC_HELPER_CORE_DUMPED) != 0,
                                        notGone: failure & Int32(HWC_HELPER_NOT_GONE) != 0)
        case -4: helper = HelperFailure(died: false)
        default: return .failure(.notInitialised)
        }
        let mainQueue = hwc_main_queue_address()
        var threads: [ThreadOutcome] = []
        var refused: [Int] = []
        var lost: [Int] = []
        for index in tids.indices {
            switch Int(results[index]) {
            case Int(HWC_RESULT_ANSWERED):
                let recorded = read(slot: slots[index], mainQueue: mainQueue)
                if let line = recorded?.syscall { survey.settle(index, syscall: line) }
                threads.append(ThreadOutcome(status: .captured, recorded: recorded))
                continue
            case Int(HWC_RESULT_REFUSED):
                refused.append(index)
                threads.append(ThreadOutcome(status: .unreachable))
            case Int(HWC_RESULT_HELPER_LOST):
                lost.append(index)
                threads.append(ThreadOutcome(status: .timedOut))
            case Int(HWC_RESULT_EXITED): threads.append(ThreadOutcome(status: .exited))
            case Int(HWC_RESULT_TIMED_OUT): threads.append(ThreadOutcome(status: .timedOut))
            default: threads.append(ThreadOutcome(status: .unreachable))
            }
            survey.settleUnanswered(index)
        }
        return .success(QuietOutcome(outcome: Outcome(threads: threads, elapsedNanoseconds: elapsed, method: .ptrace),
                                     refused: refused, lost: lost, helper: helper))
    }

    /// Must run inside `gate`. Afterwards `masks` holds what the answers showed (and, when
    /// `everyThread` listed them all, only threads that still exist).
    private static func captureWithSignals(_ survey: Survey, frames: Int, stackBytes: Int, timeout: Double,
                                           masks: inout [Int32: UInt64], everyThread: Bool) throws -> Outcome {
        let tids = survey.tids
        var results = [Int32](repeating: 0, count: tids.count)
        var slots = [Int32](repeating: -1, count: tids.count)
        var elapsed: UInt64 = 0
        let timeoutNanoseconds = UInt64(min(timeout, 3600) * 1e9)
        var hooks = hwc_capture_hooks(
            context: Unmanaged.passUnretained(survey).toOpaque(),
            choose: { context, index in
                Unmanaged<Survey>.fromOpaque(context!).takeUnretainedValue().choose(Int(index))
            },
            recheck: { context, index, sent in
                Unmanaged<Survey>.fromOpaque(context!).takeUnretainedValue().recheck(Int(index), sent: sent)
            },
            // Answers arrive every few tens of µs while threads are answering (512 threads
            // answer within 10 ms on 2 CPUs): 0.5 ms without one means the rest are not coming
            // by themselves, or the machine is busy — then the recheck costs a status read each.
            stall_ns: 500_000)
        let signals = [Int32](repeating: 0, count: tids.count)
        let called = withExtendedLifetime(survey) {
            hwc_capture(tids, signals, UInt32(tids.count), UInt32(min(frames, Int(UInt32.max))),
                        UInt32(min(stackBytes, Int(UInt32.max))), timeoutNanoseconds, &hooks, &results, &slots, &elapsed)
        }
        guard called == 0 else { throw CaptureError.unavailable("capture machinery not initialised") }
        let mainQueue = hwc_main_queue_address()
        var threads: [ThreadOutcome] = []
        threads.reserveCapacity(tids.count)
        masks = survey.masks
        for index in tids.indices {
            switch Int(results[index]) {
            case Int(HWC_RESULT_ANSWERED):
                threads.append(ThreadOutcome(status: .captured, recorded: read(slot: slots[index], mainQueue: mainQueue)))
                if let slot = hwc_slot_at(slots[index]) { masks[tids[index]] = slot.pointee.blocked }
            case Int(HWC_RESULT_TIMED_OUT): threads.append(ThreadOutcome(status: .timedOut))
            case Int(HWC_RESULT_EXITED): threads.append(ThreadOutcome(status: .exited))
            default: threads.append(ThreadOutcome(status: .unreachable))
            }
        }
        if everyThread {
            let listed = Set(tids)
            masks = masks.filter { listed.contains($0.key) }
        }
        return Outcome(threads: threads, elapsedNanoseconds: elapsed, method: .signals)
    }

    private static func read(slot index: Int32, mainQueue: UInt64) -> Recorded? {
        guard let slot = hwc_slot_at(index)?.pointee else { return nil }
        let registers = withUnsafeBytes(of: slot.registers) { Array($0.bindMemory(to: UInt64.self)) }
        var frames: [UInt64] = []
        if slot.frame_count > 0, let base = hwc_slot_frames(index) {
            frames = Array(UnsafeBufferPointer(start: base, count: Int(slot.frame_count)))
        }
        var stack: [UInt8] = []
        if slot.stack_size > 0, let base = hwc_slot_stack(index) {
            stack = Array(UnsafeBufferPointer(start: base, count: Int(slot.stack_size)))
        }
        let label = withUnsafeBytes(of: slot.queue_label) { raw in
            String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
        }
        let name = withUnsafeBytes(of: slot.name) { raw in String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self) }
        let (prof, virt, sched) = (Double(slot.cpu_ns.0) / 1e9, Double(slot.cpu_ns.1) / 1e9, Double(slot.cpu_ns.2) / 1e9)
        return Recorded(registers: Registers(values: registers), frames: frames,
                        queueLabel: label.isEmpty ? nil : label,
                        onMainQueue: slot.flags & HWC_SLOT_FLAG_MAIN_QUEUE != 0 && mainQueue != 0,
                        stack: stack, name: name.isEmpty ? nil : name,
                        cpu: sched > 0 ? TaskReader.cpuSplit(sched: sched, prof: prof, virt: virt) : nil,
                        syscall: slot.flags & HWC_SLOT_FLAG_SYSCALL == 0 ? nil
                            : Syscalls.line(number: slot.syscall, arguments: withUnsafeBytes(of: slot.syscall_arguments) {
                                Array($0.bindMemory(to: UInt64.self))
                            }, sp: registers[Int(HW_REGISTER_SP)], pc: registers[Int(HW_REGISTER_PC)]))
    }

    private static func wallClockNow() -> Double {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
    }
}
