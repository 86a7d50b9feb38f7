// The narrow seam between the watchdog and the DumpWithoutCrash pipeline: where captures come
// from, and the sink they go to (the database's staging area and intermediate dumps, or memory).
// Two implementations: DatabaseHangCapture (hangs become intermediate dumps in a database)
// and HangMonitorTesting's MemoryHangCapture (hangs stay in memory: no staging, no files).
import HangwatchCapture
import HangwatchDatabase
import HangwatchSnapshot

package protocol HangCapturing: Sendable {
    /// The database's staging area, where hangs are staged; nil keeps them in memory (nothing
    /// is staged or promoted, `hangwatch run` is not told, and a hang still going when the
    /// monitor stops is submitted as not recovered).
    var staging: StagingArea? { get }
    /// Captures every thread of this process (the caller marks the hung one).
    func captureAll(reason: CaptureReason) throws -> ProcessSnapshot
    /// One stack of one thread of this process, frames[0] the pc.
    func sample(tid: Int32) throws -> [UInt64]
    /// Hands a finished hang snapshot to the database as a report to process; returns where it went.
    func submit(_ snapshot: ProcessSnapshot) throws -> String
}
