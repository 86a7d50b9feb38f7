// Bounding the database: reports by age and total size, failed dumps by age, and temporary
// files that a crashed writer left behind. staging/ belongs to HangMonitor (a live hang's
// files are there) and unclaimed intermediate dumps are still to be processed: neither is pruned.
import HangwatchSnapshot
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

public struct PrunePolicy: Sendable {
    /// Reports (and failed dumps) older than this are removed.
    public var maxAge: TimeInterval = 30 * 24 * 3600
    /// Reports plus failed dumps are kept under this many bytes: completed reports go first,
    /// then pending ones, oldest first within each.
    public var maxTotalBytes: Int64 = 100 << 20
    /// A `.tmp-…` file untouched this long belongs to a writer that died.
    public var staleTemporaryAge: TimeInterval = 3600
    public var now: Date = Date()

    public init(maxAge: TimeInterval = 30 * 24 * 3600, maxTotalBytes: Int64 = 100 << 20,
                staleTemporaryAge: TimeInterval = 3600, now: Date = Date()) {
        self.maxAge = maxAge
        self.maxTotalBytes = maxTotalBytes
        self.staleTemporaryAge = staleTemporaryAge
        self.now = now
    }
}

public struct PruneResult: Sendable, Equatable {
    public var removedReportIDs: [String] = []
    /// Paths (as they were) of removed failed dumps.
    public var removedFailedDumps: [String] = []
    /// Paths (as they were) of removed stale temporary files.
    public var removedTemporaryFiles: [String] = []
    public var bytesFreed: Int64 = 0
    /// Bytes of reports and failed dumps left.
    public var bytesRemaining: Int64 = 0
}

extension CrashReportDatabase {
    public func prune(policy: PrunePolicy = PrunePolicy()) throws -> PruneResult {
        var result = PruneResult()
        for directory in [root, intermediate, processing, failed, pending, completed] {
            for entry in try directory.entries()
            where entry.isRegularFile && entry.name.hasPrefix(DatabaseNames.temporaryPrefix)
                && policy.now.timeIntervalSince(entry.modificationDate) > policy.staleTemporaryAge {
                if try directory.remove(entry.name) {
                    result.removedTemporaryFiles.append(directory.pathOf(entry.name))
                    result.bytesFreed += entry.size
                }
            }
        }

        // A report's .txt/.server/.hwdump/.upload without its .json: left by an interrupted write or delete.
        for directory in [pending, completed] {
            let entries = try directory.entries().filter(\.isRegularFile)
            let names = Set(entries.map(\.name))
            for entry in entries where policy.now.timeIntervalSince(entry.modificationDate) > policy.staleTemporaryAge {
                guard let dot = entry.name.lastIndex(of: "."), [Self.textSuffix, Self.serverSuffix, Self.dumpSuffix, Self.uploadStateSuffix].contains(String(entry.name[dot...])),
                      !names.contains(entry.name[..<dot] + Self.jsonSuffix) else { continue }
                if try directory.remove(entry.name) {
                    result.removedTemporaryFiles.append(directory.pathOf(entry.name))
                    result.bytesFreed += entry.size
                }
            }
        }

        var failedDumps = try failed.entries().filter { $0.isRegularFile && !$0.name.hasPrefix(".") }
        failedDumps.sort { $0.modificationDate < $1.modificationDate }
        var keptFailed: [DirectoryEntry] = []
        for entry in failedDumps {
            if policy.now.timeIntervalSince(entry.modificationDate) > policy.maxAge {
                if try failed.remove(entry.name) {
                    result.removedFailedDumps.append(failed.pathOf(entry.name))
                    result.bytesFreed += entry.size
                }
            } else {
                keptFailed.append(entry)
            }
        }

        var keptReports: [StoredReport] = []
        for report in try listReports() {
            if policy.now.timeIntervalSince(report.modificationDate) > policy.maxAge {
                try removeForPrune(report, into: &result)
            } else {
                keptReports.append(report)
            }
        }

        var total = keptReports.reduce(0) { $0 + $1.size } + keptFailed.reduce(0) { $0 + $1.size }
        // Failed dumps are the least useful, then reports already uploaded, then pending ones.
        while total > policy.maxTotalBytes, !keptFailed.isEmpty {
            let entry = keptFailed.removeFirst()
            if try failed.remove(entry.name) {
                result.removedFailedDumps.append(failed.pathOf(entry.name))
                result.bytesFreed += entry.size
            }
            total -= entry.size
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
