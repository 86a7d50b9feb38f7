// Redaction end to end: a job whose argv, stderr and environment-like tokens carry a secret is
// captured and killed by `hangwatch run --redact`, and the secret is in nothing hangwatch keeps
// or would send: the report's JSON and text, the dump kept beside it, and the minidump made
// from it. The same run without --redact is the control (the secret is there).
import DumpWithoutCrash
import HangwatchDatabase
import HangwatchReport
import HangwatchSnapshot
import Foundation
import HangwatchTestSupport
import Testing

@Suite("Redaction", .ownThread)
struct RedactionTests {
    static let secret = "hunter2-6f1c"
    /// Prints the secret as a KEY=VALUE token on stderr, carries it in argv (a flag value and a
    /// positional argument), then spins (so the shell itself is the culprit) until the timeout.
    static let script = "echo \"starting with API_TOKEN=\(secret)\" >&2; while :; do :; done"

    func run(_ redact: [String]) throws -> (database: TemporaryDatabase, report: Report) {
        let database = try TemporaryDatabase()
        let result = try runHangwatch(["run", "--timeout", "1"] + redact + ["--", "/bin/sh", "-c", Self.script, "sh", "--password=\(Self.secret)", Self.secret],
                                      database: database)
        #expect(result.status == 124, "\(result.stderr)")
        let reports = try database.reports()
        try #require(reports.count == 1)
        return (database, reports[0])
    }

    /// Every byte hangwatch keeps for the report, and the minidump it would upload.
    func everythingKept(_ database: TemporaryDatabase, _ report: Report) throws -> [(String, Data)] {
        let store = try CrashReportDatabase(path: database.path)
        let minidumpPath = database.path + "/out.dmp"
        let result = try runHangwatch(["show", report.id, "--format", "minidump", "--output", minidumpPath], database: database)
        #expect(result.status == 0, "\(result.stderr)")
        return [("report JSON", try store.readReport(id: report.id)),
                ("report text", Data(try #require(try store.readReportText(id: report.id)).utf8)),
                ("kept dump", try #require(try store.readReportDump(id: report.id))),
                ("minidump", try Data(contentsOf: URL(fileURLWithPath: minidumpPath)))]
    }

    @Test func withoutRedactionTheSecretIsEverywhere() throws {
        let (database, report) = try run([])
        #expect(report.process.arguments.contains(Self.secret))
        #expect(report.context?.stderrTail?.contains("API_TOKEN=\(Self.secret)") == true)
        for (what, bytes) in try everythingKept(database, report) {
            #expect(bytes.range(of: Data(Self.secret.utf8)) != nil, "\(what) should carry the secret without --redact")
        }
    }

    @Test func redactAllLeavesItOutOfEverythingKept() throws {
        let (database, report) = try run(["--redact", "all"])
        #expect(report.process.arguments.first == "/bin/sh")
        #expect(report.process.arguments.dropFirst().allSatisfy { $0 == "<redacted>" })
        #expect(report.context?.stderrTail == nil)
        #expect(report.annotations["hangwatch.redacted"] == "arguments,key-values,stderr,stack-memory,kernel-log")
        #expect(report.redacted == ["arguments", "key-values", "stderr", "stack-memory", "kernel-log"])
        #expect(report.processTree?.processes.allSatisfy { $0.arguments.dropFirst().allSatisfy { $0 == "<redacted>" } } ?? true)
        for (what, bytes) in try everythingKept(database, report) {
            #expect(bytes.range(of: Data(Self.secret.utf8)) == nil, "\(what) carries the secret")
        }
        #expect(!report.threads.isEmpty && report.threads.allSatisfy { !$0.frames.isEmpty }, "the unwound stacks stay")
        let dump = try #require(try CrashReportDatabase(path: database.path).readReportDump(id: report.id))
        let kept = try IntermediateDumpReader.read(bytes: [UInt8](dump))
        #expect(!kept.threads.isEmpty && kept.threads.allSatisfy { $0.stackMemory.isEmpty }, "the stack windows are left out")
    }

    /// key-values alone: the flag keeps its name, the positional secret (not a KEY=VALUE) stays,
    /// the stderr tail keeps its text with the value replaced.
    @Test func keyValuesKeepKeysAndEverythingElse() throws {
        let (_, report) = try run(["--redact", "key-values"])
        #expect(report.process.arguments.contains("--password=<redacted>"))
        #expect(report.process.arguments.contains(Self.secret))
        #expect(report.context?.stderrTail?.contains("starting with API_TOKEN=<redacted>") == true)
    }

    @Test func theConfigurationAndAnUnknownNameAreHonoured() throws {
        let database = try TemporaryDatabase()
        let bad = try runHangwatch(["run", "--redact", "argv", "--", "/bin/true"], database: database)
        #expect(bad.status != 0 && bad.stderr.contains("unknown redaction \"argv\"") && bad.stderr.contains("stack-memory"), "\(bad.stderr)")
        // HANGWATCH_REDACT, as a config file's `redact` would: `hangwatch process` redacts what it processes.
        let client = try DumpClient(databasePath: database.path, bundleID: "redaction-test")
        client.annotations = ["login": "user=admin secret=\(Self.secret)"]
        try client.dumpWithoutCrashAndDeferProcessing()
        let processed = try ChildProcess(product: "hangwatch", ["process", "--database", database.path],
                                         environment: ["HANGWATCH_REDACT": "key-values,stack-memory"])
        #expect(try processed.waitForExit(timeout: 60) == 0, "\(processed.stderr)")
        let report = try #require(try database.reports().first)
        #expect(report.annotations["login"] == "user=<redacted> secret=<redacted>")
        #expect(report.annotations["hangwatch.redacted"] == "key-values,stack-memory")
    }
}
