// The strict loader: every documented key, env overrides, and errors that name the key.
import Testing
import Foundation
import HangwatchTestSupport
@testable import HangMonitor
@testable import HangMonitorConfiguration
import HangMonitorService

@Suite struct ConfigurationTests {
    func withFile(_ text: String, _ body: (String) throws -> Void) throws {
        let dir = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(dir) }
        let path = dir + "/hangwatch.json"
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        try body(path)
    }

    func error(_ body: () throws -> Void) -> ConfigurationError? {
        do { try body(); return nil } catch let e as ConfigurationError { return e } catch { return nil }
    }

    @Test func shippedConfigFileLoadsWithDocumentedDefaults() throws {
        let path = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../config/hangwatch.json").standardized.path
        let config = try HangMonitor.Configuration.load(path: path, environment: [:])
        #expect(config.threshold == .seconds(2))
        #expect(config.sampleInterval == .milliseconds(50))
        #expect(config.maxSamples == 200)
        #expect(config.targets == [.mainQueue])
        #expect(config.keepRecoveredHangsLongerThan == nil)
        #expect(config.dedupWindow == .seconds(300))
        #expect(config.suspendWhenTraced)
        #expect(config.databasePath == "/var/tmp/hangwatch")
        #expect(config.redaction == [])
        #expect(config.runRecordInterval == .seconds(5))
        // Every documented key is in the shipped file, so the file is the documentation.
        let text = try String(contentsOfFile: path, encoding: .utf8)
        for key in HangMonitor.Configuration.keys { #expect(text.contains("\"\(key.file)\"")) }
    }

    @Test func everyKeyIsRead() throws {
        try withFile("""
            {"threshold": 1.5, "sampleInterval": 0.02, "maxSamples": 7, "databasePath": "/tmp/db", "bundleID": "com.example.app",
             "targets": ["main-queue", "cooperative-pool"], "keepRecoveredHangsLongerThan": 4, "dedupWindow": 0, "suspendWhenTraced": false,
             "redact": ["arguments", "stack-memory"], "runRecordInterval": 0}
            """) { path in
            let c = try HangMonitor.Configuration.load(path: path, environment: [:])
            #expect(c.threshold == .milliseconds(1500))
            #expect(c.sampleInterval == .milliseconds(20))
            #expect(c.maxSamples == 7)
            #expect(c.databasePath == "/tmp/db")
            #expect(c.bundleID == "com.example.app")
            #expect(c.targets == [.mainQueue, .cooperativePool])
            #expect(c.keepRecoveredHangsLongerThan == .seconds(4))
            #expect(c.dedupWindow == .zero)
            #expect(c.runRecordInterval == .zero, "0: no run record")
            #expect(!c.suspendWhenTraced)
            #expect(c.redaction == [.arguments, .stackMemory])
        }
    }

    @Test func redactionComesFromTheEnvironmentAndAnUnknownNameIsAnError() throws {
        try withFile(#"{"redact": ["arguments"]}"#) { path in
            let c = try HangMonitor.Configuration.load(path: path, environment: ["HANGWATCH_REDACT": "key-values, stderr"])
            #expect(c.redaction == [.keyValues, .stderrTail])
            #expect(throws: ConfigurationError.self) {
                try HangMonitor.Configuration.load(path: path, environment: ["HANGWATCH_REDACT": "passwords"])
            }
        }
        try withFile(#"{"redact": "all"}"#) { path in
            #expect(throws: ConfigurationError.self) { try HangMonitor.Configuration.load(path: path, environment: [:]) }
        }
    }

    @Test func environmentOverridesTheFile() throws {
        try withFile(#"{"threshold": 3, "bundleID": "file.id"}"#) { path in
            let c = try HangMonitor.Configuration.load(path: path, environment: [
                "HANGWATCH_THRESHOLD": "0.75", "HANGWATCH_BUNDLE_ID": "env.id", "HANGWATCH_TARGETS": "cooperative-pool, main-queue",
                "HANGWATCH_SUSPEND_WHEN_TRACED": "no", "HANGWATCH_KEEP_RECOVERED_HANGS_LONGER_THAN": "2"])
            #expect(c.threshold == .milliseconds(750))
            #expect(c.bundleID == "env.id")
            #expect(c.targets == [.cooperativePool, .mainQueue])
            #expect(!c.suspendWhenTraced)
            #expect(c.keepRecoveredHangsLongerThan == .seconds(2))
        }
    }

    @Test func negativeThresholdNamesTheKey() throws {
        try withFile(#"{"threshold": -1}"#) { path in
            let e = error { _ = try HangMonitor.Configuration.load(path: path, environment: [:]) }
            #expect(e?.key == "threshold")
            #expect(e?.problem.contains("negative") == true)
        }
        let fromEnv = error { _ = try HangMonitor.Configuration.load(path: nil, environment: ["HANGWATCH_THRESHOLD": "-2"]) }
        #expect(fromEnv?.key == "HANGWATCH_THRESHOLD")
        let zero = error { _ = try HangMonitor.Configuration.load(path: nil, environment: ["HANGWATCH_THRESHOLD": "0"]) }
        #expect(zero?.key == "HANGWATCH_THRESHOLD")
        #expect(throws: ConfigurationError.self) { _ = try HangMonitor(configuration: .init(threshold: .seconds(-1), databasePath: "/tmp/x", bundleID: "a")) }
    }

    @Test func unknownKeyIsAnErrorNamingIt() throws {
        try withFile(#"{"threshold": 2, "treshold": 3}"#) { path in
            let e = error { _ = try HangMonitor.Configuration.load(path: path, environment: [:]) }
            #expect(e?.key == "treshold")
            #expect(e?.problem.contains("unknown key") == true)
        }
    }

    @Test func unreadableOrMalformedFileIsAnErrorNamingIt() throws {
        let missing = error { _ = try HangMonitor.Configuration.load(path: "/nonexistent/hangwatch.json", environment: [:]) }
        #expect(missing?.key == "/nonexistent/hangwatch.json")
        try withFile("{not json") { path in
            let e = error { _ = try HangMonitor.Configuration.load(path: path, environment: [:]) }
            #expect(e?.key == path)
        }
        try withFile("[1, 2]") { path in
            #expect(error { _ = try HangMonitor.Configuration.load(path: path, environment: [:]) }?.key == path)
        }
        try withFile(String(repeating: " ", count: 70_000) + "{}") { path in
            #expect(error { _ = try HangMonitor.Configuration.load(path: path, environment: [:]) }?.problem.contains("larger") == true)
        }
    }

    @Test func wrongTypesNameTheKey() throws {
        let cases: [(String, String)] = [
            (#"{"suspendWhenTraced": 1}"#, "suspendWhenTraced"), (#"{"maxSamples": 2.5}"#, "maxSamples"),
            (#"{"threshold": "2s"}"#, "threshold"), (#"{"targets": ["main-queue", "gpu"]}"#, "targets"),
            (#"{"targets": ["queue:nope"]}"#, "targets"), (#"{"bundleID": "../evil"}"#, "bundleID"),
            (#"{"targets": []}"#, "targets"), (#"{"sampleInterval": 0}"#, "sampleInterval"),
        ]
        for (text, key) in cases {
            try withFile(text) { path in
                #expect(error { _ = try HangMonitor.Configuration.load(path: path, environment: [:]) }?.key == key, "\(text)")
            }
        }
        #expect(error { _ = try HangMonitor.Configuration.load(path: nil, environment: ["HANGWATCH_MAX_SAMPLES": "many"]) }?.key == "HANGWATCH_MAX_SAMPLES")
        #expect(error { _ = try HangMonitor.Configuration.load(path: nil, environment: ["HANGWATCH_SUSPEND_WHEN_TRACED": "maybe"]) }?.key == "HANGWATCH_SUSPEND_WHEN_TRACED")
    }

    @Test func namedQueueTargetsResolveToPassedQueues() throws {
        let queue = DispatchQueue(label: "com.example.db")
        let c = try HangMonitor.Configuration.load(path: nil, environment: ["HANGWATCH_TARGETS": "main-queue,queue:com.example.db"], queues: [queue])
        #expect(c.targets == [.mainQueue, .queue(queue)])
        #expect(c.targets.map(\.description) == [WatchTarget.mainQueue.description, "queue:com.example.db"])
    }
    // swift-configuration alone would take these silently (null = absent, an object flattens to
    // dotted keys, a bad env value falls back); the loader's strictness must not.
    @Test func valuesSwiftConfigurationWouldAcceptAreErrors() throws {
        let cases: [(String, String)] = [
            (#"{"threshold": null}"#, "threshold"), (#"{"threshold": {"seconds": 2}}"#, "threshold"),
            (#"{"maxSamples": true}"#, "maxSamples"), (#"{"targets": "main-queue"}"#, "targets"),
            (#"{"targets": ["main-queue", 1]}"#, "targets"), (#"{"bundleID": 7}"#, "bundleID"),
        ]
        for (text, key) in cases {
            try withFile(text) { path in
                #expect(error { _ = try HangMonitor.Configuration.load(path: path, environment: [:]) }?.key == key, "\(text)")
            }
        }
        try withFile(#"{"threshold": 3}"#) { path in
            // A bad override is an error, not a fall-through to the file's value.
            let e = error { _ = try HangMonitor.Configuration.load(path: path, environment: ["HANGWATCH_THRESHOLD": "3s"]) }
            #expect(e?.key == "HANGWATCH_THRESHOLD")
            #expect(e?.problem.contains("3s") == true)
        }
        for text in ["nan", "inf", "1e12"] {
            #expect(error { _ = try HangMonitor.Configuration.load(path: nil, environment: ["HANGWATCH_DEDUP_WINDOW": text]) }?.key == "HANGWATCH_DEDUP_WINDOW", "\(text)")
        }
        #expect(error { _ = try HangMonitor.Configuration.load(path: nil, environment: ["HANGWATCH_MAX_SAMPLES": "-3"]) }?.key == "HANGWATCH_MAX_SAMPLES")
    }

    @Test func environmentSpellingsAndPrecedence() throws {
        try withFile(#"{"keepRecoveredHangsLongerThan": null, "suspendWhenTraced": false, "maxSamples": 9}"#) { path in
            let c = try HangMonitor.Configuration.load(path: path, environment: [
                "HANGWATCH_KEEP_RECOVERED_HANGS_LONGER_THAN": " 1.5 ", "HANGWATCH_SUSPEND_WHEN_TRACED": "On",
                "HANGWATCH_TARGETS": "main-queue,, cooperative-pool,", "HANGWATCH_NOT_A_KEY": "x", "THRESHOLD": "9"])
            #expect(c.keepRecoveredHangsLongerThan == .milliseconds(1500))
            #expect(c.suspendWhenTraced)
            #expect(c.targets == [.mainQueue, .cooperativePool])
            #expect(c.maxSamples == 9)                // from the file: no override
            #expect(c.threshold == .seconds(2))       // default: only HANGWATCH_* names count
        }
        let off = try HangMonitor.Configuration.load(path: nil, environment: ["HANGWATCH_SUSPEND_WHEN_TRACED": "off"])
        #expect(!off.suspendWhenTraced)
    }
}
