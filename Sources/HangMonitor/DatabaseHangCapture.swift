// HangCapturing over capture + database only: a hang becomes an intermediate dump in the
// database (the deferred verb), processed into a symbolicated report later by
// `hangwatch process` or `DumpClient.processIntermediateDumps()`. No symbolication runs in the
// monitored program, so a server linking HangMonitor loads no libdw, libelf or network code.
import FoundationEssentials
import Glibc
import HangwatchPlatform
import HangwatchCapture
import HangwatchDatabase
import HangwatchSnapshot
import HangwatchSupervisorProtocol

struct DatabaseHangCapture: HangCapturing {
    let database: CrashReportDatabase
    let bundleID: String
    let captureOptions: CaptureOptions
    /// Applied to every capture, so what it leaves out is never staged nor stored.
    let redaction: Redaction

    /// Opens (creating if needed) the database and prepares capture now, not in the middle of
    /// the first hang (loads libunwind, installs the capture handlers).
    init(databasePath: String, bundleID: String, captureOptions: CaptureOptions = CaptureOptions(), redaction: Redaction = []) throws {
        try CrashReportDatabase.validateBundleID(bundleID)
        database = try CrashReportDatabase(path: databasePath)
        self.bundleID = bundleID
        self.captureOptions = captureOptions
        self.redaction = redaction
        try LiveCapture.prepare(options: captureOptions)
    }

    var staging: StagingArea? { database.stagingArea }

    func captureAll(reason: CaptureReason) throws -> ProcessSnapshot {
        try LiveCapture.captureProcess(reason: reason, bundleID: bundleID, annotations: annotations, options: captureOptions)
            .redacted(redaction)
    }

    /// The `hangwatch run` this process runs under, so the supervisor can tell its reports.
    private let annotations: [String: String] = RunIdentity.current(environment: ProcessInfo.processInfo.environment)
        .map { [RunIdentity.annotationKey: $0] } ?? [:]

    func sample(tid: Int32) throws -> [UInt64] { try LiveCapture.sampleStack(tid: tid, options: captureOptions) }

    /// A pending intermediate dump; its hang info (recovered or not) makes it a `hang` or a
    /// `fatal-hang` report when processed.
    func submit(_ snapshot: ProcessSnapshot) throws -> String {
        try database.writeIntermediateDump(snapshot, bundleID: bundleID)
    }
}
