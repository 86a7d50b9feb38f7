// Stuck tasks (docs/tasks.md): real Swift programs whose requests wait forever with every
// thread idle, read from outside by `hangwatch dump --pid P --tasks`, and by themselves.
import HangwatchReport
import Foundation
import HangwatchTestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

@Suite("stuck tasks", .ownThread)
struct TaskCaptureTests {
    /// Starts the fixture and waits until its tasks wait.
    func start(_ scenario: String, _ count: Int? = nil) throws -> ChildProcess {
        let child = try ChildProcess(product: "hangwatch-fixture-tasks", [scenario] + (count.map { [String($0)] } ?? []))
        _ = try child.waitForOutput("\"ready\"", timeout: 120)
        return child
    }

    func dumpTasks(_ pid: pid_t, _ extra: [String] = [], database: TemporaryDatabase) throws -> Report {
        let result = try runHangwatch(["dump", "--pid", "\(pid)", "--tasks", "--format", "json"] + extra, database: database)
        #expect(result.status == 0, "\(result.stderr)")
        return try Report.decode(from: Data(result.stdout.utf8))
    }

    /// Function and line of each frame of a task's chain, its own code only (the fixture's file).
    func chain(_ task: Report.Task) -> [String] {
        task.frames.compactMap { frame in
            guard let file = frame.file, file.hasSuffix("hangwatch-fixture-tasks/main.swift"), let function = frame.function else { return nil }
            let name = function.range(of: "hangwatch_fixture_tasks.").map { String(function[$0.upperBound...]) } ?? function
            return "\(name.prefix { $0 != "(" }):\(frame.line ?? 0)"
        }
    }

    @Test func aContinuationNeverResumedThreeCallsDeepIsListedWithItsChainAtFileAndLine() throws {
        let database = try TemporaryDatabase()
        let child = try start("leak", 3)
        defer { child.signal(SIGKILL) }
        let tasks = try #require(try dumpTasks(child.pid, database: database).tasks)
        #expect(tasks.error == nil, "\(tasks.error ?? "")")
        #expect(tasks.tasks.count == 3, "\(tasks.tasks.map(\.id))")
        for task in tasks.tasks {
            #expect(task.state == .suspended)
            #expect(task.waitingOn == "continuation")
            let own = chain(task)
            #expect(own.count >= 3, "\(task.frames.map { $0.function ?? "?" })")
            #expect(own.prefix(3).map { $0.prefix { $0 != ":" } } == ["leafWait", "middle", "handlerLeak"], "\(own)")
            #expect(own.allSatisfy { !$0.hasSuffix(":0") }, "every frame of the program has its line: \(own)")
        }
        #expect(Set(tasks.tasks.map(\.id)).count == 3, "distinct ids")
        #expect(tasks.scannedBytes > 0)
    }

    @Test func twoTasksAwaitingEachOtherAreNamedADeadlock() throws {
        let database = try TemporaryDatabase()
        let child = try start("mutual")
        defer { child.signal(SIGKILL) }
        let report = try dumpTasks(child.pid, database: database)
        let tasks = try #require(report.tasks)
        #expect(tasks.tasks.count == 2)
        #expect(tasks.tasks.allSatisfy { $0.waitingOn == "task" && $0.waitingOnTaskID != nil })
        #expect(tasks.cycles == [tasks.tasks.map(\.id).sorted()], "\(tasks.cycles)")
        let text = try runHangwatch(["dump", "--pid", "\(child.pid)", "--tasks"], database: database).stdout
        #expect(text.contains("DEADLOCK: tasks"), "\(text)")
    }

    @Test func requestsWaitingForAPoolLeaseThatNeverComesWaitInLease() throws {
        let database = try TemporaryDatabase()
        let child = try start("pool", 2)
        defer { child.signal(SIGKILL) }
        let tasks = try #require(try dumpTasks(child.pid, database: database).tasks)
        let waiting = tasks.tasks.filter { chain($0).first?.hasPrefix("ConnectionPool.lease") == true }
        #expect(waiting.count == 2, "\(tasks.tasks.map(chain))")
        #expect(waiting.allSatisfy { chain($0).dropFirst().first?.hasPrefix("handleRequest") == true })
    }

    @Test func aNamedTaskCarriesItsName() throws {
        let database = try TemporaryDatabase()
        let child = try start("named")
        defer { child.signal(SIGKILL) }
        let tasks = try #require(try dumpTasks(child.pid, database: database).tasks)
        #expect(tasks.tasks.map(\.name) == ["GET /users/:id"])
    }

    /// Sampling: the leaked tasks' chains do not move; they are marked so and listed first.
    @Test func samplesMarkTheTasksThatDidNotMove() throws {
        let database = try TemporaryDatabase()
        let child = try start("churn", 2)
        defer { child.signal(SIGKILL) }
        let report = try dumpTasks(child.pid, ["--samples", "5", "--interval", "100"], database: database)
        let tasks = try #require(report.tasks)
        let stuck = tasks.tasks.filter { $0.unchangedSeconds != nil }
        #expect(stuck.count >= 2, "\(tasks.tasks.map { ($0.id, chain($0), $0.unchangedSeconds) })")
        #expect(stuck.allSatisfy { ($0.unchangedSeconds ?? 0) >= 0.35 })
        #expect(stuck.filter { chain($0).first?.hasPrefix("leafWait") == true }.count == 2)
        #expect(tasks.tasks.prefix(stuck.count).allSatisfy { $0.unchangedSeconds != nil }, "stuck ones first")
    }

    /// Tasks created and finishing without pause while they are read, on a loaded machine: no
    /// crash, no garbage (every chain a real one), the leaked tasks always found.
    @Test func tasksFinishingWhileReadGiveNoGarbage() throws {
        let database = try TemporaryDatabase()
        let child = try start("churn", 3)
        defer { child.signal(SIGKILL) }
        for _ in 0..<8 {
            let tasks = try #require(try dumpTasks(child.pid, database: database).tasks)
            #expect(tasks.tasks.filter { chain($0).first?.hasPrefix("leafWait") == true }.count == 3)
            for task in tasks.tasks {
                #expect(!task.frames.isEmpty)
                #expect(task.frames.allSatisfy { $0.module != nil }, "every resume address is in a module")
            }
        }
    }

    /// Read and reported by a niced hangwatch (10,000 chains are seconds of symbolication and
    /// JSON in a debug build, which the suite's in-process timing tests beside it must not lose).
    @Test func tenThousandSuspendedTasksAreAllRead() throws {
        let database = try TemporaryDatabase()
        let child = try start("leak", 10_000)
        defer { child.signal(SIGKILL) }
        let result = try niceDump(child.pid, ["--format", "json"], database: database)
        #expect(result.status == 0, "\(result.stderr)")
        let report = try Report.decode(from: Data(result.stdout.utf8))
        let tasks = try #require(report.tasks)
        #expect(tasks.tasks.count == 10_000)
        #expect(!tasks.truncated)
        let text = ReportRenderer.text(report)
        #expect(text.contains("10000 tasks ("), "one group for one chain: \(text.prefix(2000))")
    }

    @Test func aProgramReadsItsOwnTasks() throws {
        let child = try ChildProcess(product: "hangwatch-fixture-tasks", ["inprocess", "4"])
        #expect(try child.waitForExit(timeout: 60) == 0)
        let line = try #require(child.stdout.split(separator: "\n").first { $0.contains("\"tasks\"") })
        let object = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        #expect(object["count"] as? Int == 4, "\(line)")
        #expect(object["error"] as? String == "")
        #expect((object["chains"] as? [Int] ?? []).allSatisfy { $0 >= 5 }, "\(line)")
    }

    @Test func aProgramWithoutSwiftTasksGetsAClearReason() throws {
        let database = try TemporaryDatabase()
        let sleeper = try ChildProcess("/bin/sleep", ["30"])
        defer { sleeper.signal(SIGKILL) }
        Thread.sleep(forTimeInterval: 0.2)
        let report = try dumpTasks(sleeper.pid, database: database)
        let tasks = try #require(report.tasks)
        #expect(tasks.tasks.isEmpty)
        #expect(tasks.error?.contains("no Swift concurrency runtime") == true, "\(tasks.error ?? "")")
        let bad = try runHangwatch(["dump", "--pid", "\(sleeper.pid)", "--tasks", "--tree"], database: database)
        #expect(bad.status != 0 && bad.stderr.contains("--tasks"))
    }
}

extension TaskCaptureTests {
    /// A stripped program (no symbols, no DWARF): its tasks are still found, their chains given
    /// as module + offset.
    @Test func aStrippedProgramsTasksAreFramesByModuleAndOffset() throws {
        let database = try TemporaryDatabase()
        let directory = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(directory) }
        let stripped = directory + "/stripped-tasks"
        let strip = try runProgram("/usr/bin/strip", ["--strip-all", "-o", stripped, try productPath("hangwatch-fixture-tasks")])
        try #require(strip.status == 0, "\(strip.stderr)")
        let child = try ChildProcess(stripped, ["leak", "2"])
        defer { child.signal(SIGKILL) }
        _ = try child.waitForOutput("\"ready\"", timeout: 120)
        let tasks = try #require(try dumpTasks(child.pid, database: database).tasks)
        #expect(tasks.tasks.count == 2, "\(tasks.error ?? "")")
        for task in tasks.tasks {
            let own = task.frames.filter { $0.module == stripped }
            #expect(own.count >= 3, "\(task.frames.map { ($0.module ?? "?", $0.function ?? "-") })")
            #expect(own.allSatisfy { $0.moduleOffset != nil && $0.function == nil && $0.line == nil })
        }
    }
}

extension TaskCaptureTests {
    /// `hangwatch run --tasks`: a job that goes silent with its requests stuck on continuations
    /// is killed for hanging; its report has the tasks and their chains.
    @Test func runWithTasksKeepsTheTasksOfAHungJob() throws {
        let database = try TemporaryDatabase()
        let result = try runHangwatch(["run", "--silence", "1", "--kill-after", "1", "--tasks", "--",
                                       try productPath("hangwatch-fixture-tasks"), "leak", "2"], database: database, timeout: 120)
        #expect(result.status == 124, "\(result.stderr)")
        let report = try #require(try database.reports().first { $0.kind == .fatalHang })
        let tasks = try #require(report.tasks)
        #expect(tasks.tasks.count == 2, "\(tasks.error ?? "")")
        #expect(tasks.tasks.allSatisfy { chain($0).first?.hasPrefix("leafWait") == true })
    }
}

extension TaskCaptureTests {
    /// An actor's method awaits a task that waits for the actor's method to finish: the first
    /// awaits the second (by id), the second waits on a continuation in the actor.
    @Test func anActorAwaitingATaskThatWaitsForItShowsBothEnds() throws {
        let database = try TemporaryDatabase()
        let child = try start("actor")
        defer { child.signal(SIGKILL) }
        let tasks = try #require(try dumpTasks(child.pid, database: database).tasks)
        let loader = try #require(tasks.tasks.first { chain($0).first?.hasPrefix("Registry.load") == true }, "\(tasks.tasks.map(chain))")
        let waiter = try #require(tasks.tasks.first { chain($0).first?.hasPrefix("Registry.waitUntilLoaded") == true })
        #expect(loader.waitingOn == "task" && loader.waitingOnTaskID == waiter.id)
        #expect(waiter.waitingOn == "continuation")
    }
}
