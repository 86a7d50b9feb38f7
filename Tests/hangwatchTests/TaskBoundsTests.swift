// Reading tasks costs what the task graph holds and no more (docs/tasks.md, "Bounds"): a
// serial queue of 20,000 tasks. Time is the CPU time of the hangwatch child: never the test
// process's clock.
import DumpWithoutCrash
import Foundation
import HangwatchTestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

extension TaskCaptureTests {
    /// `hangwatch dump --pid P --tasks ARGS…`, niced, to its end (its CPU time in the result).
    func niceDump(_ pid: pid_t, _ extra: [String] = [], database: TemporaryDatabase, timeout: Double = 120) throws -> ProgramResult {
        try runProgram("/usr/bin/nice", ["-n", "10", try productPath("hangwatch"), "dump", "--pid", "\(pid)", "--tasks"] + extra,
                       environment: database.environment, timeout: timeout)
    }

    /// 20,000 requests of a serial queue, each awaiting the one before: one line, no circle. The
    /// cycle search walked a path per task with a linear search per step (2,000 tasks: 49 s of
    /// CPU; 20,000: hours); every step over the graph is linear now.
    @Test func aSerialQueueOf20000TasksIsOneLineAndNoDeadlock() throws {
        let database = try TemporaryDatabase()
        let child = try start("serial", 20_000)
        defer { child.signal(SIGKILL) }
        let result = try niceDump(child.pid, ["--format", "json"], database: database)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.cpuSeconds < 30, "hangwatch used \(result.cpuSeconds) s of CPU")
        let report = try Report.decode(from: Data(result.stdout.utf8))
        let tasks = try #require(report.tasks)
        #expect(tasks.tasks.count == 20_000 && !tasks.truncated)
        #expect(tasks.cycles.isEmpty, "a line is no deadlock: \(tasks.cycles.prefix(3))")
        let awaiting = tasks.tasks.filter { $0.waitingOnTaskID != nil }
        #expect(awaiting.count == 19_999)
        #expect(Set(awaiting.compactMap(\.waitingOnTaskID)).count == 19_999, "each awaits another")
        let text = ReportRenderer.text(report)
        #expect(text.contains("IN LINE: 20000 tasks, each awaiting the one ahead of it"), "\(text.prefix(3000))")
        #expect(text.contains("19999 tasks (") && text.contains("each awaiting another task:"), "\(text.prefix(3000))")
        #expect(!text.contains("DEADLOCK"))
    }
}
