// How a process ended, as the database tells it: the first report — stored, or a dump still
// waiting in intermediate/ or processing/ — of a crash (which supersedes a hang that process had
// staged, HangPromotion) or of any end (a crash, a fatal hang, a kill: a run record of that
// process then needs no `killed` report, RunVerdict in HangwatchProcessing). Report kinds are
// judged here, in processing, never in the database: a stored report by the subject kept beside
// it (`ReportSubject`, never the report itself), a waiting dump by the kind its capture reason
// implies.
import HangwatchDatabase
import HangwatchSnapshot
import FoundationEssentials

/// A report already in the database (or a dump waiting for processing) that tells how a process ended.
package struct ReportedEnding: Sendable, Equatable {
    /// Path of the report or pending dump, as shown to the user.
    package var location: String
    /// Wall-clock creation time, seconds since 1970.
    package var createdAt: Double
    /// Set when it is a stored (processed) report.
    package var reportID: String? = nil

    package init(location: String, createdAt: Double, reportID: String? = nil) {
        self.location = location
        self.createdAt = createdAt
        self.reportID = reportID
    }
}

package struct ProcessEndings: Sendable {
    let database: CrashReportDatabase

    package init(database: CrashReportDatabase) { self.database = database }

    /// The first crash of process `pid` of `bundleID` after `time`: a stored crash report
    /// (`reportID` set), or a crash dump not yet processed (hang dumps there are never crashes).
    /// A dump still being written (`.locked`, not empty) that cannot be read yet counts as a
    /// crash of that process: the crash handler's.
    package func crash(ofProcess pid: Int32, bundleID: String, after time: Double) -> ReportedEnding? {
        first(of: [.crash], pid: pid, bundleID: bundleID, runID: nil, after: time)
    }

    /// The first report after `time` that says how process `pid` ended — a crash, a fatal hang or
    /// a kill — stored, or a dump of one waiting to be processed; of `bundleID`, or made by the
    /// `hangwatch run` `runID` (whose reports name the child by its executable).
    package func ending(ofProcess pid: Int32, bundleID: String, runID: String?, after time: Double) -> ReportedEnding? {
        first(of: [.crash, .fatalHang, .killed], pid: pid, bundleID: bundleID, runID: runID, after: time)
    }

    private func first(of kinds: Set<ReportKind>, pid: Int32, bundleID: String, runID: String?, after time: Double) -> ReportedEnding? {
        (stored(of: kinds, pid: pid, bundleID: bundleID, runID: runID, after: time)
            + waiting(of: kinds, pid: pid, bundleID: bundleID, after: time)).min { $0.createdAt < $1.createdAt }
    }

    /// Stored reports of one of `kinds` of that process (its bundle id, or its run) written after
    /// `time`, as their subjects tell (`CrashReportDatabase.reportSubjects(after:)`).
    private func stored(of kinds: Set<ReportKind>, pid: Int32, bundleID: String, runID: String?, after time: Double) -> [ReportedEnding] {
        database.reportSubjects(after: time).compactMap { report, subject in
            guard subject.bundleID == bundleID || (runID != nil && subject.runID == runID),
                  subject.pid == pid, kinds.contains(subject.kind) else { return nil }
            return ReportedEnding(location: report.path, createdAt: report.modificationDate.timeIntervalSince1970, reportID: report.id)
        }
    }

    /// Dumps of `bundleID` waiting to be processed, written after `time`, whose capture implies one
    /// of `kinds` for process `pid` (or which are still being written and cannot be read yet).
    private func waiting(of kinds: Set<ReportKind>, pid: Int32, bundleID: String, after time: Double) -> [ReportedEnding] {
        database.waitingDumps(ofBundle: bundleID, after: time).compactMap { dump in
            if let snapshot = database.read(dump).flatMap({ try? IntermediateDumpReader.read(bytes: [UInt8]($0)) }) {
                guard kinds.contains(ReportKind(implying: snapshot.reason)), snapshot.process.pid == pid else { return nil }
            } else if !dump.isBeingWritten {
                return nil
            }
            return ReportedEnding(location: dump.path, createdAt: dump.createdAt)
        }
    }
}
