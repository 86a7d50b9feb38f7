// `hangwatch run` and a child killed from outside (docs/killed.md): by the OOM killer of the
// job's own memory cgroup (--memory-max), by another process's kill -9; never a report for
// what hangwatch itself sent.
import Foundation
import HangwatchTestSupport
import HangwatchPlatform
import Testing
#if canImport(Glibc)
import Glibc
#endif

@Suite("killed from outside", .ownThread)
struct KilledCommandTests {
    /// Allocates 16 MiB more (written, so resident) every 20 ms, saying so on stderr.
    static let allocator = [
        "python3", "-c",
        "import sys, time\nkept = []\nwhile True:\n    kept.append(b'Z' * (16 << 20))\n"
            + "    sys.stderr.write('allocated %d MiB\\n' % (16 * len(kept)))\n    sys.stderr.flush()\n    time.sleep(0.02)\n",
    ]

    /// Whether this machine lets hangwatch make a memory cgroup (root, or a delegated one).
    static var cgroupsWritable: Bool {
        guard let own = MemoryCgroup.of(nil),
              let probe = try? own.createChild(named: "hangwatch-probe-" + UUID().uuidString.prefix(8).lowercased(),
                                               limitBytes: 64 << 20) else {
            print("KilledCommandTests: memory cgroups cannot be written here: the --memory-max part is skipped")
            return false
        }
        probe.remove()
        return true
    }

    @Test func anOOMKillUnderMemoryMaxIsAKilledReportWithTheStderrTail() throws {
        guard Self.cgroupsWritable else { return }
        let database = try TemporaryDatabase()
        let result = try runHangwatch(["run", "--memory-max", "200M", "--"] + Self.allocator, database: database, timeout: 90)
        #expect(result.status == 128 + SIGKILL, "\(result.stderr.suffix(600))")
        #expect(result.stderr.contains("killed by"), "\(result.stderr.suffix(600))")
        #expect(result.stderr.contains("OOM"), "the summary says why: \(result.stderr.suffix(600))")
        let reports = try database.reports()
        #expect(reports.map(\.kind) == [.killed])
        let report = try #require(reports.first)
        let killed = try #require(report.killed)
        #expect(killed.cause == .oom, "\(killed.explanation) \(killed.evidence)")
        #expect(killed.signal == "SIGKILL")
        #expect(killed.memoryCgroup?.limitBytes == 200 << 20, "\(String(describing: killed.memoryCgroup))")
        #expect(killed.memoryCgroup?.path.contains("/hangwatch-\(report.runID ?? "?")") == true)
        #expect(killed.memoryCgroup?.oomKillsAfter ?? 0 > killed.memoryCgroup?.oomKillsBefore ?? 0)
        #expect(report.context?.stderrTail?.contains("allocated") == true)
        #expect(!killed.samples.isEmpty)
        #expect(report.process.executable.contains("python3"), "\(report.process)")
        // The job's cgroup is gone with the job.
        let path = try #require(killed.memoryCgroup?.path)
        #expect(!FileManager.default.fileExists(atPath: path))
    }

    /// A SIGKILL hangwatch did not send (the job sends it itself here, after some samples: from
    /// hangwatch's side the same as another process's kill -9, which the suite cannot send
    /// reliably while its other tests run — an outside kill of the child's pid failed twice in
    /// CI, the pid not found).
    @Test func aSIGKILLHangwatchDidNotSendIsAKilledReportThatSaysSoNeverOOM() async throws {
        let database = try TemporaryDatabase()
        let result = try runHangwatch(["run", "--", "/bin/sh", "-c", "echo READY $$; sleep 1.5; kill -9 $$"], database: database)
        #expect(result.status == 128 + SIGKILL, "\(result.stderr)")
        #expect(result.stderr.contains("which hangwatch did not send"), "\(result.stderr)")
        let pid = result.stdout.split(separator: "\n").first { $0.hasPrefix("READY ") }.flatMap { Int32($0.dropFirst(6)) }
        let reports = try database.reports()
        #expect(reports.map(\.kind) == [.killed])
        let killed = try #require(reports.first?.killed)
        #expect(killed.cause == .signal, "\(killed.explanation)")
        #expect(killed.signal == "SIGKILL")
        #expect(!killed.samples.isEmpty)
        #expect(reports.first?.process.pid == pid)
    }

    @Test func whatHangwatchSentIsNoKill() async throws {
        let database = try TemporaryDatabase()
        let run = try hangwatch(["run", "--", "/bin/sh", "-c", "echo READY; exec sleep 30"], database: database)
        try run.waitForOutput("READY")
        run.signal(SIGINT)  // a user's ^C, passed on to the job
        #expect(try run.waitForExit(timeout: 30) == 128 + SIGINT)
        #expect(try database.reports().isEmpty)
        // Killed for hanging is a fatal hang, not a kill from outside.
        let hung = try runHangwatch(["run", "--silence", "0.5", "--kill-after", "0.5", "--", "sleep", "30"], database: database)
        #expect(hung.status == 124)
        #expect(try database.reports().map(\.kind) == [.fatalHang])
    }

    @Test(arguments: ["12", "lots", "0", "-5M", "99999999999T"])
    func aBadMemoryMaxIsAClearErrorAndStartsNothing(_ size: String) throws {
        let database = try TemporaryDatabase()
        let result = try runHangwatch(["run", "--memory-max", size, "--", "/bin/sh", "-c", "echo STARTED"], database: database)
        #expect(result.status != 0)
        #expect(result.stderr.contains("--memory-max"), "\(result.stderr)")
        #expect(!result.stdout.contains("STARTED"))
    }
}
