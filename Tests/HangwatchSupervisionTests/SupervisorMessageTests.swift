// The operations a monitor names in its hang message (`operations=`, docs/hang-monitor.md):
// they come back as they were sent, a crafted item is skipped, and a message never grows past
// what a supervisor reads.
import HangwatchSnapshot
import HangwatchSupervisorProtocol
import Testing

@Suite struct SupervisorMessageTests {
    static let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

    @Test func operationsComeBackAsTheyWereSent() throws {
        let operations = [
            RunningOperation(name: "GET /users/:id, /a b%c", startTime: 1_763_779_000.5, limitSeconds: 5, task: 0, thread: 42,
                             traceparent: Self.traceparent),
            RunningOperation(name: "POST /jobs", startTime: 1_763_779_001.25, limitSeconds: 0.5, task: 0, thread: 43),
        ]
        let message = SupervisorMessage.hang(MonitorHang(target: .mainQueue, threads: [42], startTime: 1_763_779_002,
                                                         operations: operations))
        let read = try #require(SupervisorMessage(datagram: message.datagram))
        guard case .hang(let hang) = read else { Issue.record("\(read)"); return }
        #expect(hang.operations == operations)
    }

    @Test func aCraftedItemIsSkippedAndTheRestKept() throws {
        let items = [
            "42/1.5/5/\(Self.traceparent)/GET%20%2Fa",   // kept
            "0/1.5/5/-/GET",                            // thread 0
            "42/nan/5/-/GET",                           // a start that is no time
            "42/1e300/5/-/GET",                         // nor is this one
            "42/1.5/-1/-/GET",                          // a limit below zero
            "42/1.5/5/not-a-traceparent/GET%20%2Fb",    // kept, without the trace
            "42/1.5/5/-/",                              // no name
            "42/1.5/5/-/GET/extra",                     // a sixth field
        ].joined(separator: ",")
        var escaped = ""
        for byte in items.utf8 {
            escaped += byte == UInt8(ascii: "%") || byte == UInt8(ascii: "/") || byte == UInt8(ascii: ",")
                ? "%" + String(byte, radix: 16, uppercase: true) : String(UnicodeScalar(byte))
        }
        let read = try #require(SupervisorMessage(datagram: "hangwatch/2 hang target=main-queue threads=42 operations=\(escaped)"))
        guard case .hang(let hang) = read else { Issue.record("\(read)"); return }
        #expect(hang.operations.map(\.name) == ["GET /a", "GET /b"])
        #expect(hang.operations.map(\.traceparent) == [Self.traceparent, nil])
    }

    /// Names that escape to three bytes a byte, a long database path: the message still fits in
    /// a datagram, with as many operations as fit, at most 8, names cut to 64 bytes.
    @Test func aMessageWithOperationsStaysWithinADatagram() throws {
        let operations = (0..<20).map { index in
            RunningOperation(name: String(repeating: "/", count: 200) + "\(index)", startTime: 1_763_779_000, limitSeconds: 5,
                             task: 0, thread: Int32(100 + index), traceparent: Self.traceparent)
        }
        for databaseBytes in [10, 1_000, 2_500, 3_900] {
            let hang = MonitorHang(target: .mainQueue, threads: [100], startTime: 1_763_779_002, bundleID: "com.example",
                                   stagedID: "00000000-0000-0000-0000-000000000001",
                                   databasePath: "/" + String(repeating: "d", count: databaseBytes), operations: operations)
            let datagram = SupervisorMessage.hang(hang).datagram
            #expect(datagram.utf8.count <= SupervisorMessage.maximumLength, "\(databaseBytes): \(datagram.utf8.count)")
            let read = try #require(SupervisorMessage(datagram: datagram), "\(databaseBytes)")
            guard case .hang(let back) = read else { Issue.record("\(read)"); continue }
            #expect(back.operations.count <= SupervisorMessage.maximumOperations)
            if databaseBytes == 10 { #expect(back.operations.count == SupervisorMessage.maximumOperations) }
            #expect(back.operations.allSatisfy { $0.name.utf8.count <= SupervisorMessage.maximumOperationNameBytes })
            #expect(back.operations.allSatisfy { $0.traceparent == Self.traceparent })
        }
    }
}
