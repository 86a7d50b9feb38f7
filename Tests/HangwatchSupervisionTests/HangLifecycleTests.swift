// The one hang lifecycle (Sources/HangwatchLifecycle/HangLifecycle.swift), driven by hand: each
// step from each state, and none that goes back.
import HangwatchLifecycle
import HangwatchSnapshot
import Testing

@Suite("hang lifecycle")
struct HangLifecycleTests {
    @Test func aCapturedHangIsStagedSampledAndEndsOnce() {
        var hang = HangLifecycle(target: .mainQueue)
        #expect(hang.state == .pending && hang.isLive)
        let fresh = hang.captured(duplicate: false)
        #expect(fresh)
        hang.staged()
        #expect(hang.state == .staged)
        let again = hang.captured(duplicate: false)
        #expect(!again, "a second capture of a staged hang is no new hang")
        let ending = hang.end(.recovered)
        #expect(ending == .init(outcome: .recovered, report: false))
        #expect(hang.state == .ended(.recovered) && !hang.isLive)
        let second = hang.end(.fatal)
        #expect(second == nil, "a hang ends once")
        hang.staged()
        #expect(hang.state == .ended(.recovered), "an ended hang is never staged again")
        let taken = hang.takenOver(by: "r")
        #expect(!taken, "nor superseded")
    }

    @Test func whatBecomesAReport() {
        for (outcome, keep, report) in [(HangOutcome.recovered, false, false), (.recovered, true, true), (.fatal, false, true),
                                        (.unfinished, false, true)] {
            var hang = HangLifecycle(target: .cooperativePool)
            let ending = hang.end(outcome, keepRecovered: keep)
            #expect(ending?.report == report, "\(outcome) keep \(keep)")
        }
        var ongoing = HangLifecycle(target: .mainQueue)
        let notAnEnd = ongoing.end(.ongoing)
        #expect(notAnEnd == nil && ongoing.isLive, "ongoing is no end")
    }

    @Test func aDuplicateIsStagedAfterThreeThresholdsOnceUnlessItMayNot() {
        var hang = HangLifecycle(target: .queue(label: "db"))
        let staging = hang.captured(duplicate: true)
        #expect(!staging)
        #expect(hang.state == .duplicate(mayStage: true) && hang.isLive)
        let early = hang.duplicateDueForStaging(lasted: 2_999, threshold: 1_000)
        let due = hang.duplicateDueForStaging(lasted: 3_000, threshold: 1_000)
        let dueAgain = hang.duplicateDueForStaging(lasted: 9_000, threshold: 1_000)
        #expect(!early && due)
        #expect(!dueAgain, "once")
        hang.staged()
        #expect(hang.state == .staged)

        var operation = HangLifecycle(target: .operation(name: "fetch"))
        let operationStaging = operation.captured(duplicate: true, mayStageLater: false)
        let operationDue = operation.duplicateDueForStaging(lasted: .max / 4, threshold: 1)
        #expect(!operationStaging && !operationDue, "an operation's duplicate is never staged")
    }

    @Test func aSupersededHangIsNeverWrittenAgain() {
        for duplicate in [false, true] {
            var hang = HangLifecycle(target: .mainQueue)
            _ = hang.captured(duplicate: duplicate)
            let taken = hang.takenOver(by: "/db/reports/pending/c.json")
            #expect(taken)
            #expect(hang.state == .superseded(report: "/db/reports/pending/c.json") && !hang.isLive)
            let due = hang.duplicateDueForStaging(lasted: .max / 4, threshold: 1)
            hang.staged()
            let recovered = hang.end(.recovered), fatal = hang.end(.fatal)
            let takenAgain = hang.takenOver(by: nil)
            #expect(!due && recovered == nil && fatal == nil && !takenAgain)
            #expect(hang.state == .superseded(report: "/db/reports/pending/c.json"))
        }
    }
}
