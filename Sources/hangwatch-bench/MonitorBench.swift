// Sections 1 and 2: HangMonitor's detection latency and overhead, each in child processes
// whose main queue is drained by `dispatchMain()` (so it runs on a pool thread, the common
// server set-up, docs/platform-facts.md fact 1).
//
// 1. 20 deliberate main-queue hangs with a 500 ms threshold: (time the `.detected` event
//    reached the program − time the hanging work item started) / threshold. The event comes
//    after the capture and staging, so this is "hang noticed and recorded", not just noticed.
//    dedupWindow is 0 so every hang is captured and staged in full (the default 300 s would
//    turn hangs 2…20, which share a stack, into cheaper duplicates).
// 2. A main queue saturated with small work items (each re-enqueues the next), with the
//    monitor (default settings) switched on and off between short windows in one process.
//    Items per CPU-second of the process is the figure judged: it charges the monitor's own
//    CPU and its pings to the monitor, and is immune to how much CPU a busy shared machine
//    happens to grant; items per wall second is shown too. Both compare two noisy rates, so
//    the figure judged is the monitor's own CPU time: its thread's CPU clock during the "on"
//    windows, plus its pings (the rate the monitor posts them × one ping's cost, timed through
//    the same main queue in a `_pingcost` child), relative to the work's CPU time in those
//    windows. Plus the monitor's CPU time when the program is idle, scaled to an hour, and
//    the private memory it adds.
import Foundation
import HangMonitor
import HangwatchPlatform
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

struct DetectionOutcome: Codable {
    var ratios: [Double]
    var missed: Int
    /// Monitor events that explain an outlier: its clock stalled (it rebaselined), or it failed.
    var rebaselines: Int = 0
    var failures: Int = 0
}

struct ThroughputOutcome: Codable {
    /// Per window pair: loss in % of items per wall second, and of items per process CPU second.
    var wallLoss: [Double]
    var cpuLoss: [Double]
    var offItemsPerSecond: [Double]
    /// Over all "on" windows: the monitor thread's CPU, the process's CPU, their wall time.
    var monitorThreadCPUSeconds: Double = 0
    var processCPUSecondsOn: Double = 0
    var secondsOn: Double = 0
}

struct PingCostOutcome: Codable {
    /// Process CPU per ping-shaped work item, posted from another thread to the main queue
    /// and run there (enqueue, dequeue, the answer's clock reads and atomic stores).
    var cpuSecondsPerPing: Double
}

/// The CPU time of thread `tid` of this process (its SCHED CPU clock, as the kernel counts it).
func threadCPUSeconds(_ tid: Int32) -> Double? { TaskReader.threadClock(tid: tid, kind: 2) }

/// The thread of this process named `name` (its kernel comm), if any.
func threadNamed(_ name: String) -> Int32? {
    guard let tasks = try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task") else { return nil }
    return tasks.compactMap(Int32.init).first { tid in
        (try? String(contentsOfFile: "/proc/self/task/\(tid)/comm", encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines) == name
    }
}

struct IdleOutcome: Codable {
    var cpuSecondsPerSecond: Double
}

private let hangStartedAt = Atomic<UInt64>(0)
private let hangDetectedAt = Atomic<UInt64>(0)
private let hangsRecovered = Atomic<Int>(0)
private let monitorRebaselines = Atomic<Int>(0)
private let monitorFailures = Atomic<Int>(0)
private let itemsDone = Atomic<Int>(0)
private let stopFeeding = Atomic<Bool>(false)
private let pingsAnswered = Atomic<Int>(0)
private let pingStamp = Atomic<UInt64>(0)
private let pingThread = Atomic<Int32>(0)

/// A fraction of a microsecond of arithmetic the optimiser cannot drop.
@inline(never) func smallWork(_ seed: Int) -> Int {
    var value = seed
    for step in 0..<200 { value = value &* 6364136223846793005 &+ step }
    return value
}

private func feedMainQueue() {
    if smallWork(itemsDone.load(ordering: .relaxed)) == 42 { print("") }
    itemsDone.add(1, ordering: .relaxed)
    if !stopFeeding.load(ordering: .relaxed) { DispatchQueue.main.async(execute: feedMainQueue) }
}

enum MonitorBench {
    static let threshold = 0.5
    static let hangs = 20
    static let throughputPairs = 16
    static let throughputWindow = 0.3

    static func runChildIfAsked(_ arguments: [String]) throws {
        guard let mode = arguments.first, ["_detect", "_throughput", "_idle", "_pingcost"].contains(mode) else { return }
        let database = arguments.count > 1 ? arguments[1] : NSTemporaryDirectory() + "/hangwatch-bench-db"
        let monitorOn = arguments.count > 2 ? arguments[2] == "on" : true
        let seconds = arguments.count > 3 ? Double(arguments[3]) ?? 2 : 2
        var monitor: HangMonitor?
        switch mode {
        case "_detect":
            let configuration = HangMonitor.Configuration(
                threshold: .milliseconds(Int(threshold * 1000)), databasePath: database, bundleID: "bench-detect",
                dedupWindow: .zero,
                eventHandler: { event in
                    switch event {
                    case .detected: _ = hangDetectedAt.compareExchange(expected: 0, desired: Clock.nanos(), ordering: .sequentiallyConsistent)
                    case .recovered: hangsRecovered.add(1, ordering: .sequentiallyConsistent)
                    case .rebaselined: monitorRebaselines.add(1, ordering: .sequentiallyConsistent)
                    case .failed: monitorFailures.add(1, ordering: .sequentiallyConsistent)
                    default: break
                    }
                })
            monitor = try HangMonitor(configuration: configuration)
            monitor?.start()
            Thread.detachNewThread { driveHangs() }
        case "_pingcost":
            Thread.detachNewThread { measurePingCost() }
        case "_throughput":
            let toggled = try HangMonitor(configuration: .init(databasePath: database, bundleID: "bench-throughput"))
            monitor = toggled
            DispatchQueue.main.async(execute: feedMainQueue)
            Thread.detachNewThread { measureThroughput(toggling: toggled, window: seconds) }
        default:
            if monitorOn {
                monitor = try HangMonitor(configuration: .init(databasePath: database, bundleID: "bench-idle"))
                monitor?.start()
            }
            Thread.detachNewThread { measureIdle(seconds: seconds) }
        }
        withExtendedLifetime(monitor) { dispatchMain() }
    }

    /// Runs on a plain thread: posts each hang to the main queue and times its detection.
    private static func driveHangs() {
        Clock.sleep(seconds: 0.7)  // the monitor's first pings, libunwind loaded
        var outcome = DetectionOutcome(ratios: [], missed: 0)
        for _ in 0..<hangs {
            hangStartedAt.store(0, ordering: .sequentiallyConsistent)
            hangDetectedAt.store(0, ordering: .sequentiallyConsistent)
            let recoveredBefore = hangsRecovered.load(ordering: .sequentiallyConsistent)
            DispatchQueue.main.async {
                let started = Clock.nanos()
                hangStartedAt.store(started, ordering: .sequentiallyConsistent)
                // Blocked, as a main queue waiting on a lock or I/O is, until seen (or 3 s).
                while hangDetectedAt.load(ordering: .sequentiallyConsistent) == 0 && Clock.nanos() - started < 3_000_000_000 {
                    usleep(1_000)
                }
                usleep(50_000)
            }
            let deadline = Clock.nanos() + 5_000_000_000
            while hangsRecovered.load(ordering: .sequentiallyConsistent) == recoveredBefore && Clock.nanos() < deadline { usleep(2_000) }
            let started = hangStartedAt.load(ordering: .sequentiallyConsistent)
            let detected = hangDetectedAt.load(ordering: .sequentiallyConsistent)
            if started != 0 && detected > started {
                outcome.ratios.append(Double(detected - started) / 1e9 / threshold)
            } else {
                outcome.missed += 1
            }
            Clock.sleep(seconds: 0.15)
        }
        outcome.rebaselines = monitorRebaselines.load(ordering: .sequentiallyConsistent)
        outcome.failures = monitorFailures.load(ordering: .sequentiallyConsistent)
        finish(outcome)
    }

    /// One process, the monitor switched on and off between short windows (which state comes
    /// first alternates), so both states see the same machine load; the first pair warms up.
    private static func measureThroughput(toggling monitor: HangMonitor, window: Double) {
        var outcome = ThroughputOutcome(wallLoss: [], cpuLoss: [], offItemsPerSecond: [])
        Clock.sleep(seconds: 0.3)
        for pair in 0...throughputPairs {
            var wallRate: [Bool: Double] = [:]
            var cpuRate: [Bool: Double] = [:]
            for on in pair % 2 == 0 ? [false, true] : [true, false] {
                if on { monitor.start() } else { monitor.stop() }
                Clock.sleep(seconds: 0.05)
                let monitorThread = on ? threadNamed("hangwatch-mon") : nil
                let monitorCPU = monitorThread.flatMap(threadCPUSeconds)
                let items = itemsDone.load(ordering: .relaxed)
                let cpu = ProcReading.processCPUSeconds()
                let started = Clock.seconds()
                Clock.sleep(seconds: window)
                let done = Double(itemsDone.load(ordering: .relaxed) - items)
                let elapsed = Clock.seconds() - started
                let used = ProcReading.processCPUSeconds() - cpu
                wallRate[on] = done / elapsed
                cpuRate[on] = done / max(used, 1e-6)
                if pair > 0, on, let monitorThread, let before = monitorCPU, let after = threadCPUSeconds(monitorThread) {
                    outcome.monitorThreadCPUSeconds += after - before
                    outcome.processCPUSecondsOn += used
                    outcome.secondsOn += elapsed
                }
            }
            guard pair > 0 else { continue }
            outcome.wallLoss.append((1 - wallRate[true]! / wallRate[false]!) * 100)
            outcome.cpuLoss.append((1 - cpuRate[true]! / cpuRate[false]!) * 100)
            outcome.offItemsPerSecond.append(wallRate[false]!)
        }
        monitor.stop()
        stopFeeding.store(true, ordering: .relaxed)
        finish(outcome)
    }

    /// 200,000 work items shaped like the monitor's main-queue ping (PingChannel.answer: two
    /// monotonic clock reads, gettid, three atomic stores), posted from this thread to the main
    /// queue as the monitor thread posts them; the process's CPU per item, both sides counted.
    private static func measurePingCost() {
        Clock.sleep(seconds: 0.2)
        let count = 200_000
        let cpu = ProcReading.processCPUSeconds()
        for _ in 0..<count {
            DispatchQueue.main.async {
                pingStamp.store(Clock.nanos(), ordering: .relaxed)
                pingThread.store(currentTID(), ordering: .relaxed)
                pingsAnswered.add(1, ordering: .releasing)
                _ = Clock.nanos()
            }
        }
        while pingsAnswered.load(ordering: .acquiring) < count { usleep(1_000) }
        finish(PingCostOutcome(cpuSecondsPerPing: (ProcReading.processCPUSeconds() - cpu) / Double(count)))
    }

    private static func measureIdle(seconds: Double) {
        Clock.sleep(seconds: 0.5)
        let cpu = ProcReading.processCPUSeconds()
        let started = Clock.seconds()
        Clock.sleep(seconds: seconds)
        let used = ProcReading.processCPUSeconds() - cpu
        finish(IdleOutcome(cpuSecondsPerSecond: used / (Clock.seconds() - started)))
    }

    private static func finish(_ outcome: some Encodable) -> Never {
        let data = (try? JSONEncoder().encode(outcome)) ?? Data("{}".utf8)
        emitLine("RESULT " + String(decoding: data, as: UTF8.self))
        exit(0)
    }

    // MARK: - the bench side

    private static func runChild<T: Decodable>(_ arguments: [String], as type: T.Type, deadline: Double = 60) throws -> T {
        let child = try ChildProgram(executable: ProcReading.executablePath(), arguments: arguments,
                                     stderr: FileHandle.nullDevice, deadline: deadline)
        defer { child.stop() }
        let line = try child.expectLine(prefix: "RESULT ")
        return try JSONDecoder().decode(T.self, from: Data(line.dropFirst(7).utf8))
    }

    static func detectionLatency(into results: inout BenchResults, workDirectory: String) throws {
        progress("detection latency: \(hangs) hangs, threshold \(Int(threshold * 1000)) ms")
        let outcome = try runChild(["_detect", workDirectory + "/detect-db"], as: DetectionOutcome.self, deadline: 120)
        let median = Stats.median(outcome.ratios)
        let worst = Stats.max(outcome.ratios)
        let note = "\(outcome.ratios.count)/\(hangs) hangs detected" + (outcome.missed > 0 ? " — \(outcome.missed) MISSED" : "")
            + "; min \(String(format: "%.3f", Stats.min(outcome.ratios)))"
            + (outcome.rebaselines > 0 ? "; the monitor rebaselined \(outcome.rebaselines)× (its own clock stalled: machine load)" : "")
            + (outcome.failures > 0 ? "; \(outcome.failures) monitor failures" : "")
        results.add("1", "detection latency, median (detected − hang start) / threshold", median, "ratio",
                    target: "≤ 1.01", met: median <= 1.01 && outcome.missed == 0, note: note)
        let sorted = outcome.ratios.sorted()
        let p90 = sorted.isEmpty ? Double.nan : sorted[min(sorted.count - 1, Int((Double(sorted.count) * 0.9).rounded(.up)) - 1)]
        results.add("1", "detection latency, max", worst, "ratio", target: "≤ 1.02", met: worst <= 1.02,
                    note: "× 500 ms = \(fmt(worst * threshold * 1000)) ms after the hang began; 90th percentile \(String(format: "%.3f", p90))")
    }

    static func overhead(into results: inout BenchResults, workDirectory: String) throws {
        progress("monitor overhead: saturated main queue, monitor toggled every \(throughputWindow) s × \(throughputPairs) pairs")
        let outcome = try runChild(["_throughput", workDirectory + "/throughput-db", "on", "\(throughputWindow)"],
                                   as: ThroughputOutcome.self, deadline: 120)
        let cpuLoss = Stats.median(outcome.cpuLoss)
        let wallLoss = Stats.median(outcome.wallLoss)
        // The loss of throughput is measured beside the monitor's own CPU (the row with the target):
        // its on/off windows range ±40 % on a shared machine, which no target survives.
        let throughputNote = "main-queue items per CPU-second, monitor on vs off: median \(String(format: "%+.2f", cpuLoss)) % over \(outcome.cpuLoss.count) window pairs (ranged \(String(format: "%+.1f…%+.1f", Stats.min(outcome.cpuLoss), Stats.max(outcome.cpuLoss))) %); per wall second \(String(format: "%+.2f", wallLoss)) % (ranged \(String(format: "%+.1f…%+.1f", Stats.min(outcome.wallLoss), Stats.max(outcome.wallLoss))) %, \(fmt(Stats.median(outcome.offItemsPerSecond) / 1e6)) M items/s off)"
        // The monitor's own CPU: its thread plus its pings, against the work's CPU.
        let pingCost = try runChild(["_pingcost"], as: PingCostOutcome.self)
        // One target (the main queue), pinged every threshold / 40, the default threshold 2 s.
        let defaults = HangMonitor.Configuration(databasePath: workDirectory + "/unused", bundleID: "bench")
        let pingsPerSecond = 40 / (Double(defaults.threshold.components.seconds) + Double(defaults.threshold.components.attoseconds) / 1e18)
        let pingCPU = pingsPerSecond * outcome.secondsOn * pingCost.cpuSecondsPerPing
        let monitorCPU = outcome.monitorThreadCPUSeconds + pingCPU
        let workCPU = outcome.processCPUSecondsOn - monitorCPU
        let share = monitorCPU / max(workCPU, 1e-9) * 100
        results.add("2", "monitor's own CPU time, busy program: monitor thread + pings / the work's CPU", share, "%",
                    target: "≤ 0.1 %", met: share <= 0.1,
                    note: "\(fmt(outcome.monitorThreadCPUSeconds * 1000)) ms on its thread + \(Int(pingsPerSecond * outcome.secondsOn)) pings × \(fmt(pingCost.cpuSecondsPerPing * 1e6)) µs over \(fmt(outcome.secondsOn)) s of saturated main queue (\(fmt(workCPU)) CPU-s of work); = \(fmt(monitorCPU / outcome.secondsOn * 3600)) CPU-s per hour busy; \(throughputNote)")

        progress("monitor overhead: idle CPU and memory")
        var idleOn: [IdleOutcome] = []
        var idleOff: [IdleOutcome] = []
        for _ in 0..<2 {
            idleOff.append(try runChild(["_idle", workDirectory + "/idle-db", "off", "4"], as: IdleOutcome.self))
            idleOn.append(try runChild(["_idle", workDirectory + "/idle-db", "on", "4"], as: IdleOutcome.self))
        }
        let cpuPerHour = (Stats.median(idleOn.map(\.cpuSecondsPerSecond)) - Stats.median(idleOff.map(\.cpuSecondsPerSecond))) * 3600
        results.add("2", "monitor CPU time per hour, program idle", cpuPerHour, "s", target: "≤ 36 s (1 % of a core)", met: cpuPerHour <= 36,
                    note: "on − off, 2 × 4 s each, scaled to 3600 s (\(fmt(cpuPerHour / 36)) % of one core)")
        try monitorOnlyMemory(into: &results, workDirectory: workDirectory)
    }

    /// Memory of a program that links HangMonitor only (hangwatch-fixture-monitor-only), with
    /// the monitor on vs never created, each after the same main-queue hang (staged, sampled,
    /// stored as a pending dump). Private = anonymous + dirty file pages: what the monitor
    /// really costs; clean library pages are reported beside it (shared with any other process
    /// that maps the same libraries, and reclaimable).
    static func monitorOnlyMemory(into results: inout BenchResults, workDirectory: String) throws {
        progress("monitor memory: a HangMonitor-only program, monitor on vs never started")
        let program = try BenchProgram.monitorOnly.require()
        func run(_ mode: String) throws -> [String: Int] {
            let database = workDirectory + "/monitor-only-\(mode)"
            let child = try ChildProgram(executable: program, arguments: [mode, database], stderr: FileHandle.nullDevice, deadline: 30)
            defer { child.stop() }
            let line = try child.expectLine(prefix: "{")
            guard let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                  let memory = object["memory"] as? [String: Int] else { throw BenchFailure("monitor-only output: \(line)") }
            return memory
        }
        var on: [[String: Int]] = []
        var off: [[String: Int]] = []
        for _ in 0..<3 {
            off.append(try run("off"))
            on.append(try run("on"))
        }
        func added(_ key: String) -> Double {
            (Stats.median(on.map { Double($0[key] ?? 0) }) - Stats.median(off.map { Double($0[key] ?? 0) })) / 1024
        }
        let privateAdded = added("Private_Dirty")
        results.add("2", "private memory the monitor adds (anonymous + dirty)", privateAdded, "MiB", target: "≤ 0.5 MiB",
                    met: privateAdded <= 0.5,
                    note: "smaps_rollup on − off, median of 3 each, after one staged hang; anonymous alone \(fmt(added("Anonymous"))) MiB; "
                        + "clean library pages beside it: +\(fmt(added("Private_Clean") + added("Shared_Clean"))) MiB (libunwind, Foundation pages touched)")
    }
}
