// The processing stage's side of staged hangs: an orphaned hang promoted and processed into a
// fatal-hang report, a crash report taking in the hang its process had staged (HangStitch).
@testable import HangwatchDatabase
import HangwatchProcessing
import HangwatchPromotion
import HangwatchReport
@testable import HangwatchSnapshot
import HangwatchStageTestSupport
import Foundation
import HangwatchTestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

@Suite("Staged hangs processed", .ownThread)
struct StagedHangProcessingTests {
    /// StagingArea is staging/'s one owner: names, the lease, the dump and its sidecar,
    /// promotion of an orphan into one claimable dump; nothing else in staging/ is touched.
    @Test func stagesAndPromotesAnOrphanedHang() throws {
        let sandbox = try DatabaseSandbox()
        let database = try sandbox.open()
        let staging = database.stagingArea
        // A pid that is nobody's now: a child already reaped.
        let child = try ChildProcess("/bin/true")
        _ = try child.waitForExit(timeout: 30)
        func sidecar(_ bundle: String) -> HangSidecar {
            HangSidecar(bundleID: bundle, pid: child.pid, processStartTicks: 1, target: .mainQueue, thresholdSeconds: 1,
                        startTime: 1_000, lastSeenTime: 1_003, sampleCount: 0, hungThread: nil, hungThreads: nil, signature: "")
        }
        #expect(throws: DatabaseError.self) { try staging.begin(sidecar("../escape")) }
        var hang = try staging.begin(sidecar("com.example.app"))
        try staging.write(DumpSamples.hang(), of: hang)
        #expect(modeOf(staging.dumpPath(of: hang)) == 0o600)
        #expect(symlink(sandbox.directory, database.stagingPath + "/planted") == 0)
        let id = "com.example.app@" + hang.id
        #expect(try staging.fileNames() == [id + ".hang.dump", id + ".hang.json", id + ".hang.lease"])
        // Its owner (this process) holds the lease: not an orphan.
        #expect(staging.orphanCount() == 0)
        close(hang.lease)
        hang.lease = -1
        // A child that another test of this process spawns copies the descriptor table until its
        // exec closes the lease (O_CLOEXEC): for that moment the lock is still held.
        var outcomes = HangPromotion(database: database).promoteOrphans()
        for _ in 0..<200 where outcomes.isEmpty {
            usleep(10_000)
            outcomes = HangPromotion(database: database).promoteOrphans()
        }
        try #require(outcomes.count == 1)
        guard case let .promoted(promoted, atLeast, _, _) = outcomes[0] else { Issue.record("\(outcomes)"); return }
        #expect(promoted.target == .mainQueue && atLeast == 3)
        // The dump moved as it was written; its sidecar waits here for the dump's processor.
        #expect(directoryNames(database.stagingPath) == [id + ".hang.json", "planted"])
        let reports = try DumpProcessor(database: database).processIntermediateDumps()
        try #require(reports.count == 1)
        #expect(reports[0].kind == .fatalHang && reports[0].hang?.durationSeconds == 3)
        #expect(reports[0].annotations["hang.durationIsLowerBound"] == "true")
        #expect(directoryNames(database.stagingPath) == ["planted"])
    }

    /// A crash of the hung process supersedes its staged hang only once the crash report is
    /// stored: a report that cannot be written leaves the hang staged (and promotable).
    @Test func aCrashReportThatCannotBeStoredLeavesTheHangStaged() throws {
        let sandbox = try DatabaseSandbox()
        let database = try sandbox.open()
        let staging = database.stagingArea
        let child = try ChildProcess("/bin/true")
        _ = try child.waitForExit(timeout: 30)
        var hang = try staging.begin(HangSidecar(
            bundleID: "com.example.app", pid: child.pid, processStartTicks: 1, target: .mainQueue,
            thresholdSeconds: 1, startTime: 1_000, lastSeenTime: 1_002, sampleCount: 0, hungThread: nil, hungThreads: nil, signature: ""))
        try staging.write(DumpSamples.hang(), of: hang)
        close(hang.lease)
        hang.lease = -1
        var crash = DumpSamples.crash(message: nil)
        crash.process.pid = child.pid
        crash.process.bundleID = "com.example.app"
        crash.timestamp = 1_005
        let processor = DumpProcessor(database: database)
        // An id the database refuses: the write fails after the hang was stitched in.
        #expect(throws: DatabaseError.self) { try processor.store(crash, id: "../not-an-id") }
        #expect(try staging.fileNames().contains("com.example.app@\(hang.id).hang.dump"))
        #expect(staging.orphanCount() == 1, "its lease was let go")
        let report = try processor.store(crash, id: UUID().uuidString.lowercased())
        #expect(report.context?.supersededHang?.target == HangTarget.mainQueue)
        #expect(report.context?.supersededHang?.durationSeconds == 5)
        #expect(try staging.fileNames().isEmpty)
    }

    /// Whether a crash supersedes a staged hang is read from the subject kept beside each stored
    /// report, never from the report's JSON: a report whose JSON is unreadable but whose subject
    /// says "crash of that process" supersedes the hang; a crash report stored with no subject
    /// (the public `writeReport`) tells nothing, and the hang is promoted.
    @Test func aStoredCrashSupersedesByItsSubjectNotItsJSON() throws {
        let sandbox = try DatabaseSandbox()
        let database = try sandbox.open()
        let child = try ChildProcess("/bin/true")
        _ = try child.waitForExit(timeout: 30)
        var crash = DumpSamples.crash(message: nil)
        crash.process.pid = child.pid
        for bundle in ["com.example.subject", "com.example.json"] {
            var hang = try database.stagingArea.begin(HangSidecar(
                bundleID: bundle, pid: child.pid, processStartTicks: 1, target: .mainQueue, thresholdSeconds: 1,
                startTime: 1_000, lastSeenTime: 1_002, sampleCount: 0, hungThread: nil, hungThreads: nil, signature: ""))
            try database.stagingArea.write(DumpSamples.hang(), of: hang)
            close(hang.lease)
            hang.lease = -1
            crash.process.bundleID = bundle
            let report = DumpProcessor(database: database).makeReport(crash, id: UUID().uuidString.lowercased())
            #expect(report.subject == ReportSubject(kind: .crash, pid: child.pid, bundleID: bundle, runID: nil))
            if bundle == "com.example.subject" {
                try database.writeReport(id: report.id, json: Data("{}".utf8), text: nil, dump: nil, subject: report.subject)
            } else {
                try database.writeReport(id: report.id, json: ReportRenderer.json(report), text: nil)
            }
        }
        var outcomes: [String: StagedHangOutcome] = [:]
        for _ in 0..<200 where outcomes.count < 2 {  // a spawned child may hold a lease until its exec
            for outcome in HangPromotion(database: database).promoteOrphans() {
                switch outcome {
                case .promoted(let sidecar, _, _, _), .supersededByCrash(let sidecar, _), .awaitingCrashDump(let sidecar, _),
                     .failed(let sidecar, _):
                    outcomes[sidecar.bundleID] = outcome
                }
            }
            usleep(10_000)
        }
        guard case .supersededByCrash = outcomes["com.example.subject"] else { Issue.record("\(outcomes)"); return }
        guard case .promoted = outcomes["com.example.json"] else { Issue.record("\(outcomes)"); return }
    }
}
