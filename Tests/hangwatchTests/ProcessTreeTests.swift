// `hangwatch run` and the whole process tree of a job: real shells, daemonizing grandchildren,
// fork loops, Python workers, a reader that stops reading, pid namespaces. "Nothing left" is
// checked in the process table: every test's processes carry a marker in their command line.
import HangwatchReport
import Foundation
import HangwatchTestSupport
import HangwatchPlatform
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Pids whose command line contains `marker` (this test process excluded).
func processes(containing marker: String) -> [Int32] {
    let me = getpid()
    return ((try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []).compactMap { name -> Int32? in
        guard let pid = Int32(name), pid != me,
              let data = FileManager.default.contents(atPath: "/proc/\(pid)/cmdline"), !data.isEmpty,
              let state = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              !(state.split(separator: ")").last?.dropFirst().hasPrefix("Z") ?? true) else { return nil }
        let text = String(decoding: data.map { $0 == 0 ? 0x20 : $0 }, as: UTF8.self)
        return text.contains(marker) ? pid : nil
    }
}

/// The process has exited and waits to be reaped.
func isZombie(_ pid: Int32) -> Bool {
    guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8) else { return false }
    return stat.split(separator: ")").last?.dropFirst().hasPrefix("Z") ?? false
}

/// Polls `condition` every 20 ms until it holds (true) or `timeout` seconds pass (false).
func waitUntil(timeout: Double, _ condition: () -> Bool) -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    while !condition() {
        guard Date() < deadline else { return false }
        usleep(20_000)
    }
    return true
}

/// A sleep duration nobody else uses, as a marker in `sleep`'s command line.
func uniqueSleep() -> String { "\(1000 + Int.random(in: 0..<8000)).\(Int.random(in: 100..<999))" }

@Suite("hangwatch run: the whole process tree", .ownThread)
struct ProcessTreeTests {
    @Test func timeoutEndsEveryProcessOfTheJobIncludingDaemonsAndOrphans() throws {
        let database = try TemporaryDatabase()
        let mark = uniqueSleep()
        // A background sleep, one in its own session (setsid), one orphaned by a subshell.
        let script = "sleep \(mark) & setsid sh -c 'sleep \(mark)' & (sleep \(mark) &); sleep \(mark)"
        let run = try hangwatch(["run", "--timeout", "1", "--", "/bin/sh", "-c", script], database: database)
        #expect(try run.waitForExit(timeout: 30) == 124, "\(run.stderr)")
        #expect(processes(containing: mark).isEmpty, "left running: \(processes(containing: mark))")
    }

    @Test func whatANormalExitLeavesRunningIsEnded() throws {
        let database = try TemporaryDatabase()
        let mark = uniqueSleep()
        let run = try hangwatch(["run", "--", "/bin/sh", "-c", "sleep \(mark) & echo started"], database: database)
        #expect(try run.waitForExit(timeout: 30) == 0, "\(run.stderr)")
        #expect(run.stdout.contains("started"))
        #expect(processes(containing: mark).isEmpty)
    }

    @Test func killTreeNoLeavesTheJobAlone() throws {
        let database = try TemporaryDatabase()
        let mark = uniqueSleep()
        let run = try hangwatch(["run", "--kill-tree", "no", "--", "/bin/sh", "-c", "sleep \(mark) & exit 0"], database: database)
        // hangwatch exits while the sleep runs on (the test harness only sees the exit once the
        // sleep, which inherited its pipes, is gone: so look at the process table first).
        let deadline = Date().addingTimeInterval(30)
        while !isZombie(run.pid) && Date() < deadline { usleep(10_000) }
        #expect(isZombie(run.pid), "hangwatch exited")
        let left = processes(containing: mark)
        #expect(left.count == 1, "the background sleep still runs, as asked")
        left.forEach { kill($0, SIGKILL) }
        #expect(try run.waitForExit(timeout: 30) == 0, "\(run.stderr)")
    }

    /// kill -9 of hangwatch itself (the OOM killer, a stop timeout, a user): its watchdog ends
    /// the job it left, daemons and orphans included (JobWatchdog.swift).
    @Test func killMinusNineOfHangwatchEndsTheWholeJob() throws {
        let database = try TemporaryDatabase()
        let mark = uniqueSleep()
        defer { for pid in processes(containing: mark) { kill(pid, SIGKILL) } }
        let script = "sleep \(mark) & setsid sh -c 'sleep \(mark)' & (sleep \(mark) &); echo up; sleep \(mark)"
        let run = try hangwatch(["run", "--", "/bin/sh", "-c", script], database: database)
        try run.waitForOutput("up")
        #expect(waitUntil(timeout: 10) { processes(containing: mark).count >= 4 }, "\(processes(containing: mark))")
        usleep(1_500_000)  // the watchdog is told of the job's processes once a second
        run.signal(SIGKILL)
        #expect(try run.waitForExit(timeout: 30) == 128 + SIGKILL)
        #expect(waitUntil(timeout: 20) { processes(containing: mark).isEmpty }, "left running: \(processes(containing: mark))")
    }

    /// Issue 45: the job's watchdog kept 65,536 members and then dropped the oldest half, so a
    /// job that forked more had its first child forgotten, and that child outlived a kill -9 of
    /// hangwatch. Told first of a live process (not its child), then of 400,000 dead ones (pids
    /// above the kernel's limit: no process ever has them), the watchdog still ends the live one
    /// at end-of-file, and its memory stays bounded by the live members (a table of all 400,000
    /// would take over 12 MiB more than an idle watchdog; this one takes about 3).
    @Test func theJobWatchdogForgetsNoLiveMember() throws {
        let sleeper = try ChildProcess("/bin/sleep", ["300"])
        let ticks = try #require(startTicks(of: sleeper.pid))
        let reference = try JobWatchdogUnderTest()
        reference.tell(["+ \(sleeper.pid) \(ticks)\n"])
        let baseline = try #require(reference.peakResidentKiB())
        reference.end(cleanly: true)

        let watchdog = try JobWatchdogUnderTest()
        watchdog.tell(["+ \(sleeper.pid) \(ticks)\n"])
        for first in stride(from: 0, to: 400_000, by: 10_000) {
            watchdog.tell([(first..<(first + 10_000)).map { "+ \(4_194_305 + $0) \(1_000_000_000_000 + $0)\n" }.joined()])
        }
        let peak = try #require(watchdog.peakResidentKiB())
        #expect(peak - baseline < 8 << 10, "peak \(peak) KiB, \(baseline) KiB when told of one process")
        watchdog.end(cleanly: false)  // end-of-file without "done": hangwatch died
        // The sleeper is this process's child: its pid stays its own until reaped here.
        #expect(try sleeper.waitForExit(timeout: 30) == 128 + SIGKILL, "the first member was forgotten")
        #expect(try watchdog.process.waitForExit(timeout: 30) == 0)
    }

    /// The same with --memory-max: the job's memory cgroup goes with it; and one that a killed
    /// run left behind (its hangwatch gone, its watchdog too) is removed by the next run.
    @Test func theMemoryCgroupOfAKilledRunIsRemoved() throws {
        guard KilledCommandTests.cgroupsWritable, let own = MemoryCgroup.of(nil) else { return }
        let database = try TemporaryDatabase()
        let mark = uniqueSleep()
        defer { for pid in processes(containing: mark) { kill(pid, SIGKILL) } }
        let run = try hangwatch(["run", "--memory-max", "64M", "--", "/bin/sh", "-c", "echo up; sleep \(mark)"], database: database)
        try run.waitForOutput("up")
        let sleeping = { processes(containing: mark).filter { ProcFS.comm(of: $0) == "sleep" } }
        #expect(waitUntil(timeout: 10) { sleeping().count == 1 })
        let job = try #require(sleeping().first.flatMap { MemoryCgroup.of($0) })
        #expect(job.path.contains("/hangwatch-"), "\(job.path)")
        run.signal(SIGKILL)
        _ = try run.waitForExit(timeout: 30)
        #expect(waitUntil(timeout: 20) { processes(containing: mark).isEmpty && !FileManager.default.fileExists(atPath: job.path) },
                "\(job.path) is left")

        // A run's cgroup whose hangwatch is gone (a process that ran and exited) and that is empty.
        let gone = try ChildProcess("/bin/true")
        _ = try gone.waitForExit(timeout: 10)
        let stale = try own.createChild(named: "hangwatch-\(UUID().uuidString.lowercased()).\(gone.pid).12345", limitBytes: 64 << 20)
        defer { stale.remove() }
        let next = try hangwatch(["run", "--memory-max", "64M", "--", "/bin/true"], database: database)
        #expect(try next.waitForExit(timeout: 30) == 0, "\(next.stderr)")
        #expect(!FileManager.default.fileExists(atPath: stale.path), "the next run removed \(stale.path)")
    }

    /// Issue 45: root's `run --memory-max` removed another user's empty cgroup because its name
    /// fit `hangwatch-<uuid>.<pid>.<ticks>` and that pid was gone. Only this user's own (a
    /// directory it owns, 0700 as hangwatch makes it) is removed; another owner's stays.
    @Test func anotherOwnersCgroupOfAnEndedRunIsLeftAlone() throws {
        guard KilledCommandTests.cgroupsWritable, let own = MemoryCgroup.of(nil) else {
            print("anotherOwnersCgroupOfAnEndedRunIsLeftAlone: memory cgroups cannot be written here: nothing tested")
            return
        }
        let database = try TemporaryDatabase()
        let gone = try ChildProcess("/bin/true")
        _ = try gone.waitForExit(timeout: 10)
        func stale() throws -> MemoryCgroup {
            try own.createChild(named: "hangwatch-\(UUID().uuidString.lowercased()).\(gone.pid).12345", limitBytes: 64 << 20)
        }
        let others = try stale(), ours = try stale()
        defer { others.remove(); ours.remove() }
        let nobody: uid_t = 65534
        #expect(chown(others.path, nobody, nobody) == 0, "chown \(others.path): \(String(cString: strerror(errno)))")
        let next = try hangwatch(["run", "--memory-max", "64M", "--", "/bin/true"], database: database)
        #expect(try next.waitForExit(timeout: 30) == 0, "\(next.stderr)")
        var info = stat()
        #expect(lstat(others.path, &info) == 0 && info.st_uid == nobody, "another user's \(others.path) was removed")
        #expect(!FileManager.default.fileExists(atPath: ours.path), "this user's \(ours.path) is left")
    }

    @Test func aForkLoopCannotOutrunTheKill() throws {
        let database = try TemporaryDatabase()
        let mark = uniqueSleep()
        let run = try hangwatch(["run", "--timeout", "1", "--", "/bin/sh", "-c", "while true; do sleep \(mark) & done"],
                                database: database)
        #expect(try run.waitForExit(timeout: 60) == 124, "\(run.stderr.suffix(2000))")
        #expect(processes(containing: mark).isEmpty)
    }

    @Test func aJobThatIgnoresTheKillSignalIsKilledAfterTheGracePeriod() throws {
        let database = try TemporaryDatabase()
        let mark = uniqueSleep()
        let run = try hangwatch(["run", "--timeout", "1", "--kill-signal", "TERM", "--kill-grace", "1", "--",
                                 "/bin/sh", "-c", "trap '' TERM; sleep \(mark) & sleep \(mark)"], database: database)
        #expect(try run.waitForExit(timeout: 30) == 124, "\(run.stderr)")
        #expect(processes(containing: mark).isEmpty)
    }

    @Test func forwardedSigtermEndsTheWholeJob() throws {
        let database = try TemporaryDatabase()
        let mark = uniqueSleep()
        let run = try hangwatch(["run", "--kill-grace", "1", "--", "/bin/sh", "-c",
                                 "setsid sh -c 'trap \"\" TERM; sleep \(mark)' & sleep \(mark) & echo up; wait"], database: database)
        try run.waitForOutput("up")
        run.signal(SIGTERM)
        let status = try run.waitForExit(timeout: 30)
        #expect(status == 128 + SIGTERM, "\(run.stderr)")
        #expect(processes(containing: mark).isEmpty, "the TERM-ignoring daemon got SIGKILL after the grace period")
    }

    /// A setuid-root descendant of an unprivileged job cannot be signalled: the kill ends the
    /// rest of the job, and the report names it as unkillable (and as not traceable in the
    /// tree). Needs root: to make the setuid helper and to drop to `nobody` with setpriv.
    @Test(.enabled(if: getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv")))
    func aSetuidDescendantIsNamedInTheReportAsUnkillable() throws {
        let directory = try makeTemporaryDirectory("hangwatch-setuid")
        defer { removeTemporaryDirectory(directory) }
        let mark = uniqueSleep()
        defer { for pid in processes(containing: mark) { kill(pid, SIGKILL) } }
        // Becomes root for good (real, effective and saved uid), then waits.
        try "#include <unistd.h>\nint main(void) { if (setresuid(0, 0, 0)) return 1; for (;;) pause(); }\n"
            .write(toFile: directory + "/rooted.c", atomically: true, encoding: .utf8)
        let helper = directory + "/rooted"
        try runTool("/usr/bin/gcc", ["-o", helper, directory + "/rooted.c"])
        try #require(chmod(helper, 0o4755) == 0 && chown(directory, 65534, 65534) == 0)
        let database = directory + "/db"
        let run = try ChildProcess("/usr/bin/setpriv", [
            "--reuid=65534", "--regid=65534", "--clear-groups", "--", try productPath("hangwatch"),
            "run", "--timeout", "2", "--kill-grace", "1", "--database", database, "--",
            "/bin/sh", "-c", "\(helper) \(mark) & sleep \(mark)"])
        #expect(try run.waitForExit(timeout: 60) == 124, "\(run.stderr)")
        #expect(run.stderr.contains("(rooted) of the job could not be signalled"), "\(run.stderr)")
        // The database belongs to nobody (the test, root, would be refused opening it as a database).
        let pending = database + "/reports/pending"
        let name = try #require(try FileManager.default.contentsOfDirectory(atPath: pending).first { $0.hasSuffix(".json") })
        let report = try Report.decode(from: Data(contentsOf: URL(fileURLWithPath: pending + "/" + name)))
        let unkillable = try #require(report.context?.unkillableProcesses, "\(report.context as Any)")
        #expect(unkillable.map(\.name) == ["rooted"])
        // The tree lists it too, not captured: nobody may not trace a process of root.
        let rooted = try #require(report.processTree?.processes.first { $0.name == "rooted" })
        #expect(rooted.threads == nil && rooted.captureError?.contains("belongs to uid 0") == true, "\(rooted.captureError ?? "")")
        #expect(ReportRenderer.text(report).contains("Unkillable: \(unkillable[0].pid) (rooted)"))
        // All that outlived the job is the process nobody could signal.
        #expect(processes(containing: mark) == unkillable.map(\.pid))
    }

    /// Orphans hangwatch adopted are reaped while the job runs: a long job that keeps starting
    /// short-lived daemons does not fill the process table with zombies.
    @Test func adoptedOrphansThatExitAreReapedWhileTheJobRuns() throws {
        let database = try TemporaryDatabase()
        let mark = uniqueSleep()
        // Five daemons (orphaned at once) that live 0.2 s; the job itself goes on.
        let script = "for i in 1 2 3 4 5; do (sleep 0.2 &); done; echo started; sleep \(mark)"
        let run = try hangwatch(["run", "--timeout", "30", "--", "/bin/sh", "-c", script], database: database)
        defer { run.signal(SIGKILL) }
        try run.waitForOutput("started")
        var zombies: [Int32] = []
        let deadline = Date().addingTimeInterval(5)
        repeat {
            usleep(200_000)
            zombies = ((try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []).compactMap { Int32($0) }.filter { pid in
                guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
                      let fields = stat.split(separator: ")").last?.split(separator: " "), fields.count > 2 else { return false }
                return fields[0] == "Z" && fields[1] == "\(run.pid)"
            }
        } while !zombies.isEmpty && Date() < deadline
        #expect(zombies.isEmpty, "zombies of hangwatch \(run.pid): \(zombies)")
        run.signal(SIGTERM)
        #expect(try run.waitForExit(timeout: 30) == 128 + SIGTERM)
        #expect(processes(containing: mark).isEmpty)
    }

    @Test func pythonWorkerPoolIsEndedWithItsParent() throws {
        let database = try TemporaryDatabase()
        let mark = uniqueSleep()
        let program = """
            import multiprocessing, sys, time
            def work(_):
                time.sleep(3600)
            if __name__ == "__main__":
                with multiprocessing.Pool(3) as pool:
                    pool.map_async(work, range(3))
                    print("workers started", flush=True)
                    time.sleep(3600)
            """
        let run = try hangwatch(["run", "--silence", "1", "--kill-after", "1", "--", "/usr/bin/python3", "-c", program, mark],
                                database: database)
        #expect(try run.waitForExit(timeout: 60) == 124, "\(run.stderr)")
        #expect(run.stdout.contains("workers started"))
        #expect(processes(containing: mark).isEmpty, "left: \(processes(containing: mark))")
    }

    /// hangwatch's stdout is a pipe nobody reads: the child's output fills it and more, yet
    /// --timeout fires on time and hangwatch exits (no SIGPIPE death, no blocked event loop).
    @Test func aReaderThatStopsReadingDoesNotDelayTheTimeout() throws {
        let database = try TemporaryDatabase()
        let mark = uniqueSleep()
        var unread: [Int32] = [0, 0]
        try #require(pipe(&unread) == 0)
        defer { close(unread[0]) }
        let started = Date()
        let run = try ChildProcess(product: "hangwatch", ["run", "--timeout", "2", "--", "/bin/sh", "-c", "yes | head -c 20000000; sleep \(mark)"],
                                   environment: database.environment, stdoutDescriptor: unread[1])
        close(unread[1])
        let status = try run.waitForExit(timeout: 30)
        let took = Date().timeIntervalSince(started)
        let stderr = run.stderr
        #expect(status == 124, "hangwatch blocked on its unread stdout, or died: \(status) \(stderr)")
        #expect(took < 15, "took \(took) s")
        #expect(stderr.contains("bytes of the child's output were dropped"))
        #expect(processes(containing: mark).isEmpty)
        // The report of the timeout was stored despite the stalled reader.
        #expect(try database.reports().contains { $0.kind == .fatalHang })
    }

    @Test(arguments: [["--threshold", "1e13"], ["--timeout", "nan"], ["--kill-after=-1"], ["--kill-grace", "0"],
                      ["--silence", "inf"], ["--stderr-tail=-5"]])
    func durationsOutOfRangeAreOneLineErrors(_ option: [String]) throws {
        let database = try TemporaryDatabase()
        let run = try hangwatch(["run"] + option + ["--", "/bin/true"], database: database)
        let status = try run.waitForExit(timeout: 30)
        #expect(status == 64, "\(option): \(status) \(run.stderr)")
        let name = String(option[0].split(separator: "=")[0])
        #expect(run.stderr.contains(name) && run.stderr.split(separator: "\n").count <= 3, "\(run.stderr)")
    }

    /// In a pid namespace every child is pid 3 (hangwatch is pid 1, its job's watchdog pid 2): a
    /// second run's crash report is its own, not mistaken for the first run's (reports are
    /// matched by run id, not pid).
    @Test func pidReuseInPidNamespacesKeepsEachRunsCrashReport() throws {
        guard getuid() == 0, access("/usr/bin/unshare", X_OK) == 0 else { return }
        let database = try TemporaryDatabase()
        var ids: [String] = []
        for _ in 0..<2 {
            let run = try ChildProcess("/usr/bin/unshare", ["--pid", "--fork", "--mount-proc", try productPath("hangwatch"), "run",
                                                            "--catch-crashes", "--", try productPath("hangwatch-fixture-remote"), "crash"],
                                       environment: database.environment)
            #expect(try run.waitForExit(timeout: 60) == 128 + SIGSEGV, "\(run.stderr)")
            let reports = try database.reports().filter { $0.kind == .crash }
            let new = reports.map(\.id).filter { !ids.contains($0) }
            #expect(new.count == 1, "run \(ids.count + 1) stored its own crash report: \(run.stderr)")
            ids += new
        }
        let pids = try database.reports().filter { $0.kind == .crash }.map(\.process.pid)
        #expect(pids == [3, 3], "both children were pid 3 in their namespace: \(pids)")
    }
}

/// /proc/PID/stat field 22 (start time in clock ticks), read here on its own.
func startTicks(of pid: Int32) -> UInt64? {
    guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
          let close = stat.lastIndex(of: ")") else { return nil }
    let fields = stat[stat.index(after: close)...].split(separator: " ")
    return fields.count > 19 ? UInt64(fields[19]) : nil
}

/// `hangwatch job-watchdog` started as `hangwatch run` starts it: its stdin a pipe of
/// "+ PID START-TICKS" lines, "done" for a clean end, end-of-file when hangwatch died.
final class JobWatchdogUnderTest {
    let process: ChildProcess
    private var input: Int32

    init() throws {
        var ends: [Int32] = [0, 0]
        guard pipe(&ends) == 0 else { throw POSIXError(.init(rawValue: errno) ?? .EIO) }
        for end in ends { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }  // no other child of the test inherits it
        defer { close(ends[0]) }
        process = try ChildProcess(product: "hangwatch", ["job-watchdog"], stdinDescriptor: ends[0])
        input = ends[1]
    }

    deinit { if input >= 0 { close(input) } }

    /// Writes `chunks` whole (blocking while the watchdog reads).
    func tell(_ chunks: [String]) {
        for chunk in chunks {
            let bytes = Array(chunk.utf8)
            var offset = 0
            while offset < bytes.count {
                let written = bytes[offset...].withUnsafeBytes { write(input, $0.baseAddress, $0.count) }
                if written < 0 && errno == EINTR { continue }
                guard written > 0 else { return }
                offset += written
            }
        }
    }

    /// Its peak resident memory (VmHWM, KiB) once it has read everything written so far.
    func peakResidentKiB() -> Int? {
        var unread: Int32 = 1
        while withUnsafeMutablePointer(to: &unread, { ioctl(input, UInt(FIONREAD), $0) }) == 0 && unread > 0 { usleep(10_000) }
        usleep(300_000)  // the last read's lines
        guard let status = try? String(contentsOfFile: "/proc/\(process.pid)/status", encoding: .utf8),
              let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmHWM:") }) else { return nil }
        return Int(line.split(separator: " ").dropFirst().first ?? "")
    }

    /// "done" first (`cleanly`), then end-of-file.
    func end(cleanly: Bool) {
        if cleanly { tell(["done\n"]) }
        close(input)
        input = -1
    }
}
