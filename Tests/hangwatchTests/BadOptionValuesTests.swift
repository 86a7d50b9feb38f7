// Every subcommand with a bad value of each of its options (issue 50): the first line of the
// message names the option or the value and says what is wrong, and the exit status is the one
// `hangwatch --help` documents — 64 for a command line refused, 1 for a file, database or
// process that cannot be used, 127 for a command `run` cannot find. Flags take no value; the
// free-text options (upload's --product, --product-version) have no bad one; job-watchdog is
// hangwatch's own helper, not a command a person types.
import Foundation
import HangwatchTestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

@Suite("bad option values", .ownThread)
struct BadOptionValuesTests {
    /// A command line, the exit status it must give, and what its first stderr line must name.
    struct Case: CustomStringConvertible {
        var arguments: [String]
        var status: Int32
        var names: [String]
        var description: String { arguments.joined(separator: " ") }
    }

    static func check(_ cases: [Case], database: TemporaryDatabase) throws {
        for bad in cases {
            let result = try runHangwatch(bad.arguments, database: database)
            let first = result.stderr.split(separator: "\n").first.map(String.init) ?? ""
            #expect(result.status == bad.status, "\(bad): exit \(result.status), \(result.stderr)")
            for name in bad.names { #expect(first.contains(name), "\(bad): \(first)") }
            #expect(result.stdout.isEmpty, "\(bad): \(result.stdout)")
        }
    }

    /// Paths the cases use: a regular file where a directory belongs, a file that is not there.
    struct Paths {
        let directory: String
        var file: String { directory + "/file" }
        var missing: String { directory + "/missing.json" }
        var unwritable: String { directory + "/no/such/dir/out" }

        init() throws {
            directory = try makeTemporaryDirectory()
            try "not a directory\n".write(toFile: directory + "/file", atomically: true, encoding: .utf8)
        }
    }

    @Test func run() throws {
        let database = try TemporaryDatabase()
        let paths = try Paths()
        defer { removeTemporaryDirectory(paths.directory) }
        func run(_ option: String, _ value: String, _ names: [String], _ status: Int32 = 64) -> Case {
            Case(arguments: ["run", option, value, "--", "true"], status: status, names: names)
        }
        try Self.check([
            run("--threshold", "abc", ["'abc'", "--threshold"]),
            run("--silence", "0", ["--silence", "not 0.0"]),
            run("--timeout", "-5", ["--timeout", "not -5.0"]),
            run("--kill-after", "-1", ["--kill-after", "not -1.0"]),
            run("--kill-signal", "FOO", ["--kill-signal", "'FOO'"]),
            run("--kill-grace", "-1", ["--kill-grace", "not -1.0"]),
            run("--kill-tree", "maybe", ["'maybe'", "--kill-tree"]),
            run("--stderr-tail", "-1", ["--stderr-tail", "not -1"]),
            run("--memory-max", "lots", ["'lots'", "--memory-max"]),
            run("--format", "svg", ["--format", "not svg"]),
            run("--redact", "bogus", ["--redact", "\"bogus\""]),
            run("--database", paths.file, ["database \(paths.file)"], 1),
            run("--config", paths.missing, [paths.missing], 1),
            Case(arguments: ["run"], status: 64, names: ["missing command"]),
            Case(arguments: ["run", "--", paths.missing], status: 127, names: ["\(paths.missing): command not found"]),
        ], database: database)
    }

    @Test func dump() throws {
        let database = try TemporaryDatabase()
        let paths = try Paths()
        defer { removeTemporaryDirectory(paths.directory) }
        let target = try parkedSwiftTarget()
        defer { target.signal(SIGTERM); _ = try? target.waitForExit(timeout: 10) }
        let pid = "\(target.pid)"
        func dump(_ more: [String], _ names: [String], _ status: Int32 = 64) -> Case {
            Case(arguments: ["dump", "--pid", pid] + more, status: status, names: names)
        }
        try Self.check([
            Case(arguments: ["dump", "--pid", "-3"], status: 64, names: ["--pid", "not -3"]),
            Case(arguments: ["dump", "--pid", "abc"], status: 64, names: ["'abc'", "--pid"]),
            Case(arguments: ["dump", "--pid", "999999999"], status: 1, names: ["999999999"]),
            dump(["--format", "pdf"], ["'pdf'", "--format"]),
            dump(["--samples", "0"], ["--samples", "not 0"]),
            dump(["--interval", "0"], ["--interval", "not 0"]),
            dump(["--output", paths.unwritable], ["cannot write \(paths.unwritable)"], 1),
            dump(["--redact", "bogus"], ["--redact", "\"bogus\""]),
            dump(["--save", "--database", paths.file], ["database \(paths.file)"], 1),
            dump(["--config", paths.missing], [paths.missing], 1),
        ], database: database)
    }

    @Test func listShowProcessPrune() throws {
        let database = try TemporaryDatabase()
        let paths = try Paths()
        defer { removeTemporaryDirectory(paths.directory) }
        let report = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Fixtures/data/reports/dump-profile.json").path
        try Self.check([
            Case(arguments: ["list", "--database", paths.file], status: 1, names: ["database \(paths.file)"]),
            Case(arguments: ["list", "--config", paths.missing], status: 1, names: [paths.missing]),
            Case(arguments: ["list", "--bogus"], status: 64, names: ["'--bogus'"]),
            Case(arguments: ["show", "zzzz"], status: 1, names: ["\"zzzz\""]),
            Case(arguments: ["show", paths.missing], status: 1, names: ["cannot read \(paths.missing)"]),
            Case(arguments: ["show", report, "--format", "pdf"], status: 64, names: ["'pdf'", "--format"]),
            Case(arguments: ["show", report, "--format", "json", "--output", paths.unwritable], status: 1,
                 names: ["cannot write \(paths.unwritable)"]),
            Case(arguments: ["show", "zzzz", "--database", paths.file], status: 1, names: ["database \(paths.file)"]),
            Case(arguments: ["show", "zzzz", "--config", paths.missing], status: 1, names: [paths.missing]),
            Case(arguments: ["process", "--database", paths.file], status: 1, names: ["database \(paths.file)"]),
            Case(arguments: ["process", "--config", paths.missing], status: 1, names: [paths.missing]),
            Case(arguments: ["process", "--redact", "bogus"], status: 64, names: ["--redact", "\"bogus\""]),
            Case(arguments: ["prune", "--max-age-days", "abc"], status: 64, names: ["'abc'", "--max-age-days"]),
            Case(arguments: ["prune", "--max-age-days", "-1"], status: 64, names: ["--max-age-days", "not -1.0"]),
            Case(arguments: ["prune", "--max-megabytes", "-1"], status: 64, names: ["--max-megabytes", "not -1.0"]),
            Case(arguments: ["prune", "--database", paths.file], status: 1, names: ["database \(paths.file)"]),
            Case(arguments: ["prune", "--config", paths.missing], status: 1, names: [paths.missing]),
        ], database: database)
    }

    @Test func symbolsAndUpload() throws {
        let database = try TemporaryDatabase()
        let paths = try Paths()
        defer { removeTemporaryDirectory(paths.directory) }
        let program = try productPath("hangwatch-fixture-remote")
        let url = "http://127.0.0.1:9/"
        try Self.check([
            Case(arguments: ["symbols", paths.missing], status: 1, names: ["cannot read \(paths.missing)"]),
            Case(arguments: ["symbols", program, "--output", paths.unwritable], status: 1, names: ["cannot write \(paths.unwritable)"]),
            Case(arguments: ["symbols", program, "--store", paths.file], status: 1, names: [paths.file]),
            Case(arguments: ["symbols", program, "--debug-dir", paths.missing], status: 1, names: ["--debug-dir \(paths.missing)"]),
            Case(arguments: ["symbols", program, "--output", paths.directory + "/a", "--store", paths.directory], status: 64,
                 names: ["--output or --store"]),
            Case(arguments: ["upload", "--url", "not a url"], status: 64, names: ["--url", "'not a url'"]),
            Case(arguments: ["upload", "--url", url, "--id", "zzzz"], status: 1, names: ["\"zzzz\""]),
            Case(arguments: ["upload", "--url", url, "--timeout", "-1"], status: 64, names: ["--timeout", "not -1.0"]),
            Case(arguments: ["upload", "--url", url, "--max-megabytes", "0"], status: 64, names: ["--max-megabytes", "not 0.0"]),
            Case(arguments: ["upload", "--url", url, "--max-attempts", "0"], status: 64, names: ["--max-attempts", "not 0"]),
            Case(arguments: ["upload", "--url", url, "--rate-limit", "-1"], status: 64, names: ["--rate-limit", "not -1"]),
            Case(arguments: ["upload", "--url", url, "--redact", "bogus"], status: 64, names: ["--redact", "\"bogus\""]),
            Case(arguments: ["upload", "--url", url, "--database", paths.file], status: 1, names: ["database \(paths.file)"]),
            Case(arguments: ["upload", "--url", url, "--config", paths.missing], status: 1, names: [paths.missing]),
        ], database: database)
    }
}
