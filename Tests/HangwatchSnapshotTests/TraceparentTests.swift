// The one form a report names a request's trace in (Traceparent.swift, docs/traces.md): what is
// kept, what is dropped, in memory and through an intermediate dump.
@testable import HangwatchSnapshot
import Testing
import HangwatchStageTestSupport

@Suite struct TraceparentTests {
    static let valid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

    @Test(arguments: [
        valid,
        "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",  // a later version, flags 0
    ])
    func theW3CFormIsKept(_ value: String) {
        #expect(Traceparent.validated(value) == value)
        #expect(RunningOperation(name: "GET /", startTime: 0, limitSeconds: 1, task: 0, thread: 1, traceparent: value).traceparent == value)
    }

    @Test(arguments: [
        "",
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01",   // upper case
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",   // the version W3C forbids
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",   // a zero trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",   // a zero span id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",  // too long
        "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",   // not dashes
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b\u{1B}-01",  // a control byte
        "00-4bf92f3577b34da6a3ce929d0e0e47é-00f067aa0ba902b7-01",   // 55 bytes, not hex
    ])
    func anythingElseIsDropped(_ value: String) {
        #expect(Traceparent.validated(value) == nil)
        #expect(RunningOperation(name: "GET /", startTime: 0, limitSeconds: 1, task: 0, thread: 1, traceparent: value).traceparent == nil)
    }

    @Test func theIDsAreItsFields() {
        #expect(Traceparent.traceID(of: Self.valid) == "4bf92f3577b34da6a3ce929d0e0e4736")
        #expect(Traceparent.spanID(of: Self.valid) == "00f067aa0ba902b7")
    }

    /// An operation's traceparent survives the dump; a dump that carries another form under its
    /// key (a crafted file) reads back without it.
    @Test func aDumpKeepsTheTraceparentAndDropsAForgedOne() throws {
        var snapshot = DumpSamples.hang()
        guard case .hang(var info) = snapshot.reason else { Issue.record("not a hang"); return }
        info.operations = [
            RunningOperation(name: "GET /users/:id", startTime: 1_763_779_000, limitSeconds: 5, task: 0x1000, thread: 4000,
                             traceparent: Self.valid),
            RunningOperation(name: "GET /plain", startTime: 1_763_779_001, limitSeconds: 5, task: 0, thread: 4001),
        ]
        snapshot.reason = .hang(info)
        let read = try IntermediateDumpReader.read(bytes: IntermediateDumpWriter.encode(snapshot))
        #expect(read == snapshot)

        var forged = info
        forged.operations[0].traceparent = "00-\u{1B}[31mred"   // set past the initializer's check
        snapshot.reason = .hang(forged)
        let back = try IntermediateDumpReader.read(bytes: IntermediateDumpWriter.encode(snapshot))
        guard case .hang(let readBack) = back.reason else { Issue.record("not a hang"); return }
        #expect(readBack.operations.map(\.traceparent) == [nil, nil])
    }
}
