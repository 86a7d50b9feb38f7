// `hangwatch run` over a child whose own quiet captures (Sources/CHangwatchCapture/hw_quiet.c)
// keep a helper alive most of the time: the helper, a clone of the child sharing its memory, is
// no process of the job (not listed, not blamed), and the child is captured all the same.
import Foundation
import HangwatchTestSupport
import Testing

@Suite(.ownThread)
struct RunWithCaptureHelperTests {
    /// hangwatch-fixture-hang `vfork own-tracer`: DumpClient captures back to back while the main
    /// thread sits in vfork (each helper waits 50 ms for it), and the worker queue blocks 2 s three
    /// times; its HangMonitor tells hangwatch, which captures the job each time. The culprit is
    /// the child, of at most 2 processes (it and its vfork child): before, the helper was a
    /// third, the child's own capture was refused ("already being traced by … (hangwatch-quiet)")
    /// and the vfork child was blamed, or the helper "exited during the capture".
    @Test func theChildsCaptureHelperIsNoProcessOfTheJob() async throws {
        let database = try TemporaryDatabase()
        let childDatabase = try makeTemporaryDirectory("hangwatch-child-db")
        defer { removeTemporaryDirectory(childDatabase) }
        // Through env: hangwatch itself reads HANGWATCH_* too, and has no queue of that name.
        let child = try hangwatch(["run", "--", "/usr/bin/env", "HANGWATCH_TARGETS=queue:fixture.worker", "HANGWATCH_THRESHOLD=0.5",
                                   "HANGWATCH_DATABASE_PATH=\(childDatabase)", "HANGWATCH_BUNDLE_ID=com.example.own-tracer",
                                   "HANGWATCH_DEDUP_WINDOW=0", "HANGWATCH_CAPTURE=quiet",
                                   try productPath("hangwatch-fixture-hang"), "vfork", "own-tracer", "2"],
                                  database: database)
        #expect(try await offPool { try child.waitForExit(timeout: 90) } == 0, "stderr: \(child.stderr)")
        let ready = try #require(child.stdout.split(separator: "\n").first { $0.contains("\"ready\"") }, "\(child.stdout)")
        let pid = try #require(ready.split(separator: ":").last.flatMap { Int32($0.dropLast().trimmingCharacters(in: .whitespaces)) })
        let captures = child.stderr.split(separator: "\n").filter { $0.contains("hangwatch: captured ") }
        #expect(captures.count == 3, "\(child.stderr)")
        for line in captures {
            #expect(line.contains("(pid \(pid),") || !line.contains("(pid "), "the child is the culprit: \(line)")
            let processes = line.split(separator: " ").firstIndex(of: "processes);").map { line.split(separator: " ")[$0 - 1] }
            #expect(processes.map { Int($0) ?? 99 }.map { $0 <= 2 } ?? true, "\(line)")
        }
        #expect(!child.stderr.contains("exited during the capture"), "\(child.stderr)")
        #expect(!child.stderr.contains("hangwatch-quiet"), "\(child.stderr)")
    }
}
