// DumpClient's upload verb end to end: pending dumps processed and uploaded in the
// background to a real HTTP server on loopback (UploadTestServer), never blocking the caller.
import DumpWithoutCrash
import Foundation
import Testing
import HangwatchTestSupport
import HangwatchStageTestSupport
import HangMonitorTesting

@Suite("DumpClient upload", .ownThread, .serialized)
struct DumpClientUploadTests {
    private func setUp() throws -> (directory: String, database: CrashReportDatabase, server: UploadTestServer) {
        try makeUploadSandbox()
    }

    @Test func startProcessingPendingReportsProcessesDumpsAndUploadsInTheBackground() throws {
        let (directory, database, server) = try setUp()
        defer { removeTemporaryDirectory(directory) }
        let client = try DumpClient(databasePath: database.path, bundleID: "upload-test")
        client.annotations = ["ver": "9.9"]
        try client.dumpWithoutCrashAndDeferProcessing()
        let scheduler = client.startProcessingPendingReports(uploadURL: server.url, pollInterval: 600)
        defer { scheduler.stop() }
        #expect(scheduler.waitForPasses(1, timeout: 60))
        let received = try server.received()
        #expect(received.count == 1)
        #expect((received.first?.record["fields"] as? [String: String])?["ver"] == "9.9")
        let reports = try client.database.listReports()
        #expect(reports.count == 1 && reports[0].state == .completed && reports[0].serverID?.hasPrefix("CrashID=bp-") == true)
        // The live capture's stack windows reached the server inside the minidump.
        let dump = try #require(received.first?.parts["upload_file_minidump"])
        #expect(dump.count > 16 * 1024)
    }

    /// Crashpad's verb is called at start-up, often from the main actor: processing and a slow
    /// upload (the server answers after 2 s) must happen in the background, the main queue
    /// never blocked for 200 ms by them.
    @Test(.hangLimit(.milliseconds(200))) func startingProcessingFromTheMainActorNeverBlocksIt() async throws {
        let (directory, database, server) = try setUp()
        defer { removeTemporaryDirectory(directory) }
        try server.setMode("slow:2")
        let client = try DumpClient(databasePath: database.path, bundleID: "upload-test")
        try client.dumpWithoutCrashAndDeferProcessing()
        let url = server.url
        let scheduler = await MainActor.run { client.startProcessingPendingReports(uploadURL: url, pollInterval: 600) }
        defer { scheduler.stop() }
        #expect(await Task.detached { scheduler.waitForPasses(1, timeout: 60) }.value)
        #expect(try server.received().count == 1)
    }
}
