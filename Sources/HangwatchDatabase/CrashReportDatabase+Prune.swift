// Bounding the database: reports by age and total size, failed dumps by age, and temporary
// files that a crashed writer left behind. staging/ belongs to HangMonitor (a live hang's
// files are there) and unclaimed intermediate dumps are still to be processed: neither is pruned.
// Only what hangwatch wrote is removed: a file's name must be one of ours *and* its first
// bytes what we write there (`DatabaseFiles`); sizes are what files take on disk (allocated
// blocks), so a sparse file cannot make the prune delete real reports to "free" bytes it never used.
import HangwatchSnapshot
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// What `prune(policy:)` keeps: reports younger than `maxAge`, under `maxTotalBytes` on disk.
public struct PrunePolicy: Sendable {
    /// Reports (and failed dumps) older than this are removed.
    public var maxAge: TimeInterval = 30 * 24 * 3600
    /// Reports plus failed dumps are kept under this many bytes: completed reports go first,
    /// then pending ones, oldest first within each.
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
    /// Paths (as they were) of removed failed dumps.
    public var removedFailedDumps: [String] = []
    /// Paths (as they were) of removed stale temporary files.
    public var removedTemporaryFiles: [String] = []
    /// Disk bytes (allocated blocks) the removed files took.
    public var bytesFreed: Int64 = 0
    /// Bytes of reports and failed dumps left.
    public var bytesRemaining: Int64 = 0
}

extension CrashReportDatabase {
    /// Removes reports and failed dumps older than the policy's age or over its size, and stale
    /// temporary files; only files hangwatch created (name and header checked, docs/database.md).
    public func prune(policy: PrunePolicy = PrunePolicy()) throws -> PruneResult {
        var result = PruneResult()
        for directory in [root, intermediate, processing, failed, pending, completed] {
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

        // A report's .txt/.server/.hwdump/.upload without its .json: left by an interrupted write or delete.
        for directory in [pending, completed] {
            let entries = try directory.entries().filter(\.isRegularFile)
            let names = Set(entries.map(\.name))
            for entry in entries where policy.now.timeIntervalSince(entry.modificationDate) > policy.staleTemporaryAge {
                guard let dot = entry.name.lastIndex(of: "."), [Self.textSuffix, Self.serverSuffix, Self.dumpSuffix, Self.uploadStateSuffix].contains(String(entry.name[dot...])),
                      (try? DatabaseNames.validateReportID(String(entry.name[..<dot]))) != nil,
                      !names.contains(entry.name[..<dot] + Self.jsonSuffix), DatabaseFiles.isOurs(entry, in: directory) else { continue }
                if try directory.remove(entry.name) {
                    result.removedTemporaryFiles.append(directory.pathOf(entry.name))
                    result.bytesFreed += entry.diskBytes
                }
            }
        }

        var failedDumps = try failed.entries().filter { entry in
            entry.isRegularFile && !entry.name.hasPrefix(".") && DatabaseFiles.isFailedDumpName(entry.name) && DatabaseFiles.isOurs(entry, in: failed)
        }
        failedDumps.sort { $0.modificationDate < $1.modificationDate }
        var keptFailed: [DirectoryEntry] = []
        for entry in failedDumps {
            if policy.now.timeIntervalSince(entry.modificationDate) > policy.maxAge {
                if try failed.remove(entry.name) {
                    result.removedFailedDumps.append(failed.pathOf(entry.name))
                    result.bytesFreed += entry.diskBytes
                }
            } else {
                keptFailed.append(entry)
            }
        }

        var keptReports: [StoredReport] = []
        for report in try listReports() where isOurReport(report) {
            if policy.now.timeIntervalSince(report.modificationDate) > policy.maxAge {
                try removeForPrune(report, into: &result)
            } else {
                keptReports.append(report)
            }
        }

        var total = keptReports.reduce(0) { $0 + $1.size } + keptFailed.reduce(0) { $0 + $1.diskBytes }
        // Failed dumps are the least useful, then reports already uploaded, then pending ones.
        while total > policy.maxTotalBytes, !keptFailed.isEmpty {
            let entry = keptFailed.removeFirst()
            if try failed.remove(entry.name) {
                result.removedFailedDumps.append(failed.pathOf(entry.name))
                result.bytesFreed += entry.diskBytes
            }
            total -= entry.diskBytes
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

/// What the files hangwatch writes in the database look like, so that nothing else is ever
/// removed: each of our names and what its first bytes are (or, for the few small text files
/// with no header of their own, how large it can be).
enum DatabaseFiles {
    /// `<bundle>@<uuid>~<a|f>~<n>.hwdump` and its `.reason`.
    static func isFailedDumpName(_ name: String) -> Bool {
        let dump = name.hasSuffix(CrashReportDatabase.failureReasonSuffix) ? String(name.dropLast(CrashReportDatabase.failureReasonSuffix.count)) : name
        guard let (parsed, state) = DumpName.parseIntermediate(dump) else { return false }
        return state == .finished && parsed.triedName == dump
    }

    /// Whether `entry` (a regular file in `directory`) holds what we write under `name` (its
    /// own name unless given): the header of its kind, or no more bytes than we ever write there.
    static func isOurs(_ entry: DirectoryEntry, in directory: DatabaseDirectory, as name: String? = nil) -> Bool {
        let name = name ?? entry.name
        let dump: [UInt8] = Array("HWIDUMP".utf8) + [0]
        let json: [UInt8] = Array("{".utf8)
        switch true {
        case name.hasSuffix(CrashReportDatabase.dumpSuffix), name.hasSuffix(DatabaseNames.lockedSuffix):
            return directory.startsWithOneOf([dump], entry.name)
        case name.hasSuffix(CrashReportDatabase.jsonSuffix), name.hasSuffix(CrashReportDatabase.uploadStateSuffix):
            return directory.startsWithOneOf([json], entry.name)
        case name.hasSuffix(CrashReportDatabase.textSuffix):
            return directory.startsWithOneOf([Array("*** ".utf8)], entry.name)
        case name.hasSuffix(CrashReportDatabase.serverSuffix):
            return entry.size <= CrashReportDatabase.maxServerIDBytes
        case name.hasSuffix(CrashReportDatabase.failureReasonSuffix):
            return entry.size <= 4097
        default:
            return false
        }
    }
}
