// Out-of-process capture of a live process: every thread is stopped with PTRACE_SEIZE +
// PTRACE_INTERRUPT (the program sees no signal), its registers read and its stack unwound
// with libunwind-ptrace, then all threads are let go together. No code runs inside the
// target, so this works when the target is too stuck for any in-process capture (a global
// deadlock, a lock held inside malloc). Only the pid given is traced, nothing else.
import HangwatchPlatform
import HangwatchSnapshot
#if canImport(Glibc)
import Glibc
#endif
import CHangwatchPtrace
import FoundationEssentials

package struct RemoteCaptureOptions: Sendable {
    /// Recorded in the snapshot; `.dumpRequested` for `hangwatch dump`.
    package var reason: CaptureReason
    /// Deepest stack kept per thread.
    package var maxFrames: Int
    /// Bytes copied from each thread's stack pointer up (for minidumps), short of the thread's
    /// own descriptor (docs/minidump.md); 0 copies none.
    package var stackMemoryBytes: Int
    /// Bytes of each thread's stack copied while it is stopped, to unwind from after it runs
    /// again: frames within it are exact; a deeper stack is read live, where it may have moved on.
    package var unwindWindowBytes: Int
    /// How long to wait for all threads to stop; a thread stuck in uninterruptible sleep past
    /// this is reported `.timedOut` instead of blocking the capture.
    package var stopTimeoutSeconds: Double
    /// Read /proc/PID/maps and each module's build-id.
    package var includeModules: Bool
    package var annotations: [String: String]
    /// The start time (/proc/PID/stat field 22) the process had when it was chosen (a tree
    /// walk found it in the job): checked while its threads are stopped, before anything of it
    /// is read, so a pid recycled since names no outsider in the report. nil: not checked.
    package var expectedStartTicks: UInt64?

    package init(reason: CaptureReason = .dumpRequested, maxFrames: Int = 256, stackMemoryBytes: Int = ThreadSnapshot.defaultStackMemoryBytes,
                stopTimeoutSeconds: Double = 2, includeModules: Bool = true, annotations: [String: String] = [:],
                unwindWindowBytes: Int = RemoteCaptureOptions.defaultUnwindWindowBytes) {
        self.reason = reason
        self.maxFrames = maxFrames
        self.stackMemoryBytes = stackMemoryBytes
        self.unwindWindowBytes = unwindWindowBytes
        self.stopTimeoutSeconds = stopTimeoutSeconds
        self.includeModules = includeModules
        self.annotations = annotations
    }
}

extension RemoteCaptureOptions {
    /// 32 KiB: a Swift frame is typically 48–200 bytes, so 150+ frames of an ordinary stack.
    package static let defaultUnwindWindowBytes = 32 << 10
}

package struct RemoteCaptureResult: Sendable {
    package var snapshot: ProcessSnapshot
    /// How long the target was stopped: first PTRACE_INTERRUPT to last PTRACE_DETACH.
    package var pauseSeconds: Double

    package init(snapshot: ProcessSnapshot, pauseSeconds: Double) {
        self.snapshot = snapshot
        self.pauseSeconds = pauseSeconds
    }
}

package struct RemoteSamplingResult: Sendable {
    /// The first sample as a full snapshot (threads, modules, identity); `reason` as given.
    package var snapshot: ProcessSnapshot
    /// Every sampled thread's stacks, aggregated by identical stack: sorted by tid, then by
    /// count (most frequent first).
    package var samples: [StackSample]
    /// Samples actually taken (fewer than asked when the process exited meanwhile).
    package var sampleCount: Int
    /// Target pause of each sample, seconds.
    package var pauseSeconds: [Double]
    /// Why sampling ended before `count`, if it did (e.g. the process exited).
    package var endedEarly: String?

    package init(snapshot: ProcessSnapshot, samples: [StackSample], sampleCount: Int, pauseSeconds: [Double],
                endedEarly: String? = nil) {
        self.snapshot = snapshot
        self.samples = samples
        self.sampleCount = sampleCount
        self.pauseSeconds = pauseSeconds
        self.endedEarly = endedEarly
    }
}

package enum RemoteCapture {
    /// Captures every thread of `pid` once. Throws `RemoteCaptureError`; on every path the
    /// target is left running and untraced.
    package static func capture(pid: Int32, options: RemoteCaptureOptions = .init()) throws -> RemoteCaptureResult {
        try validate(pid: pid, options: options)
        return try busyTargets.exclusively(pid) {
            try onTracerThread {
                let patience = monotonicSeconds() + quietHelperPatienceSeconds
                while true {
                    do {
                        let session = try Session(pid: pid, options: options)
                        return try session.fullCapture()
                    } catch RemoteCaptureError.alreadyTraced(let target, let tracer, let name)
                                where isQuietCaptureHelper(tracer, name: name, of: target) && monotonicSeconds() < patience {
                        waitUntilGone(tracer, until: patience)
                    }
                }
            }
        }
    }

    /// How long a capture waits for the target's own quiet-capture helpers to be gone. A helper
    /// lives at most the program's capture timeout + 0.5 s (hw_quiet.c), 0.5 s + 0.5 s by default.
    static let quietHelperPatienceSeconds = 2.0

    /// A tracer that is `target`'s own quiet-capture helper, as ProcFS identifies one (a clone of the
    /// target that shares its memory, in its first moments or its last too), or gone already:
    /// it holds a thread for microseconds, the capture is tried again. A tracer gone between
    /// the refusal and this look traces nothing any more (a loaded machine made that gap:
    /// RunWithCaptureHelperTests), so it is tried again too.
    static func isQuietCaptureHelper(_ tracer: Int32, name: String, of target: Int32) -> Bool {
        guard let stat = ProcFS.processStat(of: tracer) else { return true }
        if stat.parent == target && ProcFS.isQuietCaptureHelper(tracer, stat: stat) { return true }
        return name == ProcFS.quietCaptureHelperName && ProcFS.sharesMemory(target, tracer) != false
    }

    /// Polls (every 0.5 ms) until `pid` is gone or `until` (monotonicSeconds).
    private static func waitUntilGone(_ pid: Int32, until: Double) {
        while ProcFS.processExists(pid) && monotonicSeconds() < until { usleep(500) }
    }

    /// `capture(pid:options:)` when only the snapshot matters.
    package static func captureProcess(pid: Int32, options: RemoteCaptureOptions = .init()) throws -> ProcessSnapshot {
        try capture(pid: pid, options: options).snapshot
    }

    /// Takes `count` captures `interval` seconds apart (the first one full, the rest stacks
    /// only) and aggregates identical stacks per thread, for call trees of where time is spent.
    package static func captureSamples(pid: Int32, count: Int, interval: Double,
                                      options: RemoteCaptureOptions = .init()) throws -> RemoteSamplingResult {
        try validate(pid: pid, options: options)
        guard count >= 1 else { throw RemoteCaptureError.invalidArgument("sample count must be at least 1, got \(count)") }
        guard interval >= 0, interval.isFinite else { throw RemoteCaptureError.invalidArgument("sample interval must be >= 0 seconds, got \(interval)") }
        return try busyTargets.exclusively(pid) { try onTracerThread {
            let session = try Session(pid: pid, options: options)
            let first = try session.fullCapture()
            var counts: [SampleKey: Int] = [:]
            func add(_ threads: [ThreadSnapshot]) {
                for thread in threads where !thread.frames.isEmpty {
                    counts[SampleKey(tid: thread.tid, frames: thread.frames), default: 0] += 1
                }
            }
            add(first.snapshot.threads)
            var pauses = [first.pauseSeconds]
            var endedEarly: String?
            while pauses.count < count {
                sleepSeconds(interval)
                do {
                    let (threads, pause) = try session.stopUnwindRelease(readThreadInfo: false)
                    guard threads.contains(where: { $0.status == .ptrace }) else {
                        endedEarly = "no thread of pid \(pid) could be sampled any more"; break
                    }
                    add(threads)
                    pauses.append(pause)
                } catch {
                    endedEarly = "\(error)"; break
                }
            }
            let samples = counts.map { StackSample(tid: $0.key.tid, frames: $0.key.frames, count: $0.value) }
                .sorted { ($0.tid, -$0.count, $0.frames.count) < ($1.tid, -$1.count, $1.frames.count) }
            return RemoteSamplingResult(snapshot: first.snapshot, samples: samples, sampleCount: pauses.count,
                                        pauseSeconds: pauses, endedEarly: endedEarly)
        } }
    }

    private struct SampleKey: Hashable { var tid: Int32; var frames: [UInt64] }

    private static func validate(pid: Int32, options: RemoteCaptureOptions) throws {
        guard pid > 0 else { throw RemoteCaptureError.invalidArgument("pid must be positive, got \(pid)") }
        guard options.maxFrames >= 1, options.maxFrames <= 65536 else {
            throw RemoteCaptureError.invalidArgument("maxFrames must be 1...65536, got \(options.maxFrames)")
        }
        guard options.unwindWindowBytes >= 0, options.unwindWindowBytes <= 1 << 20 else {
            throw RemoteCaptureError.invalidArgument("unwindWindowBytes must be 0...1 MiB, got \(options.unwindWindowBytes)")
        }
        guard options.stackMemoryBytes >= 0, options.stackMemoryBytes <= 1 << 20 else {
            throw RemoteCaptureError.invalidArgument("stackMemoryBytes must be 0...1 MiB, got \(options.stackMemoryBytes)")
        }
        guard options.stopTimeoutSeconds > 0, options.stopTimeoutSeconds.isFinite else {
            throw RemoteCaptureError.invalidArgument("stopTimeoutSeconds must be positive")
        }
        guard pid != getpid() else { throw RemoteCaptureError.cannotCaptureSelf(pid: pid) }
        guard ProcFS.processExists(pid) else { throw RemoteCaptureError.noSuchProcess(pid: pid) }
    }

    static func sleepSeconds(_ seconds: Double) {
        guard seconds > 0 else { return }
        var request = timespec(tv_sec: Int(seconds), tv_nsec: Int((seconds - seconds.rounded(.down)) * 1e9))
        var remaining = timespec()
        while nanosleep(&request, &remaining) != 0 && errno == EINTR { request = remaining }
    }

    static func monotonicSeconds() -> Double {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
    }

    static func wallClockSeconds() -> Double {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
    }

    // MARK: one capture per target at a time

    /// A process has one tracer at a time: a second capture of the same pid from this process
    /// waits for the first instead of failing with "already traced" by ourselves.
    private final class BusyTargets: @unchecked Sendable {
        private let condition = ConditionLock()
        private var busy: Set<Int32> = []

        func exclusively<T>(_ pid: Int32, _ body: () throws -> T) throws -> T {
            condition.lock()
            while busy.contains(pid) { condition.wait() }
            busy.insert(pid)
            condition.unlock()
            defer {
                condition.lock()
                busy.remove(pid)
                condition.broadcast()
                condition.unlock()
            }
            return try body()
        }
    }

    private static let busyTargets = BusyTargets()

    // MARK: tracer thread

    private final class TracerJob: @unchecked Sendable {
        let work: () -> Void
        init(_ work: @escaping () -> Void) { self.work = work }
    }

    /// Runs `body` on a short-lived thread: the kernel ties tracees to the tracing thread and
    /// drops them when it exits, so even a thread that never stopped (and so could not be
    /// detached) is released once the capture is over.
    private static func onTracerThread<T>(_ body: () throws -> T) throws -> T {
        var outcome: Result<T, any Error>?
        try withoutActuallyEscaping(body) { body in
            let job = TracerJob { outcome = Result { try body() } }
            let context = Unmanaged.passRetained(job)
            defer { context.release() }
            let started = hwp_run_on_tracer_thread({ raw in
                Unmanaged<TracerJob>.fromOpaque(raw!).takeUnretainedValue().work()
            }, context.toOpaque())
            if started != 0 { throw RemoteCaptureError.tracerThreadFailed(errno: started) }
        }
        guard let outcome else { throw RemoteCaptureError.tracerThreadFailed(errno: EAGAIN) }
        return try outcome.get()
    }
}
