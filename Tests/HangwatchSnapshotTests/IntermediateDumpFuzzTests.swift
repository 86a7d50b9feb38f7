// Property-style fuzzing that runs in every test pass (seeded, so it replays exactly), the
// golden files that pin the wire format, and replay of inputs found by the libFuzzer run
// (scripts/fuzz intermediate-dump).
@testable import HangwatchSnapshot
import Foundation
import Testing
import HangwatchStageTestSupport

@Suite struct IntermediateDumpFuzzTests {
    /// The reader's one promise for any input: it returns or throws. What it returns must
    /// itself encode to a readable dump that encodes to the same bytes again.
    static func checkReaderSurvives(_ bytes: [UInt8], _ context: @autoclosure () -> String) {
        guard let snapshot = try? IntermediateDumpReader.read(bytes: bytes) else { return }
        let encoded = IntermediateDumpWriter.encode(snapshot)
        guard let again = try? IntermediateDumpReader.read(bytes: encoded) else {
            Issue.record("re-encoded dump unreadable: \(context())")
            return
        }
        #expect(IntermediateDumpWriter.encode(again) == encoded, "unstable re-encoding: \(context())")
    }

    @Test func everySingleBitFlipOfASmallDump() {
        let bytes = IntermediateDumpWriter.encode(DumpSamples.hang(threadCount: 2, stackBytes: 8))
        for offset in bytes.indices {
            for bit in 0..<8 {
                var mutated = bytes
                mutated[offset] ^= UInt8(1) << bit
                Self.checkReaderSurvives(mutated, "flip \(offset):\(bit)")
            }
        }
    }

    @Test(arguments: 0..<4)
    func seededRandomMutations(seed: UInt64) {
        var random = SeededGenerator(seed: 0xD0_0D_F00D &+ seed)
        let bases = [
            IntermediateDumpWriter.encode(DumpSamples.hang(threadCount: 3, stackBytes: 16)),
            IntermediateDumpWriter.encode(DumpSamples.crash(message: "boom")),
            IntermediateDumpWriter.encode(DumpSamples.empty),
            IntermediateDumpWriter.encode(DumpSamples.oddities()),
        ]
        for iteration in 0..<1500 {
            var bytes = bases[Int(random.next() % UInt64(bases.count))]
            let mutationCount = 1 + Int(random.next() % 6)
            for _ in 0..<mutationCount { Self.mutate(&bytes, &random) }
            Self.checkReaderSurvives(bytes, "seed \(seed) iteration \(iteration)")
        }
    }

    static func mutate(_ bytes: inout [UInt8], _ random: inout SeededGenerator) {
        func offset(_ extra: Int = 0) -> Int { Int(random.next() % UInt64(bytes.count + extra)) }
        guard !bytes.isEmpty else { bytes = [UInt8(truncatingIfNeeded: random.next())]; return }
        switch random.next() % 10 {
        case 0: bytes[offset()] ^= UInt8(1) << (random.next() % 8)
        case 1: bytes[offset()] = UInt8(truncatingIfNeeded: random.next())
        case 2: bytes.insert(UInt8(truncatingIfNeeded: random.next()), at: offset(1))
        case 3:
            let start = offset()
            bytes.removeSubrange(start..<min(bytes.count, start + 1 + Int(random.next() % 16)))
        case 4:  // a huge or near-limit length field somewhere
            let at = offset()
            let lengths: [UInt32] = [.max, 0x0100_0000, 0x00FF_FFFF, 0x8000_0000, 144, 8, 0, 7]
            let value = lengths[Int(random.next() % UInt64(lengths.count))]
            for index in 0..<4 where at + index < bytes.count { bytes[at + index] = UInt8(truncatingIfNeeded: value >> (8 * UInt32(index))) }
        case 5:  // deep nesting
            let depth = 1 + Int(random.next() % 40)
            let element: [UInt8] = random.next() % 2 == 0 ? [2, 0x84, 0x03] : [3, 0x2C, 0x01]
            bytes.insert(contentsOf: Array([[UInt8]](repeating: element, count: depth).joined()), at: offset(1))
        case 6:  // duplicate a range (repeated sections and elements)
            let start = offset(), end = min(bytes.count, start + 1 + Int(random.next() % 64))
            bytes.insert(contentsOf: bytes[start..<end], at: offset(1))
        case 7: bytes.removeSubrange(offset()...)  // truncate
        case 8:  // a stray structural byte
            bytes.insert(UInt8(1 + random.next() % 7), at: offset(1))
        default:  // overwrite a run with noise
            let start = offset()
            for index in start..<min(bytes.count, start + 1 + Int(random.next() % 8)) {
                bytes[index] = UInt8(truncatingIfNeeded: random.next())
            }
        }
    }

    // MARK: golden files and found inputs

    /// Schema 1, written by builds before the killed reason: read, never written again.
    static let goldenV1: [(String, ProcessSnapshot)] = [
        ("golden-v1-hang.hwdump", DumpSamples.hang(threadCount: 3, stackBytes: 16)),
        ("golden-v1-crash.hwdump", DumpSamples.crash(message: "Fatal error: Unexpectedly found nil")),
        ("golden-v1-empty.hwdump", DumpSamples.empty),
    ]
    /// Schema 2, written by builds before lock waits and running operations: read, never written again.
    static let goldenV2: [(String, ProcessSnapshot)] = [
        ("golden-v2-hang.hwdump", DumpSamples.hang(threadCount: 3, stackBytes: 16)),
        ("golden-v2-crash.hwdump", DumpSamples.crash(message: "Fatal error: Unexpectedly found nil")),
        ("golden-v2-empty.hwdump", DumpSamples.empty),
        ("golden-v2-killed.hwdump", DumpSamples.killed(signal: SIGKILL, cause: .oom)),
        ("golden-v2-killed-unknown.hwdump", DumpSamples.killed(signal: nil, cause: .unknown)),
        ("golden-v2-tasks.hwdump", DumpSamples.withTasks()),
        ("golden-v2-tasks-partly-read.hwdump", DumpSamples.withTasksPartlyRead()),
    ]

    /// Schema 3, what this build writes.
    static let golden: [(String, ProcessSnapshot)] = [
        ("golden-v3-hang.hwdump", DumpSamples.hang(threadCount: 3, stackBytes: 16)),
        ("golden-v3-crash.hwdump", DumpSamples.crash(message: "Fatal error: Unexpectedly found nil")),
        ("golden-v3-empty.hwdump", DumpSamples.empty),
        ("golden-v3-killed.hwdump", DumpSamples.killed(signal: SIGKILL, cause: .oom)),
        ("golden-v3-killed-unknown.hwdump", DumpSamples.killed(signal: nil, cause: .unknown)),
        ("golden-v3-tasks.hwdump", DumpSamples.withTasks()),
        ("golden-v3-tasks-partly-read.hwdump", DumpSamples.withTasksPartlyRead()),
        ("golden-v3-hang-operations-locks.hwdump", DumpSamples.hangWithOperationsAndALockWait()),
    ]

    /// Files written by an earlier build must keep reading the same, and today's writer must
    /// still produce today's byte for byte: a renumbered key or changed layout fails here.
    /// HANGWATCH_REGENERATE_DUMP_FIXTURES=1 rewrites today's (only for a deliberate format change).
    @Test func goldenFilesPinTheWireFormat() throws {
        for (name, snapshot) in Self.goldenV1 + Self.goldenV2 {
            #expect(try IntermediateDumpReader.read(path: DumpFixtures.directory.appendingPathComponent(name).path) == snapshot, "\(name)")
        }
        for (name, snapshot) in Self.golden {
            let path = DumpFixtures.directory.appendingPathComponent(name).path
            if ProcessInfo.processInfo.environment["HANGWATCH_REGENERATE_DUMP_FIXTURES"] == "1" {
                try Data(IntermediateDumpWriter.encode(snapshot)).write(to: URL(fileURLWithPath: path))
            }
            #expect(try IntermediateDumpReader.read(path: path) == snapshot, "\(name)")
            #expect(try IntermediateDumpReader.readFile(path: path) == IntermediateDumpWriter.encode(snapshot), "\(name)")
        }
    }

    /// Inputs the coverage-guided fuzzer kept, one per distinct outcome. The name records the
    /// outcome when it was found (`fuzz-error-<reason>-…`, `fuzz-ok-complete-…`,
    /// `fuzz-ok-incomplete-…`), so a change in how the reader treats one is caught.
    @Test func foundInputsReplay() throws {
        let found = try DumpFixtures.files().filter { $0.lastPathComponent.hasPrefix("fuzz-") }
        #expect(found.count >= 20, "the fuzzer's corpus is checked in")
        for file in found {
            let name = file.lastPathComponent
            let bytes = try IntermediateDumpReader.readFile(path: file.path)
            Self.checkReaderSurvives(bytes, name)
            let outcome: String
            do {
                let snapshot = try IntermediateDumpReader.read(bytes: bytes)
                outcome = snapshot.incomplete ? "ok-incomplete" : "ok-complete"
            } catch {
                let reason = "\(error.reason)"
                outcome = "error-" + (reason.split(separator: "(").first.map(String.init) ?? reason)
            }
            #expect(name.hasPrefix("fuzz-\(outcome)-"), "\(name) now reads as \(outcome)")
        }
    }
}
