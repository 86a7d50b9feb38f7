// Uploads against a real HTTP server on loopback that parses the multipart body itself:
// fields, minidump bytes, server id, and what happens when the server is down, answers 500,
// is slow, restarts, or the report is too large.
import Foundation
import Testing
import HangwatchMinidump
@testable import HangwatchDatabase
import HangwatchProcessing
@testable import HangwatchReport
@testable import HangwatchSnapshot
@testable import HangwatchUpload
import HangwatchTestSupport
#if canImport(Glibc)
import Glibc
import HangwatchStageTestSupport
#endif

@Suite("Upload", .ownThread, .serialized)
struct UploadTests {
    private func setUp() throws -> (directory: String, database: CrashReportDatabase, server: UploadTestServer) {
        try makeUploadSandbox()
    }

    private func options(_ url: URL, _ change: (inout UploadOptions) -> Void = { _ in }) -> UploadOptions {
        var options = UploadOptions(url: url, timeoutSeconds: 10, initialBackoffSeconds: 60, maxBackoffSeconds: 3600)
        change(&options)
        return options
    }

    private func pendingIDs(_ database: CrashReportDatabase) throws -> [String] {
        try database.listReports().filter { $0.state == .pending }.map(\.id)
    }

    /// A report stored before any redaction was configured: `UploadOptions.redaction` leaves
    /// the secret out of every field, the minidump (its command line and stack windows) and the
    /// attached JSON report all the same; the stored report is not changed.
    @Test func redactionAppliesToWhatIsSentWhateverTheStoredReportHolds() throws {
        let (directory, database, server) = try setUp()
        defer { removeTemporaryDirectory(directory) }
        let secret = "hunter2-upload"
        let id = try storeSyntheticReport(in: database, annotations: ["ver": "2.5", "login": "password=\(secret)"],
                                          arguments: ["app", "--token=\(secret)", secret])
        let stored = try database.readReport(id: id)
        #expect(stored.range(of: Data(secret.utf8)) != nil)
        _ = try ReportUploader(database: database, options: options(server.url) { $0.redaction = .all }).uploadPending()
        let received = try #require(try server.received().first)
        let fields = try #require(received.record["fields"] as? [String: String])
        #expect(fields["login"] == "password=<redacted>")
        #expect(!fields.values.contains { $0.contains(secret) })
        for (name, bytes) in received.parts {
            #expect(bytes.range(of: Data(secret.utf8)) == nil, "\(name) carries the secret")
        }
        let sentReport = try Report.decode(from: try #require(received.parts["hangwatch_report"]))
        #expect(sentReport.process.arguments == ["app", "<redacted>", "<redacted>"])
        #expect(sentReport.redacted == ["arguments", "key-values", "stderr", "stack-memory", "kernel-log"])
        #expect(try database.readReport(id: id) == stored, "the stored report is as it was")
    }

    @Test func sendsCrashpadFieldsAndTheMinidumpThenCompletesWithTheServerID() throws {
        let (directory, database, server) = try setUp()
        defer { removeTemporaryDirectory(directory) }
        let id = try storeSyntheticReport(in: database)
        let minidump = Data(try database.minidump(forReport: id))
        let json = try database.readReport(id: id)

        let outcomes = try ReportUploader(database: database, options: options(server.url)).uploadPending()
        let received = try server.received()
        #expect(received.count == 1)
        let record = try #require(received.first).record
        let fields = try #require(record["fields"] as? [String: String])
        #expect(fields["prod"] == "com.example.app")
        #expect(fields["ver"] == "2.5")
        #expect(fields["channel"] == "beta")
        #expect(fields["guid"] == database.clientID.uuidString.lowercased())
        #expect(fields["hangwatch_kind"] == "dump")
        let files = try #require(record["files"] as? [String: [String: Any]])
        #expect(files["upload_file_minidump"]?["filename"] as? String == "\(id).dmp")
        #expect(files["upload_file_minidump"]?["head"] as? String == "MDMP")
        #expect(received[0].parts["upload_file_minidump"] == minidump, "server got exactly the minidump bytes")
        #expect(received[0].parts["hangwatch_report"] == json)

        let crashID = try #require(record["crash_id"] as? String)
        #expect(outcomes == [UploadOutcome(reportID: id, result: .uploaded(serverID: "CrashID=\(crashID)"))])
        let stored = try #require(try database.listReports().first { $0.id == id })
        #expect(stored.state == .completed)
        #expect(stored.serverID == "CrashID=\(crashID)")
        #expect(try database.readReportDump(id: id) != nil, "the dump moved to completed with the report")
    }

    /// A killed report (made by processing a run record whose owner is gone) uploads like any
    /// other: its kind, its minidump (no threads; the KILL exception), its JSON.
    @Test func aKilledReportUploadsWithItsKindAndMinidump() throws {
        let (directory, database, server) = try setUp()
        defer { removeTemporaryDirectory(directory) }
        var record = RunRecord.current(bundleID: "com.example.app", heartbeatIntervalSeconds: 5)
        record.pid = 1
        record.processStartTicks = 1  // not process 1's: its owner is gone
        record.sample(hangs: [])
        database.runRecords.release(try database.runRecords.begin(record))
        let killed = try DumpProcessor(database: database).processIntermediateDumps()
        let id = try #require(killed.first { $0.kind == .killed }?.id)
        let minidump = Data(try database.minidump(forReport: id))

        _ = try ReportUploader(database: database, options: options(server.url)).uploadPending()
        let received = try server.received()
        try #require(received.count == 1)
        let fields = try #require(received[0].record["fields"] as? [String: String])
        #expect(fields["hangwatch_kind"] == "killed")
        #expect(received[0].parts["upload_file_minidump"] == minidump)
        let report = try Report.decode(from: try #require(received[0].parts["hangwatch_report"]))
        #expect(report.killed?.samples.count == 1)
        #expect(try database.listReports().first { $0.id == id }?.state == .completed)
    }

    @Test func gzipEncodedBodyArrivesIntact() throws {
        let (directory, database, server) = try setUp()
        defer { removeTemporaryDirectory(directory) }
        let id = try storeSyntheticReport(in: database)
        let minidump = Data(try database.minidump(forReport: id))

        let outcomes = try ReportUploader(database: database, options: options(server.url) { $0.gzip = true }).uploadPending()
        let received = try server.received()
        try #require(received.count == 1)
        #expect(received[0].record["content_encoding"] as? String == "gzip")
        #expect(received[0].parts["upload_file_minidump"] == minidump, "the server decompressed exactly the minidump bytes")
        #expect(outcomes.count == 1)
        if case .uploaded = outcomes.first?.result {} else { Issue.record("not uploaded: \(outcomes)") }
    }

    @Test func gzipRoundTripsThroughPythonsDecoder() throws {
        let original = Data((0..<100_000).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 / 300) })
        let compressed = try #require(Gzip.compress(original))
        #expect(compressed.count < original.count)
        #expect(compressed.prefix(2) == Data([0x1f, 0x8b]), "gzip magic")
        let directory = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(directory) }
        try compressed.write(to: URL(fileURLWithPath: directory + "/body.gz"))
        let decoded = try runTool("/usr/bin/env", ["python3", "-c",
            "import gzip, hashlib, sys; print(hashlib.sha256(gzip.decompress(open(sys.argv[1], 'rb').read())).hexdigest())", directory + "/body.gz"])
        try original.write(to: URL(fileURLWithPath: directory + "/original"))
        let reference = try runTool("/usr/bin/sha256sum", [directory + "/original"]).split(separator: " ").first.map(String.init)
        #expect(decoded.trimmingCharacters(in: .whitespacesAndNewlines) == reference)
    }

    @Test func serverDownKeepsTheReportBacksOffAndARestartedServerGetsIt() throws {
        let (directory, database, server) = try setUp()
        defer { removeTemporaryDirectory(directory) }
        let id = try storeSyntheticReport(in: database)
        let port = server.port
        server.stop()
        let uploader = ReportUploader(database: database, options: options(server.url))

        let before = Date()
        let first = try uploader.uploadPending()
        guard case .failed(let error, let attempts, let retryAt, let gaveUp) = try #require(first.first).result else {
            Issue.record("expected a failure, got \(first)"); return
        }
        #expect(attempts == 1 && !gaveUp)
        #expect(error.description == "connection refused", "\(error)")
        #expect(try #require(retryAt) >= before.addingTimeInterval(59))
        #expect(try pendingIDs(database) == [id])
        #expect(database.uploadState(id: id).attempts == 1)

        // Still down and not due: nothing is tried.
        let second = try uploader.uploadPending()
        guard case .waiting = try #require(second.first).result else { Issue.record("\(second)"); return }

        // The server comes back on the same port; the backoff expires (a later clock).
        try server.start(port: port)
        let later = Date().addingTimeInterval(3600)
        let third = try uploader.uploadPending(now: { later })
        guard case .uploaded = try #require(third.first).result else { Issue.record("\(third)"); return }
        #expect(try server.received().count == 1)
        #expect(try pendingIDs(database).isEmpty)
    }

    @Test func fiveHundredsBackOffExponentiallyThenTheReportIsKeptAndMarked() throws {
        let (directory, database, server) = try setUp()
        defer { removeTemporaryDirectory(directory) }
        let id = try storeSyntheticReport(in: database)
        try server.setMode("500")
        let settings = options(server.url) { $0.maxAttempts = 3; $0.initialBackoffSeconds = 10; $0.maxBackoffSeconds = 15 }
        #expect(settings.backoff(afterAttempts: 1) == 10 && settings.backoff(afterAttempts: 2) == 15)
        let uploader = ReportUploader(database: database, options: settings)
        var clock = Date()
        var waits: [Double] = []
        for attempt in 1...3 {
            let start = clock
            let outcome = try #require(try uploader.uploadPending(now: { start }).first)
            guard case .failed(.httpStatus(500, let body), let attempts, let retryAt, let gaveUp) = outcome.result else {
                Issue.record("\(outcome)"); return
            }
            #expect(body == "server error on purpose")
            #expect(attempts == attempt)
            #expect(gaveUp == (attempt == 3))
            if let retryAt { waits.append(retryAt.timeIntervalSince(start).rounded()) }
            clock = start.addingTimeInterval(3600)
        }
        #expect(waits == [10, 15], "doubling, capped")
        let state = database.uploadState(id: id)
        #expect(state.failed && state.attempts == 3 && state.lastError?.hasPrefix("HTTP 500") == true)
        let end = clock
        #expect(try uploader.uploadPending(now: { end }).first?.result == .markedFailed)
        #expect(try pendingIDs(database) == [id], "a report that keeps failing is kept")

        // Explicit retry once the server is fixed.
        try server.setMode("ok")
        guard case .uploaded = try #require(try uploader.uploadPending(retryFailed: true).first).result else {
            Issue.record("retry failed"); return
        }
        #expect(try pendingIDs(database).isEmpty)
    }

    /// A redirect is never followed: a 302 would turn the POST into a GET whose 200 marked the
    /// report uploaded, a 307 would re-send it elsewhere. The report stays pending.
    @Test(arguments: ["302", "307"])
    func redirectsAreNotFollowedAndTheReportStays(_ mode: String) throws {
        let (directory, database, server) = try setUp()
        defer { removeTemporaryDirectory(directory) }
        let id = try storeSyntheticReport(in: database)
        try server.setMode(mode)
        let uploader = ReportUploader(database: database, options: options(server.url))
        let outcome = try #require(try uploader.uploadPending().first)
        guard case .failed(.httpStatus(let status, let body), 1, _, false) = outcome.result else { Issue.record("\(outcome)"); return }
        #expect(status == Int(mode) && body.contains("not followed") && body.contains("/elsewhere"), "\(body)")
        #expect(try pendingIDs(database) == [id])
        #expect(try server.received().isEmpty, "nothing reached the redirect's target")
    }

    /// A 2 GiB answer (in ~2 MB of gzip, or chunked): the uploader keeps 4 KiB of it, decoded,
    /// and cuts the transfer. The report counts as uploaded (the server said 200); what the
    /// server said is no id (NUL bytes, a 4 KiB blob), so none is kept. Memory stays bounded by
    /// construction: measured in processes of their own — the CLI and a program using the
    /// library's uploader — never in this parallel test process (it grew by 2.1 GB with
    /// URLSession, which queued every decoded chunk).
    @Test(arguments: ["gzip-bomb", "chunked"])
    func aHugeAnswerCostsTheUploaderNoMemory(_ mode: String) throws {
        let (directory, database, server) = try setUp()
        defer { removeTemporaryDirectory(directory) }
        try server.setMode(mode)
        // The CLI.
        let cliReport = try storeSyntheticReport(in: database)
        let cli = try runMeasured(try productPath("hangwatch"), ["upload", "--database", database.path, "--url", server.url.absoluteString, "--now"])
        #expect(cli.status == 0, "\(cli.stderr)")
        #expect(cli.peakKiB <= 64 * 1024, "the CLI peaked at \(cli.peakKiB / 1024) MiB")
        #expect(cli.seconds < 20, "\(cli.seconds) s: the answer was read, not cut")
        #expect(cli.stdout.contains("uploaded \(cliReport): (empty answer)"), "\(cli.stdout)")
        // The library, as a program uses it (startProcessingPendingReports).
        _ = try storeSyntheticReport(in: database)
        let library = try runMeasured(try productPath("hangwatch-fixture-database"), ["upload", database.path, server.url.absoluteString])
        #expect(library.status == 0, "\(library.stderr)")
        #expect(library.peakKiB <= 64 * 1024, "the program peaked at \(library.peakKiB / 1024) MiB")
        #expect(library.stdout.contains("server-id \n") || library.stdout.hasSuffix("server-id "), "\(library.stdout)")
        let reports = try database.listReports()
        #expect(reports.allSatisfy { $0.state == .completed && ($0.serverID ?? "") == "" }, "\(reports.map { ($0.id, $0.state, $0.serverID ?? "-") })")
    }

    /// What a server answers is kept only as short printable text: a newline would forge a
    /// line of hangwatch's on the terminal.
    @Test func aServerIDThatIsNotPrintableTextIsNeitherKeptNorPrinted() throws {
        let (directory, database, server) = try setUp()
        defer { removeTemporaryDirectory(directory) }
        try server.setMode("forged-id")
        let id = try storeSyntheticReport(in: database)
        let cli = try runMeasured(try productPath("hangwatch"), ["upload", "--database", database.path, "--url", server.url.absoluteString, "--now"])
        #expect(cli.status == 0, "\(cli.stderr)")
        #expect(!cli.stdout.split(separator: "\n").contains { $0.hasPrefix("hangwatch: report FAKE") }, "\(cli.stdout)")
        #expect((try database.listReports().first { $0.id == id }?.serverID ?? "") == "")
        let status = try runMeasured(try productPath("hangwatch"), ["upload", "--database", database.path, "--status"])
        #expect(!status.stdout.contains("FAKE"), "\(status.stdout)")
    }

    /// One byte a second: cut at the stated timeout (it used to go on to 40 s for a 30 s one).
    @Test func aTricklingServerIsCutAtTheTimeout() throws {
        let (directory, database, server) = try setUp()
        defer { removeTemporaryDirectory(directory) }
        try server.setMode("trickle")
        let id = try storeSyntheticReport(in: database)
        let run = try runMeasured(try productPath("hangwatch"), ["upload", "--database", database.path, "--url", server.url.absoluteString,
                                                                 "--now", "--timeout", "3"])
        #expect(run.seconds >= 2.9 && run.seconds < 5, "\(run.seconds) s")
        #expect(run.stdout.contains("no complete answer within 3 s (the upload timeout)"), "\(run.stdout)")
        #expect(try pendingIDs(database) == [id])
    }

    @Test func aSlowServerTimesOutAndNothingIsLost() throws {
        let (directory, database, server) = try setUp()
        defer { removeTemporaryDirectory(directory) }
        let id = try storeSyntheticReport(in: database)
        try server.setMode("slow:4")
        let uploader = ReportUploader(database: database, options: options(server.url) { $0.timeoutSeconds = 1 })
        let outcome = try #require(try uploader.uploadPending().first)
        guard case .failed(.transport(let why), 1, _, false) = outcome.result else { Issue.record("\(outcome)"); return }
        #expect(why == "no complete answer within 1 s (the upload timeout)", "\(why)")
        #expect(try pendingIDs(database) == [id])
    }

    @Test func rateLimitAndSizeLimitKeepReportsPending() throws {
        let (directory, database, server) = try setUp()
        defer { removeTemporaryDirectory(directory) }
        let small = try storeSyntheticReport(in: database, stackBytes: 64)
        let large = try storeSyntheticReport(in: database, stackBytes: 200_000)
        let limit = 100_000
        #expect(try database.minidump(forReport: small).count < limit)
        #expect(try database.minidump(forReport: large).count > limit)

        let uploader = ReportUploader(database: database, options: options(server.url) { $0.maxUploadsPerHour = 1; $0.maxReportBytes = limit })
        let outcomes = try uploader.uploadPending(ids: [large, small])
        let byID = Dictionary(uniqueKeysWithValues: outcomes.map { ($0.reportID, $0.result) })
        // The oldest (small) goes first and uses up the hour's single upload.
        guard case .uploaded = try #require(byID[small]) else { Issue.record("\(outcomes)"); return }
        #expect(byID[large] == .rateLimited)

        let roomy = ReportUploader(database: database, options: options(server.url) { $0.maxReportBytes = limit })
        let next = try #require(try roomy.uploadPending().first { $0.reportID == large })
        guard case .failed(.tooLarge(let bytes, limit), 1, nil, true) = next.result else { Issue.record("\(next)"); return }
        #expect(bytes > limit)
        #expect(try server.received().count == 1, "the large report was never sent")
        #expect(try pendingIDs(database) == [large])
    }

    @Test func atMostOneUploadInFlight() throws {
        let (directory, database, server) = try setUp()
        defer { removeTemporaryDirectory(directory) }
        for _ in 0..<4 { try storeSyntheticReport(in: database) }
        try server.setMode("slow:0.3")
        let settings = options(server.url)
        // Two uploaders on two threads of this process: requests never overlap.
        let group = DispatchGroup()
        for _ in 0..<2 {
            DispatchQueue.global().async(group: group) {
                _ = try? ReportUploader(database: database, options: settings).uploadPending()
            }
        }
        #expect(group.wait(timeout: .now() + 60) == .success)
        let received = try server.received()
        #expect(received.count == 4, "each report exactly once")
        #expect(Set(received.compactMap { ($0.record["fields"] as? [String: String])?["hangwatch_report_id"] }).count == 4)
        #expect(received.allSatisfy { $0.record["max_in_flight"] as? Int == 1 })

        // Another live process holding the lock: this one backs off with `busy`.
        let lock = database.path + "/" + ReportUploader.lockName
        try Data("1\n".utf8).write(to: URL(fileURLWithPath: lock))
        #expect(throws: UploadError.busy) { try ReportUploader(database: database, options: settings).uploadPending() }
        // A lock left by a dead process is taken over.
        try Data("999999999\n".utf8).write(to: URL(fileURLWithPath: lock))
        #expect(try ReportUploader(database: database, options: settings).uploadPending().isEmpty)
    }
}
