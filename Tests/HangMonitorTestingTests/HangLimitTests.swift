// HangMonitorTesting in the suite that uses it: a block longer than the limit fails with its
// stack, a short one passes, and a block by code that is not the test's is not charged to it
// (the rest of this suite runs in parallel meanwhile). The trait's failing side, XCTest and
// "nothing written to disk" are checked on a real test package by scripts/example-hang-limit.
import Dispatch
import Foundation
import Testing
import HangMonitor
import HangMonitorTesting
import HangwatchTestSupport

/// Blocks the calling thread; a named frame for the stack to show.
@inline(never) func blockTheCallingThread(milliseconds: Int) {
    let end = DispatchTime.now().uptimeNanoseconds + UInt64(milliseconds) * 1_000_000
    while DispatchTime.now().uptimeNanoseconds < end { usleep(5_000) }
}

/// Blocks the main queue from code that belongs to no test.
@inline(never) func blockTheMainQueueFromElsewhere(milliseconds: Int) {
    DispatchQueue.main.async { blockTheCallingThread(milliseconds: milliseconds) }
}

// Serialized: its tests block the main queue on purpose, and blocks that follow each other on
// the main queue within one hang are what a limit cannot tell apart (docs/hang-monitor.md).
@Suite(.ownThreadAlone, .serialized) struct HangLimitTests {
    @Test func aBlockOfTheMainQueueLongerThanTheLimitFailsWithItsStack() async throws {
        let error = await #expect(throws: HangLimitExceeded.self) {
            try await withHangLimit(.milliseconds(200)) {
                await MainActor.run { blockTheCallingThread(milliseconds: 600) }
            }
        }
        let hang = try #require(error?.hangs.first)
        #expect(error?.hangs.count == 1)
        #expect(hang.target == WatchTarget.mainQueue.description)
        #expect(hang.recovered)
        #expect(hang.durationSeconds >= 0.55 && hang.durationSeconds < 5, "\(hang.durationSeconds)")
        #expect(hang.limitSeconds == 0.2)
        // The blocking function with its file:line, and the test's own frame marked.
        #expect(hang.stack.contains("blockTheCallingThread") && hang.stack.contains("HangLimitTests.swift:"), "\(hang.stack)")
        let marked = try #require(hang.stack.split(separator: "\n").first { $0.hasPrefix(" → ") })
        #expect(marked.contains("HangMonitorTestingTests."), "\(hang.stack)")
        #expect(error?.description.hasPrefix("main-queue blocked for ") == true, "\(String(describing: error))")
    }

    @Test func aBlockShorterThanTheLimitPasses() async throws {
        let value = try await withHangLimit(.milliseconds(500)) {
            await MainActor.run { blockTheCallingThread(milliseconds: 50) }
            return 42
        }
        #expect(value == 42)
    }

    @Test(.hangLimit(.milliseconds(500))) func aTestUnderItsTraitsLimitPasses() async {
        await MainActor.run { blockTheCallingThread(milliseconds: 50) }
    }

    /// Another test (here: code outside this test) blocks the main queue for longer than the
    /// limit while the limit is on: the monitor sees the hang, its stack is not this test's.
    @Test func aBlockByCodeThatIsNotTheTestsIsNotCharged() async throws {
        try await withHangLimit(.milliseconds(200)) {
            blockTheMainQueueFromElsewhere(milliseconds: 600)
            try await Task.sleep(for: .milliseconds(900))
        }
    }

    /// Precision, not run by default (scripts/hang-limit-precision runs it with the rest of the
    /// suite in parallel): against a 200 ms limit, 150 ms blocks pass and 250 ms blocks fail.
    static let precisionRuns = Int(ProcessInfo.processInfo.environment["HANGWATCH_LIMIT_PRECISION_RUNS"] ?? "") ?? 0

    @Test(.enabled(if: precisionRuns > 0, "scripts/hang-limit-precision sets HANGWATCH_LIMIT_PRECISION_RUNS"))
    func blocksJustUnderTheLimitPassAndJustOverItFail() async throws {
        var shortPassed = 0
        var longFailed = 0
        for _ in 0..<Self.precisionRuns {
            do {
                try await withHangLimit(.milliseconds(200)) { await MainActor.run { blockTheCallingThread(milliseconds: 150) } }
                shortPassed += 1
            } catch let error as HangLimitExceeded {
                print("hang-limit precision: a 150 ms block failed: \(error)")
            }
            do {
                try await withHangLimit(.milliseconds(200)) { await MainActor.run { blockTheCallingThread(milliseconds: 250) } }
                print("hang-limit precision: a 250 ms block passed")
            } catch is HangLimitExceeded {
                longFailed += 1
            }
        }
        print("hang-limit precision: limit 200 ms; 150 ms blocks passed \(shortPassed)/\(Self.precisionRuns), "
              + "250 ms blocks failed \(longFailed)/\(Self.precisionRuns)")
        #expect(shortPassed == Self.precisionRuns)
        #expect(longFailed == Self.precisionRuns)
    }

    @Test func theBodysOwnErrorComesFirst() async throws {
        struct Failure: Error {}
        await #expect(throws: Failure.self) {
            try await withHangLimit(.milliseconds(200)) {
                await MainActor.run { blockTheCallingThread(milliseconds: 400) }
                throw Failure()
            }
        }
    }
}
