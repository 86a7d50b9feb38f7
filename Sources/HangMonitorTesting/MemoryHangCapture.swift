// Where a hang limit's monitor puts its hangs: in memory. No database, no staging, no file
// is created; what the monitor submits (a recovered hang, or one still going when it stops)
// is kept here until the limit's scope reads it.
import Synchronization
import HangMonitor
import HangwatchCapture
import HangwatchSnapshot
import HangwatchDatabase

final class MemoryHangCapture: HangCapturing {
    private let submitted = Mutex<[ProcessSnapshot]>([])
    private let bundleID: String

    /// Prepares capture now (libunwind, the capture handlers), not during the first hang. The
    /// first limit of a process also captures once, before its body runs, so that the first
    /// hang's capture (and the sampling that starts after it) costs what later ones do.
    init(bundleID: String) throws {
        self.bundleID = bundleID
        try LiveCapture.prepare()
        if !Self.warmedUp.exchange(true, ordering: .relaxed) {
            _ = try? LiveCapture.captureProcess(reason: .dumpRequested, bundleID: bundleID)
        }
    }

    private static let warmedUp = Atomic<Bool>(false)

    /// The hangs submitted so far, oldest first; takes them.
    func takeSubmitted() -> [ProcessSnapshot] { submitted.withLock { list in defer { list.removeAll() }; return list } }

    var staging: StagingArea? { nil }

    func captureAll(reason: CaptureReason) throws -> ProcessSnapshot {
        try LiveCapture.captureProcess(reason: reason, bundleID: bundleID)
    }

    func sample(tid: Int32) throws -> [UInt64] { try LiveCapture.sampleStack(tid: tid) }

    func submit(_ snapshot: ProcessSnapshot) throws -> String {
        submitted.withLock { $0.append(snapshot) }
        return "memory"
    }
}
