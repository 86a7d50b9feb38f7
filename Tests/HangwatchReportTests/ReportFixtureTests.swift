// Reports written by earlier builds (Fixtures/reports, see its README) must keep decoding, and
// decode → JSON must give back the same bytes: the schema's spelling is fixed within a version.
import HangwatchReport
import HangwatchSymbolication
import HangwatchSnapshot
import Foundation
import Testing
import HangwatchStageTestSupport

enum ReportFixtures {
    static var directory: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Fixtures/data/reports")
    }

    static let names = ["crash-superseded-hang.json", "fatal-hang-timeout.json", "dump-profile.json",
                        "fatal-hang-process-tree.json", "killed-oom-memory-max.json"]

    static func data(_ name: String) throws -> Data {
        try Data(contentsOf: directory.appendingPathComponent(name))
    }
}

@Suite struct ReportFixtureTests {
    /// Every kept dump that reads (the fuzzer's among them, Fixtures/data/dumps) becomes a
    /// report whose JSON decodes again: a NaN in a dump (an operation's limit, once) made the
    /// JSON "{}" (scripts/fuzz intermediate-dump found it).
    @Test func everyFixtureDumpBecomesAReportWhoseJSONDecodes() throws {
        var rendered = 0
        for file in try DumpFixtures.files() {
            guard let snapshot = try? IntermediateDumpReader.read(bytes: IntermediateDumpReader.readFile(path: file.path)) else { continue }
            let report = ReportBuilder.makeReport(from: snapshot, id: "fixture", kind: ReportKind(implying: snapshot.reason),
                                                  symbolicator: Symbolicator(cache: nil))
            let json = ReportRenderer.json(report)
            #expect((try? Report.decode(from: json)) != nil, "\(file.lastPathComponent): \(String(decoding: json.prefix(200), as: UTF8.self))")
            rendered += 1
        }
        #expect(rendered >= 10)
    }

    @Test(arguments: ReportFixtures.names)
    func storedReportRoundTripsByteForByte(_ name: String) throws {
        let stored = try ReportFixtures.data(name)
        let report = try Report.decode(from: stored)
        let rendered = ReportRenderer.json(report)
        #expect(rendered == stored, "\(name) re-rendered differently:\n\(String(decoding: rendered, as: UTF8.self))")
        #expect(try Report.decode(from: rendered) == report)
    }

    @Test func aKilledReportOfVersionThreeOpensWithItsCauseAndSamples() throws {
        let report = try Report.decode(from: ReportFixtures.data("killed-oom-memory-max.json"))
        #expect(report.schemaVersion == 3 && report.kind == .killed)
        let killed = try #require(report.killed)
        #expect(killed.cause == .oom && killed.signal == "SIGKILL")
        #expect(killed.memoryCgroup?.limitBytes == 200 << 20)
        #expect(killed.memoryCgroup?.oomKillsBefore == 0 && killed.memoryCgroup?.oomKillsAfter == 1)
        #expect(killed.samples.count == 2 && killed.samples[1].residentBytes > killed.samples[0].residentBytes)
        #expect(killed.evidence.contains { $0.hasPrefix("kernel: Memory cgroup out of memory: Killed process \(report.process.pid) ") })
        #expect(report.threads.isEmpty && report.modules.isEmpty)
        #expect(report.context?.stderrTail?.contains("allocated 192 MiB") == true)
        let text = ReportRenderer.text(report)
        #expect(text.contains("Memory:     cgroup "), "\(text)")
        #expect(!text.contains("Captured:") && !text.contains("Modules:"), "nothing is captured at a kill")
        // A cause a later build adds reads as unknown rather than failing the report.
        let future = String(decoding: try ReportFixtures.data("killed-oom-memory-max.json"), as: UTF8.self)
            .replacingOccurrences(of: "\"cause\" : \"oom\"", with: "\"cause\" : \"thermal\"")
        #expect(try Report.decode(from: Data(future.utf8)).killed?.cause == .unknown)
    }

    @Test func versionOneReportsOpenWithoutTheVersionTwoKeys() throws {
        let old = try Report.decode(from: ReportFixtures.data("fatal-hang-timeout.json"))
        #expect(old.schemaVersion == 1 && old.processTree == nil && old.runID == nil)
        let tree = try Report.decode(from: ReportFixtures.data("fatal-hang-process-tree.json"))
        #expect(tree.schemaVersion == 2)
        let processTree = try #require(tree.processTree)
        #expect(processTree.culpritPID == tree.process.pid && processTree.rootPID != tree.process.pid)
        #expect(processTree.processes.map(\.activity) == ["waiting", "blocked"])
        // The culprit's threads are the report's own; the shell's are in the tree.
        #expect(processTree.processes[1].threads == nil && processTree.processes[0].threads?.count == 1)
        #expect(tree.runID == tree.annotations["hangwatch.run-id"])
    }

    @Test func storedSpellingsDecodeToNumbers() throws {
        let crash = try Report.decode(from: ReportFixtures.data("crash-superseded-hang.json"))
        #expect(crash.timestamp == 1_795_388_779.269)                              // "2026-11-22T23:06:19.269Z"
        #expect(crash.context?.supersededHang?.startTime == 1_795_388_777.266)
        #expect(crash.signal?.address == 0x28)
        let thread = try #require(crash.threads.first)
        #expect(thread.registers?["r10"] == 0x2625_44e0_0cbf_dbd7)                 // above 2^53: every bit kept
        #expect(thread.registers?["rip"] == 0x0000_555c_bfd3_901c)
        let frame = try #require(thread.frames.first)
        #expect(frame.address == 0x0000_555c_bfd3_901c)
        #expect(frame.moduleOffset == 0x15_301c)
        let module = try #require(crash.modules.first { $0.path == frame.module })
        #expect(module.base == 0x0000_555c_bfbe_6000 && module.start == module.base && module.end == 0x0000_555c_bfdb_24b8)
        #expect(frame.address - module.base == frame.moduleOffset)

        let hang = try Report.decode(from: ReportFixtures.data("fatal-hang-timeout.json"))
        #expect(hang.timestamp == 1_795_388_784.988)
        #expect(hang.hang?.startTime == 1_795_388_784.984)
    }

    /// A value that does not have its schema spelling makes the report malformed (the error names
    /// it); it never decodes to 0.
    @Test func misspelledAddressesAndTimesAreMalformed() throws {
        let cases: [(edit: (inout [String: Any]) -> Void, path: String)] = [
            ({ $0["timestamp"] = "yesterday" }, "timestamp"),
            ({ $0["timestamp"] = 1_795_388_779.269 }, "timestamp"),
            ({ Self.editThread(&$0) { $0["registers"] = ["rip": "pc"] } }, "threads[0].registers"),
            ({ Self.editThread(&$0) { thread in
                var frames = thread["frames"] as! [[String: Any]]
                frames[0]["address"] = "0xg"
                thread["frames"] = frames
            } }, "threads[0].frames[0].address"),
            ({ Self.editThread(&$0) { thread in
                var frames = thread["frames"] as! [[String: Any]]
                frames[0]["moduleOffset"] = ""
                thread["frames"] = frames
            } }, "threads[0].frames[0].moduleOffset"),
            ({ object in
                var modules = object["modules"] as! [[String: Any]]
                modules[0]["end"] = "end"
                object["modules"] = modules
            }, "modules[0].end"),
        ]
        for (edit, path) in cases {
            var object = try #require(try JSONSerialization.jsonObject(with: ReportFixtures.data("dump-profile.json")) as? [String: Any])
            edit(&object)
            do {
                _ = try Report.decode(from: JSONSerialization.data(withJSONObject: object))
                Issue.record("decoded with a bad \(path)")
            } catch let error as ReportDecodingError {
                guard case .malformed(let detail) = error else { Issue.record("wrong error \(error)"); continue }
                #expect(detail.hasPrefix(path + ":"), "\(detail)")
            }
        }
    }

    private static func editThread(_ object: inout [String: Any], _ edit: (inout [String: Any]) -> Void) {
        var threads = object["threads"] as! [[String: Any]]
        edit(&threads[0])
        object["threads"] = threads
    }
}
