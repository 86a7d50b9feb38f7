// HangCapturing over capture + database only: a hang becomes an intermediate dump in the
// database (the deferred verb), processed into a symbolicated report later by
// `hangwatch process` or `DumpClient.processIntermediateDumps()`. No symbolication runs in the
// monitored program, so a server linking HangMonitor loads no libdw, libelf or network code.
import FoundationEssentials
import Glibc
import HangwatchPlatform
import HangwatchCapture
import HangwatchDatabase
import HangwatchSnapshot
import HangwatchSupervisorProtocol

struct DatabaseHangCapture: HangCapturing {
    let database: CrashReportDatabase
    let bundleID: String
    let captureOptions: CaptureOptions
    /// Applied to every capture, so what it leaves out is never staged nor stored.
    let redaction: Redaction

    /// Opens (creating if needed) the database and prepares capture now, not in the middle of
    /// the first hang (loads libunwind, installs the capture handlers).
    init(databasePath: String, bundleID: String, captureOptions: CaptureOptions = CaptureOptions(), redaction: Redaction = []) throws {
        try CrashReportDatabase.validateBundleID(bundleID)
        database = try CrashReportDatabase(path: databasePath)
        self.bundleID = bundleID
        self.captureOptions = captureOptions
        self.redaction = redaction
        try LiveCapture.prepare(options: captureOptions)
    }

    var staging: StagingArea? { database.stagingArea }

    func captureAll(reason: CaptureReason) throws -> ProcessSnapshot {
        try LiveCapture.captureProcess(reason: reason, bundleID: bundleID, annotations: annotations, options: captureOptions)
            .redacted(redaction)
    }

    /// The `hangwatch run` this process runs under, so the supervisor can tell its reports.
    private let annotations: [String: String] = RunIdentity.current(environment: ProcessInfo.processInfo.environment)
        .map { [RunIdentity.annotationKey: $0] } ?? [:]

    func sample(tid: Int32) throws -> [UInt64] { try LiveCapture.sampleStack(tid: tid, options: captureOptions) }

    /// DumpWithoutCrashAndDeferProcessingAtPath: the intermediate dump, written into staging/.
    func stage(_ snapshot: ProcessSnapshot, atPath path: String) throws { try IntermediateDumpFiles.write(snapshot, toPath: path) }


    /// A pending intermediate dump; its hang info (recovered or not) makes it a `hang` or a
    /// `fatal-hang` report when processed.
    func submit(_ snapshot: ProcessSnapshot) throws -> String {
        try database.writeIntermediateDump(snapshot, bundleID: bundleID)
    }

    /// Crash reports of `bundleID` stored after `time`, and crash dumps of `bundleID` not yet processed.
    func crashReports(bundleID: String, newerThan time: Double) throws -> [DatabaseReportReference] {
        try database.crashesOrCrashDumps(bundleID: bundleID, newerThan: time)
    }

    /// `<bundle>@<uuid>` of a dump file name, the same while it is `.locked`, finished
    /// (`.hwdump`, `~a~1.hwdump`) or claimed (`~…​.claim`).
    static func dumpIdentity(_ fileName: String) -> String {
        guard let at = fileName.lastIndex(of: "@") else { return fileName }
        let rest = fileName[fileName.index(after: at)...]
        let uuid = rest.prefix { $0 != "." && $0 != "~" }
        return String(fileName[..<at]) + "@" + uuid
    }

    /// A stored report gets `context.supersededHang` in its JSON (and a line in its text); a
    /// dump not yet processed gets `staging/<bundle>@<uuid>.superseded-hang.json`, which its
    /// processor merges.
    func attachContext(_ context: SupersededHangContext, to report: DatabaseReportReference) throws {
        let superseded = JSONValue.object([
            "target": .string(context.target), "thresholdSeconds": .number(context.thresholdSeconds),
            "durationSeconds": .number(context.durationSeconds), "startTime": .string(Timestamp.iso8601(context.startTime)),
        ])
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        if let id = report.reportID {
            guard case .object(var json) = try JSONDecoder().decode(JSONValue.self, from: database.readReport(id: id)) else {
                throw StagingError.corrupt("report \(id) is not a JSON object")
            }
            guard case .object(var reportContext) = json["context"] ?? .object([:]) else {
                throw StagingError.corrupt("report \(id) has a context that is not an object")
            }
            reportContext["supersededHang"] = superseded
            json["context"] = .object(reportContext)
            let line = "Superseded hang: \(context.target) hung for \(Text.fixed(context.durationSeconds, decimals: 1)) s before this crash\n"
            try database.amendReport(id: id, json: encoder.encode(JSONValue.object(json)), appendingText: line)
            return
        }
        let name = Self.dumpIdentity(Paths.lastComponent(of: report.location)) + SupersededHangNote.fileSuffix
        let (fd, _) = try database.createStagingFile(named: name)
        defer { close(fd) }
        let data = try encoder.encode(superseded)
        _ = data.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
    }
}
