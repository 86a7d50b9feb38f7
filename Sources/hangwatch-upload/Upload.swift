// `hangwatch upload`: its own executable, so that only uploading loads libcurl
// (with its TLS, Kerberos and LDAP libraries); `hangwatch` execs it.
import ArgumentParser
import Foundation
import HangwatchCommandLine
import HangwatchDatabase
import HangwatchPlatform
import HangwatchReport
import HangwatchUpload

@main
struct Upload: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "hangwatch upload",
        abstract: "Send pending reports to a crash server (Crashpad's upload protocol).",
        discussion: """
            Each pending report is POSTed as multipart/form-data: the minidump in \
            `upload_file_minidump` (<id>.dmp), the annotations as fields, `prod`, `ver`, `guid` \
            (this database's client id) and the JSON report as `hangwatch_report` — what Sentry, \
            Backtrace and Socorro-style collectors accept. The server's answer is kept as the \
            report's server id and the report moves to completed. A failed report stays pending \
            and is retried later with exponential backoff; after --max-attempts it is marked failed \
            (see --status, retry with --retry-failed). Nothing is uploaded unless you run this (or \
            the program calls startProcessingPendingReports). Details: docs/upload.md.

            Examples:
              hangwatch upload --url https://sentry.example.com/api/42/minidump/?sentry_key=KEY
              hangwatch upload --url http://127.0.0.1:8080/submit --id 3fa2 --now
              hangwatch upload --status
            """
    )

    @OptionGroup var global: GlobalOptions
    @OptionGroup var redact: RedactionOption

    @Option(help: "Where to POST reports (default: HANGWATCH_UPLOAD_URL).")
    var url: String?

    @Option(name: .customLong("id"), help: "Upload only this report (id or unique prefix); repeatable.")
    var ids: [String] = []

    @Flag(help: "Try reports whose retry time has not come yet.")
    var now = false

    @Flag(name: .customLong("retry-failed"), help: "Also try reports marked failed.")
    var retryFailed = false

    @Flag(help: "Print each pending report's upload state and exit.")
    var status = false

    @Option(help: "`prod` field (default: the report's prod annotation, else its bundle id).")
    var product: String?

    @Option(name: .customLong("product-version"), help: "`ver` field (default: the report's ver/version annotation).")
    var productVersion: String?

    @Option(parsing: .unconditional, help: "Seconds one upload may take.")
    var timeout: Double = 30

    @Option(name: .customLong("max-megabytes"), parsing: .unconditional, help: "Never send a report (minidump + JSON) larger than this.")
    var maxMegabytes: Double = 16

    @Option(name: .customLong("max-attempts"), parsing: .unconditional, help: "Mark a report failed after this many failed attempts.")
    var maxAttempts: Int = 8

    @Option(name: .customLong("rate-limit"), parsing: .unconditional, help: "Upload attempts per rolling hour, all processes together (0: no limit).")
    var rateLimit: Int = 20

    @Flag(help: "Send the body gzip-compressed (Content-Encoding: gzip), for servers that accept it.")
    var gzip = false

    func validate() throws {
        guard timeout > 0, timeout.isFinite else { throw ValidationError("--timeout must be a positive number of seconds, not \(timeout)") }
        guard maxMegabytes > 0, maxMegabytes.isFinite else { throw ValidationError("--max-megabytes must be a positive number of MiB, not \(maxMegabytes)") }
        guard maxAttempts >= 1 else { throw ValidationError("--max-attempts must be at least 1, not \(maxAttempts)") }
        guard rateLimit >= 0 else { throw ValidationError("--rate-limit must be 0 (no limit) or more, not \(rateLimit)") }
        if let url, Self.httpURL(url) == nil { throw ValidationError("--url: '\(url)' is not an http(s) URL") }
    }

    /// `text` as an http or https URL with a host; nil for anything else.
    static func httpURL(_ text: String) -> URL? {
        guard let parsed = URL(string: text), let scheme = parsed.scheme?.lowercased(), ["http", "https"].contains(scheme),
              parsed.host != nil else { return nil }
        return parsed
    }

    func run() throws {
        let database = try openDatabase(global)
        if status {
            try printStatus(database)
            return
        }
        let target = try uploadURL()
        let selected = try ids.map { prefix -> String in
            do { return try database.findReport(prefix).id } catch { throw CLIError("\(error)") }
        }
        var options = UploadOptions(url: target, product: product, version: productVersion, timeoutSeconds: timeout,
                                    maxReportBytes: Int(maxMegabytes * 1_048_576), maxAttempts: maxAttempts,
                                    maxUploadsPerHour: rateLimit)
        options.gzip = gzip
        options.redaction = try redact.redaction(global)
        let outcomes: [UploadOutcome]
        do {
            outcomes = try ReportUploader(database: database, options: options)
                .uploadPending(ids: selected.isEmpty ? nil : selected, ignoreBackoff: now, retryFailed: retryFailed)
        } catch let error as UploadError {
            throw CLIError(error.description)
        }
        if outcomes.isEmpty { print("no pending reports in \(database.path)") }
        var failures = 0
        for outcome in outcomes {
            switch outcome.result {
            case .uploaded(let serverID):
                // The server's answer is the server's: printed escaped.
                print(Text.singleLine("uploaded \(outcome.reportID): \(serverID.isEmpty ? "(empty answer)" : serverID)"))
            case .failed(let error, let attempts, let retryAt, let gaveUp):
                failures += 1
                let next = gaveUp ? "marked failed, kept" : retryAt.map { "retry after \(Self.time($0))" } ?? "kept"
                print(Text.singleLine("failed \(outcome.reportID): \(error) (attempt \(attempts); \(next))"))
            case .waiting(let until):
                print("waiting \(outcome.reportID): next attempt after \(Self.time(until)) (--now to try anyway)")
            case .markedFailed:
                print("skipped \(outcome.reportID): marked failed (--retry-failed to try again)")
            case .rateLimited:
                print("deferred \(outcome.reportID): rate limit of \(rateLimit) uploads per hour reached")
            }
        }
        if failures > 0 { throw ExitCode(1) }
    }

    private func uploadURL() throws -> URL {
        guard let text = url ?? ProcessInfo.processInfo.environment["HANGWATCH_UPLOAD_URL"], !text.isEmpty else {
            throw CLIError("no upload URL: give --url URL or set HANGWATCH_UPLOAD_URL")
        }
        guard let parsed = Self.httpURL(text) else { throw CLIError("HANGWATCH_UPLOAD_URL: '\(text)' is not an http(s) URL") }
        return parsed
    }

    private func printStatus(_ database: CrashReportDatabase) throws {
        let reports = try database.listReports()
        if reports.isEmpty { print("no reports in \(database.path)") }
        for report in reports {
            if report.state == .completed {
                print(Text.singleLine("\(report.id)  uploaded  \(report.serverID ?? "(not uploaded: completed locally)")"))
                continue
            }
            let state = database.uploadState(id: report.id)
            var line = "\(report.id)  \(state.failed ? "failed" : "pending")  attempts \(state.attempts)"
            if let next = state.nextAttempt { line += ", next after \(Self.time(next))" }
            if let error = state.lastError { line += ", last error: \(error)" }
            print(Text.singleLine(line))
        }
    }

    static func time(_ date: Date) -> String {
        ReportFormatting.timestamp(date.timeIntervalSince1970)
    }
}
