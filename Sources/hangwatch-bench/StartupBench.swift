// Section 7: how long `hangwatch list` on an empty database takes from exec to exit, against a
// Foundation hello-world built the same way (hangwatch-bench-hello), runs alternating so both
// see the same machine.
import Foundation
#if canImport(Glibc)
import Glibc
#endif

enum StartupBench {
    static let runs = 60

    static func run(into results: inout BenchResults, workDirectory: String) throws {
        let directory = (ProcReading.executablePath() as NSString).deletingLastPathComponent
        let hangwatch = directory + "/hangwatch", hello = directory + "/hangwatch-bench-hello"
        for program in [hangwatch, hello] where access(program, X_OK) != 0 {
            throw BenchFailure("\(program) missing: build that product in release too")
        }
        let database = workDirectory + "/startup-db"
        let output = workDirectory + "/startup.out"
        progress("CLI start-up: hangwatch list (empty database) vs a Foundation hello-world, \(runs) runs each, alternating")
        // One untimed run each: the database is created, pages are in the cache.
        _ = try timeCommand(hangwatch, ["list", "--database", database], outputPath: output)
        _ = try timeCommand(hello, [], outputPath: output)
        var cli: [Double] = [], baseline: [Double] = []
        for index in 0..<runs {
            let order = index % 2 == 0 ? [true, false] : [false, true]
            for isCLI in order {
                let (seconds, status) = isCLI
                    ? try timeCommand(hangwatch, ["list", "--database", database], outputPath: output)
                    : try timeCommand(hello, [], outputPath: output)
                guard status == 0 else { throw BenchFailure("\(isCLI ? "hangwatch list" : "hello") exited \(status)") }
                if isCLI { cli.append(seconds) } else { baseline.append(seconds) }
            }
        }
        let ratio = Stats.median(cli) / Stats.median(baseline)
        results.add("7", "CLI start: hangwatch list on an empty database / Foundation hello-world", ratio, "ratio",
                    target: "≤ 1.0", met: ratio <= 1.0,
                    note: "medians of \(runs): \(fmt(Stats.median(cli) * 1000)) ms vs \(fmt(Stats.median(baseline) * 1000)) ms (exec to exit)")
    }
}
