// What a report is about, as stored reports spell it (`kind`, docs/report-schema.md): here, beside
// the capture reason that implies it, so that whoever reads stored reports' kinds — processing,
// and the promotion policy HangMonitor runs without linking the report model (HangwatchPromotion)
// — decodes this one type.

/// Why a report exists.
public enum ReportKind: String, Codable, Sendable, CaseIterable {
    /// The program asked for a dump (DumpWithoutCrash).
    case dump
    /// A watchdog saw a hang; the process was still alive when the report was made.
    case hang
    /// The process ended (killed) while hung: the staged hang dump was promoted.
    case fatalHang = "fatal-hang"
    /// A fatal signal.
    case crash
    /// Something outside ended the process — the OOM killer, an outside SIGKILL, a stop
    /// timeout — with no crash and no hang (schemaVersion 3; `Report.killed`, docs/killed.md).
    case killed
}

extension ReportKind {
    /// A hang that recovered is a `hang`; one that did not (the process died hung) is fatal.
    package init(implying reason: CaptureReason) {
        switch reason {
        case .dumpRequested: self = .dump
        case .hang(let info): self = info.recovered ? .hang : .fatalHang
        case .crash: self = .crash
        case .killed: self = .killed
        }
    }
}

/// Whose end a stored report describes: the few facts the processing stages decide from (did this
/// process crash, how did it end, which run's child was it), stored beside the report as
/// `<id>.subject` (CrashReportDatabase+Reports.swift) so that no stage decodes a rendered
/// report to learn them.
package struct ReportSubject: Codable, Sendable, Equatable {
    /// The report's kind.
    package var kind: ReportKind
    /// The process the report is of, as its capture saw it.
    package var pid: Int32
    /// The bundle id the report is filed under.
    package var bundleID: String
    /// The `hangwatch run` the report was made in or for (`Report.runID`, or the run id its
    /// process carried in its annotations); nil outside a run.
    package var runID: String?

    package init(kind: ReportKind, pid: Int32, bundleID: String, runID: String?) {
        self.kind = kind
        self.pid = pid
        self.bundleID = bundleID
        self.runID = runID
    }
}
