// A stored report's hang outcome, read back (minidumps of reports kept without their dump): the
// `hang.outcome` annotation the report carries (HangOutcome, ReportNames.swift), else its kind.
import HangwatchSnapshot

extension HangOutcome {
    /// The outcome `report` says: its annotation when it agrees with its kind; else `recovered`
    /// for a `hang` report and `ongoing` for a fatal one that does not spell it (as its dump
    /// did: a fatal hang `hangwatch run` reported before the outcome was one type).
    package init(reportedBy report: Report) {
        let recovered = report.kind == .hang
        if let spelled = report.annotations[Self.annotationKey].flatMap(Self.init(rawValue:)), spelled.recovered == recovered {
            self = spelled
        } else {
            self = recovered ? .recovered : .ongoing
        }
    }
}
