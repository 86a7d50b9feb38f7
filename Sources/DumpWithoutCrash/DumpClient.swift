// The client API, with Crashpad's verbs so Crashpad users recognise them:
//   dumpWithoutCrash                         capture + process now, returns the report
//   dumpWithoutCrashAndDeferProcessing       capture now into the database, process later
//   …AndDeferProcessing(atPath:)             capture to a path of the caller's, never picked up
//   processIntermediateDumps                 turn every pending dump into a report
//   processIntermediateDump(atPath:)         turn one dump file into a report
import HangwatchSymbolication
import HangwatchSnapshot
import HangwatchDatabase
import HangwatchCapture
import HangwatchReport
import HangwatchProcessing
import HangwatchMinidump
import HangwatchUpload
import HangwatchSupervisorProtocol
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Crashpad's verbs for this process: capture every thread (`dumpWithoutCrash` and its deferred
/// forms), keep the dumps and reports in a database, process dumps into symbolicated reports,
/// catch fatal signals (`installCrashHandlers`) and upload reports. One per bundle id and database.
public final class DumpClient: @unchecked Sendable {
    /// The crash-report database every dump and report of this client goes to.
    public let database: CrashReportDatabase
    /// Names this program's dumps and reports in a database several programs may share.
    public let bundleID: String
    /// How threads are captured (method, timeout, frames, stack window).
    public let captureOptions: CaptureOptions
    /// What every report of this client leaves out (and the dumps kept beside them).
    public let redaction: Redaction

    private let processor: DumpProcessor
    private let lock = NSLock()
    private var storedAnnotations: [String: String] = [:]

    /// Process-wide key/value pairs copied into every dump (version, build, user tier, …).
    /// Inside a `hangwatch run`, every dump also carries the run's id, whatever this holds.
    public var annotations: [String: String] {
        get { lock.withLock { storedAnnotations } }
        set {
            lock.withLock { storedAnnotations = newValue }
            crashAnnotationsDidChange(dumpAnnotations)  // crash handler: re-prepare its annotation bytes
        }
    }

    /// The `hangwatch run` this process belongs to (RunIdentity), kept apart from `annotations`
    /// so that setting them cannot drop it: the run finds its child's reports by it.
    private let runID: String?

    /// What every dump of this client carries: `annotations` and the run id.
    var dumpAnnotations: [String: String] {
        guard let runID else { return annotations }
        return annotations.merging([RunIdentity.annotationKey: runID]) { $1 }
    }

    /// Opens (creating if needed) the database and prepares capture (loads libunwind,
    /// installs the capture signal handlers, preallocates per-thread slots).
    /// `redaction`: what this client's dumps and reports leave out (applied at capture and
    /// when processing, so also to minidumps and uploads).
    public init(databasePath: String, bundleID: String, captureOptions: CaptureOptions = CaptureOptions(),
                redaction: Redaction = []) throws {
        try DatabaseNames.validateBundleID(bundleID)
        self.database = try CrashReportDatabase(path: databasePath)
        self.processor = DumpProcessor(database: database, redaction: redaction)
        self.redaction = redaction
        self.bundleID = bundleID
        self.captureOptions = captureOptions
        self.runID = RunIdentity.current(environment: ProcessInfo.processInfo.environment)
        try LiveCapture.prepare(options: captureOptions)
    }

    // MARK: - Capture

    /// Captures every thread and processes the capture at once: the report is in the
    /// database when this returns. Processing happens in memory; a crash during it loses
    /// this report (use the deferred verb where that matters).
    @discardableResult
    public func dumpWithoutCrash() throws -> Report {
        let snapshot = try capture(reason: .dumpRequested)
        return try store(snapshot, id: UUID().uuidString.lowercased())
    }

    /// Captures every thread into a pending intermediate dump; `processIntermediateDumps()`
    /// (in this or any process sharing the database) turns it into a report later.
    /// Returns the dump's path.
    @discardableResult
    public func dumpWithoutCrashAndDeferProcessing() throws -> String {
        try deferProcessing(of: capture(reason: .dumpRequested))
    }

    /// Captures every thread into `path` (0600, replaced atomically). The database never
    /// picks this file up: the caller decides whether to process or delete it (this is how
    /// a hang monitor stages a dump it may throw away).
    public func dumpWithoutCrashAndDeferProcessing(atPath path: String) throws {
        try write(capture(reason: .dumpRequested), toPath: path)
    }

    /// Turns every finished (or abandoned) intermediate dump in the database into a report.
    /// Dumps that cannot be parsed are moved to `failed/`.
    @discardableResult
    public func processIntermediateDumps() throws -> [Report] {
        try processor.processIntermediateDumps()
    }

    /// Processes one dump file (e.g. one written with `…AndDeferProcessing(atPath:)`) into a
    /// report stored in the database. The file itself is left where it is.
    @discardableResult
    public func processIntermediateDump(atPath path: String) throws -> Report {
        try processIntermediateDump(atPath: path, kind: nil)
    }

    // MARK: - Package-internal (HangMonitor, hangwatch)

    /// Captures every thread of this process for `reason`, with the client's annotations and run id.
    package func capture(reason: CaptureReason) throws -> ProcessSnapshot {
        try LiveCapture.captureProcess(reason: reason, bundleID: bundleID, annotations: dumpAnnotations, options: captureOptions)
            .redacted(redaction)
    }

    /// Writes `snapshot` as an intermediate dump at `path` (temp file + rename, 0600, no symlinks followed).
    package func write(_ snapshot: ProcessSnapshot, toPath path: String) throws {
        try IntermediateDumpFiles.write(snapshot, toPath: path)
    }

    package func deferProcessing(of snapshot: ProcessSnapshot) throws -> String {
        try database.writeIntermediateDump(snapshot, bundleID: bundleID)
    }

    /// `kind` overrides what the snapshot implies (a staged hang found after the process
    /// died is a fatal hang); `context` is attached to the report.
    package func processIntermediateDump(atPath path: String, kind: ReportKind?, context: Report.Context? = nil) throws -> Report {
        try processor.processIntermediateDump(atPath: path, kind: kind, context: context)
    }

    /// Symbolicates `snapshot` and writes the report (JSON + text) to the database.
    package func store(_ snapshot: ProcessSnapshot, id: String, kind: ReportKind? = nil, context: Report.Context? = nil) throws -> Report {
        try processor.store(snapshot, id: id, kind: kind, context: context)
    }
}
