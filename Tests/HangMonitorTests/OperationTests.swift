// Operations that never finish (`HangMonitor.watch`, docs/tasks.md), in a real program whose
// request awaits a continuation nobody resumes — no thread blocked, every ping answered.
import Testing
import Foundation
import HangwatchTestSupport
@testable import HangMonitor
import DumpWithoutCrash
import HangwatchReport
import HangwatchTaskCapture
import HangwatchSnapshot
import HangwatchPlatform
import Synchronization

@Suite(.ownThread) struct OperationTests {
    static let bundle = "com.example.operations"

    func start(_ scenario: String, limit: Double, database db: String) throws -> ChildProcess {
        // A long threshold: the main queue is idle, only the operation's limit matters.
        try startFixture("dispatchmain", scenario, seconds: limit, database: db, bundleID: Self.bundle, threshold: 5)
    }

    /// A limit no operation reaches is taken as it is: converting it to nanoseconds used to trap
    /// past 584 years (UInt64's overflow), and one past 2^62 ns now never comes.
    /// The operations table reuses a freed slot, but never an id: an operation that ended cannot
    /// end (or be reported as) the one that took its slot, and overdue ones come in the order
    /// they began.
    @Test func anEndedOperationsIDNeverReachesTheNextOneInItsSlot() {
        let table = Operations()
        let first = table.begin(name: "first", limit: .seconds(1), now: 0)
        table.end(first, now: 1)
        let second = table.begin(name: "second", limit: .seconds(1), now: 5)
        let third = table.begin(name: "third", limit: .seconds(1), now: 2)
        #expect(first != second && first != 0 && second != 0 && third != second)
        #expect(table.running().map(\.operation.name) == ["third", "second"], "the longest-running first")
        #expect(table.nextDeadline() == 1_000_000_002)
        #expect(table.overdue(now: 2_000_000_000).map(\.operation.name) == ["third", "second"])
        #expect(table.end(first, now: 6) == nil, "the slot's earlier operation")
        #expect(table.takeEnded().isEmpty)
        #expect(table.end(second, now: 7)?.name == "second")
        #expect(table.end(second, now: 8) == nil, "ends once")
        #expect(table.takeEnded() == [second: 7])
        #expect(table.running().map(\.operation.name) == ["third"])
        #expect(table.nextDeadline() == nil, "the one left was reported")
    }

    @Test func anyLimitIsTakenWithoutATrap() async throws {
        #expect(Duration.seconds(Int64.max).nanoseconds == 1 << 62)
        #expect(Duration.seconds(-5).nanoseconds == 0)
        #expect(Duration.milliseconds(1500).nanoseconds == 1_500_000_000)
        let db = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(db) }
        let monitor = try HangMonitor(configuration: .init(databasePath: db, bundleID: Self.bundle))
        monitor.start()
        defer { monitor.stop() }
        for limit: Duration in [.seconds(Int64.max), .seconds(1 << 40), .seconds(60)] {
            #expect(await monitor.watch("limit \(limit)", limit: limit) { 42 } == 42)
        }
        #expect(stagingFiles(db).isEmpty)
    }

    @Test func aStuckOperationIsAHangWithItsTaskAsTheCulpritAndFatalWhenTheProcessDies() async throws {
        let db = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(db) }
        let limit = 1.0
        let child = try start("operation", limit: limit, database: db)
        let output = try await offPool { try child.waitForOutput("\"detected-wall\"", timeout: 30) }
        let all = events(in: output)
        let started = try #require(all.first { $0.name == "operation-started" }?.double("wall"))
        let detectedAt = try #require(all.first { $0.name == "detected-wall" }?.double("wall"))
        let detected = try #require(all.first { $0.name == "detected" })
        #expect(detected.string("target") == "operation:GET /users/:id")
        // Detected at the limit, not before (the monitor wakes at the operation's deadline). How
        // soon after is the example server's figure (scripts/example-server: within 1.1x, run
        // alone); beside the parallel suite on a loaded machine only "not much later" holds.
        #expect(detectedAt - started >= limit && detectedAt - started < limit + 5, "\(detectedAt - started) s")
        #expect(stagingFiles(db).contains { $0.hasSuffix(".hang.dump") })
        child.signal(SIGKILL)
        _ = try? await offPool { try child.waitForExit(timeout: 10) }

        let reports = try DumpClient(databasePath: db, bundleID: Self.bundle).processIntermediateDumps()
        #expect(reports.map(\.kind) == [.fatalHang], "a fatal hang, and no killed report besides: \(reports.map(\.kind))")
        let report = try #require(reports.first)
        let reason = ReportRenderer.reason(report)
        #expect(reason.hasPrefix("operation GET /users/:id still running after "), "\(reason)")
        #expect(reason.contains("waiting in withCheckedContinuation"), "\(reason)")
        #expect(reason.contains("in fixtureLeafWait() at main.swift:"), "\(reason)")
        let tasks = try #require(report.tasks)
        let culprit = try #require(tasks.tasks.first)
        #expect(culprit.operation == "GET /users/:id")
        #expect(culprit.waitingOn == "continuation")
        let functions = culprit.frames.compactMap(\.function)
        for name in ["fixtureLeafWait", "fixtureMiddle", "fixtureHandler"] {
            #expect(functions.contains { $0.contains(name) }, "\(functions)")
        }
        #expect(report.hang?.thresholdSeconds == limit)
    }

    /// The operation's own task only awaits a future that a task it started completes (as
    /// Vapor's middleware awaits the route's task): the culprit is that task, where the work is
    /// stuck, with its await chain; the operation's own task is named next; a detached task
    /// stuck beside them is not the operation's.
    @Test func anOperationWaitingForATaskItStartedBlamesThatTask() async throws {
        let db = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(db) }
        let child = try start("operation-spawned", limit: 1.0, database: db)
        _ = try await offPool { try child.waitForOutput("\"detected-wall\"", timeout: 30) }
        child.signal(SIGKILL)
        _ = try? await offPool { try child.waitForExit(timeout: 10) }

        let report = try #require(try DumpClient(databasePath: db, bundleID: Self.bundle).processIntermediateDumps().first)
        let tasks = try #require(report.tasks).tasks
        let marked = tasks.prefix { $0.operation != nil }
        #expect(marked.count == 2, "\(tasks.map { ($0.id, $0.operation ?? "-") })")
        let culprit = try #require(marked.first)
        let functions = culprit.frames.compactMap(\.function)
        for name in ["fixtureLeafWait", "fixtureMiddle", "fixtureHandler"] {
            #expect(functions.contains { $0.contains(name) }, "\(tasks.map { ($0.id, $0.operation ?? "-", $0.frames.compactMap(\.function).prefix(2)) })")
        }
        let own = try #require(marked.dropFirst().first)
        #expect(own.waitingOn == "continuation" && !own.frames.contains { $0.function?.contains("fixtureHandler") == true })
        let unrelated = tasks.filter { $0.frames.contains { $0.function?.contains("fixtureUnrelatedWait") == true } }
        #expect(unrelated.count == 1 && unrelated.allSatisfy { $0.operation == nil }, "\(unrelated.map(\.id))")
        let reason = ReportRenderer.reason(report)
        #expect(reason.contains("in fixtureLeafWait() at main.swift:"), "\(reason)")
        #expect(reason.contains("(task \(culprit.id), started within it; its own task \(own.id) is waiting"), "\(reason)")
    }

    /// The tasks an operation starts carry its id (a copy of the task-local `Operations.current`),
    /// read out of their memory; a detached task does not. The tasks wait until the test ends
    /// (cancelled), however late the parallel suite lets the test run.
    @Test func theTasksAnOperationStartsCarryItsID() async throws {
        let addresses = TaskAddresses()
        let note = addresses.note
        let operation = Task {
            await Operations.$current.withValue(0xfeed_beef) {
                note("own")
                let spawned = Task { note("spawned"); try? await Task.sleep(for: .seconds(3600)) }
                let detached = Task.detached { note("detached"); try? await Task.sleep(for: .seconds(3600)) }
                try? await Task.sleep(for: .seconds(3600))
                spawned.cancel()
                detached.cancel()
            }
        }
        defer { operation.cancel() }
        while addresses.all.count < 3 { try await Task.sleep(for: .milliseconds(10)) }
        try await Task.sleep(for: .milliseconds(50))
        // The three tasks as a reading would list them (a scan of this test process's heap
        // beside the parallel suite may be cut short by its bounds: not what is tested here).
        let noted = addresses.all
        let read = TaskCapture(tasks: noted.values.map { TaskSnapshot(address: $0, id: 0, state: .suspended, frames: []) })
        let values = SwiftTaskCapture.taskLocalValues(key: Operations.currentKey, in: read, pid: getpid())
        // What a reading of this process says of its runtime, when nothing was read.
        let why = values.isEmpty ? SwiftTaskCapture.capture(pid: getpid(), maxTasks: 1, options: TaskScanOptions(maxBytes: 8, seconds: 1)).error : nil
        #expect(values[noted["own"] ?? 0] == 0xfeed_beef, "\(noted) \(values) key \(Operations.currentKey) \(why ?? "runtime located")")
        #expect(values[noted["spawned"] ?? 0] == 0xfeed_beef)
        #expect(values[noted["detached"] ?? 0] == nil)
    }

    /// A reader that maps the whole Swift concurrency runtime file (libelf does, while this
    /// process symbolicates it) adds another offset-0 mapping of it, here below the loaded one:
    /// the runtime is still found where it is loaded (it was taken from the first such mapping,
    /// which gave its layout from garbage).
    @Test func aCopyOfTheRuntimeFileMappedByAReaderIsNotTakenForIt() throws {
        let regions = ProcFS.memoryRegions(of: getpid())
        let path = try #require(regions.first { $0.path.hasSuffix("/libswift_Concurrency.so") }?.path)
        let file = open(path, O_RDONLY | O_CLOEXEC)
        try #require(file >= 0)
        defer { close(file) }
        let size = Int(try #require(regions.filter { $0.path == path }.map { $0.end - $0.start }.max()))
        let lowest = try #require(regions.filter { $0.start > 0x1_0000 }.map(\.start).min())
        // Below every mapping of the process, so that it comes first in /proc/self/maps.
        let hint = UnsafeMutableRawPointer(bitPattern: UInt(max(0x1000_0000, (lowest / 2) & ~0xfff_ffff)))
        let copy = mmap(hint, size, PROT_READ, MAP_PRIVATE | 0x100000 /* MAP_FIXED_NOREPLACE */, file, 0)
        try #require(copy != MAP_FAILED, "mmap: \(String(cString: strerror(errno)))")
        defer { munmap(copy, size) }
        let mapped = ProcFS.memoryRegions(of: getpid())
        let firstOfPath = try #require(mapped.sorted { $0.start < $1.start }.first { $0.path == path && $0.offset == 0 })
        try #require(firstOfPath.start == UInt64(UInt(bitPattern: copy)), "the copy is the first mapping of \(path)")
        let reading = SwiftTaskCapture.capture(pid: getpid(), maxTasks: 1, options: TaskScanOptions(maxBytes: 8, seconds: 1))
        #expect(reading.error == nil, "\(reading.error ?? "")")
    }

    @Test func aLateOperationRecoversAndLeavesNothingStaged() async throws {
        let db = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(db) }
        let child = try start("operation-late", limit: 0.5, database: db)
        #expect(try await offPool { try child.waitForExit(timeout: 30) } == 0, "\(child.stdout)")
        let all = events(in: child.stdout)
        #expect(all.filter { $0.name == "detected" }.map { $0.string("target") } == ["operation:GET /slow"], "\(child.stdout)")
        let recovered = try #require(all.first { $0.name == "recovered" }, "\(child.stdout)")
        #expect((recovered.double("durationSeconds") ?? 0) >= 1.9)
        #expect(stagingFiles(db).isEmpty, "\(stagingFiles(db))")
    }

    @Test func operationsThatFinishInTimeAreNeverHangs() async throws {
        let db = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(db) }
        let child = try start("operation-ok", limit: 1, database: db)
        #expect(try await offPool { try child.waitForExit(timeout: 30) } == 0, "\(child.stdout)")
        #expect(!events(in: child.stdout).contains { $0.name == "detected" }, "\(child.stdout)")
        #expect(stagingFiles(db).isEmpty)
    }
}

/// The addresses of tasks, noted by name from inside each.
final class TaskAddresses: Sendable {
    private let noted = Mutex<[String: UInt64]>([:])
    var all: [String: UInt64] { noted.withLock { $0 } }
    @Sendable func note(_ name: String) {
        let address = withUnsafeCurrentTask { UInt64(UInt(bitPattern: unsafeBitCast($0!, to: Int.self))) }
        noted.withLock { $0[name] = address }
    }
}
