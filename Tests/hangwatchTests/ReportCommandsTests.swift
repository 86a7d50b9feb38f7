// `hangwatch dump`, `list`, `show`, `process`, `prune` on real processes and real files.
import DumpWithoutCrash
import HangwatchDatabase
import HangwatchReport
import Foundation
import HangwatchTestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

@Suite("hangwatch reports", .ownThread)
struct ReportCommandsTests {
    @Test func dumpCapturesEveryThreadOfALiveProcessAndLeavesItRunning() throws {
        let database = try TemporaryDatabase()
        let target = try ChildProcess(product: "hangwatch-fixture-remote", ["threads", "65"])
        try target.waitForOutput("READY")
        let result = try runHangwatch(["dump", "--pid", "\(target.pid)", "--format", "json", "--save"], database: database)
        #expect(result.status == 0, "stderr: \(result.stderr)")
        let report = try Report.decode(from: Data(result.stdout.utf8))
        #expect(report.threads.count == 65)
        #expect(report.threads.filter { functionNames($0).contains { $0.contains("parkedRecursion") } }.count == 64)
        // Demangled Swift names with file:line, as eu-stack and gdb do not give for Swift.
        let frame = try #require(report.threads.flatMap(\.frames).first { $0.function?.contains("parkedRecursion") == true })
        #expect(frame.function?.contains("hangwatch_fixture_remote.parkedRecursion(Swift.Int)") == true)
        #expect(frame.file?.hasSuffix("hangwatch-fixture-remote/main.swift") == true)
        #expect((frame.line ?? 0) > 0)
        #expect(try database.reports().map(\.id) == [report.id])

        // Still alive and untraced.
        target.signal(SIGUSR1)
        try target.waitForOutput("PONG")
        target.signal(SIGTERM)
        #expect(try target.waitForExit() == 0)
    }

    /// libdw's standard debug-file lookup asks debuginfod servers (DEBUGINFOD_URLS, set by
    /// Debian's and Fedora's login shells) for what it cannot find locally: a crash tool must
    /// not reach the network, nor load libdebuginfod and libcurl.
    @Test func symbolicationNeverAsksADebuginfodServer() throws {
        let (listener, port) = try #require(loopbackListener())
        defer { close(listener) }

        // Threads parked in libdispatch, which has no DWARF: its debug file is looked for.
        let database = try TemporaryDatabase()
        let target = try ChildProcess(product: "hangwatch-fixture-hang", ["dispatchmain", "idle", "60"], environment: [
            "HANGWATCH_THRESHOLD": "100", "HANGWATCH_DATABASE_PATH": database.path, "HANGWATCH_BUNDLE_ID": "com.example.idle",
        ])
        try target.waitForOutput("\"ready\"")
        let dump = try hangwatch(["dump", "--pid", "\(target.pid)"], database: database,
                                 environment: ["DEBUGINFOD_URLS": "http://127.0.0.1:\(port)/", "LD_DEBUG": "files"])
        #expect(try dump.waitForExit(timeout: 60) == 0, "\(dump.stderr.suffix(2000))")
        #expect(dump.stdout.contains("libdispatch"))
        #expect(!dump.stderr.contains("libdebuginfod"), "libdebuginfod was loaded")
        #expect(accept(listener, nil, nil) < 0 && errno == EAGAIN, "something connected to the debuginfod URL")
        target.signal(SIGTERM)
        _ = try target.waitForExit()
    }

    /// A FIFO never blocks `show`: by path it is refused (not a regular file); a bare name is
    /// an id, whatever file of that name the current directory holds.
    @Test func showNeverOpensAFIFO() throws {
        let database = try TemporaryDatabase()
        let directory = try makeTemporaryDirectory("hangwatch-fifo")
        defer { removeTemporaryDirectory(directory) }
        try #require(mkfifo(directory + "/3fa2", 0o600) == 0)
        let byPath = try runHangwatch(["show", directory + "/3fa2"], database: database, timeout: 10)
        #expect(byPath.status == 1 && byPath.stderr.contains("not a regular file"), "\(byPath.stderr)")
        let byName = try ChildProcess("/bin/sh", ["-c", "cd \"$1\" && exec \"$2\" show 3fa2", "sh", directory, try productPath("hangwatch")],
                                      environment: database.environment)
        #expect(try byName.waitForExit(timeout: 10) == 1)
        #expect(byName.stderr.contains("3fa2"), "looked up as a report id: \(byName.stderr)")
    }

    @Test func dumpWithSamplesPrintsFoldedStacks() throws {
        let database = try TemporaryDatabase()
        let target = try ChildProcess(product: "hangwatch-fixture-remote", ["threads", "4"])
        try target.waitForOutput("READY")
        let result = try runHangwatch(["dump", "--pid", "\(target.pid)", "--samples", "5", "--interval", "10", "--format", "folded"], database: database)
        #expect(result.status == 0, "stderr: \(result.stderr)")
        let lines = result.stdout.split(separator: "\n")
        #expect(!lines.isEmpty)
        for line in lines {
            let count = Int(line.split(separator: " ").last ?? "")
            #expect(count != nil && count! >= 1, "bad folded line: \(line)")
        }
        #expect(result.stdout.contains("parkedRecursion"))
    }

    /// Read by QuickStart (its own error exit) or by swift-argument-parser (`--tasks` is not a
    /// plain spelling QuickStart takes): the same words and status either way.
    @Test func dumpOfAMissingProcessIsAClearError() throws {
        let database = try TemporaryDatabase()
        let quick = try runHangwatch(["dump", "--pid", "2147483646"], database: database)
        let parsed = try runHangwatch(["dump", "--pid", "2147483646", "--tasks"], database: database)
        for result in [quick, parsed] {
            #expect(result.status == 1)
            #expect(result.stderr == "Error: no process with pid 2147483646\n", "\(result.stderr)")
            #expect(result.stdout.isEmpty)
        }
    }

    @Test func listShowAndPrune() throws {
        let database = try TemporaryDatabase()
        let empty = try runHangwatch(["list"], database: database)
        #expect(empty.status == 0 && empty.stdout.contains("no reports"))

        let target = try ChildProcess(product: "hangwatch-fixture-remote", ["threads", "3"])
        try target.waitForOutput("READY")
        #expect(try runHangwatch(["dump", "--pid", "\(target.pid)", "--save"], database: database).status == 0)
        let id = try #require(try database.reports().first?.id)

        let listed = try runHangwatch(["list"], database: database)
        #expect(listed.stdout.contains(id) && listed.stdout.contains("dump"))
        let shown = try runHangwatch(["show", String(id.prefix(8))], database: database)
        #expect(shown.status == 0)
        #expect(shown.stdout.contains("Report ID:  \(id)"))
        let folded = try runHangwatch(["show", id, "--format", "folded"], database: database)
        #expect(folded.stdout.contains("parkedRecursion"))

        let unknown = try runHangwatch(["show", "ffffffff"], database: database)
        #expect(unknown.status != 0 && !unknown.stderr.isEmpty)

        let pruned = try runHangwatch(["prune", "--max-megabytes", "0"], database: database)
        #expect(pruned.status == 0 && pruned.stdout.contains("removed 1 report"))
        #expect(try database.reports().isEmpty)
    }

    /// Issue 45: a thread name is the target's to choose (prctl(PR_SET_NAME), as here): one with
    /// U+202E made `hangwatch show` and `list` print a line that reads in another order. The text
    /// shows the escape; the JSON keeps the exact name.
    @Test func aBidiControlInAThreadNameIsShownEscaped() throws {
        let database = try TemporaryDatabase()
        let name = "evil\u{202E}gnp.exe"  // 12 bytes: a thread name holds 15
        let script = "import ctypes, sys, time\nctypes.CDLL(None).prctl(15, sys.argv[1].encode(), 0, 0, 0)\n"
            + "print('READY', flush=True)\ntime.sleep(300)\n"
        let target = try ChildProcess("/usr/bin/python3", ["-c", script, name])
        try target.waitForOutput("READY")
        #expect(try runHangwatch(["dump", "--pid", "\(target.pid)", "--save"], database: database).status == 0)
        let id = try #require(try database.reports().first?.id)

        let shown = try runHangwatch(["show", id], database: database)
        #expect(shown.status == 0, "\(shown.stderr)")
        #expect(shown.stdout.contains("evil\\u{202e}gnp.exe"), "\(shown.stdout.prefix(1500))")
        let listed = try runHangwatch(["list"], database: database)
        #expect(listed.stdout.contains("evil\\u{202e}gnp.exe"), "\(listed.stdout)")
        for output in [shown.stdout, listed.stdout] {
            #expect(!output.unicodeScalars.contains("\u{202E}"), "no raw U+202E reaches the terminal")
        }
        let json = try runHangwatch(["show", id, "--format", "json"], database: database)
        let report = try Report.decode(from: Data(json.stdout.utf8))
        #expect(report.threads.contains { $0.tid == target.pid && $0.name == name }, "JSON keeps the exact name")
    }

    /// With neither --database nor HANGWATCH_DATABASE_PATH, the database is $XDG_STATE_HOME/hangwatch
    /// when that is absolute, else $HOME/.local/state/hangwatch; each variable is read alone
    /// (GlobalOptions.swift), not from the whole environment made a dictionary.
    @Test func theDefaultDatabaseFollowsXDGStateHomeThenHome() throws {
        let directory = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(directory) }
        let hangwatch = try productPath("hangwatch")
        let home = directory + "/home/.local/state/hangwatch"
        for (variables, expected) in [
            (["XDG_STATE_HOME=\(directory)/state", "HOME=\(directory)/home"], directory + "/state/hangwatch"),
            (["XDG_STATE_HOME=relative", "HOME=\(directory)/home"], home),
            (["HOME=\(directory)/home"], home),
        ] {
            let child = try ChildProcess("/usr/bin/env", ["-u", "HANGWATCH_DATABASE_PATH", "-u", "XDG_STATE_HOME"] + variables + [hangwatch, "list"])
            let status = try child.waitForExit(timeout: 60)
            #expect(status == 0 && child.stdout == "no reports in \(expected) (no database there)\n", "\(variables): \(child.stdout)\(child.stderr)")
        }
    }

    /// `list`'s plain spellings are read without swift-argument-parser (Sources/hangwatch/QuickStart.swift):
    /// this debug build parses each of them with swift-argument-parser too and stops if the two differ.
    /// Everything else still goes to swift-argument-parser, with its messages and help.
    @Test func listParsesAsBefore() throws {
        let database = try TemporaryDatabase()
        let other = try TemporaryDatabase()
        let directory = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(directory) }
        let config = directory + "/config.json"
        try Data(#"{"databasePath": "\#(other.path)"}"#.utf8).write(to: URL(fileURLWithPath: config))

        let cases: [(arguments: [String], stdout: String)] = [
            (["list", "--database", other.path], "no reports in \(other.path) (no database there)\n"),
            (["list", "--json", "--database=\(other.path)"], ""),
            (["list", "--database", other.path, "--json", "--config", config], ""),
            // HANGWATCH_DATABASE_PATH (set by runHangwatch) overrides the config file's databasePath.
            (["list", "--config=\(config)"], "no reports in \(database.path) (no database there)\n"),
            // A repeat goes to swift-argument-parser: the last one counts.
            (["list", "--database", other.path, "--database", database.path], "no reports in \(database.path) (no database there)\n"),
            (["list", "--database=-x-\(other.path)", "--database", other.path], "no reports in \(other.path) (no database there)\n"),
        ]
        for (arguments, stdout) in cases {
            let result = try runHangwatch(arguments, database: database)
            #expect(result.status == 0 && result.stdout == stdout && result.stderr.isEmpty, "\(arguments): \(result)")
        }

        let usage = "Usage: hangwatch list [--database <database>] [--config <config>] [--json]\n"
        let help = try runHangwatch(["list", "--database", other.path, "--help"], database: database)
        #expect(help.status == 0 && help.stdout.hasPrefix("OVERVIEW: List the reports in the database, oldest capture first."))
        #expect(help.stdout.contains("USAGE: hangwatch list [--database <database>] [--config <config>] [--json]\n"))
        for (arguments, message) in [
            (["list", "--bogus"], "Error: Unknown option '--bogus'\n"),
            (["list", "--json", "--database"], "Error: Missing value for '--database <database>'\n"),
            (["list", "--database", "--json"], "Error: Missing value for '--database <database>'\n"),
            (["list", other.path], "Error: Unexpected argument '\(other.path)'\n"),
        ] {
            let result = try runHangwatch(arguments, database: database)
            #expect(result.status == 64 && result.stdout.isEmpty, "\(arguments): \(result)")
            #expect(result.stderr.hasPrefix(message) && result.stderr.contains(usage), "\(arguments): \(result.stderr)")
        }
        let missing = try runHangwatch(["list", "--config", directory + "/missing.json"], database: database)
        #expect(missing.status == 1 && missing.stderr.hasPrefix("Error: hangwatch configuration: \(directory)/missing.json: "),
                "\(missing)")
    }

    /// `dump`'s plain spellings are read without swift-argument-parser too (QuickStart.swift):
    /// this debug build checks each against swift-argument-parser; errors, repeats and help
    /// still come from swift-argument-parser.
    @Test func dumpParsesAsBefore() throws {
        let database = try TemporaryDatabase()
        let directory = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(directory) }
        let target = try ChildProcess(product: "hangwatch-fixture-remote", ["threads", "3"])
        try target.waitForOutput("READY")
        let pid = "\(target.pid)"
        for arguments in [
            ["dump", "--pid", pid],
            ["dump", "--pid=\(pid)", "--format", "folded", "--samples", "3", "--interval=5"],
            ["dump", "--format=json", "--pid", pid, "--redact", "all", "--database", database.path],
            ["dump", "--pid", pid, "--tree", "--save"],
            ["dump", "--pid", pid, "--format", "svg", "--output", directory + "/stacks.svg"],
            ["dump", "--pid", pid, "--pid", pid],   // a repeat: swift-argument-parser's (the last counts)
        ] {
            let result = try runHangwatch(arguments, database: database)
            #expect(result.status == 0, "\(arguments): \(result.stderr)")
        }
        #expect(FileManager.default.fileExists(atPath: directory + "/stacks.svg"))
        for (arguments, message) in [
            (["dump", "--pid", "0"], "Error: --pid must be a positive process id, not 0\n"),
            (["dump", "--pid", pid, "--format", "minidump"], "Error: --format minidump writes a binary file: give --output FILE\n"),
            (["dump", "--pid", pid, "--samples", "2", "--tree"], "Error: --tree takes one capture of each process: it cannot be combined with --samples\n"),
            (["dump", "--pid", pid, "--format", "pdf"], "Error: The value 'pdf' is invalid for '--format <format>'"),
            (["dump", "--pid", "-3"], "Error: --pid must be a positive process id, not -3\n"),
            (["dump"], "Error: Missing expected argument '--pid <pid>'\n"),
        ] {
            let result = try runHangwatch(arguments, database: database)
            #expect(result.status == 64 && result.stderr.hasPrefix(message), "\(arguments): \(result.stderr)")
        }
        let help = try runHangwatch(["dump", "--pid", pid, "--help"], database: database)
        #expect(help.status == 0 && help.stdout.hasPrefix("OVERVIEW: Capture every thread of a running process from outside"))
        target.signal(SIGTERM)
        _ = try target.waitForExit(timeout: 10)
    }

    @Test func showRejectsCorruptAndForeignFilesClearly() throws {
        let database = try TemporaryDatabase()
        let directory = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(directory) }
        let corruptJSON = directory + "/corrupt.json"
        try Data(#"{"schemaVersion": 1, "id": "#.utf8).write(to: URL(fileURLWithPath: corruptJSON))
        let json = try runHangwatch(["show", corruptJSON], database: database)
        #expect(json.status != 0)
        #expect(json.stderr.contains("is not a valid report"))

        let garbage = directory + "/garbage.hwdump"
        try Data((0..<4096).map { UInt8(truncatingIfNeeded: $0 &* 31) }).write(to: URL(fileURLWithPath: garbage))
        let dump = try runHangwatch(["show", garbage], database: database)
        #expect(dump.status != 0)
        #expect(dump.stderr.contains("is not a hangwatch report or dump"), "\(dump.stderr)")
        #expect(dump.stderr.split(separator: "\n").count <= 2)
    }

    @Test func processTurnsDeferredDumpsIntoReports() throws {
        let database = try TemporaryDatabase()
        let client = try DumpClient(databasePath: database.path, bundleID: "com.example.cli-test")
        client.annotations["version"] = "9.9.9"
        try client.dumpWithoutCrashAndDeferProcessing()
        try client.dumpWithoutCrashAndDeferProcessing()
        let result = try runHangwatch(["process"], database: database)
        #expect(result.status == 0, "stderr: \(result.stderr)")
        #expect(result.stdout.contains("processed 2 dump(s)"))
        let reports = try database.reports()
        #expect(reports.count == 2)
        #expect(reports.allSatisfy { $0.kind == .dump && $0.annotations["version"] == "9.9.9" })
        #expect(try runHangwatch(["process"], database: database).stdout.contains("processed 0 dump(s)"))
    }
}

@Suite("hangwatch symbols", .ownThread)
struct SymbolsCommandTests {
    @Test func writesBreakpadSymbolsOfAnExecutable() throws {
        let database = try TemporaryDatabase()
        let directory = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(directory) }
        let program = try productPath("hangwatch-fixture-remote")
        let output = directory + "/remote.sym"
        let result = try runHangwatch(["symbols", program, "--output", output], database: database)
        #expect(result.status == 0 && result.stdout.isEmpty, "\(result)")
        let text = try String(contentsOfFile: output, encoding: .utf8)
        #expect(text.hasPrefix("MODULE Linux x86_64 ") || text.hasPrefix("MODULE Linux arm64 "))
        #expect(text.split(separator: "\n")[0].hasSuffix(" hangwatch-fixture-remote"))
        #expect(text.contains("\nINFO CODE_ID "))
        // The fixture's own Swift function, demangled, with line records.
        #expect(text.contains(" hangwatch_fixture_remote.parkedRecursion(Swift.Int) -> Swift.Int\n"))
        var info = stat()
        #expect(stat(output, &info) == 0 && info.st_mode & 0o777 == 0o600)
    }

    /// Not an ELF file, a FIFO (never blocks), a missing file, an ELF file without a build-id:
    /// one clear line each, nothing written.
    @Test func badInputIsAOneLineError() throws {
        let database = try TemporaryDatabase()
        let directory = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(directory) }
        try "not an ELF file\n".write(toFile: directory + "/text", atomically: true, encoding: .utf8)
        #expect(mkfifo(directory + "/fifo", 0o600) == 0)
        try "int main(void) { return 0; }\n".write(toFile: directory + "/p.c", atomically: true, encoding: .utf8)
        try runTool("/usr/bin/gcc", ["-Wl,--build-id=none", "-o", directory + "/no-build-id", directory + "/p.c"])
        for (file, message) in [
            ("text", "is not a 64-bit little-endian x86_64 or arm64 ELF file"),
            ("fifo", "is not a regular file: give an ELF executable or shared library"),
            ("missing", "cannot read \(directory)/missing: No such file or directory"),
            ("no-build-id", "has no GNU build-id"),
        ] {
            let result = try runHangwatch(["symbols", directory + "/" + file, "--output", directory + "/out.sym"], database: database)
            #expect(result.status == 1 && result.stderr.contains(message) && result.stderr.split(separator: "\n").count == 1,
                    "\(file): \(result)")
            #expect(!FileManager.default.fileExists(atPath: directory + "/out.sym"))
        }
    }

    /// `hangwatch --version`: one line with the version, the report schema and the run protocol.
    @Test func versionSaysWhatThisBuildSpeaks() throws {
        let result = try runHangwatch(["--version"], database: try TemporaryDatabase())
        let words = result.stdout.split(separator: " ", maxSplits: 2)
        #expect(result.status == 0 && words.count == 3 && words[0] == "hangwatch" && words[1].first?.isNumber == true
            && words[2] == "(report schema \(Report.currentSchemaVersion), run protocol hangwatch/2)\n", "\(result)")
    }
}

/// The symbol cache as many hangwatch processes share it: eight dumps at once into an empty
/// cache, and dumps killed while they index, leave only sound entries, which later dumps read.
@Suite("symbol cache under concurrent and killed writers", .ownThread)
struct SymbolCacheSharingTests {
    /// The frames of a text report, without what changes between two dumps (times, ids, CPU).
    static func frames(_ text: String) -> [String] {
        text.split(separator: "\n").filter { $0.hasPrefix("  #") }.map(String.init)
    }

    static func entries(_ cache: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: cache)) ?? []).sorted()
    }

    /// Eight `hangwatch show DUMP` at once (each symbolicates the same intermediate dump) into
    /// an empty cache, so that all eight store their answers: all agree with a run without the
    /// cache, and what they leave is whole entries that the next run reads without rewriting any.
    @Test func eightProcessesAtOnceIntoAnEmptyCacheAgreeAndLeaveSoundEntries() throws {
        let database = try TemporaryDatabase()
        let directory = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(directory) }
        let cache = directory + "/symbols"
        let target = try ChildProcess(product: "hangwatch-fixture-remote", ["threads", "8"])
        try target.waitForOutput("READY")
        defer { target.signal(SIGKILL) }
        // One capture, kept as an intermediate dump: the runs below only symbolicate it.
        let saved = try hangwatch(["dump", "--pid", "\(target.pid)", "--save"], database: database, environment: ["HANGWATCH_SYMBOL_CACHE": "off"])
        #expect(try saved.waitForExit(timeout: 60) == 0)
        let id = try #require(try database.reports().first?.id)
        let dump = directory + "/capture.hwdump"
        try #require(try CrashReportDatabase(path: database.path).readReportDump(id: id)).write(to: URL(fileURLWithPath: dump))

        let direct = try hangwatch(["show", dump], database: database, environment: ["HANGWATCH_SYMBOL_CACHE": "off"])
        #expect(try direct.waitForExit(timeout: 60) == 0, "\(direct.stderr)")
        let expected = Self.frames(direct.stdout)
        #expect(!expected.isEmpty)
        let environment = ["HANGWATCH_SYMBOL_CACHE": cache]
        let runs = try (0..<8).map { _ in try hangwatch(["show", dump], database: database, environment: environment) }
        for run in runs {
            #expect(try run.waitForExit(timeout: 60) == 0, "\(run.stderr)")
            #expect(Self.frames(run.stdout) == expected)
        }
        let entries = Self.entries(cache)
        // Whole entries, no temporary left, and the cache's mark (written once, by one of the eight).
        #expect(!entries.isEmpty && entries.allSatisfy { $0.hasSuffix(".hwsym") || $0 == "CACHEDIR.TAG" }, "\(entries)")
        #expect(entries.filter { $0 == "CACHEDIR.TAG" }.count == 1, "\(entries)")
        func inodes() -> [UInt64] { entries.map { name in var info = stat(); stat(cache + "/" + name, &info); return UInt64(info.st_ino) } }
        let before = inodes()
        let again = try hangwatch(["show", dump], database: database, environment: environment)
        #expect(try again.waitForExit(timeout: 60) == 0)
        #expect(Self.frames(again.stdout) == expected)
        #expect(Self.entries(cache) == entries)
        #expect(inodes() == before, "an entry was rewritten instead of read")
    }

    /// kill -9 at spread-out moments of a first dump, storing its answers into an empty cache:
    /// whatever it left, the next dump gives the same frames as one without a cache.
    @Test func dumpsKilledWhileStoringAnswersLeaveNothingThatMisleads() throws {
        let database = try TemporaryDatabase()
        let directory = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(directory) }
        let cache = directory + "/symbols"
        let target = try ChildProcess(product: "hangwatch-fixture-remote", ["threads", "4"])
        try target.waitForOutput("READY")
        defer { target.signal(SIGKILL) }
        let direct = try hangwatch(["dump", "--pid", "\(target.pid)"], database: database, environment: ["HANGWATCH_SYMBOL_CACHE": "off"])
        #expect(try direct.waitForExit(timeout: 60) == 0)
        let expected = Self.frames(direct.stdout)
        for delay in [5_000, 20_000, 40_000, 80_000, 160_000] as [useconds_t] {
            try? FileManager.default.removeItem(atPath: cache)
            let dump = try hangwatch(["dump", "--pid", "\(target.pid)"], database: database, environment: ["HANGWATCH_SYMBOL_CACHE": cache])
            usleep(delay)
            dump.signal(SIGKILL)
            _ = try dump.waitForExit(timeout: 30)
            // The target is not left stopped or traced by the killed dump.
            #expect(tracerPIDs(of: target.pid).allSatisfy { $0 == 0 })
            let next = try hangwatch(["dump", "--pid", "\(target.pid)"], database: database, environment: ["HANGWATCH_SYMBOL_CACHE": cache])
            #expect(try next.waitForExit(timeout: 60) == 0, "after a kill at \(delay) µs: \(next.stderr)")
            #expect(Self.frames(next.stdout) == expected, "after a kill at \(delay) µs")
        }
    }
}
