// Section 9: reading every Swift task of a server whose 10,000 requests wait forever
// (hangwatch-fixture-tasks leak 10000, release build) — from outside, as `hangwatch dump --pid
// P --tasks` does, and by the process itself — against a thread capture of the same process
// measured in the same run, the yardstick for "off by default where it costs more than a
// thread capture". The target is never stopped for it (process_vm_readv while it runs). And a
// serial queue of 20,000 tasks (hangwatch-fixture-tasks serial 20000), dumped whole with
// `hangwatch dump --pid P --tasks` (issue 27: every step over the task graph linear).
import Foundation
import HangMonitor
import HangMonitorTracing
import HangwatchRemoteCapture
import Synchronization
import HangwatchTaskCapture
import Tracing
#if canImport(Glibc)
import Glibc
#endif

enum TaskBench {
    static let tasks = 10_000
    static let runs = 5

    static let operations = 200_000
    /// The serial queue: each task awaits the one before (one line of 20,000, no cycle).
    static let serialTasks = 20_000
    /// The whole dump of it, seconds at most (the cycle search was cubic: 2,000 took 49 s).
    static let serialTarget = 0.5

    /// What `HangMonitor.watch` costs an operation that finishes in time: the same tiny async
    /// body run `operations` times bare and under `watch`, with a monitor running.
    static func watchCost(into results: inout BenchResults, workDirectory: String) throws {
        progress("tasks: HangMonitor.watch around \(operations) operations that finish in time, against the bare body")
        let monitor = try HangMonitor(configuration: .init(databasePath: workDirectory + "/watch-db", bundleID: "bench-watch"))
        monitor.start()
        defer { monitor.stop() }
        let (bare, watched) = fastestOfThree(
            { index in await body(index) },
            { index in await monitor.watch("op", limit: .seconds(5)) { await body(index) } })
        let perOperation = (watched - bare) / Double(operations) * 1e9
        results.add("9", "HangMonitor.watch per operation that finishes in time", perOperation, "ns", target: "≤ 2 µs (5 % of the bench server's 40 µs request)", met: perOperation <= 2000,
                    note: "\(operations) operations: \(fmt(watched * 1000)) ms watched vs \(fmt(bare * 1000)) ms bare (each the fastest of 3, alternating); a lock taken twice, a slot of the operations table taken and freed, a task-local binding")
        try traceLinkCost(plain: monitor, into: &results, workDirectory: workDirectory)
    }

    /// What HangMonitorTracing's trace link adds to `watch`: the same operations in a request's
    /// ServiceContext, watched by a monitor with the link and by one without (`plain`).
    static func traceLinkCost(plain: HangMonitor, into results: inout BenchResults, workDirectory: String) throws {
        progress("tasks: the same operations in a request's ServiceContext, watched with HangMonitorTracing's link and without")
        let traced = try HangMonitor(configuration: .init(databasePath: workDirectory + "/watch-db", bundleID: "bench-watch-traced",
                                                          traceLink: HangTracing()))
        traced.start()
        defer { traced.stop() }
        let context = requestContext
        let (without, with) = fastestOfThree(
            { index in await ServiceContext.withValue(context) { await plain.watch("op", limit: .seconds(5)) { await body(index) } } },
            { index in await ServiceContext.withValue(context) { await traced.watch("op", limit: .seconds(5)) { await body(index) } } })
        let perOperation = (with - without) / Double(operations) * 1e9
        results.add("9", "the trace link's time per watched operation (HangMonitorTracing)", perOperation, "ns",
                    target: "≤ 400 ns (1 % of the bench server's 40 µs request)", met: perOperation <= 400,
                    note: "\(operations) operations, each in a request's ServiceContext: \(fmt(with * 1000)) ms with the link vs \(fmt(without * 1000)) ms without (each the fastest of 3, alternating); a task-local read, kept with the operation")
    }

    /// The tiny async body the watch rows run.
    @inline(never) static func body(_ index: Int) async -> Int { index &* 31 }

    /// What a tracer's span puts in a request's context: here, its ids.
    enum RequestSpanKey: ServiceContextKey { typealias Value = String }
    /// A request's context, as a tracer's span makes one.
    static var requestContext: ServiceContext {
        var context = ServiceContext.topLevel
        context[RequestSpanKey.self] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        return context
    }

    /// `operations` runs of `first`, then of `second`, three rounds alternating, off the calling
    /// thread (a detached task): each one's fastest round, seconds.
    static func fastestOfThree(_ first: @escaping @Sendable (Int) async -> Int,
                               _ second: @escaping @Sendable (Int) async -> Int) -> (first: Double, second: Double) {
        let fastest = Mutex<(first: Double, second: Double)>((.infinity, .infinity))
        let done = DispatchSemaphore(value: 0)
        Task.detached {
            var sink = 0
            for _ in 0..<3 {
                var started = Clock.seconds()
                for index in 0..<operations { sink &+= await first(index) }
                let one = Clock.seconds() - started
                started = Clock.seconds()
                for index in 0..<operations { sink &+= await second(index) }
                let two = Clock.seconds() - started
                fastest.withLock { $0 = (min($0.first, one), min($0.second, two)) }
            }
            if sink == 42 { print("") }
            done.signal()
        }
        done.wait()
        return fastest.withLock { $0 }
    }

    /// The operations each arm of `watchAllocations` runs in one child, fewer and more: the
    /// difference is what they allocated, without the start and end of the process.
    static let allocationOperations = (fewer: 2_000, more: 202_000)

    /// What HangMonitorTracing's trace link allocates per operation that finishes in time
    /// (issue 48: nothing beyond what `watch` allocates): `_watchallocs` children counted by
    /// valgrind's memcheck ("total heap usage: N allocs"), with and without the link, each run
    /// with fewer and more operations.
    static func watchAllocations(into results: inout BenchResults, workDirectory: String) throws {
        guard let valgrind = findExecutable("valgrind") else { throw BenchFailure("valgrind is not installed (scripts/bench installs the Debian package)") }
        progress("tasks: heap allocations per watched operation, with HangMonitorTracing's link and without (valgrind memcheck)")
        let bench = try valgrindReadyBench(workDirectory: workDirectory)
        func allocations(_ arm: String, _ operations: Int) throws -> Int {
            let output = workDirectory + "/allocs-\(arm)-\(operations).txt"
            let (_, status) = try timeCommand(valgrind, ["--tool=memcheck", "--leak-check=no", "--error-exitcode=0", bench, "_watchallocs", arm,
                                                         "\(operations)", workDirectory + "/allocs-db"], outputPath: output)
            let text = ProcReading.text(output, limit: 1 << 20) ?? ""
            guard status == 0, let line = text.split(separator: "\n").first(where: { $0.contains("total heap usage:") }),
                  let count = line.split(separator: ":").last?.split(separator: " ").first.flatMap({ Int($0.replacingOccurrences(of: ",", with: "")) })
            else { throw BenchFailure("valgrind \(arm) \(operations) exited \(status): \(text.suffix(400))") }
            return count
        }
        var perOperation: [String: Double] = [:]
        for arm in ["plain", "traced"] {
            let fewer = try allocations(arm, allocationOperations.fewer), more = try allocations(arm, allocationOperations.more)
            perOperation[arm] = Double(more - fewer) / Double(allocationOperations.more - allocationOperations.fewer)
        }
        let plain = perOperation["plain"] ?? 0, traced = perOperation["traced"] ?? 0
        results.add("9", "heap allocations the trace link adds per watched operation", traced - plain, "allocs", target: "0 (≤ 0.01)",
                    met: traced - plain <= 0.01,
                    note: "valgrind memcheck: \(fmt(traced)) allocations per operation with HangMonitorTracing's link, \(fmt(plain)) without, "
                        + "each in a request's ServiceContext (\(allocationOperations.more) − \(allocationOperations.fewer) operations)")
    }

    /// `_watchallocs plain|traced N DATABASE`: N operations run by `HangMonitor.watch` in a
    /// request's ServiceContext, the monitor with HangMonitorTracing's link (`traced`) or without.
    static func runAllocationChild(_ arguments: [String]) throws {
        guard arguments.count == 4, let count = Int(arguments[2]) else { throw BenchFailure("usage: _watchallocs plain|traced N DATABASE") }
        // A threshold no run under valgrind reaches: no hang, no capture; no run record, whose
        // heartbeats would allocate by the second, not by the operation.
        let monitor = try HangMonitor(configuration: .init(threshold: .seconds(600), databasePath: arguments[3], bundleID: "bench-allocs",
                                                           runRecordInterval: .zero,
                                                           traceLink: arguments[1] == "traced" ? HangTracing() : nil))
        monitor.start()
        defer { monitor.stop() }
        let context = requestContext
        let done = DispatchSemaphore(value: 0)
        Task.detached {
            var sink = 0
            await ServiceContext.withValue(context) {
                for index in 0..<count { sink &+= await monitor.watch("op", limit: .seconds(600)) { await body(index) } }
            }
            if sink == 42 { print("") }
            done.signal()
        }
        done.wait()
    }

    /// `hangwatch dump --pid P --tasks` of a serial queue of `serialTasks` tasks, whole (read,
    /// symbolicated, cycles and lines found, text written): median of `runs`.
    static func serialQueue(into results: inout BenchResults, workDirectory: String) throws {
        let fixture = try BenchProgram.tasks.require(), hangwatch = try BenchProgram.hangwatch.require()
        progress("tasks: a serial queue of \(serialTasks) tasks, dumped whole \(runs) times (hangwatch dump --pid --tasks)")
        let child = try ChildProgram(executable: fixture, arguments: ["serial", "\(serialTasks)"], stderr: nil)
        defer { child.stop() }
        _ = try child.expectLine(prefix: "{\"event\":\"ready\"")
        let output = workDirectory + "/serial-dump.txt"
        var dumps: [Double] = []
        for _ in 0..<runs {
            let (took, status) = try timeCommand(hangwatch, ["dump", "--pid", "\(child.pid)", "--tasks"], outputPath: output)
            guard status == 0 else { throw BenchFailure("hangwatch dump --tasks exited \(status)") }
            dumps.append(took)
        }
        let text = ProcReading.text(output, limit: 16 << 20) ?? ""
        let line = text.contains("IN LINE: \(serialTasks) tasks"), cycle = text.contains("DEADLOCK")
        let median = Stats.median(dumps)
        results.add("9", "hangwatch dump --pid --tasks, a serial queue of \(serialTasks) tasks (whole)", median * 1000, "ms",
                    target: "≤ \(Int(serialTarget * 1000)) ms", met: median <= serialTarget && line && !cycle,
                    note: "median of \(runs), max \(fmt(Stats.max(dumps) * 1000)) ms; each task awaits the one before: "
                        + (line ? "one line of \(serialTasks) found" : "the line NOT found") + (cycle ? ", a cycle named (wrong)" : ", no cycle"))
    }

    static func run(into results: inout BenchResults) throws {
        let fixture = try BenchProgram.tasks.require()
        progress("tasks: \(tasks) suspended tasks, read \(runs) times from outside, against a thread capture")
        let child = try ChildProgram(executable: fixture, arguments: ["leak", "\(tasks)"], stderr: nil)
        defer { child.stop() }
        _ = try child.expectLine(prefix: "{\"event\":\"ready\"")
        var reads: [Double] = [], scanned: UInt64 = 0, found = 0
        for _ in 0..<runs {
            let capture = SwiftTaskCapture.capture(pid: child.pid)
            if let error = capture.error { throw BenchFailure("reading tasks: \(error)") }
            reads.append(capture.durationSeconds)
            scanned = capture.scannedBytes
            found = capture.tasks.count
        }
        var threadCaptures: [Double] = []
        for _ in 0..<runs {
            let started = Clock.seconds()
            _ = try RemoteCapture.captureProcess(pid: child.pid)
            threadCaptures.append(Clock.seconds() - started)
        }
        let read = Stats.median(reads), threads = Stats.median(threadCaptures)
        let mebibytes = Double(scanned) / 1_048_576
        results.add("9", "task capture, \(tasks) suspended tasks, from outside", read * 1000, "ms", target: "≤ 10 ms",
                    met: read <= 0.01 && found >= tasks,
                    note: "median of \(runs); \(found) found; \(fmt(mebibytes)) MiB of heap scanned, "
                        + "\(fmt(mebibytes / (read * 1000))) MiB/ms; the target is not stopped; \(fmt(read / threads))× a thread capture of "
                        + "the same process (\(fmt(threads * 1000)) ms): task capture stays opt-in (--tasks)")
        // The whole of what a user runs: read, symbolicated, the task graph walked, JSON written.
        let hangwatch = try BenchProgram.hangwatch.require(), output = NSTemporaryDirectory() + "/hangwatch-bench-tasks-\(getpid()).json"
        defer { unlink(output) }
        var dumps: [Double] = []
        for _ in 0..<3 {
            let (took, status) = try timeCommand(hangwatch, ["dump", "--pid", "\(child.pid)", "--tasks", "--format", "json"], outputPath: output)
            guard status == 0 else { throw BenchFailure("hangwatch dump --tasks --format json exited \(status)") }
            dumps.append(took)
        }
        let json = try? JSONSerialization.jsonObject(with: Data((ProcReading.text(output, limit: 256 << 20) ?? "").utf8)) as? [String: Any]
        let dumped = ((json?["tasks"] as? [String: Any])?["tasks"] as? [Any])?.count ?? 0
        let whole = Stats.median(dumps)
        results.add("9", "hangwatch dump --pid --tasks --format json, \(tasks) suspended tasks (whole)", whole * 1000, "ms",
                    target: "≤ 1000 ms", met: whole <= 1 && dumped >= tasks,
                    note: "median of 3, max \(fmt(Stats.max(dumps) * 1000)) ms; \(dumped) tasks in the JSON")
        let own = try ChildProgram(executable: fixture, arguments: ["inprocess", "\(tasks)"], stderr: nil)
        defer { own.stop() }
        let line = try own.expectLine(prefix: "{\"event\":\"tasks\"")
        guard let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
              let seconds = (object["seconds"] as? NSNumber)?.doubleValue else { throw BenchFailure("in-process reading: \(line)") }
        let ownCount = (object["count"] as? NSNumber)?.intValue ?? 0
        results.add("9", "task capture, \(tasks) suspended tasks, by the process itself", seconds * 1000, "ms",
                    target: "≤ 50 ms", met: seconds <= 0.05 && ownCount >= tasks,
                    note: "\((object["count"] as? NSNumber)?.intValue ?? 0) found")
    }
}
