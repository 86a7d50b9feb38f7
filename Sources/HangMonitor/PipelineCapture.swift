// HangCapturing over the DumpWithoutCrash pipeline (DumpClient: live capture, intermediate
// dumps, the database, symbolicated reports). Hang reports are stored here, where the
// outcome is known: a recovered hang is `kind: hang`, a promoted one `kind: fatal-hang`.
import Foundation
import DumpWithoutCrash

struct PipelineCapture: HangCapturing {
    let client: DumpClient
    var database: CrashReportDatabase { client.database }
    var bundleID: String { client.bundleID }

    /// Opens (creating if needed) the database and prepares capture now, not in the middle
    /// of the first hang (DumpClient loads libunwind and installs the capture handlers).
    init(databasePath: String, bundleID: String) throws {
        client = try DumpClient(databasePath: databasePath, bundleID: bundleID)
    }

    var stagingDirectory: String { database.stagingPath }

    func captureAll(reason: CaptureReason) throws -> ProcessSnapshot { try client.capture(reason: reason) }

    func sample(tid: Int32) throws -> [UInt64] { try LiveCapture.sampleStack(tid: tid, options: client.captureOptions) }

    /// DumpWithoutCrashAndDeferProcessingAtPath: the intermediate dump, written into staging/.
    func stage(_ snapshot: ProcessSnapshot, atPath path: String) throws { try client.write(snapshot, toPath: path) }

    func loadStaged(atPath path: String) throws -> ProcessSnapshot { try IntermediateDumpReader.read(path: path) }

    /// Symbolicates and stores the report; the hang's outcome decides its kind (hang / fatal-hang).
    func submit(_ snapshot: ProcessSnapshot) throws -> String {
        let report = try client.store(snapshot, id: UUID().uuidString.lowercased())
        return database.pendingReportsPath + "/" + report.id + ".json"
    }

    /// Stored crash/dump reports of `bundleID` newer than `time`, and dumps of `bundleID` not yet
    /// processed (in intermediate/ or processing/: never hang reports, which are written directly).
    func crashReports(bundleID: String, newerThan time: Double) throws -> [DatabaseReportReference] {
        var found: [DatabaseReportReference] = []
        for stored in try database.listReports() where stored.modificationDate.timeIntervalSince1970 > time {
            guard let data = try? database.readReport(id: stored.id), let report = try? Report.decode(from: data),
                  report.process.bundleID == bundleID, report.kind == .crash || report.kind == .dump else { continue }
            found.append(DatabaseReportReference(location: stored.path, createdAt: stored.modificationDate.timeIntervalSince1970,
                                                 reportID: stored.id))
        }
        for directory in [database.intermediatePath, database.processingPath] {
            for name in (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
            where name.hasPrefix(bundleID + "@") && !name.hasPrefix(".") {
                var info = stat()
                guard lstat(directory + "/" + name, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else { continue }
                let created = Double(info.st_mtim.tv_sec) + Double(info.st_mtim.tv_nsec) / 1e9
                if created > time { found.append(DatabaseReportReference(location: directory + "/" + name, createdAt: created)) }
            }
        }
        return found.sorted { $0.createdAt < $1.createdAt }
    }

    /// `<bundle>@<uuid>` of a dump file name, the same while it is `.locked`, finished
    /// (`.hwdump`, `~a~1.hwdump`) or claimed (`~…​.claim`).
    static func dumpIdentity(_ fileName: String) -> String {
        guard let at = fileName.lastIndex(of: "@") else { return fileName }
        let rest = fileName[fileName.index(after: at)...]
        let uuid = rest.prefix { $0 != "." && $0 != "~" }
        return String(fileName[..<at]) + "@" + uuid
    }

    /// A stored report gets `context.supersededHang`; a dump not yet processed gets
    /// `staging/<bundle>@<uuid>.superseded-hang.json` for its processor to merge.
    func attachContext(_ context: SupersededHangContext, to report: DatabaseReportReference) throws {
        let superseded = Report.SupersededHang(target: context.target, thresholdSeconds: context.thresholdSeconds,
                                               durationSeconds: context.durationSeconds,
                                               startTime: ReportFormatting.timestamp(context.startTime))
        if let id = report.reportID {
            var decoded = try Report.decode(from: try database.readReport(id: id))
            decoded.context = Report.Context(supersededHang: superseded)
            try database.writeReport(id: id, json: ReportRenderer.json(decoded), text: ReportRenderer.text(decoded))
            return
        }
        let name = Self.dumpIdentity((report.location as NSString).lastPathComponent) + ".superseded-hang.json"
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let (fd, _) = try database.createStagingFile(named: name)
        defer { close(fd) }
        let data = try encoder.encode(superseded)
        _ = data.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
    }
}
