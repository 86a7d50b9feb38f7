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
