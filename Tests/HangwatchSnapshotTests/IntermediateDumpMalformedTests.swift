// Malformed input: each kind of damage gives its typed error at the right offset; unknown
// keys from a newer writer are skipped; hostile files on disk are refused safely.
import CHangwatchDump
@testable import HangwatchSnapshot
import Foundation
import Testing
import HangwatchStageTestSupport

@Suite struct IntermediateDumpMalformedTests {
    typealias Reason = IntermediateDumpError.Reason

    private func expectError(_ bytes: [UInt8], _ reason: Reason, at offset: Int? = nil,
                             limits: IntermediateDumpLimits = .standard, sourceLocation: SourceLocation = #_sourceLocation) {
        do {
            let snapshot = try IntermediateDumpReader.read(bytes: bytes, limits: limits)
            Issue.record("expected \(reason), read \(snapshot)", sourceLocation: sourceLocation)
        } catch {
            #expect(error.reason == reason, sourceLocation: sourceLocation)
            if let offset { #expect(error.offset == offset, sourceLocation: sourceLocation) }
        }
    }

    @Test func headerProblems() {
        expectError([], .truncatedHeader, at: 0)
        expectError(Array(DumpBytes.header().bytes.prefix(15)), .truncatedHeader)
        var magic = DumpBytes.document().bytes
        magic[0] = UInt8(ascii: "X")
        expectError(magic, .badMagic, at: 0)
        expectError(Array("MDMP".utf8) + [UInt8](repeating: 0, count: 40), .badMagic)
        expectError(DumpBytes.header(version: 2).bytes, .unsupportedFormatVersion(2), at: 8)
    }

    @Test func theVersionPropertyMustComeFirst() {
        var dump = DumpBytes.header()
        dump.startMap(UInt16(HWD_KEY_REASON.rawValue))
        expectError(dump.bytes, .versionNotFirst, at: 16)
        var other = DumpBytes.header()
        other.property(202, Array("x".utf8))
        expectError(other.bytes, .versionNotFirst, at: 16)
        var zero = DumpBytes.header()
        zero.property(1, u64: 0)
        zero.endDocument()
        expectError(zero.bytes, .unsupportedSchemaVersion(0), at: 16)
    }

    @Test func structuralDamage() {
        var unknownType = DumpBytes.document()
        let at = unknownType.bytes.count
        unknownType.bytes.append(0x7F)
        expectError(unknownType.bytes, .unknownElementType(0x7F), at: at)

        var strayEnd = DumpBytes.document()
        strayEnd.endMap()
        expectError(strayEnd.bytes, .mismatchedEnd)

        var crossed = DumpBytes.document()
        crossed.startArray(300)
        crossed.endMap()
        expectError(crossed.bytes, .mismatchedEnd)

        var early = DumpBytes.document()
        early.startMap(100)
        early.endDocument()
        expectError(early.bytes, .endOfDocumentInsideContainer)

        var trailing = DumpBytes.document()
        trailing.endDocument()
        trailing.bytes += [6, 6]
        expectError(trailing.bytes, .trailingBytes(count: 2))

        var propertyInArray = DumpBytes.document()
        propertyInArray.startArray(300)
        propertyInArray.property(301, u64: 1)
        expectError(propertyInArray.bytes, .onlyMapsInArrays)

        var arrayInArray = DumpBytes.document()
        arrayInArray.startArray(300)
        arrayInArray.startArray(0)
        expectError(arrayInArray.bytes, .onlyMapsInArrays)
    }

    @Test func knownKeysMustHaveTheirShape() {
        var shortTid = DumpBytes.document()
        shortTid.startArray(300)
        shortTid.startMap(0)
        let at = shortTid.bytes.count
        shortTid.property(301, [1, 2, 3])
        expectError(shortTid.bytes, .wrongValueSize(key: 301, length: 3), at: at)

        // A wrong fixed size is caught from the header even when the value runs past the end.
        var hugeTid = DumpBytes.document()
        hugeTid.startMap(100)
        hugeTid.property(101, [], declaredLength: 1_000_000)
        expectError(hugeTid.bytes, .wrongValueSize(key: 101, length: 1_000_000))

        var registers = DumpBytes.document()
        registers.startArray(300)
        registers.startMap(0)
        registers.property(309, [UInt8](repeating: 0, count: 17 * 8))
        expectError(registers.bytes, .wrongValueSize(key: 309, length: 136))

        var frames = DumpBytes.document()
        frames.startArray(300)
        frames.startMap(0)
        frames.property(310, [UInt8](repeating: 0, count: 12))
        expectError(frames.bytes, .wrongValueSize(key: 310, length: 12))

        var threadsAsMap = DumpBytes.document()
        threadsAsMap.startMap(300)
        expectError(threadsAsMap.bytes, .wrongElementKind(key: 300))

        var reasonAsProperty = DumpBytes.document()
        reasonAsProperty.property(100, u64: 1)
        expectError(reasonAsProperty.bytes, .wrongElementKind(key: 100))
    }

    @Test func valuesOutOfRange() {
        var kind = DumpBytes.document()
        kind.startMap(100)
        kind.property(101, u64: 9)
        kind.endMap()
        expectError(kind.bytes, .valueOutOfRange(key: 101, value: 9))

        var tid = DumpBytes.document()
        tid.startArray(300)
        tid.startMap(0)
        tid.property(301, u64: 1 << 40)
        expectError(tid.bytes, .valueOutOfRange(key: 301, value: 1 << 40))

        var status = DumpBytes.document()
        status.startArray(300)
        status.startMap(0)
        status.property(301, u64: 7)
        status.property(308, u64: 99)
        expectError(status.bytes, .valueOutOfRange(key: 308, value: 99))

        var noTid = DumpBytes.document()
        noTid.startArray(300)
        noTid.startMap(0)
        noTid.endMap()
        expectError(noTid.bytes, .missingValue(key: 301))
    }

    @Test func boundsAreEnforced() {
        var deep = DumpBytes.document()
        for _ in 0..<17 { deep.startMap(9000) }
        expectError(deep.bytes, .depthExceeded(limit: 16))
        var sixteen = DumpBytes.document()
        for _ in 0..<16 { sixteen.startMap(9000) }
        for _ in 0..<16 { sixteen.endMap() }
        sixteen.endDocument()
        #expect(throws: Never.self) { try IntermediateDumpReader.read(bytes: sixteen.bytes) }

        var big = DumpBytes.document()
        big.property(9000, [], declaredLength: UInt32.max)
        expectError(big.bytes, .propertyTooLarge(key: 9000, length: UInt64(UInt32.max), limit: 16 << 20))

        var small = IntermediateDumpLimits()
        small.maxNodes = 10
        small.maxArrayItems = 3
        let many = IntermediateDumpWriter.encode(DumpSamples.hang(threadCount: 20))
        expectError(many, .tooManyNodes(limit: 10), limits: small)
        var items = DumpBytes.document()
        items.startArray(9001)
        for _ in 0..<4 { items.startMap(0); items.endMap() }
        small.maxNodes = 100
        expectError(items.bytes, .tooManyArrayItems(limit: 3), limits: small)
    }

    /// A newer writer's keys (any shape, anywhere) are skipped and everything known survives.
    @Test func unknownKeysAreSkipped() throws {
        let writer = UnsafeMutablePointer<hwd_writer>.allocate(capacity: 1)
        defer { writer.deallocate() }
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        let future = hwd_key(rawValue: 850), futureField = hwd_key(rawValue: 399)
        let written: Int = buffer.withUnsafeMutableBufferPointer { memory in
            hwd_writer_init_memory(writer, memory.baseAddress, UInt64(memory.count))
            hwd_begin_document(writer)
            hwd_write_string(writer, future, "from the future")
            hwd_start_map(writer, future)
            hwd_start_array(writer, futureField)
            hwd_start_map(writer, HWD_KEY_ARRAY_ITEM)
            hwd_write_u64(writer, futureField, 1)
            hwd_end_map(writer)
            hwd_end_array(writer)
            hwd_end_map(writer)
            hwd_start_array(writer, HWD_KEY_THREADS)
            hwd_start_map(writer, HWD_KEY_ARRAY_ITEM)
            hwd_write_i64(writer, HWD_KEY_THREAD_TID, 77)
            hwd_write_property(writer, futureField, "??", 2)
            hwd_start_map(writer, futureField)
            hwd_end_map(writer)
            hwd_write_u64(writer, HWD_KEY_THREAD_CAPTURE_STATUS, 4)
            hwd_end_map(writer)
            hwd_end_array(writer)
            hwd_write_f64(writer, HWD_KEY_CAPTURE_DURATION, 0.5)
            #expect(hwd_end_document(writer) == 0)
            return Int(writer.pointee.bytes_total)
        }
        let read = try IntermediateDumpReader.read(bytes: Array(buffer[0..<written]))
        #expect(read.threads == [ThreadSnapshot(tid: 77, name: "", state: "", status: .ptrace)])
        #expect(read.captureDurationSeconds == 0.5)
        #expect(read.incomplete == false)
    }

    @Test func missingSectionsTakeEmptyValues() throws {
        var dump = DumpBytes.document()
        dump.endDocument()
        #expect(try IntermediateDumpReader.read(bytes: dump.bytes) == DumpSamples.empty)
    }

    @Test func invalidUTF8IsRepairedNotRejected() throws {
        var dump = DumpBytes.document()
        dump.startMap(200)
        dump.property(202, [0x66, 0xFF, 0x6F])
        dump.endMap()
        dump.endDocument()
        #expect(try IntermediateDumpReader.read(bytes: dump.bytes).process.name == "f\u{FFFD}o")
    }

    @Test func hostileFilesOnDiskAreRefused() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("hwd-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: false)
        defer { try? FileManager.default.removeItem(at: directory) }
        let real = directory.appendingPathComponent("real.dump").path
        #expect(FileManager.default.createFile(atPath: real, contents: Data(IntermediateDumpWriter.encode(DumpSamples.hang()))))
        #expect(try IntermediateDumpReader.read(path: real) == DumpSamples.hang())

        let link = directory.appendingPathComponent("link.dump").path
        try #require(symlink(real, link) == 0)
        #expect(throws: IntermediateDumpError(offset: 0, reason: .io(errno: ELOOP))) {
            try IntermediateDumpReader.read(path: link)
        }
        let fifo = directory.appendingPathComponent("fifo.dump").path
        try #require(mkfifo(fifo, 0o600) == 0)
        #expect(throws: IntermediateDumpError(offset: 0, reason: .notARegularFile)) {
            try IntermediateDumpReader.read(path: fifo)
        }
        #expect(throws: IntermediateDumpError(offset: 0, reason: .notARegularFile)) {
            try IntermediateDumpReader.read(path: directory.path)
        }
        var tiny = IntermediateDumpLimits()
        tiny.maxFileSize = 100
        #expect(throws: IntermediateDumpError(offset: 0, reason: .fileTooLarge(limit: 100))) {
            try IntermediateDumpReader.read(path: real, limits: tiny)
        }
        #expect(throws: IntermediateDumpError(offset: 0, reason: .io(errno: ENOENT))) {
            try IntermediateDumpReader.read(path: directory.appendingPathComponent("missing").path)
        }
    }
}
