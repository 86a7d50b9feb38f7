// In-process capture of every thread (the core of DumpWithoutCrash): each thread is asked with
// a signal it does not block to record its own registers, stack and Dispatch queue (C handler
// in CHangwatchCapture); the requester records itself directly. /proc supplies what a thread
// cannot say about itself (name, state, CPU time, syscall) and the data of unreachable threads.
import HangwatchPlatform
import HangwatchDatabase
import HangwatchSnapshot
import CHangwatchCapture
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

package enum LiveCapture {
    /// One capture at a time: the C slots and sequence are process-wide. Holds "initialised".
    private static let gate = Mutex<Bool>(false)

    /// Loads libunwind and installs the handlers now instead of at the first capture, so that
    /// the first capture is not slower and a missing libunwind is reported early. The slot
    /// reservation (`maxThreads`, `maxFramesLimit`, `stackBytesLimit`, `ordinarySignal`) of the
    /// first call wins for the life of the process.
    package static func prepare(options: CaptureOptions = CaptureOptions()) throws {
        try gate.withLock { initialised in try ensureInitialised(&initialised, options) }
    }

    /// Captures every thread of this process. Concurrent callers are serialised, not failed.
    package static func captureProcess(reason: CaptureReason, bundleID: String,
                                      annotations: [String: String] = [:],
                                      options: CaptureOptions = CaptureOptions()) throws -> ProcessSnapshot {
        let (tids, statuses, syscalls, outcome) = try gate.withLock { initialised in
            try ensureInitialised(&initialised, options)
            guard let reader = TaskReader() else { throw CaptureError.cannotEnumerateThreads(errno: errno) }
            let tids = try reader.threadIDsOrThrow()
            // Name, state and CPU times (one `stat` read) and SigBlk: SigBlk chooses each signal.
            let statuses = readStatuses(tids, reader: reader)
            // Before signalling: an interrupted sleep restarts as restart_syscall, hiding what it was.
            let syscalls = tids.indices.map { statuses[$0] == nil ? nil : reader.syscallLine(tid: tids[$0]) }
            let outcome = try captureLocked(tids: tids, statuses: statuses, frames: options.maxFrames,
                                            stackBytes: options.stackBytes, timeout: options.timeout)
            return (tids, statuses, syscalls, outcome)
        }
        let pid = getpid()
        let requester = hwc_gettid()
        var threads: [ThreadSnapshot] = []
        threads.reserveCapacity(tids.count)
        for (index, tid) in tids.enumerated() {
            let status = statuses[index]
            var thread = ThreadSnapshot(
                tid: tid, name: status?.name ?? "", state: status?.state ?? "?",
                syscall: syscalls[index], userCPUSeconds: status?.userCPUSeconds ?? 0, systemCPUSeconds: status?.systemCPUSeconds ?? 0,
                status: status == nil ? .exited : outcome.threads[index].status)
            if tid == pid { thread.roles.insert(.mainThread) }
            if tid == requester { thread.roles.insert(.requester) }
            if let recorded = outcome.threads[index].recorded {
                thread.registers = recorded.registers
                thread.frames = recorded.frames
                thread.queueLabel = recorded.queueLabel
                thread.stackMemory = recorded.stack
                if recorded.onMainQueue { thread.roles.insert(.mainQueue) }
            }
            threads.append(thread)
        }
        resolveMainQueueClaims(&threads, mainThread: pid)
        return ProcessSnapshot(reason: reason, timestamp: wallClockNow(), process: ProcessIdentity.current(bundleID: bundleID),
                               threads: threads, modules: LoadedModules.list(), annotations: annotations,
                               captureDurationSeconds: Double(outcome.elapsedNanoseconds) / 1e9)
    }

    /// One thread's stack (frames[0] is its pc), for a hang monitor's periodic samples.
    package static func sampleStack(tid: Int32, options: CaptureOptions = CaptureOptions()) throws -> [UInt64] {
        let (status, outcome) = try gate.withLock { initialised in
            try ensureInitialised(&initialised, options)
            guard let reader = TaskReader() else { throw CaptureError.cannotEnumerateThreads(errno: errno) }
            let status = readStatuses([tid], reader: reader)[0]
            return (status, try captureLocked(tids: [tid], statuses: [status], frames: options.maxFrames,
                                              stackBytes: 0, timeout: options.timeout))
        }
        guard let recorded = outcome.threads[0].recorded else {
            throw CaptureError.threadNotCaptured(tid: tid, status: "\(status == nil ? .exited : outcome.threads[0].status)")
        }
        return recorded.frames
    }

    /// The thread draining the main Dispatch queue right now, or nil when no thread is (the
    /// queue is idle) or libdispatch is not loaded. Asks every thread for its queue only.
    package static func mainQueueThread(options: CaptureOptions = CaptureOptions()) throws -> Int32? {
        let (tids, outcome) = try gate.withLock { initialised in
            try ensureInitialised(&initialised, options)
            guard let reader = TaskReader() else { throw CaptureError.cannotEnumerateThreads(errno: errno) }
            let tids = try reader.threadIDsOrThrow()
            let statuses = readStatuses(tids, reader: reader)
            return (tids, try captureLocked(tids: tids, statuses: statuses, frames: 0, stackBytes: 0, timeout: options.timeout))
        }
        let claims = tids.indices.filter { outcome.threads[$0].recorded?.onMainQueue == true }.map { tids[$0] }
        return claims.first { $0 != getpid() } ?? claims.first
    }

    /// A serial queue is drained by one thread at a time. The main thread names the main queue
    /// as current from libdispatch's start, and keeps doing so when `dispatchMain()` (or an async
    /// `main`) has parked it for good while pool threads drain the queue: any other claimant wins.
    static func resolveMainQueueClaims(_ threads: inout [ThreadSnapshot], mainThread: Int32) {
        guard threads.contains(where: { $0.tid != mainThread && $0.roles.contains(.mainQueue) }),
              let index = threads.firstIndex(where: { $0.tid == mainThread && $0.roles.contains(.mainQueue) })
        else { return }
        threads[index].roles.remove(.mainQueue)
        threads[index].queueLabel = nil
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
    }

    struct ThreadOutcome {
        var status: ThreadCaptureStatus
        var recorded: Recorded?
    }

    struct Outcome {
        var threads: [ThreadOutcome]
        var elapsedNanoseconds: UInt64
    }

    private static func ensureInitialised(_ initialised: inout Bool, _ options: CaptureOptions) throws {
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
        func accepts(_ signal: Int32) -> Bool { signal > 0 && signal <= 64 && blocked & (1 << UInt64(signal - 1)) == 0 }
        if ordinary != 0 && accepts(ordinary) { return ordinary }
        if accepts(SIGPROF) { return SIGPROF }
        return 0
    }

    /// The threads' /proc status, read once no capture handler is running: a thread finishing
    /// its answer to the previous capture blocks both capture signals meanwhile. A thread that
    /// still seems to block both is read again after a moment before being called unreachable.
    /// Must run inside `gate`.
    private static func readStatuses(_ tids: [Int32], reader: TaskReader) -> [TaskReader.ThreadStatus?] {
        _ = hwc_wait_for_handlers(2_000_000)
        let ordinary = hwc_ordinary_signal()
        let requester = hwc_gettid()
        var statuses = tids.map { reader.status(tid: $0) }
        func looksUnreachable(_ index: Int) -> Bool {
            guard tids[index] != requester, let status = statuses[index] else { return false }
            return signal(forBlockedMask: status.blocked, ordinary: ordinary) == 0
        }
        let doubtful = tids.indices.filter(looksUnreachable)
        if !doubtful.isEmpty {
            usleep(200)
            for index in doubtful {
                guard let blocked = reader.blockedSignals(tid: tids[index]) else { statuses[index] = nil; continue }
                statuses[index]?.blocked = blocked
            }
        }
        return statuses
    }

    /// Must run inside `gate`.
    private static func captureLocked(tids: [Int32], statuses: [TaskReader.ThreadStatus?], frames: Int,
                                      stackBytes: Int, timeout: Double) throws -> Outcome {
        guard timeout >= 0, timeout.isFinite else { throw CaptureError.invalidOptions("timeout must be >= 0 seconds") }
        guard frames >= 0, stackBytes >= 0 else { throw CaptureError.invalidOptions("maxFrames and stackBytes must be >= 0") }
        let ordinary = hwc_ordinary_signal()
        let self_ = hwc_gettid()
        let signals: [Int32] = zip(tids, statuses).map { tid, status in
            if tid == self_ { return 0 }
            guard let status else { return 0 }
            let chosen = signal(forBlockedMask: status.blocked, ordinary: ordinary)
            // Running with every signal blocked is what pthread_create (around clone) and a
            // new thread's first instructions look like: ask with both signals, which stay
            // pending and are answered on unblocking (or the thread times out, never hangs us).
            if chosen == 0 && status.state == "R" { return HWC_SIGNAL_EITHER }
            return chosen
        }
        var results = [Int32](repeating: 0, count: tids.count)
        var slots = [Int32](repeating: -1, count: tids.count)
        var elapsed: UInt64 = 0
        let timeoutNanoseconds = UInt64(min(timeout, 3600) * 1e9)
        if hwc_capture(tids, signals, UInt32(tids.count), UInt32(min(frames, Int(UInt32.max))),
                       UInt32(min(stackBytes, Int(UInt32.max))), timeoutNanoseconds, &results, &slots, &elapsed) != 0 {
            throw CaptureError.unavailable("capture machinery not initialised")
        }
        let mainQueue = hwc_main_queue_address()
        var threads: [ThreadOutcome] = []
        threads.reserveCapacity(tids.count)
        for index in tids.indices {
            switch Int(results[index]) {
            case Int(HWC_RESULT_ANSWERED):
                threads.append(ThreadOutcome(status: .captured, recorded: read(slot: slots[index], mainQueue: mainQueue)))
            case Int(HWC_RESULT_TIMED_OUT): threads.append(ThreadOutcome(status: .timedOut))
            case Int(HWC_RESULT_EXITED): threads.append(ThreadOutcome(status: .exited))
            default: threads.append(ThreadOutcome(status: .unreachable))
            }
        }
        return Outcome(threads: threads, elapsedNanoseconds: elapsed)
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
        return Recorded(registers: Registers(values: registers), frames: frames,
                        queueLabel: label.isEmpty ? nil : label,
                        onMainQueue: slot.flags & HWC_SLOT_FLAG_MAIN_QUEUE != 0 && mainQueue != 0,
                        stack: stack)
    }

    private static func wallClockNow() -> Double {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
    }
}
