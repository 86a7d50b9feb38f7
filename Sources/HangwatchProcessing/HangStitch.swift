// The one stitch step (KSCrash's stitchReport): how a hang staged in the database joins a
// report. A hang is staged once (StagingArea: its dump, a sidecar with its timing, its
// aggregated samples) and joins exactly one report, one of three ways:
//   - promoted: its process died hung; the staged dump, promoted to intermediate/ (HangPromotion),
//     is the report's capture, and the sidecar makes it a fatal hang (DumpProcessor);
//   - superseded: its process crashed after the hang began; the crash report says of it in
//     `context.supersededHang` (DumpProcessor.store);
//   - adopted: `hangwatch run` captured the same hang of its child from outside and reports it
//     itself; the child's samples and its earlier start join that capture (RunReporter).
// The database only hands over the staged files' contents (StagedHangContents); what they make
// of the report is decided here.
import HangwatchDatabase
import HangwatchPromotion
import HangwatchReport
import HangwatchSnapshot

package enum HangStitch {
    /// The way a staged hang joins a report.
    package enum Way: Sendable {
        /// Its process died hung: the report's capture is the staged dump.
        case promoted
        /// Its process crashed at `crashTime` (the crash report's time, wall clock), after the hang began.
        case superseded(crashTime: Double)
        /// A supervisor captured the same hang itself: the report's capture is the supervisor's.
        case adopted
    }

    /// What `staged` makes of the report built from `snapshot` with `context`:
    /// - promoted: the snapshot's reason becomes the fatal hang the sidecar describes, lasting at
    ///   least last-seen − start (`hang.durationIsLowerBound`), with the samples and the
    ///   operations running when it began, its outcome `fatal` (the `hang.outcome` annotation of
    ///   its report);
    /// - superseded: `context.supersededHang` (its target, threshold, start, the time from its
    ///   start to the crash, its id);
    /// - adopted: the snapshot's hang takes the staged samples and the earlier of the two starts.
    package static func stitch(_ staged: StagedHangContents, _ way: Way, into snapshot: inout ProcessSnapshot,
                               context: inout Report.Context?) {
        let sidecar = staged.sidecar
        switch way {
        case .promoted:
            // The staged dump's own hang says which operations were running when it began.
            var running: [RunningOperation] = []
            if case .hang(let info) = snapshot.reason { running = info.operations }
            snapshot.reason = .hang(HangInfo(target: sidecar.target, thresholdSeconds: sidecar.thresholdSeconds,
                                             durationSeconds: sidecar.atLeastSeconds, outcome: .fatal, startTime: sidecar.startTime,
                                             samples: staged.samples, operations: running))
            snapshot.annotations["hang.durationIsLowerBound"] = "true"
            snapshot.annotations["hang.lastSeenTime"] = String(sidecar.lastSeenTime)
        case .superseded(let crashTime):
            var joined = context ?? Report.Context()
            joined.supersededHang = Report.SupersededHang(
                target: sidecar.target, thresholdSeconds: sidecar.thresholdSeconds,
                durationSeconds: max(0, crashTime - sidecar.startTime),
                startTime: Timestamp.millisecondResolution(sidecar.startTime), reportID: staged.id)
            context = joined
        case .adopted:
            guard case .hang(var info) = snapshot.reason else { return }
            info.samples = staged.samples
            info.startTime = min(info.startTime, sidecar.startTime)
            snapshot.reason = .hang(info)
        }
    }
}
