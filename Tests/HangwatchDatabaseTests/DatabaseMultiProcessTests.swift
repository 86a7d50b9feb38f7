// Several real processes sharing one database at once, as an application and its helpers do.
@testable import HangwatchDatabase
@testable import HangwatchSnapshot
import Foundation
import HangwatchTestSupport
import Testing
#if canImport(Glibc)
import Glibc
import HangwatchStageTestSupport
#endif

@Suite("Database shared by processes", .ownThread)
struct DatabaseMultiProcessTests {
    @Test func eightProcessesProcessEveryDumpExactlyOnce() throws {
        let sandbox = try DatabaseSandbox()
        let database = try sandbox.open()
        let bundles = ["com.example.app", "com.example.app.helper", "com.example.extension"]
        var expected: Set<String> = []
        for index in 0..<200 {
            expected.insert(try database.makeFinishedDump(bundleID: bundles[index % bundles.count]).uuid.uuidString)
        }
        let results = sandbox.directory + "/results"
        #expect(mkdir(results, 0o700) == 0)
        let go = sandbox.directory + "/go"
        let processors = try (0..<8).map { index in
            try ChildProcess(product: "hangwatch-fixture-database",
                             ["process", sandbox.databasePath, bundles[index % bundles.count], results, go])
        }
        try writeFile(go, "go") // all eight are spinning on this file: they start together
        var processedCounts: [Int] = []
        for processor in processors {
            #expect(try processor.waitForExit(timeout: 120) == 0, "\(processor.stderr)")
            let line = processor.stdout.split(separator: "\n").first { $0.hasPrefix("processed ") }
            processedCounts.append(line.flatMap { Int($0.dropFirst("processed ".count)) } ?? -1)
        }
        print("dumps processed per process: \(processedCounts)")
        #expect(processedCounts.reduce(0, +) == 200)

        // One result file per dump, each with exactly one line: nothing lost, nothing twice.
        let recorded = directoryNames(results)
        #expect(Set(recorded) == expected)
        for name in recorded {
            let lines = (readFileText(results + "/" + name) ?? "").split(separator: "\n")
            #expect(lines.count == 1, "dump \(name) processed by \(lines)")
        }
        #expect(directoryNames(database.processingPath).isEmpty)
        #expect(directoryNames(database.intermediatePath).isEmpty)
        #expect(try database.listFailedDumps().isEmpty)
        let reports = try database.listReports()
        #expect(Set(reports.map(\.id)) == expected)
    }

    @Test func processesStartingTogetherAgreeOnTheClientID() throws {
        let sandbox = try DatabaseSandbox()
        let go = sandbox.directory + "/go"
        // The database does not exist yet: every process races to create it and its settings.
        let starters = try (0..<8).map { _ in
            try ChildProcess(product: "hangwatch-fixture-database", ["client-id", sandbox.databasePath, go])
        }
        try writeFile(go, "go")
        var ids: Set<String> = []
        for starter in starters {
            #expect(try starter.waitForExit() == 0, "\(starter.stderr)")
            let line = try #require(starter.stdout.split(separator: "\n").first { $0.hasPrefix("client-id ") })
            ids.insert(String(line.dropFirst("client-id ".count)))
        }
        #expect(ids.count == 1)
        let database = try sandbox.open()
        #expect(ids == [database.clientID.uuidString])
        #expect(directoryNames(sandbox.databasePath).allSatisfy { !$0.hasPrefix(".tmp-") })
    }
}
