// The client API end to end: capture → intermediate dump → database → symbolicated report,
// on real child processes whose main queue hangs in each of the three setups.
import DumpWithoutCrash
import HangwatchRemoteCapture
import HangwatchSymbolication
import Foundation
import HangwatchTestSupport
import Testing
import HangwatchStageTestSupport

@Suite("DumpClient", .ownThread)
struct DumpClientTests {
    /// (setup, the function that hangs the main queue, whether that queue runs on the main thread)
    static let setups: [(String, String, Bool)] = [
        ("runloop", "hangUnderRunLoop", true),
        ("dispatchmain", "hangUnderDispatchMain", false),
        ("asyncmain", "hangUnderAsyncMain", false),
    ]

    @Test(arguments: 0..<3)
    func dumpWithoutCrashNamesTheHungMainQueueFunction(setupIndex: Int) throws {
        let (setup, hangFunction, onMainThread) = Self.setups[setupIndex]
        let directory = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(directory) }
        let child = try ChildProcess(product: "hangwatch-fixture-capture", [setup], environment: ["CAPTURE_FIXTURE_DATABASE": directory])
        #expect(try child.waitForExit(timeout: 60) == 0, "stderr: \(child.stderr)")
        let id = try #require(child.stdout.split(separator: "\n").first { $0.hasPrefix("REPORT ") }?.dropFirst(7))

        let database = try CrashReportDatabase(path: directory)
        let report = try Report.decode(from: database.readReport(id: String(id)))
        #expect(report.kind == .dump)
        #expect(report.annotations["setup"] == setup)
        #expect(report.process.pid == child.pid)

        let mainQueue = report.threads.filter { $0.roles.contains(.mainQueue) }
        try #require(mainQueue.count == 1, "roles: \(report.threads.map(\.roles))")
        #expect(mainQueue[0].roles.contains(.mainThread) == onMainThread)
        let hangFrame = try #require(mainQueue[0].frames.first { $0.function?.contains(hangFunction) == true },
                                     "frames: \(mainQueue[0].frames.compactMap(\.function))")
        // A debug build shows file:line for its own frames.
        #expect(hangFrame.file?.hasSuffix("hangwatch-fixture-capture/Scenery.swift") == true)
        #expect((hangFrame.line ?? 0) > 0)

        #expect(report.threads.filter { $0.roles.contains(.requester) }.count == 1)
        // Captured quietly: the thread that blocks every signal is stopped by ptrace all the
        // same (with signals it is reported from /proc, CaptureTests), and the report says how.
        #expect(report.annotations["capture.method"] == "ptrace", "\(report.annotations)")
        #expect(report.threads.allSatisfy { $0.status == .captured }, "\(report.threads.map { ($0.name, $0.status) })")
        #expect(report.threads.contains { thread in thread.frames.contains { $0.function?.contains("blockAllSignalsAndSleep") == true } })
        #expect(report.threads.contains { thread in thread.frames.contains { $0.function?.contains("readFromSilentPipe") == true } && thread.state == "S" })
        #expect(!report.modules.isEmpty && report.modules.allSatisfy { !$0.path.isEmpty })

        let text = try #require(try database.readReportText(id: String(id)))
        #expect(text.contains(hangFunction))
    }

    /// Where ptrace refuses the quiet capture's helper (here: a process that is not dumpable,
    /// run as an ordinary user), the threads are captured with signals and the report says why.
    @Test(.enabled(if: getuid() == 0, "needs root to run the fixture as another user"))
    func whereptraceIsRefusedCaptureFallsBackToSignalsAndSaysSo() throws {
        let directory = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(directory) }
        let database = directory + "/db"
        #expect(mkdir(database, 0o700) == 0 && chown(database, 65534, 65534) == 0 && chmod(directory, 0o755) == 0)
        let child = try ChildProcess("/usr/bin/setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups",
                                                          try productPath("hangwatch-fixture-capture"), "runloop"],
                                     environment: ["CAPTURE_FIXTURE_DATABASE": database, "CAPTURE_FIXTURE_NOT_DUMPABLE": "1"])
        #expect(try child.waitForExit(timeout: 60) == 0, "stderr: \(child.stderr) stdout: \(child.stdout)")
        let id = try #require(child.stdout.split(separator: "\n").first { $0.hasPrefix("REPORT ") }?.dropFirst(7))
        // The database is nobody's: read as a file (opening it as root is refused, rightly).
        let report = try Report.decode(from: try Data(contentsOf: URL(fileURLWithPath: database + "/reports/pending/\(id).json")))
        let method = try #require(report.annotations["capture.method"])
        #expect(method.hasPrefix("signals (ptrace refused"), "\(method)")
        #expect(report.threads.contains { $0.frames.contains { $0.function?.contains("hangUnderRunLoop") == true } })
    }

    @Test func deferredAndAtPathDumpsAreProcessedExactlyOnce() throws {
        let directory = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(directory) }
        let client = try DumpClient(databasePath: directory + "/db", bundleID: "com.example.tests")
        client.annotations = ["version": "1.2.3"]

        let pending = try client.dumpWithoutCrashAndDeferProcessing()
        #expect(pending.hasSuffix(".hwdump"))
        let staged = directory + "/staged.hwdump"
        try client.dumpWithoutCrashAndDeferProcessing(atPath: staged)
        let attributes = try FileManager.default.attributesOfItem(atPath: staged)
        #expect((attributes[.posixPermissions] as? Int) == 0o600)

        // The at-path dump is never picked up automatically; the pending one is, once.
        let processed = try client.processIntermediateDumps()
        #expect(processed.count == 1)
        #expect(processed[0].annotations["version"] == "1.2.3")
        #expect(try client.processIntermediateDumps().isEmpty)
        #expect(FileManager.default.fileExists(atPath: staged))

        let fromPath = try client.processIntermediateDump(atPath: staged)
        #expect(fromPath.kind == .dump)
        #expect(fromPath.threads.contains { $0.roles.contains(.requester) })
        #expect(try client.database.listReports().count == 2)

        let immediate = try client.dumpWithoutCrash()
        #expect(try client.database.findReport(immediate.id).id == immediate.id)
    }

    @Test func hostileBundleIDsAreRefused() throws {
        let directory = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(directory) }
        for bad in ["", "a/b", "..", "x\u{0}y", "a@b"] {
            #expect(throws: (any Error).self, "bundle id \(bad.debugDescription)") {
                _ = try DumpClient(databasePath: directory, bundleID: bad)
            }
        }
    }

    @Test func corruptDumpGoesToFailedAndIsNotRetried() throws {
        let directory = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(directory) }
        let client = try DumpClient(databasePath: directory, bundleID: "com.example.tests")
        let file = try client.database.createIntermediateDump(bundleID: "com.example.tests")
        _ = "HWDUMP but not really".withCString { write(file.fd, $0, 21) }
        try client.database.finish(file)
        #expect(try client.processIntermediateDumps().isEmpty)
        #expect(try client.database.listFailedDumps().count == 1)
        #expect(try client.processIntermediateDumps().isEmpty)
        #expect(try client.database.listReports().isEmpty)
    }
}
