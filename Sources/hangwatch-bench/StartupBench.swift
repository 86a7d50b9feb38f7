// Section 7: how long `hangwatch list` on an empty database takes from exec to exit, against a
// Foundation hello-world built the same way (hangwatch-bench-hello), and how long `hangwatch
// dump` takes to start (its arguments read, the process looked for: a pid no process has),
// against `list`; runs alternating so all see the same machine.
import Foundation
#if canImport(Glibc)
import Glibc
#endif

enum StartupBench {
    static let runs = 60

    static func run(into results: inout BenchResults, workDirectory: String) throws {
        let hangwatch = try BenchProgram.hangwatch.require(), hello = try BenchProgram.hello.require()
        let database = workDirectory + "/startup-db"
        let output = workDirectory + "/startup.out"
        progress("CLI start-up: hangwatch list (empty database) vs a Foundation hello-world, \(runs) runs each, alternating")
        // One untimed run each: the database is created, pages are in the cache.
        _ = try timeCommand(hangwatch, ["list", "--database", database], outputPath: output)
        _ = try timeCommand(hello, [], outputPath: output)
        // pid_max's last pid: no process has it here (checked below by the exit status).
        let gone = "\((Int(ProcReading.text("/proc/sys/kernel/pid_max")?.trimmingCharacters(in: .whitespacesAndNewlines) ?? "") ?? 32768) - 1)"
        // `dump` finds no such process: it alone must fail.
        let programs: [(executable: String, arguments: [String], fails: Bool)] = [
            (hangwatch, ["list", "--database", database], false), (hello, [], false),
            (hangwatch, ["dump", "--pid", gone, "--database", database], true),
        ]
        var samples: [[Double]] = programs.map { _ in [] }
        for index in 0..<runs {
            for program in programs.indices.map({ ($0 + index) % programs.count }) {
                let (executable, arguments, fails) = programs[program]
                let (seconds, status) = try timeCommand(executable, arguments, outputPath: output)
                guard fails == (status != 0) else { throw BenchFailure("\(executable) \(arguments.joined(separator: " ")) exited \(status)") }
                samples[program].append(seconds)
            }
        }
        let (cli, baseline, dump) = (samples[0], samples[1], samples[2])
        let ratio = Stats.median(cli) / Stats.median(baseline)
        results.add("7", "CLI start: hangwatch list on an empty database / Foundation hello-world", ratio, "ratio",
                    target: "≤ 1.0", met: ratio <= 1.0,
                    note: "medians of \(runs): \(fmt(Stats.median(cli) * 1000)) ms vs \(fmt(Stats.median(baseline) * 1000)) ms (exec to exit)")
        let dumpRatio = Stats.median(dump) / Stats.median(cli)
        results.add("7", "CLI start: hangwatch dump (arguments read, no such process) / hangwatch list", dumpRatio, "ratio",
                    target: "≤ 1.05", met: dumpRatio <= 1.05,
                    note: "medians of \(runs): \(fmt(Stats.median(dump) * 1000)) ms vs \(fmt(Stats.median(cli) * 1000)) ms (exec to exit; pid \(gone))")
    }
}
