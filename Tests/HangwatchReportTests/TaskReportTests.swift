// The report's tasks (docs/tasks.md): links as ids, cycles, JSON that round-trips, text.
import HangwatchSnapshot
import Foundation
import Testing
import HangwatchStageTestSupport
@testable import HangwatchReport
import HangwatchSymbolication

@Suite struct TaskReportTests {
    func report(_ snapshot: ProcessSnapshot) -> Report {
        ReportBuilder.makeReport(from: snapshot, id: "t", kind: .dump, symbolicator: Symbolicator())
    }

    @Test func linksBecomeIdsAndTheReportRoundTrips() throws {
        let built = report(DumpSamples.withTasks())
        let tasks = try #require(built.tasks)
        #expect(tasks.tasks.map(\.id) == [1, 0x1_0000_0002, 3])
        #expect(tasks.tasks[0].waitingOn == "task" && tasks.tasks[0].waitingOnTaskID == 0x1_0000_0002)
        #expect(tasks.tasks[1].parentID == 1 && tasks.tasks[1].flags.names == ["child", "cancelled", "async-let"])
        #expect(tasks.tasks[1].chainCut && tasks.truncated)
        #expect(tasks.cycles.isEmpty, "task 2 awaits a continuation, not task 1")
        let json = ReportRenderer.json(built)
        #expect(try Report.decode(from: json) == built)
        #expect(String(decoding: json, as: UTF8.self).contains("\"address\" : \"0x00007f0000001000\""))
        let text = ReportRenderer.text(built)
        #expect(text.contains("Task 1 \"GET /users/:id\" suspended, awaiting task 4294967298:"), "\(text)")
        #expect(text.contains("child of task 1, cancelled:"), "\(text)")
        #expect(text.contains("the chain goes on (cut)"))
    }

    @Test func circlesOfTasksAwaitingEachOtherAreFoundOnce() {
        func task(_ id: UInt64, awaits: UInt64?) -> Report.Task {
            Report.Task(info: TaskInfo(id: id, address: id, state: .suspended), waitingOn: awaits == nil ? nil : "task", waitingOnTaskID: awaits, frames: [])
        }
        let tasks = [task(5, awaits: 3), task(3, awaits: 9), task(9, awaits: 5), task(1, awaits: 3), task(7, awaits: 7),
                     task(8, awaits: nil)]
        #expect(TaskCycles.find(in: tasks) == [[3, 9, 5], [7]])
    }

    /// A task awaits one task at most: lines, circles, and lines that run into a circle.
    @Test func linesAndCirclesAreToldApartInOneWalk() {
        func task(_ id: UInt64, awaits: UInt64?, waiting: String? = "task") -> Report.Task {
            Report.Task(info: TaskInfo(id: id, address: id, state: .suspended), waitingOn: awaits == nil ? waiting : "task", waitingOnTaskID: awaits, frames: [])
        }
        // 1 ← 2 ← … ← 5000 (a serial queue, 1 awaits a continuation); 6000 → 6001 → 6002 → 6000, with 6003 → 6004 → 6000 behind.
        var tasks = [task(1, awaits: nil, waiting: "continuation")] + (2...5_000).map { task($0, awaits: $0 - 1) }
        tasks += [task(6_001, awaits: 6_002), task(6_002, awaits: 6_000), task(6_000, awaits: 6_001),
                  task(6_003, awaits: 6_004), task(6_004, awaits: 6_000)]
        #expect(TaskCycles.find(in: tasks) == [[6_000, 6_001, 6_002]])
        #expect(TaskCycles.find(in: tasks.reversed()) == [[6_000, 6_001, 6_002]])
        let line = TaskLines.longest(in: tasks)
        #expect(line?.count == 5_000 && line?.head == 1)
        #expect(TaskLines.longest(in: tasks.reversed())?.count == 5_000)
        #expect(TaskLines.longest(in: Array(tasks.suffix(5))) == nil, "a circle and what runs into it are no line")
        let text = TaskReportText.lines(Report.Tasks(tasks: tasks, cycles: TaskCycles.find(in: tasks), scannedBytes: 0,
                                                     durationSeconds: 0, truncated: false)).joined(separator: "\n")
        #expect(text.contains("IN LINE: 5000 tasks, each awaiting the one ahead of it (a serial queue); at the head, task 1 awaits a continuation"), "\(text)")
        #expect(text.contains("DEADLOCK: tasks 6000 → 6001 → 6002 → 6000 await each other"))
        #expect(text.contains("tasks (2, 3, 4, 5, 6, …) suspended, each awaiting another task:"), "\(text)")
    }

    /// What the reading left unread, and the memory the program never touched, are in the
    /// report; a report without them (written before) still reads.
    @Test func unreadAndUntouchedMemoryAreReported() throws {
        let built = report(DumpSamples.withTasksPartlyRead())
        let tasks = try #require(built.tasks)
        #expect(tasks.untouchedBytes == 64 << 30 && tasks.unreadBytes == 3 << 30)
        let json = ReportRenderer.json(built)
        #expect(try Report.decode(from: json) == built)
        let text = ReportRenderer.text(built)
        #expect(text.contains("to read 26 MiB (64 GiB never touched, not read)"), "\(text)")
        #expect(text.contains("not all read: 3 GiB in use past the 4 GiB bound of bytes read"), "\(text)")
        let before = ReportRenderer.json(report(DumpSamples.withTasks()))
        #expect(!String(decoding: before, as: UTF8.self).contains("untouchedBytes"))
        #expect(try Report.decode(from: before).tasks?.unread == nil)
    }

    @Test func aReadingThatFailedSaysWhy() {
        var snapshot = DumpSamples.withTasks()
        snapshot.tasks = TaskCapture(tasks: [], error: "process 4 has no Swift concurrency runtime")
        let text = ReportRenderer.text(report(snapshot))
        #expect(text.contains("Tasks: 0"))
        #expect(text.contains("not read: process 4 has no Swift concurrency runtime"))
    }
}
