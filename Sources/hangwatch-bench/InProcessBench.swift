// Section 3: in-process capture of every thread (LiveCapture.captureProcess), for 8, 64 and
// 512 threads ~30 frames deep, in a child process whose "hung" thread spins 30 frames deep
// and records how long it was kept from running its own code. Both methods, measured side by
// side: quiet (ptrace stops by the helper, the default) and signals (docs/hang-monitor.md,
// "How capture works").
//
// Pause, two honest definitions, both reported:
// - wall: the hung thread's longest gap between two of its own clock readings during a
//   capture. It includes the kernel delivering the signal, our handler unwinding it,
//   sigreturn, AND any time the scheduler gave its CPU to someone else meanwhile — the
//   threads the capture woke, the requester, and on a loaded shared machine other processes.
//   Shown next to the same figure over an equal window without a capture (machine noise).
// - on-CPU: the most thread CPU time (CLOCK_THREAD_CPUTIME_ID) one step of its loop took:
//   signal delivery + handler + sigreturn, which is the work the capture itself puts on the
//   hung thread; time spent waiting for a CPU is not counted. The 200 µs target is judged on
//   this one, because on a 2-core machine shared with other builds the wall figure measures
//   mostly the machine's load (see the baseline column).
import CHangwatchBenchFloor
import HangwatchCapture
import HangwatchSnapshot
import Foundation
import Synchronization

struct InProcessOutcome: Codable {
    var threads: Int
    var capturedThreads: Int
    var minFramesOfParked: Int
    /// Captures in which some thread was not captured, or a name or state differed from /proc's.
    var incompleteCaptures: Int
    var misreportedThreads: Int
    /// The first few of them: "tid name state, /proc: name".
    var misreportExamples: [String] = []
    /// LiveCapture.captureProcess wall time (what a caller pays: /proc reads, signals, modules).
    var totalMicroseconds: [Double]
    /// snapshot.captureDurationSeconds: the per-thread /proc reads, the signals, up to the last answer.
    var signalMicroseconds: [Double]
    var pauseMicroseconds: [Double]
    var pausePreempted: [Bool]
    var cpuPauseMicroseconds: [Double]
    var baselineGapMicroseconds: [Double]
    /// Quiet only: after each capture, the kernel's part alone over the same threads at once
    /// (hwb_floor_round: seize, interrupt, stop, registers, stack copy, detach), its time.
    var floorMicroseconds: [Double] = []
    /// Quiet only, CPU time per capture (less at the mercy of a shared machine than wall time):
    /// the requesting thread's, the helper's (reaped: RUSAGE_CHILDREN), and the floor round's
    /// (its helper's and the thread that waits for it).
    var requesterCPUMicroseconds: [Double] = []
    var helperCPUMicroseconds: [Double] = []
    var floorCPUMicroseconds: [Double] = []
    /// The capture.method annotation of the last capture ("ptrace", "signals").
    var method = ""
}

/// Bumped after each capture: the mask flipper blocks the ordinary signal in odd epochs.
let maskEpoch = Atomic<Int>(0)
let maskFlipperStarted = Atomic<Bool>(false)

enum InProcessChild {
    /// `_inprocess THREADS CAPTURES`: total threads in the process = THREADS (main + hung + parked).
    static func run(threads: Int, captures: Int, method: CaptureMethod) throws -> Never {
        let options = CaptureOptions(method: method)
        let board = GapBoard.anonymous()
        startSpinner(board)
        startParkedThreads(max(threads - 3, 0))
        // One thread blocks or unblocks the ordinary capture signal before every 5th capture:
        // the signal its last answer accepted may then be blocked, and it must be captured all
        // the same (that capture waits for answers to stop, then asks it again: `max total`).
        startMaskFlipper()
        let hungTID = Int32(truncatingIfNeeded: board[.tid])
        try LiveCapture.prepare(options: options)
        for _ in 0..<2 { _ = try LiveCapture.captureProcess(reason: .dumpRequested, bundleID: "bench", options: options) }  // warm

        var outcome = InProcessOutcome(threads: threads, capturedThreads: 0, minFramesOfParked: .max, incompleteCaptures: 0,
                                       misreportedThreads: 0, totalMicroseconds: [],
                                       signalMicroseconds: [], pauseMicroseconds: [], pausePreempted: [], cpuPauseMicroseconds: [],
                                       baselineGapMicroseconds: [])
        for _ in 0..<captures {
            let switchesBefore = ProcReading.involuntarySwitches(tid: hungTID)
            board.reset()
            let (cpuBefore, childrenBefore) = (Clock.threadCPUNanos(), Clock.reapedChildrenCPUNanos())
            let started = Clock.nanos()
            let snapshot = try LiveCapture.captureProcess(reason: .dumpRequested, bundleID: "bench", options: options)
            outcome.method = snapshot.annotations[LiveCapture.methodAnnotation] ?? "?"
            let took = Clock.nanos() - started
            let (cpuAfter, childrenAfter) = (Clock.threadCPUNanos(), Clock.reapedChildrenCPUNanos())
            Clock.sleep(seconds: 0.002)  // the hung thread notes its gap when it runs again
            outcome.pauseMicroseconds.append(board.maxGapMicroseconds)
            outcome.cpuPauseMicroseconds.append(board.maxCPUGapMicroseconds)
            outcome.pausePreempted.append(ProcReading.involuntarySwitches(tid: hungTID) != switchesBefore)
            outcome.totalMicroseconds.append(Double(took) / 1000)
            outcome.signalMicroseconds.append(snapshot.captureDurationSeconds * 1e6)
            outcome.capturedThreads = snapshot.threads.filter { $0.status == .captured }.count
            let parked = snapshot.threads.filter { $0.name.hasPrefix("bparked-") || $0.name == "bench-hung" }
            outcome.minFramesOfParked = min(outcome.minFramesOfParked, parked.map(\.frames.count).min() ?? 0)
            if snapshot.threads.count != threads || snapshot.threads.contains(where: { $0.status != .captured }) {
                outcome.incompleteCaptures += 1
            }
            let wrong = misreported(snapshot, hung: hungTID)
            outcome.misreportedThreads += wrong.count
            outcome.misreportExamples += wrong.prefix(3 - min(3, outcome.misreportExamples.count))
            if outcome.totalMicroseconds.count % 5 == 4 { maskEpoch.add(1, ordering: .sequentiallyConsistent) }
            if method == .quiet {
                // The floor paired with this capture: the same threads, the same moment's machine.
                let others = snapshot.threads.map(\.tid).filter { $0 != LiveCapture.currentThreadID() }
                var floor: UInt64 = 0
                let (floorCPUBefore, floorChildrenBefore) = (Clock.threadCPUNanos(), Clock.reapedChildrenCPUNanos())
                guard hwb_floor_round(others, Int32(others.count), UInt32(CaptureOptions.defaultStackBytes), &floor) == 0 else {
                    progress("the floor round failed")
                    exit(1)
                }
                let floorCPU = (Clock.threadCPUNanos() - floorCPUBefore) + (Clock.reapedChildrenCPUNanos() - floorChildrenBefore)
                outcome.floorMicroseconds.append(Double(floor) / 1000)
                outcome.requesterCPUMicroseconds.append(Double(cpuAfter - cpuBefore) / 1000)
                outcome.helperCPUMicroseconds.append(Double(childrenAfter - childrenBefore) / 1000)
                outcome.floorCPUMicroseconds.append(Double(floorCPU) / 1000)
                Clock.sleep(seconds: 0.002)
            }

            // Same window, no capture: what the machine alone does to the spinning thread.
            board.reset()
            Clock.sleep(seconds: Double(took) / 1e9 + 0.002)
            outcome.baselineGapMicroseconds.append(board.maxGapMicroseconds)
            Clock.sleep(seconds: 0.003)
        }
        let data = try JSONEncoder().encode(outcome)
        emitLine("RESULT " + String(decoding: data, as: UTF8.self))
        exit(0)
    }

    /// Threads whose name in the snapshot is not what /proc says now (names do not change
    /// here), or whose state is not what it must be: the spinning one R, parked ones S.
    static func misreported(_ snapshot: ProcessSnapshot, hung: Int32) -> [String] {
        snapshot.threads.compactMap { thread in
            let path = "/proc/self/task/\(thread.tid)/comm"
            let name = (try? String(contentsOfFile: path, encoding: .utf8))?.trimmingCharacters(in: .newlines)
            let state: ThreadState? = thread.tid == hung ? .running : thread.name.hasPrefix("bparked-") ? .sleeping : nil
            guard name != thread.name || (state != nil && thread.state != state) else { return nil }
            return "\(thread.tid) \"\(thread.name)\" \(thread.state) \(thread.status) syscall \(thread.syscall ?? "-"), /proc: \"\(name ?? "?")\""
        }
    }

    /// A parked thread that blocks the ordinary capture signal in odd epochs and accepts it in even ones.
    static func startMaskFlipper() {
        let thread = Thread {
            nameCurrentThread("bench-flipper")
            var ordinary = sigset_t()
            sigemptyset(&ordinary)
            sigaddset(&ordinary, CaptureOptions.defaultOrdinarySignal)
            var applied = -1
            maskFlipperStarted.store(true, ordering: .sequentiallyConsistent)
            while true {
                let now = maskEpoch.load(ordering: .sequentiallyConsistent)
                if now != applied {
                    pthread_sigmask(now % 2 == 1 ? SIG_BLOCK : SIG_UNBLOCK, &ordinary, nil)
                    applied = now
                }
                usleep(1_000)
            }
        }
        thread.start()
        while !maskFlipperStarted.load(ordering: .sequentiallyConsistent) { usleep(500) }
    }
}

enum InProcessBench {
    static func run(into results: inout BenchResults) throws {
        // The default path (quiet) is held to issue 29's goals, raised by issue 49 where both of
        // its runs met them; signals, the fallback, to bounds of its own (µs).
        let plan: [(threads: Int, captures: Int, quiet: Double, signals: Double)] = [(8, 40, 1000, 1000), (64, 40, 1500, 5000),
                                                                                     (512, 15, 10000, 40000)]
        for method in CaptureMethod.allCases {
            for (threads, captures, quiet, signals) in plan {
                try run(method: method, threads: threads, captures: captures, target: method == .quiet ? quiet : signals, into: &results)
            }
        }
    }

    /// One plan row: its time, the hung thread's on-CPU pause (the work put on the thread) and
    /// its wall pause (how long it did not run: ≤ 2 ms for either method).
    static func run(method: CaptureMethod, threads: Int, captures: Int, target: Double, into results: inout BenchResults) throws {
        do {
            let name = method == .quiet ? "in-process (quiet)" : "in-process (signals)"
            progress("\(name) capture: \(threads) threads × \(captures)")
            let child = try ChildProgram(executable: ProcReading.executablePath(),
                                         arguments: ["_inprocess", "\(threads)", "\(captures)", method.rawValue], deadline: 120)
            defer { child.stop() }
            let line = try child.expectLine(prefix: "RESULT ")
            let outcome = try JSONDecoder().decode(InProcessOutcome.self, from: Data(line.dropFirst(7).utf8))
            let complete = outcome.capturedThreads == threads && outcome.minFramesOfParked >= benchStackDepth
                && outcome.incompleteCaptures == 0 && outcome.misreportedThreads == 0
            let check = complete ? "" : "CHECK FAILED: \(outcome.capturedThreads)/\(threads) captured, min depth \(outcome.minFramesOfParked), "
                + "\(outcome.incompleteCaptures) incomplete captures, \(outcome.misreportedThreads) names or states unlike /proc "
                + "(\(outcome.misreportExamples.joined(separator: "; "))); "
            let median = Stats.median(outcome.totalMicroseconds) / 1000
            let stage = method == .quiet ? "/proc reads + helper stops, copies, lets go + unwinding from copies" : "per-thread /proc reads + signals → last answer"
            results.add("3", "\(name) capture, \(threads) threads: median time", median, "ms",
                        target: "≤ \(fmt(target / 1000)) ms", met: median * 1000 <= target && complete,
                        note: "\(check)capture.method \(outcome.method); \(stage) \(fmt(Stats.median(outcome.signalMicroseconds) / 1000)) ms; "
                            + (method == .quiet ? floorNote(outcome) : "")
                            + "max total \(fmt(Stats.max(outcome.totalMicroseconds) / 1000)) ms"
                            + (complete ? "; in each of \(outcome.totalMicroseconds.count) captures every thread was captured, with the name and state /proc gives (one flips its signal mask before every 5th)" : ""))
            if method == .quiet {
                // Both measured at the same moment on the same threads, so the machine's load
                // weighs on both: steadier than either alone on a shared machine.
                let ratios = floorRatios(outcome)
                let ratio = Stats.median(ratios)
                results.add("3", "\(name) capture, \(threads) threads: over the kernel's part alone, paired (median)", ratio, "x",
                            target: "≤ 1.5x", met: !ratios.isEmpty && ratio <= 1.5,
                            note: "each capture's time over the floor round that followed it (CHangwatchBenchFloor); "
                                + "ranged \(fmt(ratios.min() ?? .nan))…\(fmt(ratios.max() ?? .nan))×; the target is the one "
                                + "docs/performance.md proposes for issue 29, whose own goal is the absolute row above")
            }
            let cpuPause = Stats.median(outcome.cpuPauseMicroseconds)
            results.add("3", "\(name), \(threads) threads: hung thread's on-CPU pause (median)", cpuPause, "µs",
                        target: "≤ 200 µs", met: cpuPause <= 200,
                        note: "max \(fmt(Stats.max(outcome.cpuPauseMicroseconds))) µs ("
                            + (method == .signals ? "signal delivery + handler + sigreturn)" : "a ptrace stop runs nothing in the thread)"))
            let preempted = outcome.pausePreempted.filter { $0 }.count
            // A quiet capture stops each thread only while its stack is copied: its median
            // pause is held to 100 µs and its longest to 1 ms (issue 49); a signal's to 2 ms.
            let wallPause = Stats.median(outcome.pauseMicroseconds), longest = Stats.max(outcome.pauseMicroseconds)
            let (medianLimit, maxLimit) = method == .quiet ? (100.0, 1000.0) : (2000.0, Double.infinity)
            results.add("3", "\(name), \(threads) threads: hung thread's wall pause (median)", wallPause, "µs",
                        target: "≤ \(fmt(medianLimit)) µs" + (maxLimit.isFinite ? ", max ≤ \(fmt(maxLimit)) µs" : ""),
                        met: wallPause <= medianLimit && longest <= maxLimit,
                        note: "max \(fmt(longest)) µs; same window without capture: median \(fmt(Stats.median(outcome.baselineGapMicroseconds))) µs; preempted in \(preempted)/\(outcome.pausePreempted.count)")
        }
    }
}

/// The kernel's part of a quiet capture alone, paired with each capture (InProcessChild: right
/// after it, over the same threads; Sources/CHangwatchBenchFloor): what per-thread ptrace stops
/// cannot go below on this machine at that moment (docs/performance.md, "3. In-process capture").
func floorNote(_ outcome: InProcessOutcome) -> String {
    guard !outcome.floorMicroseconds.isEmpty else { return "" }
    return "the kernel's part alone, paired (seize, interrupt, stop, registers, stack window copy, detach of the same "
        + "\(outcome.threads - 1) threads right after each capture): median \(fmt(Stats.median(outcome.floorMicroseconds) / 1000)) ms, "
        + "min \(fmt((outcome.floorMicroseconds.min() ?? 0) / 1000)) ms; CPU per capture (medians): requesting thread "
        + "\(fmt(Stats.median(outcome.requesterCPUMicroseconds) / 1000)) ms + helper \(fmt(Stats.median(outcome.helperCPUMicroseconds) / 1000)) ms, "
        + "floor round \(fmt(Stats.median(outcome.floorCPUMicroseconds) / 1000)) ms; "
}

/// Each quiet capture's time over its paired floor's.
func floorRatios(_ outcome: InProcessOutcome) -> [Double] {
    zip(outcome.totalMicroseconds, outcome.floorMicroseconds).compactMap { $1 > 0 ? $0 / $1 : nil }
}

func fmt(_ value: Double) -> String {
    guard value.isFinite else { return "—" }
    return value >= 100 ? String(format: "%.0f", value) : value >= 10 ? String(format: "%.1f", value) : String(format: "%.2f", value)
}
