// Whole-tree capture: a hung job's report holds every process of the tree with its threads,
// and names the likely culprit (a deadlocked program below a waiting shell), for
// `hangwatch run` and for `hangwatch dump --pid P --tree`. Real shells, a real C program
// compiled by gcc, real Python workers and a daemonizing grandchild.
import HangwatchReport
import Foundation
import HangwatchTestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// A C program whose two threads take two mutexes in opposite orders and deadlock; main joins
/// them. Its first argument is a marker for the process table.
private func buildDeadlockingCProgram(in directory: String) throws -> String {
    let source = directory + "/deadlock.c"
    let executable = directory + "/deadlock"
    try """
        #include <pthread.h>
        #include <stdio.h>
        #include <unistd.h>
        static pthread_mutex_t a = PTHREAD_MUTEX_INITIALIZER, b = PTHREAD_MUTEX_INITIALIZER;
        static pthread_barrier_t both;
        __attribute__((noinline)) static void *lock_a_then_b(void *unused) {
            pthread_mutex_lock(&a); pthread_barrier_wait(&both); pthread_mutex_lock(&b); return unused;
        }
        __attribute__((noinline)) static void *lock_b_then_a(void *unused) {
            pthread_mutex_lock(&b); pthread_barrier_wait(&both); pthread_mutex_lock(&a); return unused;
        }
        int main(void) {
            pthread_t first, second;
            pthread_barrier_init(&both, NULL, 2);
            pthread_create(&first, NULL, lock_a_then_b, NULL);
            pthread_create(&second, NULL, lock_b_then_a, NULL);
            printf("DEADLOCKED\\n"); fflush(stdout);
            pthread_join(first, NULL);
            return 0;
        }
        """.write(toFile: source, atomically: true, encoding: .utf8)
    try runTool("/usr/bin/gcc", ["-O1", "-g", "-pthread", "-o", executable, source])
    return executable
}

@Suite("Whole-tree capture", .ownThread)
struct TreeCaptureTests {
    @Test func aShellStartingADeadlockingProgramNamesTheProgramAsCulprit() throws {
        let directory = try makeTemporaryDirectory("hangwatch-tree")
        defer { removeTemporaryDirectory(directory) }
        let program = try buildDeadlockingCProgram(in: directory)
        let database = try TemporaryDatabase()
        let mark = uniqueSleep()
        let run = try hangwatch(["run", "--silence", "1", "--kill-after", "2", "--", "/bin/sh", "-c",
                                 "\(program) \(mark); echo done; sleep \(mark)"], database: database)
        #expect(try run.waitForExit(timeout: 60) == 124, "\(run.stderr)")
        #expect(processes(containing: mark).isEmpty, "left: \(processes(containing: mark))")

        // The summary names the culprit, not the shell.
        let culpritLine = try #require(run.stderr.split(separator: "\n").first { $0.hasPrefix("hangwatch: => ") }, "\(run.stderr)")
        #expect(culpritLine.contains("blocked") && culpritLine.contains(program), "\(run.stderr)")
        #expect(run.stderr.contains("of deadlock (pid"), "\(run.stderr)")

        let report = try #require(try database.reports().first { $0.kind == .fatalHang })
        #expect(report.schemaVersion == Report.currentSchemaVersion && report.runID != nil)
        #expect(report.process.executable == program, "the report is about the deadlocked program")
        let tree = try #require(report.processTree)
        #expect(tree.culpritPID == report.process.pid)
        let shell = try #require(tree.processes.first)
        #expect(shell.pid == tree.rootPID && shell.depth == 0 && shell.activity == "waiting")
        #expect(shell.arguments.first == "/bin/sh")
        // The shell's own stack is kept in the tree: it is in wait4.
        let shellFrames = (shell.threads ?? []).flatMap(functionNames)
        #expect(shellFrames.contains { $0.hasPrefix("wait4") || $0.hasPrefix("__wait4") }, "\(shellFrames)")
        let culprit = try #require(tree.processes.first { $0.pid == tree.culpritPID })
        #expect(culprit.parentPID == shell.pid && culprit.depth == 1 && culprit.activity == "blocked")
        #expect(culprit.threads == nil, "the culprit's threads are the report's own")
        // Both deadlocked threads are there, each in its locking function, with file:line.
        let names = report.threads.flatMap(functionNames)
        #expect(names.contains("lock_a_then_b") && names.contains("lock_b_then_a"), "\(names)")
        let lockFrame = try #require(report.threads.flatMap(\.frames).first { $0.function == "lock_a_then_b" })
        #expect(lockFrame.file?.hasSuffix("deadlock.c") == true && lockFrame.line != nil)
        #expect(report.threads.contains { $0.roles.contains(.hung) })
        // The text report lists the tree with the culprit marked.
        let shown = try runHangwatch(["show", report.id], database: database)
        #expect(shown.stdout.contains("Process tree: 2 of 2 processes, likely culprit \(report.process.pid)"), "\(shown.stdout)")
    }

    @Test func pythonWorkersAndADaemonizedGrandchildAreAllInTheReport() throws {
        let database = try TemporaryDatabase()
        let mark = uniqueSleep()
        let program = """
            import multiprocessing, os, sys, time
            def work(_):
                time.sleep(3600)
            if __name__ == "__main__":
                if os.fork() == 0:          # a daemon: fork, setsid, fork, the middle one exits
                    os.setsid()
                    if os.fork() == 0:
                        os.execvp("sleep", ["sleep", sys.argv[1]])
                    os._exit(0)
                with multiprocessing.Pool(2) as pool:
                    pool.map_async(work, range(2))
                    print("workers started", flush=True)
                    time.sleep(3600)
            """
        let run = try hangwatch(["run", "--timeout", "3", "--", "/usr/bin/python3", "-c", program, mark], database: database)
        try run.waitForOutput("workers started", timeout: 30)
        #expect(try run.waitForExit(timeout: 60) == 124, "\(run.stderr)")
        #expect(processes(containing: mark).isEmpty, "left: \(processes(containing: mark))")

        let report = try #require(try database.reports().first { $0.kind == .fatalHang })
        let tree = try #require(report.processTree, "\(run.stderr)")
        let byName = Dictionary(grouping: tree.processes) { $0.arguments.first.map { URL(fileURLWithPath: $0).lastPathComponent } ?? $0.name }
        // The parent, its two pool workers (multiprocessing forks: same command line), and the daemon.
        #expect((byName["python3"] ?? []).count >= 3, "\(tree.processes.map { ($0.pid, $0.arguments) })")
        let daemon = try #require(byName["sleep"]?.first, "the daemonized grandchild is in the tree")
        #expect(daemon.depth == 0 && daemon.parentPID == 0, "adopted by hangwatch, listed beside the root")
        #expect(daemon.arguments == ["sleep", mark])
        // Every captured process has its threads (the culprit's are the report's own).
        for process in tree.processes where process.pid != tree.culpritPID {
            #expect(process.captureError == nil && !(process.threads ?? []).isEmpty, "\(process.pid): \(process.captureError ?? "no threads")")
        }
        #expect(tree.processesFound == tree.processes.count)
    }

    @Test func dumpTreeCapturesALiveTreeAndLeavesItRunningUntraced() throws {
        let directory = try makeTemporaryDirectory("hangwatch-tree")
        defer { removeTemporaryDirectory(directory) }
        let program = try buildDeadlockingCProgram(in: directory)
        let mark = uniqueSleep()
        let shell = try ChildProcess("/bin/sh", ["-c", "sleep \(mark) & \(program) \(mark); wait"])
        defer {
            for pid in processes(containing: mark) { kill(pid, SIGKILL) }
        }
        try shell.waitForOutput("DEADLOCKED")
        let database = try TemporaryDatabase()
        let dumped = try runHangwatch(["dump", "--pid", String(shell.pid), "--tree", "--format", "json"], database: database)
        #expect(dumped.status == 0, "\(dumped.stderr)")
        let report = try Report.decode(from: Data(dumped.stdout.utf8))
        let tree = try #require(report.processTree)
        #expect(tree.rootPID == shell.pid && tree.processes.count == 3)
        #expect(report.process.executable == program)
        #expect(tree.processes.first { $0.arguments.first == "sleep" }?.activity == "asleep")
        // Still running, and nobody traces them any more.
        for pid in processes(containing: mark) + [shell.pid] {
            let status = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
            #expect(status.contains("TracerPid:\t0\n"), "pid \(pid) is still traced")
        }
        #expect(shell.isRunning)

        let refused = try runHangwatch(["dump", "--pid", String(shell.pid), "--tree", "--samples", "3"], database: database)
        #expect(refused.status == 64 && refused.stderr.contains("--tree"), "\(refused.stderr)")
    }
}
