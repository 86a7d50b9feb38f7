// Stored reports: atomic writes, listing, look-up by prefix, completion, deletion, pruning.
@testable import HangwatchDatabase
@testable import HangwatchSnapshot
import Foundation
import HangwatchTestSupport
import Testing
#if canImport(Glibc)
import Glibc
import HangwatchStageTestSupport
#endif

@Suite("Database reports")
struct DatabaseReportTests {
    @Test func storesListsCompletesAndDeletesReports() throws {
        let sandbox = try DatabaseSandbox()
        let database = try sandbox.open()
        let id = "3fa2c7d0-1111-4222-8333-944455556666"
        try database.writeReport(id: id, json: Data("{\"a\":1}".utf8), text: "hello")
        try database.writeReport(id: "b71e0000-0000-0000-0000-000000000000", json: Data("{}".utf8), text: nil)
        #expect(modeOf(database.pendingReportsPath + "/\(id).json") == 0o600)
        #expect(modeOf(database.pendingReportsPath + "/\(id).txt") == 0o600)

        let listed = try database.listReports()
        #expect(listed.count == 2)
        let first = try #require(listed.first { $0.id == id })
        #expect(first.state == .pending)
        #expect(first.size == diskBytes(of: database.pendingReportsPath + "/\(id).json") + diskBytes(of: database.pendingReportsPath + "/\(id).txt"),
                "sizes are what the files take on disk")
        #expect(first.textPath == database.pendingReportsPath + "/\(id).txt")
        #expect(try database.readReport(id: id) == Data("{\"a\":1}".utf8))
        #expect(try database.readReportText(id: id) == "hello")

        #expect(try database.findReport("3FA2").id == id)
        #expect(throws: DatabaseError.noSuchReport("ffff")) { try database.findReport("ffff") }
        try database.writeReport(id: "3fa2ffff", json: Data("{}".utf8), text: nil)
        #expect(throws: DatabaseError.self) { try database.findReport("3fa2") }

        try database.markCompleted(id: id, serverID: "server-42")
        try database.markCompleted(id: id, serverID: "server-42") // repeating is harmless
        let completed = try database.findReport(id)
        #expect(completed.state == .completed)
        #expect(completed.serverID == "server-42")
        #expect(try database.readReportText(id: id) == "hello")
        #expect(throws: DatabaseError.reportAlreadyCompleted(id)) {
            try database.writeReport(id: id, json: Data("{}".utf8), text: nil)
        }

        try database.deleteReport(id: id)
        #expect(throws: DatabaseError.noSuchReport(id)) { try database.readReport(id: id) }
        #expect(throws: DatabaseError.noSuchReport(id)) { try database.deleteReport(id: id) }
        #expect(directoryNames(database.completedReportsPath).isEmpty)
    }

    /// Whose end a report tells is kept beside it (`<id>.subject`, 0600): listed with the report,
    /// moved with it to completed/, removed with it, pruned when its report is gone; a report
    /// written without one, and a subject that is not ours to read, tell no end.
    @Test func aReportsSubjectLivesAndGoesWithIt() throws {
        let sandbox = try DatabaseSandbox()
        let database = try sandbox.open()
        let id = "5ab1ec70-1111-4222-8333-944455556666"
        let subject = ReportSubject(kind: .crash, pid: 42, bundleID: "com.example.app", runID: "run-7")
        try database.writeReport(id: id, json: Data("{}".utf8), text: nil, dump: nil, subject: subject)
        try database.writeReport(id: "without-subject", json: Data("{\"kind\":\"crash\"}".utf8), text: nil)
        #expect(modeOf(database.pendingReportsPath + "/\(id).subject") == 0o600)
        var found = database.reportSubjects(after: 0)
        #expect(found.map(\.report.id) == [id] && found.first?.subject == subject)
        #expect(database.reportSubjects(after: Date().timeIntervalSince1970 + 60).isEmpty, "only reports written after the time")
        #expect(try database.findReport(id).size == diskBytes(of: database.pendingReportsPath + "/\(id).json")
                + diskBytes(of: database.pendingReportsPath + "/\(id).subject"))

        try database.markCompleted(id: id, serverID: nil)
        found = database.reportSubjects(after: 0)
        #expect(found.map(\.report.id) == [id] && found.first?.subject == subject)
        #expect(directoryNames(database.completedReportsPath) == ["\(id).json", "\(id).subject"])
        try database.deleteReport(id: id)
        #expect(directoryNames(database.completedReportsPath).isEmpty)

        // Hostile or broken subjects are passed over, never trusted or trapped on.
        for (name, bytes) in [("big", Data(repeating: 0x7B, count: 1 << 20)), ("garbage", Data("{\"kind\":\"crash\",\"pid\":\"x\"}".utf8))] {
            try database.writeReport(id: name, json: Data("{}".utf8), text: nil)
            try writeFile(database.pendingReportsPath + "/\(name).subject", String(decoding: bytes, as: UTF8.self))
        }
        try database.writeReport(id: "linked", json: Data("{}".utf8), text: nil)
        let elsewhere = sandbox.directory + "/elsewhere.subject"
        try writeFile(elsewhere, "{\"bundleID\":\"b\",\"kind\":\"crash\",\"pid\":1}")
        #expect(symlink(elsewhere, database.pendingReportsPath + "/linked.subject") == 0)
        #expect(database.reportSubjects(after: 0).isEmpty)

        // A subject left without its report (an interrupted delete) is pruned once stale; a file
        // that is only named like one is not ours and stays.
        let orphan = database.pendingReportsPath + "/gone.subject", foreign = database.pendingReportsPath + "/foreign.subject"
        try writeFile(orphan, "{\"bundleID\":\"b\",\"kind\":\"crash\",\"pid\":1}")
        try writeFile(foreign, "not a subject")
        for path in [orphan, foreign] { try setModificationDate(path, Date() - 2 * hour) }
        #expect(try database.prune().removedTemporaryFiles == [orphan])
        #expect(access(foreign, F_OK) == 0)
    }

    @Test(arguments: ["", "../x", "a/b", ".hidden", "a b", "-rf", "a\0b", String(repeating: "a", count: 65)])
    func refusesReportIDsThatCouldNameAPath(id: String) throws {
        let sandbox = try DatabaseSandbox()
        let database = try sandbox.open()
        #expect(throws: DatabaseError.self) { try database.writeReport(id: id, json: Data("{}".utf8), text: nil) }
        #expect(throws: DatabaseError.self) { try database.readReport(id: id) }
        #expect(directoryNames(database.pendingReportsPath).isEmpty)
    }

    @Test func prunesByAgeThenSizeOldestCompletedFirst() throws {
        let sandbox = try DatabaseSandbox()
        let database = try sandbox.open()
        let now = Date()
        let kilobyte = Data("{".utf8) + Data(repeating: 0x41, count: 999)
        // ancient (pending, 40 days), old-done (completed, 5 days), old (pending, 4 days), new (pending, 1 day)
        for (id, age) in [("ancient", 40 * day), ("olddone", 5 * day), ("old", 4 * day), ("new", 1 * day)] {
            try database.writeReport(id: id, json: kilobyte, text: nil)
            try setModificationDate(database.pendingReportsPath + "/\(id).json", now - age)
        }
        try database.markCompleted(id: "olddone", serverID: nil)
        try writeFile(database.stagingPath + "/live-hang.hwdump", "staged")
        try setModificationDate(database.stagingPath + "/live-hang.hwdump", now - 90 * day)
        let unclaimed = try database.makeFinishedDump(bundleID: "com.example.app")
        try setModificationDate(unclaimed.path, now - 90 * day)

        // Each report takes one file's blocks on disk.
        let one = diskBytes(of: database.pendingReportsPath + "/new.json")
        #expect(one >= 1000)
        // Age: only the 40-day report goes.
        let byAge = try database.prune(policy: PrunePolicy(maxAge: 30 * day, maxTotalBytes: 1 << 30, now: now))
        #expect(byAge.removedReportIDs == ["ancient"])
        #expect(byAge.bytesRemaining == 3 * one)

        // Size: room for one and a half, so two must go: the completed one, then the oldest pending.
        let bySize = try database.prune(policy: PrunePolicy(maxAge: 30 * day, maxTotalBytes: one + one / 2, now: now))
        #expect(bySize.removedReportIDs == ["olddone", "old"])
        #expect(bySize.bytesFreed == 2 * one)
        #expect(try database.listReports().map(\.id) == ["new"])
        // Never touched: HangMonitor's staging files and dumps still waiting to be processed.
        #expect(readFileText(database.stagingPath + "/live-hang.hwdump") == "staged")
        #expect(access(unclaimed.path, F_OK) == 0)
    }

    @Test func concurrentListingsSeeEveryReport() async throws {
        let sandbox = try DatabaseSandbox()
        let database = try sandbox.open()
        // More entries than one getdents64 buffer holds, so listings really interleave.
        for index in 0..<3000 { try writeFile(database.pendingReportsPath + "/r\(index).json", "{}") }
        let counts = try await withThrowingTaskGroup(of: [Int].self) { group in
            for _ in 0..<4 {
                group.addTask { try (0..<3).map { _ in try database.listReports().count } }
            }
            return try await group.reduce(into: []) { $0 += $1 }
        }
        #expect(counts.count == 12)
        #expect(counts.allSatisfy { $0 == 3000 })
    }

    @Test func prunesStaleTemporaryFilesOnly() throws {
        let sandbox = try DatabaseSandbox()
        let database = try sandbox.open()
        let stale = database.pendingReportsPath + "/.tmp-x.json-1-2"
        let fresh = database.pendingReportsPath + "/.tmp-y.json-1-3"
        try writeFile(stale, "{\"half")
        try writeFile(fresh, "{\"writing")
        try setModificationDate(stale, Date() - 2 * hour)
        let orphanText = database.pendingReportsPath + "/gone.txt"
        try writeFile(orphanText, "*** Hang: text of a report whose json was never written")
        try setModificationDate(orphanText, Date() - 2 * hour)
        try database.writeReport(id: "kept", json: Data("{}".utf8), text: "kept text")
        try setModificationDate(database.pendingReportsPath + "/kept.txt", Date() - 2 * hour)
        let result = try database.prune()
        #expect(Set(result.removedTemporaryFiles) == [stale, orphanText])
        #expect(try database.readReportText(id: "kept") == "kept text")
        #expect(access(stale, F_OK) != 0)
        #expect(access(fresh, F_OK) == 0)
    }

    @Test func prunesOldFailedDumps() throws {
        let sandbox = try DatabaseSandbox()
        let database = try sandbox.open()
        try database.makeFinishedDump(bundleID: "com.example.app")
        let claim = try #require(try database.claimIntermediateDumps(bundleID: "com.example.app").first)
        let failed = try database.failClaim(claim, reason: "unreadable: test")
        // What the writer starts every dump with: the prune removes only dumps that are ours.
        try (Data("HWIDUMP".utf8) + [0, 1, 2, 3]).write(to: URL(fileURLWithPath: failed))
        try setModificationDate(failed, Date() - 31 * day)
        let result = try database.prune()
        #expect(result.removedFailedDumps == [failed])
        #expect(try database.listFailedDumps().isEmpty)
    }

    /// A reason is kept to 4096 bytes of UTF-8 (it was 4096 characters: up to four times as
    /// many bytes), so that prune, which takes no larger `.reason` for ours, removes it.
    @Test func aLongReasonIsBoundedInBytesAndPruned() throws {
        let sandbox = try DatabaseSandbox()
        let database = try sandbox.open()
        try database.makeFinishedDump(bundleID: "com.example.app")
        let claim = try #require(try database.claimIntermediateDumps(bundleID: "com.example.app").first)
        let failed = try database.failClaim(claim, reason: "unreadable: " + String(repeating: "\u{E9}", count: 3000))
        let reason = try Data(contentsOf: URL(fileURLWithPath: failed + ".reason"))
        #expect(reason.count <= 4097 && reason.count > 4000, "\(reason.count) bytes")
        #expect(String(data: reason, encoding: .utf8)?.hasSuffix("\u{E9}\n") == true, "cut at a character")
        try setModificationDate(failed + ".reason", Date() - 31 * day)
        #expect(try database.prune().removedFailedDumps.contains(failed + ".reason"))
    }
}
