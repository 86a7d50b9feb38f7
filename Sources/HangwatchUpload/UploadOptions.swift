// Upload settings and the per-report retry state kept in the database (docs/upload.md).
import HangwatchMinidump
import HangwatchReport
import HangwatchDatabase
import HangwatchSnapshot
import Foundation

/// Where and how reports are uploaded (Crashpad's protocol, docs/upload.md), and the limits
/// that keep a failing or slow server from costing more than it should.
public struct UploadOptions: Sendable, Equatable {
    /// Where reports are POSTed (Crashpad's protocol: multipart/form-data).
    public var url: URL
    /// `prod` field; nil: the report's "prod" annotation, else its bundle id.
    public var product: String?
    /// `ver` field; nil: the report's "ver" or "version" annotation, else "unknown".
    public var version: String?
    /// Seconds one request may take (connect + send + answer) before it counts as a failure.
    public var timeoutSeconds: Double
    /// Reports whose minidump and JSON together are larger are never sent (kept, marked).
    public var maxReportBytes: Int
    /// Wait after the first failure; doubled after each further failure, up to `maxBackoffSeconds`.
    public var initialBackoffSeconds: Double
    /// The longest wait between two attempts of one report.
    public var maxBackoffSeconds: Double
    /// After this many failed attempts a report is marked failed and no longer retried
    /// automatically (`hangwatch upload --retry-failed` tries again). It is never deleted.
    public var maxAttempts: Int
    /// Upload attempts allowed per rolling hour, across every process sharing the database
    /// (0: no limit). Reports over the limit wait for the next pass.
    public var maxUploadsPerHour: Int
    /// Attach the JSON report as an extra part ("hangwatch_report").
    public var attachJSONReport: Bool
    /// Send the multipart body gzip-compressed (`Content-Encoding: gzip`), as Crashpad does
    /// when its server accepts it. Off by default: not every collector decodes it.
    public var gzip: Bool = false
    /// What to leave out of what is sent, whatever the stored report holds (a report made
    /// before a redaction was configured): the fields, the minidump and the JSON report.
    public var redaction: Redaction = []

    /// Options; each parameter is the property of the same name.
    public init(url: URL, product: String? = nil, version: String? = nil, timeoutSeconds: Double = 30,
                maxReportBytes: Int = 16 << 20, initialBackoffSeconds: Double = 60, maxBackoffSeconds: Double = 6 * 3600,
                maxAttempts: Int = 8, maxUploadsPerHour: Int = 20, attachJSONReport: Bool = true) {
        self.url = url
        self.product = product
        self.version = version
        self.timeoutSeconds = timeoutSeconds
        self.maxReportBytes = maxReportBytes
        self.initialBackoffSeconds = initialBackoffSeconds
        self.maxBackoffSeconds = maxBackoffSeconds
        self.maxAttempts = maxAttempts
        self.maxUploadsPerHour = maxUploadsPerHour
        self.attachJSONReport = attachJSONReport
    }

    /// The wait after `attempts` failures: initial × 2^(attempts-1), capped.
    public func backoff(afterAttempts attempts: Int) -> Double {
        guard attempts > 0 else { return 0 }
        let doubled = initialBackoffSeconds * pow(2, Double(min(attempts - 1, 62)))
        return min(doubled.isFinite ? doubled : maxBackoffSeconds, maxBackoffSeconds)
    }
}

/// What the uploader remembers about one pending report (`reports/pending/<id>.upload`).
package struct UploadState: Codable, Sendable, Equatable {
    /// Failed attempts so far.
    package var attempts: Int = 0
    package var lastAttempt: Date?
    /// Not retried automatically before this time.
    package var nextAttempt: Date?
    /// Why the last attempt failed ("HTTP 500: …", "connection refused", "timed out", …).
    package var lastError: String?
    /// Gave up (too many attempts, or too large): kept, marked, not retried automatically.
    package var failed: Bool = false

    package init() {}
}

extension CrashReportDatabase {
    /// The retry state of pending report `id` (a fresh state when it was never tried).
    package func uploadState(id: String) -> UploadState {
        guard let data = try? pending.readFile(id + Self.uploadStateSuffix, limit: 64 << 10) else { return UploadState() }
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        return (try? decoder.decode(UploadState.self, from: data)) ?? UploadState()
    }

    func writeUploadState(_ state: UploadState, id: String) throws {
        try DatabaseNames.validateReportID(id)
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        // Only while the report is pending: a completed report has no retry state.
        guard try pending.entry(id + Self.jsonSuffix) != nil else { return }
        try pending.writeAtomically(id + Self.uploadStateSuffix, try encoder.encode(state))
    }
}
