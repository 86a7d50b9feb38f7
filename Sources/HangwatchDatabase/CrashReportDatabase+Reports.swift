// Processed reports: reports/pending/<id>.json (+ optional <id>.txt) until uploaded, then
// reports/completed/ (+ <id>.server holding the server's report id). The .json file is
// the report's existence: it is written last and moved last, and deleted first.
// <id>.hwdump (optional) keeps the intermediate dump with its stack bytes so a minidump can be
// made later; <id>.upload (pending only) is the uploader's retry state (docs/upload.md);
// <id>.subject is whose end the report tells (`ReportSubject`), what `reportSubjects(after:)` reads.
import HangwatchSnapshot
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// A report in the database, as `listReports()` finds it.
public struct StoredReport: Sendable, Equatable {
    /// Waiting for upload (`pending`) or done with (`completed`).
    public enum State: String, Sendable, Equatable {
        /// In reports/pending/: not yet uploaded, or kept when uploading is off.
        case pending
        /// In reports/completed/: uploaded or marked done.
        case completed
    }
    /// The report's id (a lowercase UUID).
    public let id: String
    /// Which of the two directories it is in.
    public let state: State
    /// The report's JSON file.
    public let path: String
    /// The human-readable text rendering, when one was stored.
    public let textPath: String?
    /// Bytes all the report's files take on disk together (allocated blocks: a sparse file
    /// counts what it really uses, not what its size claims).
    public let size: Int64
    /// When its JSON was last written.
    public let modificationDate: Date
    /// What the upload server called it (completed reports only, when known).
    public let serverID: String?
}

extension CrashReportDatabase {
    package static let jsonSuffix = ".json"
    static let textSuffix = ".txt"
    static let serverSuffix = ".server"
    static let dumpSuffix = ".hwdump"
    static let subjectSuffix = ".subject"
    static let maxSubjectBytes: Int64 = 4096
    package static let uploadStateSuffix = ".upload"
    static let maxServerIDBytes: Int64 = 4096

    private func directory(for state: StoredReport.State) -> DatabaseDirectory {
        state == .pending ? pending : completed
    }

    /// Stores a processed report atomically (temporary 0600 file + rename): a reader sees the
    /// whole report or none of it. Writing an id again replaces the pending report, which makes
    /// processing idempotent when the report id is the dump's uuid.
    /// `dump` (an intermediate dump of the report's snapshot) is kept beside it, 0600, for minidumps.
    /// A report written here tells no process's end (`reportSubjects(after:)`); hangwatch's own
    /// reports are stored through `store(_:dump:)` (HangwatchProcessing), which says whose it is.
    public func writeReport(id: String, json: Data, text: String?, dump: Data? = nil) throws {
        try writeReport(id: id, json: json, text: text, dump: dump, subject: nil)
    }

    /// `writeReport(id:json:text:dump:)`, with `subject` kept beside the report.
    package func writeReport(id: String, json: Data, text: String?, dump: Data?, subject: ReportSubject?) throws {
        try DatabaseNames.validateReportID(id)
        if try completed.entry(id + Self.jsonSuffix) != nil { throw DatabaseError.reportAlreadyCompleted(id) }
        let sidecars: [(suffix: String, bytes: Data?)] = [
            (Self.textSuffix, text.map { Data($0.utf8) }), (Self.dumpSuffix, dump),
            (Self.subjectSuffix, try subject.map { try Self.subjectEncoder.encode($0) }),
        ]
        do {
            for (suffix, bytes) in sidecars {
                if let bytes { try pending.writeAtomically(id + suffix, bytes) } else { try pending.remove(id + suffix) }
            }
            try pending.writeAtomically(id + Self.jsonSuffix, json)
        } catch {
            // No .json, no report: do not leave its text, dump or subject behind as orphans.
            for (suffix, bytes) in sidecars where bytes != nil { _ = try? pending.remove(id + suffix) }
            throw error
        }
        pending.sync()
    }

    private static var subjectEncoder: JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return encoder
    }

    /// Stored reports whose JSON was written after `time`, each with whose end it tells, oldest
    /// first; a report with no readable subject (written by `writeReport(id:json:text:dump:)`, or
    /// before subjects were kept, CHANGELOG "Unreleased") is not among them.
    package func reportSubjects(after time: Double) -> [(report: StoredReport, subject: ReportSubject)] {
        ((try? listReports()) ?? []).compactMap { report in
            guard report.modificationDate.timeIntervalSince1970 > time,
                  let data = try? directory(for: report.state).readFile(report.id + Self.subjectSuffix, limit: Self.maxSubjectBytes),
                  let subject = try? JSONDecoder().decode(ReportSubject.self, from: data) else { return nil }
            return (report, subject)
        }
    }

    /// Every stored report, oldest first. Links, directories and temporary files are skipped.
    public func listReports() throws -> [StoredReport] {
        var reports: [StoredReport] = []
        for state in [StoredReport.State.pending, .completed] {
            let directory = directory(for: state)
            let entries = try directory.entries().filter { $0.isRegularFile }
            let byName = Dictionary(entries.map { ($0.name, $0) }, uniquingKeysWith: { first, _ in first })
            for entry in entries where entry.name.hasSuffix(Self.jsonSuffix) {
                let id = String(entry.name.dropLast(Self.jsonSuffix.count))
                guard (try? DatabaseNames.validateReportID(id)) != nil else { continue }
                let text = byName[id + Self.textSuffix]
                let server = byName[id + Self.serverSuffix]
                let extra = [Self.dumpSuffix, Self.uploadStateSuffix, Self.subjectSuffix].reduce(Int64(0)) { $0 + (byName[id + $1]?.diskBytes ?? 0) }
                var serverID: String?
                if server != nil, let data = try? directory.readFile(id + Self.serverSuffix, limit: Self.maxServerIDBytes) {
                    serverID = String(decoding: data, as: UTF8.self)
                }
                reports.append(StoredReport(
                    id: id, state: state, path: directory.pathOf(entry.name),
                    textPath: text.map { directory.pathOf($0.name) },
                    size: entry.diskBytes + (text?.diskBytes ?? 0) + (server?.diskBytes ?? 0) + extra,
                    modificationDate: entry.modificationDate, serverID: serverID))
            }
        }
        return reports.sorted { ($0.modificationDate, $0.id) < ($1.modificationDate, $1.id) }
    }

    /// The report whose id is `idOrPrefix`, or the only one whose id starts with it
    /// (case-insensitive), as `hangwatch show 3fa2` needs.
    public func findReport(_ idOrPrefix: String) throws -> StoredReport {
        try DatabaseNames.validateReportID(idOrPrefix)
        let all = try listReports()
        if let exact = all.first(where: { $0.id == idOrPrefix }) { return exact }
        let prefix = idOrPrefix.lowercased()
        let matches = all.filter { $0.id.lowercased().hasPrefix(prefix) }
        guard let first = matches.first else { throw DatabaseError.noSuchReport(idOrPrefix) }
        guard matches.count == 1 else { throw DatabaseError.ambiguousReportID(idOrPrefix, matches: matches.map(\.id)) }
        return first
    }

    /// The report's JSON bytes, bounded by `options.maxReadBytes`.
    public func readReport(id: String) throws -> Data {
        try read(id: id, suffix: Self.jsonSuffix)
    }

    /// The report's text rendering, or nil when none was stored.
    public func readReportText(id: String) throws -> String? {
        do {
            return String(decoding: try read(id: id, suffix: Self.textSuffix), as: UTF8.self)
        } catch DatabaseError.noSuchReport {
            return nil
        }
    }

    /// The intermediate dump kept beside the report, or nil when none was stored.
    public func readReportDump(id: String) throws -> Data? {
        do {
            return try read(id: id, suffix: Self.dumpSuffix)
        } catch DatabaseError.noSuchReport {
            return nil
        }
    }

    private func read(id: String, suffix: String) throws -> Data {
        try DatabaseNames.validateReportID(id)
        for directory in [pending, completed] where try directory.entry(id + suffix) != nil {
            return try directory.readFile(id + suffix, limit: options.maxReadBytes)
        }
        throw DatabaseError.noSuchReport(id)
    }

    /// Moves a report to completed/ (after upload, or when uploading is off). Safe to repeat
    /// after an interruption: the .json move is last, so a half-moved report stays pending.
    public func markCompleted(id: String, serverID: String?) throws {
        try DatabaseNames.validateReportID(id)
        let json = id + Self.jsonSuffix
        guard try pending.entry(json) != nil else {
            if try completed.entry(json) != nil { return }
            throw DatabaseError.noSuchReport(id)
        }
        if let serverID {
            try completed.writeAtomically(id + Self.serverSuffix, Data(serverID.utf8.prefix(Int(Self.maxServerIDBytes))))
        }
        for suffix in [Self.textSuffix, Self.dumpSuffix, Self.subjectSuffix] {
            if let file = try pending.entry(id + suffix), file.isRegularFile {
                _ = try pending.move(file.name, to: completed, as: file.name)
            }
        }
        try pending.remove(id + Self.uploadStateSuffix)
        guard try pending.move(json, to: completed, as: json) else { throw DatabaseError.noSuchReport(id) }
        completed.sync()
    }

    /// Removes a report, pending or completed.
    public func deleteReport(id: String) throws {
        try DatabaseNames.validateReportID(id)
        var found = false
        for directory in [pending, completed] {
            // JSON first: once it is gone the report no longer exists, whatever remains.
            if try directory.remove(id + Self.jsonSuffix) { found = true }
            try directory.remove(id + Self.textSuffix)
            try directory.remove(id + Self.serverSuffix)
            try directory.remove(id + Self.dumpSuffix)
            try directory.remove(id + Self.uploadStateSuffix)
            try directory.remove(id + Self.subjectSuffix)
        }
        if !found { throw DatabaseError.noSuchReport(id) }
    }
}
