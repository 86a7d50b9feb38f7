// PrettyJSON (Sources/HangwatchReport/PrettyJSON.swift) against Foundation's JSONEncoder with
// the report's options, byte for byte: numbers at their edges, every control byte, quotes,
// slashes and non-ASCII text, keys that sort differently by case or prefix, a key set twice,
// empty and nested containers, nil, super encoders, a value that encodes nothing; and the
// reports earlier builds wrote. What it leaves to JSONEncoder is refused, not guessed.
import Foundation
import Testing
@testable import HangwatchReport

private func foundation<T: Encodable>(_ value: T) throws -> Data {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
    return try encoder.encode(value)
}

private struct Scalars: Encodable {
    var int = Int.min, int8 = Int8.min, int16 = Int16.max, int32 = Int32.min, int64 = Int64.max
    var uint = UInt.max, uint8 = UInt8.max, uint16 = UInt16.max, uint32 = UInt32.max, uint64 = UInt64.max
    var doubles: [Double] = [0, -0.0, 1, -1, 0.1, 1e-7, 1e21, 1e22, 123_456_789.123, 2.5e-308, .leastNonzeroMagnitude,
                             .greatestFiniteMagnitude, 1 / 3, 100, 1_000_000_000_000_000]
    var flags = [true, false]
    var strings = ["", "plain", "quote \" backslash \\ slash / end", "é 日本 🦀", "\u{7f} del", String(decoding: (0..<32).map { UInt8($0) }, as: UTF8.self)]
    var none: Int?
    var some: Int? = 7
}

private struct Keys: Encodable {
    enum CodingKeys: String, CodingKey { case b = "b", capitalA = "A", a = "a", capitalB = "B", aa = "aa", aUnderB = "a_b", empty = "", z = "zeta", digits = "10", digit = "9" }
    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        for key in [CodingKeys.b, .capitalA, .a, .capitalB, .aa, .aUnderB, .empty, .z, .digits, .digit] {
            try container.encode(key.rawValue, forKey: key)
        }
        try container.encode("again", forKey: .b)  // the later value stays
        try container.encodeNil(forKey: .z)
    }
}

private struct Containers: Encodable {
    enum CodingKeys: String, CodingKey { case emptyObject, emptyArray, nested, matrix, nothing, superValue, list }
    struct Nothing: Encodable { func encode(to encoder: any Encoder) throws {} }
    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        _ = container.nestedContainer(keyedBy: CodingKeys.self, forKey: .emptyObject)
        _ = container.nestedUnkeyedContainer(forKey: .emptyArray)
        var nested = container.nestedContainer(keyedBy: CodingKeys.self, forKey: .nested)
        var inner = nested.nestedUnkeyedContainer(forKey: .list)
        try inner.encode(1)
        try inner.encodeNil()
        var deeper = inner.nestedContainer(keyedBy: CodingKeys.self)
        try deeper.encode([[String]](), forKey: .matrix)
        try container.encode([[1, 2], [], [3]], forKey: .matrix)
        try container.encode(Nothing(), forKey: .nothing)
        try "from super".encode(to: container.superEncoder(forKey: .superValue))
        var list = container.nestedUnkeyedContainer(forKey: .list)
        try list.encode(Nothing())
        try [Scalars()].encode(to: list.superEncoder())
    }
}

@Suite struct PrettyJSONTests {
    @Test func everyKindOfValueIsWrittenAsJSONEncoderWritesIt() throws {
        for (name, bytes, expected) in [
            ("scalars", try PrettyJSON.encode(Scalars()), try foundation(Scalars())),
            ("keys", try PrettyJSON.encode(Keys()), try foundation(Keys())),
            ("containers", try PrettyJSON.encode(Containers()), try foundation(Containers())),
            ("top-level array", try PrettyJSON.encode([Keys(), Keys()]), try foundation([Keys(), Keys()])),
            ("top-level string", try PrettyJSON.encode("a\nb"), try foundation("a\nb")),
        ] as [(String, Data, Data)] {
            #expect(bytes == expected, "\(name):\n\(String(decoding: bytes, as: UTF8.self))\n— JSONEncoder —\n\(String(decoding: expected, as: UTF8.self))")
        }
    }

    @Test func whatJSONEncoderTreatsSpeciallyIsLeftToIt() {
        struct Dated: Encodable { var when = Date(timeIntervalSince1970: 0) }
        struct Blob: Encodable { var bytes = Data([1, 2]) }
        struct Link: Encodable { var url = URL(string: "https://example.com/a")! }
        struct Single: Encodable { var value: Float = 1.5 }
        struct NotFinite: Encodable { var value = Double.nan }
        #expect(throws: PrettyJSON.Unsupported.self) { try PrettyJSON.encode(Dated()) }
        #expect(throws: PrettyJSON.Unsupported.self) { try PrettyJSON.encode(Blob()) }
        #expect(throws: PrettyJSON.Unsupported.self) { try PrettyJSON.encode(Link()) }
        #expect(throws: PrettyJSON.Unsupported.self) { try PrettyJSON.encode(Single()) }
        #expect(throws: PrettyJSON.Unsupported.self) { try PrettyJSON.encode(NotFinite()) }
        // Asked to, it writes a NaN or an infinity as 0, wherever it is (ReportRenderer.json).
        struct Nested: Encodable { var values = [1.5, -Double.infinity]; var inner = NotFinite() }
        let zeroed = try? PrettyJSON.encode(Nested(), zeroingNonFinite: true)
        #expect(zeroed.map { String(decoding: $0, as: UTF8.self) } == "{\n  \"inner\" : {\n    \"value\" : 0\n  },\n  \"values\" : [\n    1.5,\n    0\n  ]\n}")
        // A top level that encodes nothing: JSONEncoder refuses it too.
        #expect(throws: PrettyJSON.Unsupported.self) { try PrettyJSON.encode(Containers.Nothing()) }
        #expect(throws: EncodingError.self) { try foundation(Containers.Nothing()) }
    }

    @Test func storedReportsAreWrittenAsJSONEncoderWritesThem() throws {
        let directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Fixtures/data/reports")
        let names = try FileManager.default.contentsOfDirectory(atPath: directory.path).filter { $0.hasSuffix(".json") }
        #expect(names.count >= 5)
        for name in names {
            let report = try Report.decode(from: try Data(contentsOf: directory.appendingPathComponent(name)))
            #expect(try PrettyJSON.encode(report) == (try foundation(report)), "\(name)")
        }
    }
}
