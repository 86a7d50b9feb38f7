// `hangwatch run`'s supervisor as a library (Sources/HangwatchSupervision/Supervisor.swift):
// a real job under it, each call it makes to its reporter read back in order. The supervisor runs
// in a process of its own (Tests/Fixtures/hangwatch-fixture-supervisor): it blocks signals and
// reaps its orphans, which a test process running other tests must not.
import Foundation
import HangwatchTestSupport
import Testing

@Suite("supervisor", .ownThread)
struct SupervisorTests {
    /// The reporter's calls, in order, for SCRIPT under SILENCE / KILL_AFTER / TIMEOUT seconds.
    func calls(silence: Double = 0, killAfter: Double = 0, timeout: Double = 0, _ script: String) throws -> [[String: Any]] {
        let child = try ChildProcess(product: "hangwatch-fixture-supervisor", ["\(silence)", "\(killAfter)", "\(timeout)", script])
        #expect(try child.waitForExit(timeout: 60) == 0, "\(child.stderr)")
        // The job's own output is relayed to the same stdout: the calls are the lines the fixture wrote.
        return try child.stdout.split(separator: "\n").filter { $0.hasPrefix("{\"call\":") }.map {
            try #require(try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any], "\($0)")
        }
    }

    func names(_ calls: [[String: Any]]) -> [String] { calls.compactMap { $0["call"] as? String } }

    @Test func silenceIsAHangThatOutputEnds() throws {
        let calls = try calls(silence: 0.3, "echo a; sleep 1; echo b; exit 3")
        #expect(names(calls) == ["hangBegan", "hangEnded", "childExited", "returned"], "\(calls)")
        #expect(calls[0]["target"] as? String == "output")
        #expect((calls[1]["seconds"] as? Double ?? 0) >= 0.3)
        #expect(calls[2]["status"] as? Int == 3 && calls[2]["killedForHang"] as? Bool == false)
        #expect(calls[3]["status"] as? Int == 3)
    }

    @Test func aHangPastKillAfterIsKilledAndSaidSo() throws {
        let calls = try calls(silence: 0.3, killAfter: 0.5, "echo started; echo oops >&2; exec sleep 30")
        #expect(names(calls) == ["hangBegan", "killingForHang", "childExited", "returned"], "\(calls)")
        #expect((calls[1]["seconds"] as? Double ?? 0) >= 0.5)
        #expect(calls[2]["status"] as? Int == 128 + Int(SIGKILL) && calls[2]["killedForHang"] as? Bool == true)
        #expect(calls[2]["stderrTail"] as? String == "oops\n")
        #expect((calls[2]["signalsSent"] as? [Int])?.contains(Int(SIGKILL)) == true)
    }

    @Test func aTimeoutEndsAJobThatKeepsTalking() throws {
        let calls = try calls(timeout: 0.8, "while :; do echo tick; sleep 0.1; done")
        #expect(names(calls) == ["hangBegan", "killingForHang", "childExited", "returned"], "\(calls)")
        #expect(calls[0]["target"] as? String == "timeout")
        #expect(calls[2]["killedForHang"] as? Bool == true)
    }

    @Test func aJobThatEndsOnItsOwnIsNoHang() throws {
        let calls = try calls(silence: 5, "echo done")
        #expect(names(calls) == ["childExited", "returned"], "\(calls)")
        #expect(calls[0]["status"] as? Int == 0)
    }
}
