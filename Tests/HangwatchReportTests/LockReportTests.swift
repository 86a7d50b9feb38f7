// Lock waits in a report (docs/locks.md): through the dump and the JSON unchanged, the headline
// at the end of the hung thread's chain, cycles said once, and reports without locks as before.
import HangwatchSnapshot
import Foundation
import Testing
import HangwatchStageTestSupport
@testable import HangwatchReport
import HangwatchSymbolication

@Suite struct LockReportTests {
    /// DumpSamples.hang's threads 4000 (main, hung) … 4003, with these waits.
    func report(_ waits: [Int32: LockWait]) throws -> Report {
        var snapshot = DumpSamples.hang()
        for index in snapshot.threads.indices { snapshot.threads[index].lockWait = waits[snapshot.threads[index].tid] }
        let read = try IntermediateDumpReader.read(bytes: IntermediateDumpWriter.encode(snapshot))
        #expect(read.threads.map(\.lockWait) == snapshot.threads.map(\.lockWait))
        return ReportBuilder.makeReport(from: read, id: "t", kind: .hang, symbolicator: Symbolicator())
    }

    func mutex(_ address: UInt64, _ holder: Int32?, unknown: String? = nil) -> LockWait {
        LockWait(kind: .mutex, address: address, holder: holder, unknown: unknown)
    }

    @Test func theHeadlineNamesTheHolderAndTheJSONRoundTrips() throws {
        let built = try report([4000: mutex(0x1000, 4002)])
        #expect(ReportRenderer.reason(built).hasSuffix(
            "; thread 4000 \"hang-fixture\" waits for mutex 0x0000000000001000 held by thread 4002 \"worker-2\" (in 0x0000555500001000)"),
            "\(ReportRenderer.reason(built))")
        let json = ReportRenderer.json(built)
        #expect(try Report.decode(from: json) == built)
        #expect(String(decoding: json, as: UTF8.self).contains(#""holderTid" : 4002"#))
        #expect(built.lockCycles == nil)
    }

    @Test func theHeadlineFollowsTheChainToWhereTheWorkStopped() throws {
        let built = try report([4000: mutex(0x1000, 4002), 4002: LockWait(kind: .piMutex, address: 0x2000, holder: 4003)])
        #expect(ReportRenderer.reason(built).hasSuffix("; thread 4000 \"hang-fixture\" waits, 1 lock on, for what thread 4002 "
            + "\"worker-2\" waits for pi-mutex 0x0000000000002000 held by thread 4003 \"worker-3\""), "\(ReportRenderer.reason(built))")
    }

    @Test func aCycleIsOneDeadlock() throws {
        let built = try report([4000: mutex(0x1000, 4002), 4002: mutex(0x2000, 4003), 4003: mutex(0x3000, 4002)])
        #expect(built.lockCycles == [[4002, 4003]])
        let reason = ReportRenderer.reason(built)
        #expect(reason.hasSuffix("held by thread 4002 \"worker-2\" (in 0x0000555500001000), in a deadlock: thread 4002 \"worker-2\" waits for mutex "
            + "0x0000000000002000 held by thread 4003, thread 4003 \"worker-3\" waits for mutex 0x0000000000003000 held by thread 4002"),
            "\(reason)")
        #expect(ReportRenderer.text(built).contains("\nDEADLOCK: thread 4002 \"worker-2\" waits for mutex 0x0000000000002000"))
        #expect(try Report.decode(from: ReportRenderer.json(built)) == built)
    }

    @Test func anUnknownHolderIsSaidSoAndNamesNoOne() throws {
        let built = try report([4000: LockWait(kind: .unknown, address: 0x1000, unknown: "its memory could not be read")])
        #expect(!ReportRenderer.reason(built).contains("held by"))
        #expect(ReportRenderer.text(built).contains("  waits for a lock 0x0000000000001000, holder unknown: its memory could not be read"))
        #expect(try Report.decode(from: ReportRenderer.json(built)) == built)
    }

    /// A queue's label is the program's: through the dump and the JSON unchanged, and on one
    /// line of the text (a newline in it is written as `\n`).
    @Test func aQueuesLabelRoundTripsAndStaysOnItsLine() throws {
        let label = "store\nDEADLOCK: forged"
        let built = try report([4000: LockWait(kind: .queue, address: 0x1000, holder: 4002, label: label),
                                4002: LockWait(kind: .queue, address: 0x2000, unknown: "it is suspended", label: "paused")])
        #expect(try Report.decode(from: ReportRenderer.json(built)) == built)
        #expect(ReportRenderer.reason(built).hasSuffix(
            "; thread 4000 \"hang-fixture\" waits, 1 lock on, for what thread 4002 \"worker-2\" waits for queue \"paused\" 0x0000000000002000, holder unknown: it is suspended"),
            "\(ReportRenderer.reason(built))")
        let text = ReportRenderer.text(built)
        #expect(text.contains("  waits for queue \"store\\nDEADLOCK: forged\" 0x0000000000001000 run by thread 4002 \"worker-2\""), "\(text.prefix(3000))")
        #expect(!text.contains("\nDEADLOCK: forged"))
    }

    /// A report without locks has none of the new keys, and a kind a later build adds reads as unknown.
    @Test func reportsWithoutLocksAreAsBefore() throws {
        let plain = String(decoding: ReportRenderer.json(try report([:])), as: UTF8.self)
        #expect(!plain.contains("waitsFor") && !plain.contains("lockCycles"))
        let later = String(decoding: ReportRenderer.json(try report([4000: mutex(0x1000, 4002)])), as: UTF8.self)
            .replacingOccurrences(of: #""kind" : "mutex""#, with: #""kind" : "futex-2030""#)
        #expect(try Report.decode(from: Data(later.utf8)).threads[0].lockWait?.kind == .unknown)
    }
}
