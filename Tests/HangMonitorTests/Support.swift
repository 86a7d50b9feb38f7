// Shared by the HangMonitor tests: event lines printed by hangwatch-fixture-hang, and waiting for them.
import Foundation
import HangwatchTestSupport
@testable import HangMonitor
import DumpWithoutCrash
import HangwatchDatabase
import HangwatchReport
import HangwatchSnapshot
import HangwatchSymbolication

struct FixtureEvent {
    let fields: [String: Any]
    var name: String { fields["event"] as? String ?? "" }
    func string(_ key: String) -> String? { fields[key] as? String }
    func double(_ key: String) -> Double? { (fields[key] as? NSNumber)?.doubleValue }
    func int(_ key: String) -> Int? { (fields[key] as? NSNumber)?.intValue }
}

func events(in output: String) -> [FixtureEvent] {
    output.split(separator: "\n").compactMap { line in
        guard line.hasPrefix("{"), let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] else { return nil }
        return FixtureEvent(fields: object)
    }
}

/// Starts hangwatch-fixture-hang configured through HANGWATCH_* like a user's program.
func startFixture(_ setup: String, _ scenario: String, seconds: Double? = nil, database: String, bundleID: String = "com.example.fixture",
                  threshold: Double = 0.5, extra: [String: String] = [:]) throws -> ChildProcess {
    var env = ["HANGWATCH_THRESHOLD": String(threshold), "HANGWATCH_DATABASE_PATH": database, "HANGWATCH_BUNDLE_ID": bundleID]
    for (k, v) in extra { env[k] = v }
    return try ChildProcess(product: "hangwatch-fixture-hang", [setup, scenario] + (seconds.map { [String($0)] } ?? []), environment: env)
}

/// Collects events delivered to an in-process monitor's eventHandler.
final class EventLog: @unchecked Sendable {
    private let lock = NSLock()
    private var list: [HangEvent] = []
    func record(_ event: HangEvent) { lock.lock(); list.append(event); lock.unlock() }
    var all: [HangEvent] { lock.lock(); defer { lock.unlock() }; return list }

    /// Polls until `match` finds an event; nil after `timeout` seconds.
    func wait<T>(timeout: Double = 60, _ match: (HangEvent) -> T?) async -> T? {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if let found = all.lazy.compactMap(match).first { return found }
            try? await Task.sleep(for: .milliseconds(20))
        }
        return nil
    }
}

func stagingFiles(_ database: String) -> [String] {
    ((try? FileManager.default.contentsOfDirectory(atPath: database + "/staging")) ?? []).sorted()
}

func readJSON(_ path: String) -> [String: Any]? {
    guard let data = FileManager.default.contents(atPath: path) else { return nil }
    return try? JSONSerialization.jsonObject(with: data) as? [String: Any]
}

/// The report at `path`; a hang the monitor stored is a pending intermediate dump
/// (`<db>/intermediate/<bundle>@<uuid>.hwdump`), processed here as `hangwatch process` would.
func readReport(_ path: String) throws -> Report {
    guard path.hasSuffix(".hwdump") else { return try Report.decode(from: try Data(contentsOf: URL(fileURLWithPath: path))) }
    let url = URL(fileURLWithPath: path)
    let name = url.deletingPathExtension().lastPathComponent
    guard let at = name.firstIndex(of: "@") else { throw CocoaError(.fileReadInvalidFileName) }
    let client = try DumpClient(databasePath: url.deletingLastPathComponent().deletingLastPathComponent().path,
                                bundleID: String(name[..<at]))
    let uuid = name[name.index(after: at)...].lowercased()
    guard let report = try client.processIntermediateDumps().first(where: { $0.id == uuid }) else {
        throw CocoaError(.fileNoSuchFile, userInfo: [NSFilePathErrorKey: path])
    }
    return report
}

/// A crash report as a fatal path would leave it (no threads: the test only needs its existence and time).
/// A stored crash report of process `pid` (built without the staging area: no stitching).
func writeCrashReport(database path: String, bundleID: String, pid: Int32 = 1) throws -> String {
    let database = try CrashReportDatabase(path: path)
    let snapshot = ProcessSnapshot(reason: .crash(SignalInfo(number: SIGSEGV, code: 1, address: 0, tid: 1)),
                                   timestamp: Date().timeIntervalSince1970,
                                   process: ProcessIdentity(pid: pid, name: "x", executable: "/x", arguments: [], bundleID: bundleID),
                                   threads: [], modules: [])
    let id = UUID().uuidString.lowercased()
    let report = ReportBuilder.makeReport(from: snapshot, id: id, kind: .crash, symbolicator: Symbolicator())
    try database.writeReport(id: id, json: ReportRenderer.json(report), text: nil, dump: nil, subject: report.subject)
    return database.pendingReportsPath + "/" + id + ".json"
}
