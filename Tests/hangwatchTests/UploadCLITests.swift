// `hangwatch show --format minidump|svg|html` and `hangwatch upload`, run as the real
// executable against a real captured child and a real HTTP collector on loopback.
import Foundation
import Testing
import HangwatchReport
import HangwatchTestSupport

/// Runs the real `hangwatch` to its end (killed after two minutes: a CLI that hangs fails the
/// test instead of hanging the run).
func hangwatch(_ arguments: [String], environment: [String: String] = [:]) throws -> ProgramResult {
    var env = environment
    if env["HANGWATCH_UPLOAD_URL"] == nil { env["HANGWATCH_UPLOAD_URL"] = "" }
    return try runProgram(try productPath("hangwatch"), arguments, environment: env)
}

/// scripts/upload-test-server on a free loopback port.
final class CollectorProcess {
    let child: ChildProcess
    let port: Int
    let directory: String

    init(directory: String) throws {
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("scripts/upload-test-server").path
        self.directory = directory
        child = try ChildProcess("/usr/bin/python3", [script, "--dir", directory])
        let out = try child.waitForOutput("PORT ")
        port = Int(out.split(separator: "\n").first { $0.hasPrefix("PORT ") }?.dropFirst(5) ?? "") ?? 0
    }

    var url: String { "http://127.0.0.1:\(port)/submit" }

    var records: [[String: Any]] {
        let names = ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? [])
            .filter { $0.hasSuffix(".json") && !$0.hasPrefix(".") }.sorted()
        return names.compactMap { name in
            (try? Data(contentsOf: URL(fileURLWithPath: directory + "/" + name)))
                .flatMap { try? JSONSerialization.jsonObject(with: $0) as? [String: Any] }
        }
    }

    func stop() {
        child.signal(SIGKILL)
        _ = try? child.waitForExit(timeout: 10)
    }
}

@Suite("UploadCLI", .ownThread, .serialized)
struct UploadCLITests {
    /// A deadlocked child dumped with `hangwatch dump --save`; returns the report id.
    private func savedDump(database: String) throws -> (ChildProcess, String) {
        let child = try ChildProcess(product: "hangwatch-fixture-remote", ["deadlock"])
        try child.waitForOutput("READY")
        let dump = try hangwatch(["dump", "--pid", String(child.pid), "--save", "--database", database, "--format", "json"])
        #expect(dump.status == 0, "\(dump.stderr)")
        let report = try Report.decode(from: Data(dump.stdout.utf8))
        return (child, report.id)
    }

    @Test func showWritesMinidumpSVGAndHTML() throws {
        let directory = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(directory) }
        let database = directory + "/db"
        let (child, id) = try savedDump(database: database)
        defer { child.signal(SIGKILL) }

        let refused = try hangwatch(["show", id, "--database", database, "--format", "minidump"])
        #expect(refused.status != 0)
        #expect(refused.stderr.contains("--output"), "\(refused.stderr)")

        let dumpPath = directory + "/r.dmp"
        let shown = try hangwatch(["show", String(id.prefix(8)), "--database", database, "--format", "minidump", "--output", dumpPath])
        #expect(shown.status == 0, "\(shown.stderr)")
        let bytes = try Data(contentsOf: URL(fileURLWithPath: dumpPath))
        #expect(bytes.prefix(4) == Data("MDMP".utf8))
        // The kept intermediate dump supplied the stack windows (3 threads, up to 16 KiB each).
        #expect(bytes.count > 8 * 1024)
        var info = stat()
        #expect(stat(dumpPath, &info) == 0 && info.st_mode & 0o777 == 0o600)

        for (format, marker) in [("svg", "<svg xmlns"), ("html", "<!DOCTYPE html>")] {
            let result = try hangwatch(["show", id, "--database", database, "--format", format])
            #expect(result.status == 0, "\(result.stderr)")
            #expect(result.stdout.contains(marker))
            #expect(result.stdout.contains("deadlockTake"), "frames are named")
        }
    }

    @Test func uploadSendsPendingReportsAndKeepsThemWhenTheServerIsDown() throws {
        let directory = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(directory) }
        try FileManager.default.createDirectory(atPath: directory + "/server", withIntermediateDirectories: true)
        let database = directory + "/db"
        let (child, id) = try savedDump(database: database)
        defer { child.signal(SIGKILL) }

        let noURL = try hangwatch(["upload", "--database", database])
        #expect(noURL.status != 0 && noURL.stderr.contains("--url"), "\(noURL.stderr)")

        let collector = try CollectorProcess(directory: directory + "/server")
        let url = collector.url
        collector.stop()
        let down = try hangwatch(["upload", "--database", database, "--url", url])
        #expect(down.status == 1)
        #expect(down.stdout.contains("failed \(id): connection refused (attempt 1; retry after"), "\(down.stdout)")
        let status = try hangwatch(["upload", "--status", "--database", database])
        #expect(status.stdout.contains("\(id)  pending  attempts 1"), "\(status.stdout)")
        #expect(status.stdout.contains("last error: connection refused"))

        let up = try CollectorProcess(directory: directory + "/server")
        defer { up.stop() }
        let waiting = try hangwatch(["upload", "--database", database, "--url", up.url])
        #expect(waiting.status == 0 && waiting.stdout.contains("waiting \(id)"), "\(waiting.stdout)")
        let sent = try hangwatch(["upload", "--database", database, "--url", up.url, "--now"])
        #expect(sent.status == 0, "\(sent.stdout) \(sent.stderr)")
        let record = try #require(up.records.first)
        let crashID = try #require(record["crash_id"] as? String)
        #expect(sent.stdout.contains("uploaded \(id): CrashID=\(crashID)"), "\(sent.stdout)")
        let fields = try #require(record["fields"] as? [String: String])
        #expect(fields["prod"] == "hangwatch-fixture-remote" && fields["hangwatch_report_id"] == id)
        let after = try hangwatch(["upload", "--status", "--database", database])
        #expect(after.stdout.contains("\(id)  uploaded  CrashID=\(crashID)"), "\(after.stdout)")
    }
}
