// The narrow seam between the watchdog and the DumpWithoutCrash pipeline: everything the
// monitor needs from capture, the intermediate dump and the database, and nothing else.
// Two implementations: DatabaseHangCapture (hangs become intermediate dumps in a database)
// and HangMonitorTesting's MemoryHangCapture (hangs stay in memory: no staging, no files).
import HangwatchCapture
import HangwatchDatabase
import HangwatchSnapshot

/// A staged hang's timing, attached to the crash report that superseded it.
package struct SupersededHangContext: Sendable, Equatable {
    package var target: String
    package var thresholdSeconds: Double
    package var durationSeconds: Double
    /// Seconds since 1970.
    package var startTime: Double
    package var sampleCount: Int
}

package protocol HangCapturing: Sendable {
    /// The database's staging area, where hangs are staged; nil keeps them in memory (nothing
    /// is staged or promoted, `hangwatch run` is not told, and a hang still going when the
    /// monitor stops is submitted as not recovered).
    var staging: StagingArea? { get }
    /// Captures every thread of this process (the caller marks the hung one).
    func captureAll(reason: CaptureReason) throws -> ProcessSnapshot
    /// One stack of one thread of this process, frames[0] the pc.
    func sample(tid: Int32) throws -> [UInt64]
    /// Writes `snapshot` as an intermediate dump at `path` (DumpWithoutCrashAndDeferProcessingAtPath).
    func stage(_ snapshot: ProcessSnapshot, atPath path: String) throws
    /// Hands a finished hang snapshot to the database as a report to process; returns where it went.
    func submit(_ snapshot: ProcessSnapshot) throws -> String
    /// Crash (non-hang) reports or pending dumps of `bundleID` created after `time`.
    func crashReports(bundleID: String, newerThan time: Double) throws -> [DatabaseReportReference]
    /// Attaches a staged hang's timing to a crash report as context.
    func attachContext(_ context: SupersededHangContext, to report: DatabaseReportReference) throws
}
