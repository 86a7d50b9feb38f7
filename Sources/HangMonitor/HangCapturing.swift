// The narrow seam between the watchdog and the DumpWithoutCrash pipeline: everything the
// monitor needs from capture, the intermediate dump and the database, and nothing else.
import HangwatchCapture
import HangwatchDatabase
import HangwatchSnapshot

/// A report already in the database that may supersede a staged hang.
struct DatabaseReportReference: Sendable, Equatable {
    /// Path (or id) of the report or pending dump, as shown to the user.
    var location: String
    /// Wall-clock creation time, seconds since 1970.
    var createdAt: Double
    /// Set when it is a stored (processed) report.
    var reportID: String? = nil
}

/// A staged hang's timing, attached to the crash report that superseded it.
struct SupersededHangContext: Sendable, Equatable {
    var target: String
    var thresholdSeconds: Double
    var durationSeconds: Double
    /// Seconds since 1970.
    var startTime: Double
    var sampleCount: Int
}

protocol HangCapturing: Sendable {
    /// `<database>/staging`: where hangs are staged.
    var stagingDirectory: String { get }
    /// Captures every thread of this process (the caller marks the hung one).
    func captureAll(reason: CaptureReason) throws -> ProcessSnapshot
    /// One stack of one thread of this process, frames[0] the pc.
    func sample(tid: Int32) throws -> [UInt64]
    /// Writes `snapshot` as an intermediate dump at `path` (DumpWithoutCrashAndDeferProcessingAtPath).
    func stage(_ snapshot: ProcessSnapshot, atPath path: String) throws
    /// Reads a staged dump back (possibly incomplete).
    func loadStaged(atPath path: String) throws -> ProcessSnapshot
    /// Hands a finished hang snapshot to the database as a report to process; returns where it went.
    func submit(_ snapshot: ProcessSnapshot) throws -> String
    /// Crash (non-hang) reports or pending dumps of `bundleID` created after `time`.
    func crashReports(bundleID: String, newerThan time: Double) throws -> [DatabaseReportReference]
    /// Attaches a staged hang's timing to a crash report as context.
    func attachContext(_ context: SupersededHangContext, to report: DatabaseReportReference) throws
}
