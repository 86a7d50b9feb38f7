// `hangwatch dump`, `list`, `show`, `process`, `prune` on real processes and real files.
import DumpWithoutCrash
import Foundation
import HangwatchTestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

@Suite("hangwatch reports", .timeLimit(.minutes(3)))
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

    @Test func dumpOfAMissingProcessIsAClearError() throws {
        let database = try TemporaryDatabase()
        let result = try runHangwatch(["dump", "--pid", "2147483646"], database: database)
        #expect(result.status != 0)
        #expect(result.stderr.contains("no process with pid 2147483646"))
        #expect(result.stdout.isEmpty)
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
        #expect(dump.stderr.contains("neither a report"))
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
