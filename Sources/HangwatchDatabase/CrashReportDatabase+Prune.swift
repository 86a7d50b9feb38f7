// Bounding the database. Reports and the files in failed/ (failed dumps, and the run records and
// staged-hang files that processing set aside there, each with its .reason) are bounded by age and
// total size. Temporary files that a killed writer left behind are removed from every directory
// (runs/ and staging/ included). A live run record or staged hang (runs/, staging/) belongs to its
// owner, and unclaimed intermediate dumps are still to be processed, so neither is pruned.
// Only files that hangwatch wrote are removed: a file's name must be one of ours *and* its first
// bytes must be what we write there (`DatabaseFiles`). Sizes are the space files take on disk
// (allocated blocks), so a sparse file cannot make the prune delete real reports to "free" bytes
// it never used.
import HangwatchSnapshot
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// What `prune(policy:)` keeps: reports younger than `maxAge`, under `maxTotalBytes` on disk.
public struct PrunePolicy: Sendable {
    /// Reports (and failed dumps and set-aside records) older than this are removed.
    public var maxAge: TimeInterval = 30 * 24 * 3600
    /// Reports plus the files in failed/ are kept under this many bytes. The files in failed/ are
    /// removed first, then completed reports, then pending ones, oldest first within each group.
    public var maxTotalBytes: Int64 = 100 << 20
    /// A `.tmp-…` file untouched this long belongs to a writer that died.
    public var staleTemporaryAge: TimeInterval = 3600
    /// The time ages are measured from (tests set it).
    public var now: Date = Date()

    /// A policy; each parameter is the property of the same name.
    public init(maxAge: TimeInterval = 30 * 24 * 3600, maxTotalBytes: Int64 = 100 << 20,
                staleTemporaryAge: TimeInterval = 3600, now: Date = Date()) {
        self.maxAge = maxAge
        self.maxTotalBytes = maxTotalBytes
        self.staleTemporaryAge = staleTemporaryAge
        self.now = now
    }
}

/// What a prune removed and what it left.
public struct PruneResult: Sendable, Equatable {
    /// Ids of the removed reports.
    public var removedReportIDs: [String] = []
    /// Paths (as they were) of removed failed dumps (and their `.reason` files).
    public var removedFailedDumps: [String] = []
    /// Paths (as they were) of removed run records and staged-hang files that processing had
    /// set aside in failed/ (values no monitor writes), and their `.reason` files.
    public var removedFailedRecords: [String] = []
    /// Paths (as they were) of removed stale temporary files.
    public var removedTemporaryFiles: [String] = []
    /// Disk bytes (allocated blocks) the removed files took.
    public var bytesFreed: Int64 = 0
    /// Bytes of the reports and failed/ files that remain.
    public var bytesRemaining: Int64 = 0
}

extension CrashReportDatabase {
    /// Removes reports, failed dumps and set-aside records older than the policy's age or over its
    /// size, and stale temporary files; only files hangwatch created (name and header checked,
    /// docs/database.md).
    public func prune(policy: PrunePolicy = PrunePolicy()) throws -> PruneResult {
        var result = PruneResult()
        try removeStaleTemporaries(policy, into: &result)
        try removeOrphanedReportFiles(policy, into: &result)
        let keptFailed = try removeOldFailedFiles(policy, into: &result)
        var keptReports: [StoredReport] = []
        for report in try listReports() where isOurReport(report) {
            if policy.now.timeIntervalSince(report.modificationDate) > policy.maxAge {
                try removeForPrune(report, into: &result)
            } else {
                keptReports.append(report)
            }
        }

        var total = keptReports.reduce(0) { $0 + $1.size } + keptFailed.reduce(0) { $0 + $1.diskBytes }
        // failed/'s files are the least useful, then reports already uploaded, then pending ones.
        var nextFailed = 0
        while total > policy.maxTotalBytes, nextFailed < keptFailed.count {
            try removeFailed(keptFailed[nextFailed], into: &result)
            total -= keptFailed[nextFailed].diskBytes
            nextFailed += 1
        }
        let bySacrifice = keptReports.filter { $0.state == .completed } + keptReports.filter { $0.state == .pending }
        var index = 0
        while total > policy.maxTotalBytes, index < bySacrifice.count {
            try removeForPrune(bySacrifice[index], into: &result)
            total -= bySacrifice[index].size
            index += 1
        }
        result.bytesRemaining = total
        return result
    }

    /// Removes the `.tmp-` files left by a writer killed mid-write (DatabaseDirectory.writeAtomically)
    /// that have been untouched for `staleTemporaryAge`, in every directory. This includes runs/ and
    /// staging/, where run records and staged hangs are written (the record itself is never touched here).
    private func removeStaleTemporaries(_ policy: PrunePolicy, into result: inout PruneResult) throws {
        for directory in [root, intermediate, processing, failed, pending, completed, runs, staging] {
            for entry in try directory.entries()
            where entry.isRegularFile && policy.now.timeIntervalSince(entry.modificationDate) > policy.staleTemporaryAge {
                guard let final = DatabaseNames.finalName(ofTemporary: entry.name), DatabaseFiles.isOurs(entry, in: directory, as: final)
                else { continue }
                if try directory.remove(entry.name) {
                    result.removedTemporaryFiles.append(directory.pathOf(entry.name))
                    result.bytesFreed += entry.diskBytes
                }
            }
        }
    }

    /// A report's .txt/.server/.hwdump/.upload/.subject without its .json: left by an interrupted write or delete.
    private func removeOrphanedReportFiles(_ policy: PrunePolicy, into result: inout PruneResult) throws {
        for directory in [pending, completed] {
            let entries = try directory.entries().filter(\.isRegularFile)
            let names = Set(entries.map(\.name))
            for entry in entries where policy.now.timeIntervalSince(entry.modificationDate) > policy.staleTemporaryAge {
                guard let dot = entry.name.lastIndex(of: "."), [Self.textSuffix, Self.serverSuffix, Self.dumpSuffix, Self.uploadStateSuffix, Self.subjectSuffix].contains(String(entry.name[dot...])),
                      (try? DatabaseNames.validateReportID(String(entry.name[..<dot]))) != nil,
                      !names.contains(entry.name[..<dot] + Self.jsonSuffix), DatabaseFiles.isOurs(entry, in: directory) else { continue }
                if try directory.remove(entry.name) {
                    result.removedTemporaryFiles.append(directory.pathOf(entry.name))
                    result.bytesFreed += entry.diskBytes
                }
            }
        }
    }

    /// Removes our files in failed/ that are older than `maxAge`, and returns the others, oldest first.
    private func removeOldFailedFiles(_ policy: PrunePolicy, into result: inout PruneResult) throws -> [DirectoryEntry] {
        var kept: [DirectoryEntry] = []
        let files = try failed.entries().filter { entry in
            entry.isRegularFile && !entry.name.hasPrefix(".") && DatabaseFiles.isFailedName(entry.name) && DatabaseFiles.isOurs(entry, in: failed)
        }
        for entry in files.sorted(by: { $0.modificationDate < $1.modificationDate }) {
            if policy.now.timeIntervalSince(entry.modificationDate) > policy.maxAge {
                try removeFailed(entry, into: &result)
            } else {
                kept.append(entry)
            }
        }
        return kept
    }

    /// Removes a file in failed/ (`DatabaseFiles.isFailedName`, header checked), and records it as
    /// belonging to a failed dump or to a set-aside record.
    private func removeFailed(_ entry: DirectoryEntry, into result: inout PruneResult) throws {
        guard try failed.remove(entry.name) else { return }  // another prune was first
        if DatabaseFiles.isSetAsideRecordName(entry.name) {
            result.removedFailedRecords.append(failed.pathOf(entry.name))
        } else {
            result.removedFailedDumps.append(failed.pathOf(entry.name))
        }
        result.bytesFreed += entry.diskBytes
    }

    /// A stored report whose JSON starts as ours does (a file merely named `<id>.json` is left alone).
    private func isOurReport(_ report: StoredReport) -> Bool {
        let directory = report.state == .pending ? pending : completed
        guard let entry = try? directory.entry(report.id + Self.jsonSuffix) else { return false }
        return DatabaseFiles.isOurs(entry, in: directory)
    }

    private func removeForPrune(_ report: StoredReport, into result: inout PruneResult) throws {
        do {
            try deleteReport(id: report.id)
            result.removedReportIDs.append(report.id)
            result.bytesFreed += report.size
        } catch DatabaseError.noSuchReport {
            // Another process removed it first: nothing to do.
        }
    }
}

/// What the files that hangwatch writes in the database look like, so that nothing else is ever
/// removed: each of our names and its first bytes (or, for the few small text files with no
/// header of their own, their maximum size).
enum DatabaseFiles {
    /// Our files in failed/: a failed dump or a set-aside record, or the `.reason` of one.
    static func isFailedName(_ name: String) -> Bool { isFailedDumpName(name) || isSetAsideRecordName(name) }

    /// `<bundle>@<uuid>~<a|f>~<n>.hwdump` and its `.reason`.
    static func isFailedDumpName(_ name: String) -> Bool {
        let dump = withoutReasonSuffix(name)
        guard let (parsed, state) = DumpName.parseIntermediate(dump) else { return false }
        return state == .finished && parsed.triedName == dump
    }

    /// What `CrashReportDatabase.setAside` moves to failed/ under its own name — a run record
    /// (`<bundle>@<id>.run.json`, RunRecords.swift) or a staged hang's sidecar, dump or samples
    /// (`<bundle>@<id>.hang.json`, `.hang.dump`, `.hang.samples.json`, StagingArea.swift) — and its `.reason`.
    static func isSetAsideRecordName(_ name: String) -> Bool {
        guard let (_, tail) = RecordName.parse(withoutReasonSuffix(name)) else { return false }
        return [RunRecords.jsonSuffix, StagingArea.sidecarSuffix, StagingArea.dumpSuffix, StagingArea.samplesSuffix].contains(String(tail))
    }

    private static func withoutReasonSuffix(_ name: String) -> String {
        let suffix = CrashReportDatabase.failureReasonSuffix
        return name.hasSuffix(suffix) ? String(name.dropLast(suffix.count)) : name
    }

    /// Whether `entry` (a regular file in `directory`) contains what we write under `name` (its
    /// own name unless given): the header of its kind, or no more bytes than we ever write there.
    static func isOurs(_ entry: DirectoryEntry, in directory: DatabaseDirectory, as name: String? = nil) -> Bool {
        let name = name ?? entry.name
        let dump: [UInt8] = Array("HWIDUMP".utf8) + [0]
        let json: [UInt8] = Array("{".utf8)
        switch true {
        case name.hasSuffix(CrashReportDatabase.dumpSuffix), name.hasSuffix(DatabaseNames.lockedSuffix), name.hasSuffix(StagingArea.dumpSuffix):
            return directory.startsWithOneOf([dump], entry.name)
        case name.hasSuffix(StagingArea.samplesSuffix):  // a JSON array (StagingArea.writeSamples)
            return directory.startsWithOneOf([Array("[".utf8)], entry.name)
        case name.hasSuffix(CrashReportDatabase.jsonSuffix), name.hasSuffix(CrashReportDatabase.uploadStateSuffix),
             name.hasSuffix(CrashReportDatabase.subjectSuffix):
            return directory.startsWithOneOf([json], entry.name)
        case name.hasSuffix(CrashReportDatabase.textSuffix):
            return directory.startsWithOneOf([Array("*** ".utf8)], entry.name)
        case name.hasSuffix(CrashReportDatabase.serverSuffix):
            return entry.size <= CrashReportDatabase.maxServerIDBytes
        case name.hasSuffix(CrashReportDatabase.failureReasonSuffix):
            return entry.size <= CrashReportDatabase.maxReasonBytes + 1  // and its newline
        default:
            return false
        }
    }
}
