// Every ProcessSnapshot field survives encode → read; the fd path and the in-memory path
// produce the same bytes; a cut file reads back as an incomplete prefix.
import CHangwatchDump
@testable import HangwatchSnapshot
import Foundation
import Testing
import HangwatchStageTestSupport

@Suite struct IntermediateDumpRoundTripTests {
    @Test(arguments: [
        ("hang", DumpSamples.hang()),
        ("hang-many-threads", DumpSamples.hang(threadCount: 40, stackBytes: 512)),
        ("crash-with-message", DumpSamples.crash(message: "Fatal error: Index out of range ✗")),
        ("crash-without-message", DumpSamples.crash(message: nil)),
        ("crash-empty-message", DumpSamples.crash(message: "")),
        ("empty", DumpSamples.empty),
        ("oddities", DumpSamples.oddities()),
    ])
    func everyFieldRoundTrips(name: String, snapshot: ProcessSnapshot) throws {
        let bytes = IntermediateDumpWriter.encode(snapshot)
        let read = try IntermediateDumpReader.read(bytes: bytes)
        #expect(read == snapshot, "\(name)")
        #expect(try IntermediateDumpReader.parse(bytes: bytes).complete)
    }

    @Test func optionalStringsKeepNilApartFromEmpty() throws {
        let read = try IntermediateDumpReader.read(bytes: IntermediateDumpWriter.encode(DumpSamples.hang()))
        #expect(read.threads[1].syscall == nil)
        #expect(read.threads[0].queueLabel == "com.apple.main-thread")
        #expect(read.threads[1].queueLabel == nil)
        #expect(read.threads[2].queueLabel == "")
        #expect(read.threads[1].registers == nil)
        #expect(read.threads[0].registers == DumpSamples.registers(0))
    }

    @Test func largeValuesBypassTheBufferAndRoundTrip() throws {
        var snapshot = DumpSamples.hang(threadCount: 2)
        snapshot.threads[0].stackMemory = (0..<200_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        snapshot.threads[0].frames = (0..<3_000).map { UInt64($0) &* 0x9E37_79B9 }
        snapshot.annotations["big"] = String(repeating: "é", count: 10_000)
        let read = try IntermediateDumpReader.read(bytes: IntermediateDumpWriter.encode(snapshot))
        #expect(read == snapshot)
    }

    @Test func writingToAFileGivesTheEncodedBytesAndReadsBackFromThePath() throws {
        let snapshot = DumpSamples.hang(threadCount: 12, stackBytes: 4096)
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("hwd-\(UUID().uuidString).dump").path
        defer { unlink(path) }
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        try #require(fd >= 0)
        try IntermediateDumpWriter.write(snapshot, to: fd)
        close(fd)
        let onDisk = try IntermediateDumpReader.readFile(path: path)
        #expect(onDisk == IntermediateDumpWriter.encode(snapshot))
        #expect(try IntermediateDumpReader.read(path: path) == snapshot)
    }

    @Test func writeToABadDescriptorThrowsTheErrno() {
        #expect(throws: IntermediateDumpWriteError(code: EBADF)) {
            try IntermediateDumpWriter.write(DumpSamples.hang(), to: -1)
        }
    }

    @Test func writeToAFullDeviceThrowsENOSPC() throws {
        let fd = open("/dev/full", O_WRONLY | O_CLOEXEC)
        try #require(fd >= 0)
        defer { close(fd) }
        #expect(throws: IntermediateDumpWriteError(code: ENOSPC)) {
            try IntermediateDumpWriter.write(DumpSamples.hang(), to: fd)
        }
    }

    /// Cutting a realistic dump at every byte: the header cut is an error, any other cut an
    /// incomplete snapshot whose content is a prefix of the original.
    @Test func truncationAtEveryOffsetGivesAnIncompletePrefix() throws {
        let original = DumpSamples.hang(threadCount: 3, stackBytes: 24)
        let bytes = IntermediateDumpWriter.encode(original)
        for length in 0..<bytes.count {
            let cut = Array(bytes[0..<length])
            if length < Int(HWD_HEADER_SIZE) {
                #expect(throws: IntermediateDumpError.self) { try IntermediateDumpReader.read(bytes: cut) }
                continue
            }
            let read: ProcessSnapshot
            do { read = try IntermediateDumpReader.read(bytes: cut) } catch {
                Issue.record("cut at \(length) of \(bytes.count): \(error)")
                continue
            }
            #expect(read.incomplete, "cut at \(length)")
            let problems = PrefixCheck.problems(read, of: original)
            #expect(problems.isEmpty, "cut at \(length): \(problems)")
        }
        // The complete dump is not incomplete, and the content only grows with the length.
        #expect(try IntermediateDumpReader.read(bytes: bytes).incomplete == false)
        let halfway = try IntermediateDumpReader.read(bytes: Array(bytes[0..<(bytes.count / 2)]))
        #expect(!halfway.threads.isEmpty && halfway.process == original.process)
    }

    @Test func aHalfWrittenThreadIsKeptWhenItHasItsTid() throws {
        let original = DumpSamples.hang(threadCount: 2, stackBytes: 16)
        let bytes = IntermediateDumpWriter.encode(original)
        let tree = try IntermediateDumpReader.parse(bytes: bytes)
        let threads = try #require(tree.root.first { $0.key == HWD_KEY_THREADS.wire })
        let second = threads.children[1]
        // Cut right after the second thread's tid property (map header 3 bytes + tid 15 bytes).
        let cut = Array(bytes[0..<(second.offset + 3 + 15)])
        let read = try IntermediateDumpReader.read(bytes: cut)
        #expect(read.threads.count == 2)
        #expect(read.threads[0] == original.threads[0])
        #expect(read.threads[1].tid == original.threads[1].tid)
        #expect(read.threads[1].frames.isEmpty)
        // Cut inside the tid: the thread has no identity and is dropped.
        let earlier = try IntermediateDumpReader.read(bytes: Array(bytes[0..<(second.offset + 3 + 10)]))
        #expect(earlier.threads == [original.threads[0]])
        #expect(earlier.modules.isEmpty && earlier.annotations.isEmpty)
    }

    @Test func aDumpCutAfterTheHeaderIsAnEmptyIncompleteSnapshot() throws {
        let read = try IntermediateDumpReader.read(bytes: DumpBytes.header().bytes)
        var expected = DumpSamples.empty
        expected.incomplete = true
        #expect(read == expected)
    }
}

/// What "a prefix of the original" means for a decoded snapshot: every value is either the
/// original's or the empty default; lists are prefixes, the last item possibly partial.
enum PrefixCheck {
    static func problems(_ read: ProcessSnapshot, of original: ProcessSnapshot) -> [String] {
        var problems: [String] = []
        func check(_ ok: Bool, _ what: String) { if !ok { problems.append(what) } }
        func orEmpty<T: Equatable>(_ value: T, _ full: T, _ empty: T, _ what: String) {
            check(value == full || value == empty, what)
        }
        switch (read.reason, original.reason) {
        case (.dumpRequested, _): break
        case (.hang(let got), .hang(let want)):
            orEmpty(got.target, want.target, .named(""), "hang.target")
            orEmpty(got.thresholdSeconds, want.thresholdSeconds, 0, "hang.threshold")
            orEmpty(got.durationSeconds, want.durationSeconds, 0, "hang.duration")
            orEmpty(got.startTime, want.startTime, 0, "hang.start")
            check(want.samples.starts(with: got.samples), "hang.samples")
        case (.crash(let got), .crash(let want)):
            orEmpty(got.number, want.number, 0, "signal.number")
            orEmpty(got.message, want.message, nil, "signal.message")
        default: check(false, "reason kind changed")
        }
        orEmpty(read.timestamp, original.timestamp, 0, "timestamp")
        orEmpty(read.process.pid, original.process.pid, 0, "pid")
        orEmpty(read.process.name, original.process.name, "", "name")
        orEmpty(read.process.executable, original.process.executable, "", "executable")
        orEmpty(read.process.bundleID, original.process.bundleID, "", "bundleID")
        check(original.process.arguments.starts(with: read.process.arguments), "arguments")
        check(read.threads.count <= original.threads.count, "thread count")
        for (index, thread) in read.threads.enumerated() where index < original.threads.count {
            let want = original.threads[index]
            if index < read.threads.count - 1 { check(thread == want, "thread \(index) not whole"); continue }
            check(thread.tid == want.tid, "thread \(index) tid")
            orEmpty(thread.name, want.name, "", "thread \(index) name")
            orEmpty(thread.frames, want.frames, [], "thread \(index) frames")
            orEmpty(thread.registers, want.registers, nil, "thread \(index) registers")
            orEmpty(thread.stackMemory, want.stackMemory, [], "thread \(index) stack")
            orEmpty(thread.syscall, want.syscall, nil, "thread \(index) syscall")
            orEmpty(thread.queueLabel, want.queueLabel, nil, "thread \(index) queue")
        }
        check(original.modules.starts(with: read.modules), "modules")
        for (key, value) in read.annotations { check(original.annotations[key] == value, "annotation \(key)") }
        orEmpty(read.captureDurationSeconds, original.captureDurationSeconds, 0, "capture duration")
        return problems
    }
}
