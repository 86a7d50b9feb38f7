// Snapshots and hand-made byte streams shared by the intermediate dump tests.
import HangwatchSnapshot
import Foundation

package enum DumpSamples {
    package static func registers(_ seed: UInt64) -> Registers {
        Registers(values: (0..<UInt64(Registers.names.count)).map { 0x7f00_0000_0000 &+ seed &* 0x1000 &+ $0 })
    }

    /// A hang as the monitor would stage it: every field set, several thread shapes.
    package static func hang(threadCount: Int = 4, stackBytes: Int = 64) -> ProcessSnapshot {
        var threads: [ThreadSnapshot] = []
        let statuses: [ThreadCaptureStatus] = [.captured, .unreachable, .timedOut, .exited, .ptrace]
        for index in 0..<threadCount {
            let captured = index % 2 == 0
            threads.append(ThreadSnapshot(
                tid: Int32(4000 + index), name: index == 0 ? "hang-fixture" : "worker-\(index)",
                state: ["S", "R", "D", "t"][index % 4],
                syscall: index == 1 ? nil : "202 0x7ffd\(index) 0x80 0x0 0x0 0x0 0x0 0x7ffd1000 0x7f001234",
                userCPUSeconds: 0.25 * Double(index), systemCPUSeconds: 0.125,
                roles: index == 0 ? [.mainThread, .hung, .mainQueue] : (index == 1 ? [.requester] : []),
                status: statuses[index % statuses.count],
                registers: captured ? registers(UInt64(index)) : nil,
                frames: captured ? (0..<UInt64(5 + index)).map { 0x5555_0000_1000 + $0 * 0x40 } : [],
                queueLabel: index == 0 ? "com.apple.main-thread" : (index == 2 ? "" : nil),
                stackMemory: captured ? (0..<stackBytes).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ index) } : []))
        }
        return ProcessSnapshot(
            reason: .hang(HangInfo(target: .mainQueue, thresholdSeconds: 2, durationSeconds: 7.5, outcome: .ongoing,
                                   startTime: 1_763_779_000.125,
                                   samples: [StackSample(tid: 4000, frames: [0x10, 0x20, 0x30], count: 12),
                                             StackSample(tid: 4000, frames: [0x10, 0x28], count: 3)])),
            timestamp: 1_763_779_002.5,
            process: ProcessIdentity(pid: 4000, name: "hang-fixture", executable: "/usr/local/bin/hang-fixture",
                                     arguments: ["hang-fixture", "--mode", "dispatchMain", "", "ünïcødé ✓"],
                                     bundleID: "com.example.hang-fixture"),
            threads: threads,
            modules: [
                ModuleSnapshot(path: "/usr/local/bin/hang-fixture", base: 0x5555_0000_0000, start: 0x5555_0000_0000,
                               end: 0x5555_0001_0000, buildID: "0123456789abcdef0123456789abcdef01234567"),
                ModuleSnapshot(path: "/usr/lib/x86_64-linux-gnu/libc.so.6", base: 0x7f00_0000_0000,
                               start: 0x7f00_0002_8000, end: 0x7f00_001f_0000, buildID: ""),
            ],
            annotations: ["ver": "1.2.3", "prod": "hang-fixture", "empty": ""],
            captureDurationSeconds: 0.00125)
    }

    package static func crash(message: String?) -> ProcessSnapshot {
        ProcessSnapshot(
            reason: .crash(SignalInfo(number: 11, code: -6, address: 0xdead_beef_0000_0008, tid: 4001, message: message)),
            timestamp: 1_763_779_100,
            process: ProcessIdentity(pid: 4001, name: "crasher", executable: "/bin/crasher", arguments: [], bundleID: ""),
            threads: [ThreadSnapshot(tid: 4001, name: "crasher", state: "R", roles: [.crashed, .mainThread],
                                     status: .captured, registers: registers(9), frames: [UInt64.max, 0, 1])],
            modules: [])
    }

    /// A process ended from outside: who it was, no threads (nothing is captured at a kill).
    package static func killed(signal: Int32?, cause: KillCause) -> ProcessSnapshot {
        ProcessSnapshot(
            reason: .killed(KillInfo(signal: signal, cause: cause)), timestamp: 1_795_600_000.5,
            process: ProcessIdentity(pid: 4242, name: "alloc", executable: "/usr/bin/alloc", arguments: ["alloc", "--big"],
                                     bundleID: "com.example.alloc"),
            threads: [], modules: [], annotations: ["hangwatch.run-id": "8f0c"])
    }

    /// A hang (schema 3) whose hung thread waits for a queue another thread runs, detected while
    /// two watched operations ran: one on the hung thread, one in no task.
    package static func hangWithOperationsAndALockWait() -> ProcessSnapshot {
        var snapshot = hang(threadCount: 3, stackBytes: 16)
        snapshot.threads[0].lockWait = LockWait(kind: .queue, address: 0x7f00_0000_3000, holder: 4002, label: "com.example.store")
        snapshot.threads[1].lockWait = LockWait(kind: .mutex, address: 0x7f00_0000_4000, unknown: "no owner recorded")
        guard case .hang(var info) = snapshot.reason else { return snapshot }
        info.operations = [
            RunningOperation(name: "GET /users/:id", startTime: 1_763_778_999.5, limitSeconds: 5, task: 0x7f00_0000_1000, thread: 4000),
            RunningOperation(name: "nightly-export ✓", startTime: 1_763_778_900.25, limitSeconds: 600, task: 0, thread: 4001),
        ]
        snapshot.reason = .hang(info)
        return snapshot
    }

    /// A dump with a task reading: a named task awaiting another, a child, a running one, a cut chain.
    package static func withTasks() -> ProcessSnapshot {
        var snapshot = crash(message: nil)
        snapshot.reason = .dumpRequested
        snapshot.tasks = TaskCapture(tasks: [
            TaskSnapshot(address: 0x7f00_0000_1000, id: 1, state: .suspended, frames: [0x5555_0000_1000, 0x5555_0000_2000],
                         name: "GET /users/:id", waitingOn: TaskWait(kind: .task, address: 0x7f00_0000_2000)),
            TaskSnapshot(address: 0x7f00_0000_2000, id: 0x1_0000_0002, state: .suspended, parent: 0x7f00_0000_1000,
                         frames: [0x5555_0000_3000], chainCut: true, flags: [.child, .asyncLet, .cancelled],
                         waitingOn: TaskWait(kind: .continuation, address: 0x7f00_0000_3000)),
            TaskSnapshot(address: 0x7f00_0000_4000, id: 3, state: .running, thread: 4001, frames: []),
        ], scannedBytes: 26 << 20, durationSeconds: 0.041, truncated: true, runtime: "libswift_Concurrency.so, layout 1")
        return snapshot
    }

    /// `withTasks()` read within bounds that left memory unread, beside memory never touched.
    package static func withTasksPartlyRead() -> ProcessSnapshot {
        var snapshot = withTasks()
        snapshot.tasks?.untouchedBytes = 64 << 30
        snapshot.tasks?.unreadBytes = 3 << 30
        snapshot.tasks?.unread = "3 GiB in use past the 4 GiB bound of bytes read"
        return snapshot
    }

    package static let empty = ProcessSnapshot(
        reason: .dumpRequested, timestamp: 0,
        process: ProcessIdentity(pid: 0, name: "", executable: "", arguments: [], bundleID: ""),
        threads: [], modules: [])

    /// Every field that has a representation set to an unusual value.
    package static func oddities() -> ProcessSnapshot {
        var snapshot = hang(threadCount: 2)
        snapshot.incomplete = true
        snapshot.timestamp = -1.5
        snapshot.captureDurationSeconds = .infinity
        snapshot.threads[0].roles = ThreadRoles(rawValue: 0xFFFF_FFFF)
        snapshot.threads[0].tid = Int32.min
        snapshot.threads[1].tid = Int32.max
        snapshot.process.pid = -1
        snapshot.annotations = ["k\u{0}ey": "v\u{0}alue", "": "empty key"]
        if case .hang(var hang) = snapshot.reason {
            hang.outcome = .recovered
            hang.samples = [StackSample(tid: -3, frames: [], count: Int.min)]
            snapshot.reason = .hang(hang)
        }
        return snapshot
    }
}

/// Hand-assembled wire bytes, independent of the C writer, for malformed inputs.
package struct DumpBytes {
    package var bytes: [UInt8] = []

    package static func header(version: UInt32 = 1) -> DumpBytes {
        var dump = DumpBytes()
        dump.bytes = Array("HWIDUMP".utf8) + [0]
        dump.u32(version)
        dump.u32(0)
        return dump
    }

    /// Header plus the schema version property: where most documents start.
    package static func document() -> DumpBytes {
        var dump = header()
        dump.property(1, u64: 1)
        return dump
    }

    package mutating func u16(_ value: UInt16) { bytes += [UInt8(value & 0xFF), UInt8(value >> 8)] }
    package mutating func u32(_ value: UInt32) { bytes += (0..<4).map { UInt8(truncatingIfNeeded: value >> (8 * $0)) } }
    package mutating func u64Bytes(_ value: UInt64) -> [UInt8] { (0..<8).map { UInt8(truncatingIfNeeded: value >> (8 * UInt64($0))) } }

    package mutating func property(_ key: UInt16, _ value: [UInt8], declaredLength: UInt32? = nil) {
        bytes.append(1)
        u16(key)
        u32(declaredLength ?? UInt32(value.count))
        bytes += value
    }
    package mutating func property(_ key: UInt16, u64 value: UInt64) { property(key, u64Bytes(value)) }
    package mutating func startMap(_ key: UInt16) { bytes.append(2); u16(key) }
    package mutating func startArray(_ key: UInt16) { bytes.append(3); u16(key) }
    package mutating func endMap() { bytes.append(4) }
    package mutating func endArray() { bytes.append(5) }
    package mutating func endDocument() { bytes.append(6) }
}

/// A tiny deterministic generator (SplitMix64) so every "random" test replays exactly.
package struct SeededGenerator: RandomNumberGenerator {
    package var state: UInt64
    package init(seed: UInt64) { state = seed }
    package mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

package enum DumpFixtures {
    package static var directory: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Fixtures/data/dumps")
    }

    package static func files() throws -> [URL] {
        try FileManager.default.contentsOfDirectory(at: directory, includingPropertiesForKeys: nil)
            .filter { !$0.lastPathComponent.hasPrefix(".") && $0.pathExtension != "md" }
            .sorted { $0.lastPathComponent < $1.lastPathComponent }
    }
}
