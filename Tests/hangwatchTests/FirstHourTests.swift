// What a newcomer reads in the first hour (issue 50), on real processes: the thread lines and
// headlines of `hangwatch dump` and `show`, and the messages of the commands they try first.
// Each check reads the text a person sees; /proc is read here on its own as the reference.
import HangwatchDatabase
import HangwatchPlatform
import HangwatchReport
import Foundation
import HangwatchTestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

@Suite("the first hour", .ownThread)
struct FirstHourTests {
    /// This test's own read of a thread's /proc line (the reference for the report's).
    static func procLine(_ pid: pid_t, _ tid: pid_t, _ file: String) -> String {
        ((try? String(contentsOfFile: "/proc/\(pid)/task/\(tid)/\(file)", encoding: .utf8)) ?? "")
            .trimmingCharacters(in: .whitespacesAndNewlines)
    }

    static func threadLine(_ text: String, tid: String) -> String? {
        text.split(separator: "\n").first { $0.hasPrefix("Thread \(tid) ") }.map(String.init)
    }

    /// Two threads deadlocked on glibc mutexes: the headline says what was dumped, and each
    /// thread line names the futex call with the address /proc gives.
    @Test func aDumpSaysWhatItCaughtAndNamesTheCalls() throws {
        let database = try TemporaryDatabase()
        let target = try ChildProcess(product: "hangwatch-fixture-remote", ["deadlock"])
        defer { target.signal(SIGKILL); _ = try? target.waitForExit(timeout: 10) }
        let ready = try target.waitForOutput("READY deadlock").split(separator: "\n").first { $0.hasPrefix("READY deadlock") } ?? ""
        let tids = ready.split(separator: " ").dropFirst(2).map(String.init)
        try #require(tids.count == 2)
        let result = try runHangwatch(["dump", "--pid", "\(target.pid)"], database: database)
        #expect(result.status == 0, "\(result.stderr)")
        let headline = result.stdout.split(separator: "\n").first.map(String.init) ?? ""
        #expect(headline.hasPrefix("*** Dump: hangwatch-fixtu [\(target.pid)]: 3 threads: 3 in system calls (3 futex); deadlock: thread "),
                "\(headline)")
        for tid in tids {
            // The lock's address is the call's first argument, as the kernel writes it.
            let address = try #require(Self.procLine(target.pid, pid_t(tid)!, "syscall").split(separator: " ").dropFirst().first)
            let line = try #require(Self.threadLine(result.stdout, tid: tid), "\(result.stdout)")
            #expect(line.contains(" — state S, ptrace, syscall futex(\(address), FUTEX_WAIT_PRIVATE, 2, NULL), cpu "), "\(line)")
        }
        // JSON: the kernel's line and the name.
        let json = try runHangwatch(["dump", "--pid", "\(target.pid)", "--format", "json"], database: database)
        let report = try Report.decode(from: Data(json.stdout.utf8))
        for tid in tids {
            let thread = try #require(report.threads.first { "\($0.tid)" == tid })
            #expect(thread.syscallName == "futex" && thread.syscall?.hasPrefix("\(Syscalls.futex) 0x") == true, "\(thread)")
        }
    }

    /// libdispatch names its workers with the last 15 bytes of their queue's label: the report
    /// says which label.
    @Test func dispatchWorkersAreNamedAfterTheirQueues() throws {
        let database = try TemporaryDatabase()
        let target = try ChildProcess(product: "hangwatch-fixture-remote", ["dispatch"])
        defer { target.signal(SIGTERM); _ = try? target.waitForExit(timeout: 10) }
        try target.waitForOutput("READY dispatch")
        let tids = try FileManager.default.contentsOfDirectory(atPath: "/proc/\(target.pid)/task")
        let names = Dictionary(uniqueKeysWithValues: tids.map { ($0, Self.procLine(target.pid, pid_t($0)!, "comm")) })
        let result = try runHangwatch(["dump", "--pid", "\(target.pid)"], database: database)
        #expect(result.status == 0, "\(result.stderr)")
        for (name, label) in [("oot.default-qos", "com.apple.root.default-qos"), ("oot.utility-qos", "com.apple.root.utility-qos"),
                              ("-qos.overcommit", "com.apple.root.<QoS>-qos.overcommit")] {
            let tid = try #require(names.first { $0.value == name }?.key, "no thread named \(name) in /proc: \(names)")
            let line = try #require(Self.threadLine(result.stdout, tid: tid), "\(result.stdout)")
            #expect(line.hasPrefix("Thread \(tid) \"\(name)\" [libdispatch: \(label)] — "), "\(line)")
        }
    }

    /// A hang killed by `run --kill-after`: what the hang was doing (its samples) comes before
    /// the threads as they were when the kill was sent.
    @Test func aKilledHangLeadsWithWhatTheHangWasDoing() throws {
        let database = try TemporaryDatabase()
        let child = try hangwatch(["run", "--threshold", "1", "--kill-after", "1.5", "--",
                                   try productPath("hangwatch-fixture-hang"), "runloop", "forever"],
                                  database: database, environment: [
                                      "HANGWATCH_THRESHOLD": "1", "HANGWATCH_BUNDLE_ID": "com.example.first-hour",
                                  ])
        #expect(try child.waitForExit(timeout: 60) == 124, "stderr: \(child.stderr)")
        let report = try #require(try database.reports().first)
        try #require((report.hang?.samples ?? 0) > 1)
        // run's summary on stderr: the samples' stack, then the thread when it was killed.
        let summary = child.stderr.split(separator: "\n").map(String.init)
        let sampledAt = try #require(summary.firstIndex { $0.hasPrefix("hangwatch: the hang was in (its most frequent stack, ") },
                                     "\(child.stderr)")
        let killedAt = try #require(summary.firstIndex { $0.contains(" was in when it was killed:") }, "\(child.stderr)")
        #expect(sampledAt < killedAt)
        let shown = try runHangwatch(["show", report.id], database: database)
        let lines = shown.stdout.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        let profile = try #require(lines.firstIndex { $0.hasPrefix("Hang profile: ") }, "\(shown.stdout)")
        let killed = try #require(lines.firstIndex { $0.hasPrefix("Threads when SIGKILL was sent (the hang profile above") })
        let firstThread = try #require(lines.firstIndex { $0.hasPrefix("Thread ") })
        #expect(profile < killed && killed < firstThread, "\(shown.stdout)")
    }

    /// The messages of the commands a newcomer tries first name what is wrong.
    @Test func theFirstMessagesSayWhatIsWrong() throws {
        let database = try TemporaryDatabase()
        let directory = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(directory) }
        let cases: [(arguments: [String], status: Int32, message: String)] = [
            (["symbols", directory + "/nope"], 1, "Error: cannot read \(directory)/nope: No such file or directory\n"),
            (["symbols", directory], 1, "Error: \(directory) is not a regular file: give an ELF executable or shared library\n"),
            (["show", "/etc/passwd"], 1, "Error: /etc/passwd is not a hangwatch report or dump: a report is JSON (it starts with {), "
                + "an intermediate dump starts with HWIDUMP\n"),
            (["run", "--kill-after", "-1", "--", "true"], 64,
             "Error: --kill-after must be more than 0 and at most 31536000 seconds (a year), not -1.0\n"),
        ]
        for (arguments, status, message) in cases {
            let result = try runHangwatch(arguments, database: database)
            #expect(result.status == status && result.stderr.hasPrefix(message), "\(arguments): \(result)")
        }
        // Every format the README shows is among the valid values.
        let format = try runHangwatch(["show", "abc", "--format", "pdf"], database: database)
        #expect(format.status == 64 && format.stderr.hasPrefix("Error: The value 'pdf' is invalid for '--format <format>'"))
        for name in ReportFormatNames.all { #expect(format.stderr.contains("  - \(name)\n"), "\(name): \(format.stderr)") }
    }

    /// `list` makes nothing where there is no database, has the state column its help
    /// promises, and lists by capture time whenever the reports were written.
    @Test func listIsWhatItsHelpSays() throws {
        let database = try TemporaryDatabase()
        let directory = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(directory) }
        let missing = directory + "/no/such/db"
        let empty = try runHangwatch(["list", "--database", missing], database: database)
        #expect(empty.status == 0 && empty.stdout == "no reports in \(missing) (no database there)\n", "\(empty)")
        #expect(!FileManager.default.fileExists(atPath: directory + "/no"), "list made the directory")

        let target = try ChildProcess(product: "hangwatch-fixture-remote", ["threads", "2"])
        defer { target.signal(SIGTERM); _ = try? target.waitForExit(timeout: 10) }
        try target.waitForOutput("READY")
        var ids: [String] = []
        for _ in 0..<2 {
            let saved = try runHangwatch(["dump", "--pid", "\(target.pid)", "--save", "--format", "json"], database: database)
            ids.append(try Report.decode(from: Data(saved.stdout.utf8)).id)
        }
        // The first capture's file written last, as `process` writes a dump captured long before.
        let first = try CrashReportDatabase(path: database.path).findReport(ids[0]).path
        var times = [timespec(tv_sec: time(nil) + 60, tv_nsec: 0), timespec(tv_sec: time(nil) + 60, tv_nsec: 0)]
        #expect(utimensat(AT_FDCWD, first, &times, 0) == 0)
        let listed = try runHangwatch(["list"], database: database)
        let rows = listed.stdout.split(separator: "\n")
        #expect(rows.map { String($0.prefix(36)) } == ids, "\(listed.stdout)")
        #expect(rows.allSatisfy { $0.dropFirst(36).hasPrefix("  pending    dump        ") }, "\(listed.stdout)")
        let help = try runHangwatch(["list", "--help"], database: database)
        #expect(help.stdout.hasPrefix("OVERVIEW: List the reports in the database, oldest capture first."))
    }

    /// A HangMonitor program ended by a plain `kill` (SIGTERM, no handler): its killed report
    /// names the signals that end a process unhandled, SIGTERM among them.
    @Test func aPlainKillIsNamedAmongWhatEndsAProcess() throws {
        let database = try TemporaryDatabase()
        let child = try ChildProcess(product: "hangwatch-fixture-hang", ["dispatchmain", "idle", "60"], environment: [
            "HANGWATCH_DATABASE_PATH": database.path, "HANGWATCH_BUNDLE_ID": "com.example.first-hour", "HANGWATCH_THRESHOLD": "2",
            "HANGWATCH_RUN_RECORD_INTERVAL": "0.2",
        ])
        try child.waitForOutput("\"ready\"")
        usleep(600_000)  // a few heartbeats
        child.signal(SIGTERM)
        #expect(try child.waitForExit(timeout: 10) == 128 + SIGTERM)
        let processed = try runHangwatch(["process"], database: database)
        #expect(processed.status == 0, "\(processed)")
        let report = try #require(try database.reports().first)
        let shown = try runHangwatch(["show", report.id], database: database)
        #expect(shown.stdout.contains("SIGTERM from a plain kill"), "\(shown.stdout)")
        #expect(!shown.stdout.contains("an uncatchable signal"), "\(shown.stdout)")
    }
}

/// What the tests expect of `--format`: every value the README shows.
enum ReportFormatNames {
    static let all = ["text", "json", "folded", "svg", "html", "minidump", "pprof"]
}
