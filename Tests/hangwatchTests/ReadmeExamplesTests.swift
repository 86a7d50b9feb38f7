// The README's library examples, compiled and run as written (paths made private): if the
// API drifts from the README, this stops compiling.
import DumpWithoutCrash
import Foundation
import HangMonitor
import HangMonitorConfiguration
import HangMonitorService
import HangwatchTestSupport
import Testing

@Suite("README examples")
struct ReadmeExamplesTests {
    @Test func dumpWithoutCrashExample() throws {
        let directory = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(directory) }
        let databasePath = directory + "/myapp-reports", stagedPath = directory + "/x.hwdump"

        let client = try DumpClient(databasePath: databasePath, bundleID: "com.example.myapp")
        client.annotations["version"] = "1.2.3"

        let report = try client.dumpWithoutCrash()
        #expect(ReportRenderer.text(report).contains("Report ID:  \(report.id)"))

        try client.dumpWithoutCrashAndDeferProcessing()
        try client.dumpWithoutCrashAndDeferProcessing(atPath: stagedPath)
        let reports = try client.processIntermediateDumps()
        let one = try client.processIntermediateDump(atPath: stagedPath)
        #expect(reports.count == 1 && one.annotations["version"] == "1.2.3")
    }

    @Test func hangMonitorExample() throws {
        let directory = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(directory) }
        let monitor = try HangMonitor(configuration: .init(
            threshold: .seconds(2),
            databasePath: directory + "/myapp-reports",
            bundleID: "com.example.myapp"))
        monitor.start()
        monitor.pause(); monitor.resume()
        monitor.stop()
        #expect(!monitor.isRunning)

        let configFile = directory + "/hangwatch.json"
        try Data(#"{"threshold": 1.5, "databasePath": "\#(directory)/db", "bundleID": "com.example.myapp"}"#.utf8)
            .write(to: URL(fileURLWithPath: configFile))
        let configured = try HangMonitor(configuration: .load(path: configFile, environment: [:]))
        #expect(configured.configuration.threshold == .milliseconds(1500))
        _ = HangMonitorService(monitor: configured)
    }

    @Test func shippedConfigurationLoads() throws {
        let shipped = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("config/hangwatch.json").path
        let configuration = try HangMonitor.Configuration.load(path: shipped, environment: [:])
        #expect(configuration.threshold == .seconds(2))
    }
}
