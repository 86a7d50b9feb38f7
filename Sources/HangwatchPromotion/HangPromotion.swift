// What becomes of a hang whose process died while it was staged (docs/hang-monitor.md, "Fatal
// hangs"): the promotion policy. The database (StagingArea) lists orphaned hangs with their
// leases held, moves a staged dump into intermediate/ and removes a staged hang; this decides,
// for each one, which of those happens:
//   - a crash of the same process after the hang began is stored already: the crash supersedes
//     the hang, which goes (its crash report had no chance to stitch it: KSCrash's stitchReport
//     is HangStitch, HangwatchProcessing);
//   - that crash's dump still waits to be processed: the hang stays staged, for that dump's
//     processor to stitch into the crash report;
//   - otherwise the hang's dump is promoted, as written, to a fatal-hang dump in intermediate/,
//     which any processor turns into a report (joining the sidecar and samples, HangStitch).
// It runs in a HangMonitor starting (its own bundle id) and in every processor (any bundle id),
// so it lives in its own target, without symbolication: a HangMonitor links neither libdw nor
// libelf (Tests/HangMonitorTests/MonitorOnlyLinkageTests.swift).
import HangwatchDatabase
import HangwatchSnapshot

/// What promoting one orphaned hang came to.
package enum StagedHangOutcome: Sendable {
    /// Now a fatal-hang dump in intermediate/ (`dumpPath`, which is `dump`); it lasted at least
    /// `atLeastSeconds`.
    case promoted(HangSidecar, atLeastSeconds: Double, dumpPath: String, dump: DumpKey)
    /// The same process crashed after the hang began and its crash report is stored already:
    /// the crash supersedes the hang, which is removed.
    case supersededByCrash(HangSidecar, crash: String)
    /// The same process crashed after the hang began and the crash dump waits to be processed:
    /// left staged, for that dump's processor to stitch (`DumpProcessor.store`).
    case awaitingCrashDump(HangSidecar, crashDump: String)
    /// Kept in staging, its lease let go: a later processor may manage (nothing is lost).
    case failed(HangSidecar, Error)
}

package struct HangPromotion: Sendable {
    let database: CrashReportDatabase

    package init(database: CrashReportDatabase) { self.database = database }

    /// Every orphaned hang (of `bundleID`, or of any bundle) becomes a fatal-hang dump in
    /// intermediate/ — or goes, when a crash of its own process after it began supersedes it.
    /// Sidecars whose promoted dump is gone (processed, or failed) are removed first.
    @discardableResult
    package func promoteOrphans(bundleID: String? = nil) -> [StagedHangOutcome] {
        let staging = database.stagingArea
        staging.removeLeftovers(bundleID: bundleID)
        return staging.orphanedHangs(bundleID: bundleID).compactMap { decide($0, staging: staging) }
    }

    /// One orphaned hang, its lease held here; nil when another processor promoted it first.
    private func decide(_ staged: StagedHang, staging: StagingArea) -> StagedHangOutcome? {
        let sidecar = staged.sidecar
        if let crash = ProcessEndings(database: database).crash(ofProcess: sidecar.pid, bundleID: sidecar.bundleID,
                                                                 after: sidecar.startTime) {
            guard crash.reportID != nil else {
                staging.release([staged])
                return .awaitingCrashDump(sidecar, crashDump: crash.location)
            }
            staging.remove(staged)
            return .supersededByCrash(sidecar, crash: crash.location)
        }
        do {
            guard let path = try staging.promote(staged) else { return nil }
            return .promoted(sidecar, atLeastSeconds: sidecar.atLeastSeconds, dumpPath: path, dump: staged.promotedKey)
        } catch {
            return .failed(sidecar, error)
        }
    }
}

extension HangSidecar {
    /// How long the hang lasted at least: from its start to the last time its monitor saw it
    /// hung, and never less than the threshold it was detected at.
    package var atLeastSeconds: Double { max(lastSeenTime - startTime, thresholdSeconds) }
}
