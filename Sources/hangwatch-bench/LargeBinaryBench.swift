// Section 10: real programs at real size (issue 46). Live processes of the Swift toolchain's own
// executables — 240–260 MB each, DWARF for their Swift code, the size of a production server's
// binary — dumped by `hangwatch dump --pid` at each sighting of the binary (a new symbol cache,
// the second dump, a warm one), alternately with `eu-stack -s -i -p` (names, file:line and inline
// frames, as hangwatch gives) on the same process, and gdb once. Time over eu-stack's median, and
// each run's peak resident memory (wait4's ru_maxrss), against the issue's targets: at most half
// eu-stack's time, at most 64 MiB whatever the binary's size. Then `hangwatch show` of a saved
// dump of each, with an empty symbol cache: what `process` does with a report of such a binary.
// With HANGWATCH_BENCH_SERVER set (scripts/bench sets it), the same for that server: the
// Hummingbird example (Examples/hummingbird-server) built in release with the Swift runtime
// linked in, as a production server ships, idle on loopback with its HangMonitor on.
import Foundation
#if canImport(Glibc)
import Glibc
#endif

enum LargeBinaryBench {
    static let rounds = 5
    static let budgetKiB = 64.0 * 1024
    static let ratioTarget = 0.5

    /// A live process of a big binary, and how to end it (with everything it started).
    struct Target {
        var name: String
        var binary: String
        var process: Process
        var stdin: Pipe

        func stop() {
            for pid in descendants(of: process.processIdentifier) + [process.processIdentifier] { kill(pid, SIGKILL) }
            process.waitUntilExit()
        }
    }

    static func run(into results: inout BenchResults, workDirectory: String) throws {
        let hangwatch = try BenchProgram.hangwatch.require()
        guard let euStack = findExecutable("eu-stack") else { throw BenchFailure("eu-stack missing (scripts/install-deps)") }
        guard let swift = findExecutable("swift"), let toolchain = realpath(swift, nil).map({ path -> String in
            defer { free(path) }
            return (String(cString: path) as NSString).deletingLastPathComponent
        }) else { throw BenchFailure("no swift on PATH: the toolchain's executables are this section's programs") }
        var starts = [startPackageManager, startLanguageServer]
        if let server = BenchProgram.largeServer {
            starts.append { _, workDirectory in try startServer(server, workDirectory: workDirectory) }
        }
        for start in starts {
            let target = try start(toolchain, workDirectory)
            defer { target.stop() }
            try measure(target, hangwatch: hangwatch, euStack: euStack, into: &results, workDirectory: workDirectory)
        }
    }

    /// `swift-package describe` of a package whose manifest sleeps: swift-package waits for it on
    /// its threads (Swift code with DWARF, and llbuild's C++).
    static func startPackageManager(_ toolchain: String, _ workDirectory: String) throws -> Target {
        let package = workDirectory + "/sleeping-manifest"
        try FileManager.default.createDirectory(atPath: package, withIntermediateDirectories: true)
        try """
            // swift-tools-version:5.9
            import PackageDescription
            import Foundation
            Thread.sleep(forTimeInterval: 900)
            let package = Package(name: "sleeping")
            """.write(toFile: package + "/Package.swift", atomically: true, encoding: .utf8)
        let target = try start("swift-package", toolchain + "/swift-package", ["describe"], directory: package)
        // Ready once the manifest runs (its compile takes seconds): a child named *-manifest.
        let deadline = Clock.seconds() + 240
        while !descendants(of: target.process.processIdentifier).contains(where: { (ProcReading.text("/proc/\($0)/cmdline", limit: 4096) ?? "").contains("-manifest") }) {
            guard Clock.seconds() < deadline, target.process.isRunning else {
                target.stop()
                throw BenchFailure("swift-package never ran the sleeping manifest")
            }
            Clock.sleep(seconds: 0.2)
        }
        Clock.sleep(seconds: 1)
        return target
    }

    /// sourcekit-lsp waiting for its first request on stdin (kept open).
    static func startLanguageServer(_ toolchain: String, _ workDirectory: String) throws -> Target {
        let target = try start("sourcekit-lsp", toolchain + "/sourcekit-lsp", [], directory: workDirectory)
        Clock.sleep(seconds: 2)
        guard target.process.isRunning else { throw BenchFailure("sourcekit-lsp ended at once") }
        return target
    }

    /// The example server, answering on a loopback port.
    /// The port `startServer` has the server listen on by default (one bench at a time per pid).
    static var serverPort: Int { 20000 + Int(getpid() % 20000) }

    static func startServer(_ executable: String, workDirectory: String, port: Int = serverPort) throws -> Target {
        let target = try start((executable as NSString).lastPathComponent, executable, [], directory: workDirectory,
                               environment: ["PORT": "\(port)", "HANGWATCH_DATABASE_PATH": workDirectory + "/server-database"])
        let deadline = Clock.seconds() + 60
        while !accepts(port: port) {
            guard Clock.seconds() < deadline, target.process.isRunning else {
                target.stop()
                throw BenchFailure("\(executable) never listened on port \(port)")
            }
            Clock.sleep(seconds: 0.1)
        }
        return target
    }

    /// Whether something accepts a TCP connection on 127.0.0.1:`port`.
    static func accepts(port: Int) -> Bool {
        let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard socket >= 0 else { return false }
        defer { close(socket) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
    }

    static func start(_ name: String, _ executable: String, _ arguments: [String], directory: String,
                      environment: [String: String] = [:]) throws -> Target {
        guard access(executable, X_OK) == 0 else { throw BenchFailure("\(executable) missing") }
        let process = Process(), stdin = Pipe()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.currentDirectoryURL = URL(fileURLWithPath: directory)
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        process.standardInput = stdin
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        return Target(name: name, binary: executable, process: process, stdin: stdin)
    }

    /// Every process started by `pid`, children first (from /proc/PID/task/*/children).
    static func descendants(of pid: pid_t) -> [pid_t] {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
        let children = tasks.flatMap { task in
            (ProcReading.text("/proc/\(pid)/task/\(task)/children", limit: 65536) ?? "").split(separator: " ").compactMap { pid_t($0) }
        }
        return children + children.flatMap { descendants(of: $0) }
    }

    /// One run: wall seconds and peak KiB; fails unless it exits 0 and its output has `expected`
    /// (hangwatch names each frame's module; eu-stack and gdb print a line per thread).
    static func runTool(_ executable: String, _ arguments: [String], output: String, environment: [String: String]? = nil,
                        expecting expected: String) throws -> (seconds: Double, peakKiB: Double) {
        let started = Clock.seconds()
        let command = try startCommand(executable, arguments, outputPath: output, environment: environment)
        let (status, peak) = waitCommandUsage(command)
        let seconds = Clock.seconds() - started
        let text = ProcReading.text(output, limit: 16 << 20) ?? ""
        guard status == 0 else { throw BenchFailure("\(executable) exited \(status): \(text.prefix(300))") }
        guard text.contains(expected) else { throw BenchFailure("\(executable)'s output has no \(expected): \(text.prefix(300))") }
        return (seconds, peak)
    }

    static func measure(_ target: Target, hangwatch: String, euStack: String, into results: inout BenchResults,
                        workDirectory: String) throws {
        let pid = target.process.processIdentifier
        let size = Double((try? FileManager.default.attributesOfItem(atPath: target.binary)[.size] as? Int) ?? 0) / 1_048_576
        let label = "\(target.name) (\(String(format: "%.0f", size)) MB, live)"
        let sightings = ["never seen", "seen once", "warm"]
        var times = [String: [Double]](), peaks = [String: [Double]]()
        let environment = ProcessInfo.processInfo.environment
        for round in 0..<rounds {
            progress("large binaries: \(target.name) round \(round + 1)/\(rounds)")
            let cache = workDirectory + "/large-cache-\(target.name)-\(round)"
            let dumps = {
                for sighting in sightings {
                    let run = try runTool(hangwatch, ["dump", "--pid", "\(pid)"], output: workDirectory + "/large-out",
                                          environment: environment.merging(["HANGWATCH_SYMBOL_CACHE": cache]) { $1 }, expecting: "in \(target.name)")
                    times[sighting, default: []].append(run.seconds)
                    peaks[sighting, default: []].append(run.peakKiB)
                }
            }
            let peer = {
                let run = try runTool(euStack, ["-s", "-i", "-p", "\(pid)"], output: workDirectory + "/large-out", expecting: "TID ")
                times["eu-stack", default: []].append(run.seconds)
                peaks["eu-stack", default: []].append(run.peakKiB)
            }
            // The order alternates, so that the machine's load hits both alike.
            if round % 2 == 0 { try dumps(); try peer() } else { try peer(); try dumps() }
        }
        var gdbNote = "gdb not installed"
        if let gdb = findExecutable("gdb"),
           let run = try? runTool(gdb, ["-nx", "-batch", "-ex", "thread apply all bt", "-p", "\(pid)"], output: workDirectory + "/large-out",
                                  expecting: "Thread ") {
            gdbNote = String(format: "gdb thread apply all bt (once): %.2f s, %.0f MiB", run.seconds, run.peakKiB / 1024)
        }
        let euTime = Stats.median(times["eu-stack"] ?? []), euPeak = (peaks["eu-stack"] ?? []).max() ?? 0
        for sighting in sightings {
            let time = Stats.median(times[sighting] ?? [])
            let ratio = time / euTime
            results.add("10", "\(label): dump --pid, binary \(sighting) / eu-stack -s -i -p (median)", ratio, "x",
                        target: "≤ \(ratioTarget)x", met: ratio <= ratioTarget,
                        note: String(format: "hangwatch %.1f ms, eu-stack -s -i -p %.1f ms (%d rounds, alternating)", time * 1000, euTime * 1000, rounds)
                            + (sighting == "never seen" ? "; \(gdbNote)" : ""))
            let peak = (peaks[sighting] ?? []).max() ?? .nan
            results.add("10", "\(label): dump --pid, binary \(sighting): peak RSS (max)", peak / 1024, "MiB",
                        target: "≤ 64 MiB", met: peak <= budgetKiB,
                        note: String(format: "eu-stack -s -i -p: %.0f MiB", euPeak / 1024))
        }
        try showSavedDump(target, label: label, hangwatch: hangwatch, euTime: euTime, into: &results, workDirectory: workDirectory)
    }

    /// `hangwatch show` of a saved dump of the target, each run with an empty symbol cache.
    static func showSavedDump(_ target: Target, label: String, hangwatch: String, euTime: Double,
                              into results: inout BenchResults, workDirectory: String) throws {
        let database = workDirectory + "/large-database-\(target.name)"
        let environment = ProcessInfo.processInfo.environment.merging(["HANGWATCH_SYMBOL_CACHE": "off"]) { $1 }
        _ = try runTool(hangwatch, ["dump", "--pid", "\(target.process.processIdentifier)", "--save", "--database", database],
                        output: workDirectory + "/large-out", environment: environment, expecting: "in \(target.name)")
        let pending = database + "/reports/pending"
        guard let dump = (try? FileManager.default.contentsOfDirectory(atPath: pending))?.first(where: { $0.hasSuffix(".hwdump") }) else {
            throw BenchFailure("dump --save left no .hwdump in \(pending)")
        }
        var times: [Double] = [], peak = 0.0
        for round in 0..<rounds {
            let run = try runTool(hangwatch, ["show", pending + "/" + dump], output: workDirectory + "/large-out",
                                  environment: environment.merging(["HANGWATCH_SYMBOL_CACHE": workDirectory + "/large-show-cache-\(target.name)-\(round)"]) { $1 },
                                  expecting: "in \(target.name)")
            times.append(run.seconds)
            peak = max(peak, run.peakKiB)
        }
        results.add("10", "\(label): show of a saved dump, empty symbol cache: peak RSS (max)", peak / 1024, "MiB",
                    target: "≤ 64 MiB", met: peak <= budgetKiB,
                    note: String(format: "median %.1f ms over %d runs (eu-stack -s -i -p of the live process: %.1f ms)",
                                 Stats.median(times) * 1000, rounds, euTime * 1000))
    }
}
