// The bytes Foundation's JSONEncoder writes with [.prettyPrinted, .sortedKeys,
// .withoutEscapingSlashes] — the report's stored form (docs/report-schema.md) — written about
// five times faster. JSONEncoder wrote 57 MB/s here: a report of 10,000 tasks (42 MB) took
// 0.73 s of a 0.95 s `hangwatch dump --tasks --format json`.
//
// The format is swift-foundation's: two spaces per level, `"key" : value`, an empty container as
// `{` or `[`, two newlines and its closing bracket at its own level, keys sorted by their UTF-8
// bytes (the last of a repeated key kept), strings escaped as JSONEncoder escapes them (`"`, `\`,
// \b \f \n \r \t, other control bytes as \u00xx, `/` as it is), integers as `description`,
// doubles as `description` without a trailing ".0". PrettyJSONTests compare it byte for byte
// with JSONEncoder over every kind of value a report holds; ReportFixtureTests hold it to the
// reports earlier builds wrote. What it does not write itself — a Date, Data, a URL, a Decimal
// (JSONEncoder's special cases) — throws, and ReportRenderer then asks JSONEncoder. A non-finite
// number (an error in JSONEncoder too) throws as well, unless `zeroingNonFinite`: then it is
// written as 0, wherever it is (JSON has no spelling for it).
import FoundationEssentials

enum PrettyJSON {
    struct Unsupported: Error {}

    static func encode<T: Encodable>(_ value: T, zeroingNonFinite: Bool = false) throws -> Data {
        let root = try node(of: value)
        if case .nothing = root { throw Unsupported() }  // JSONEncoder refuses a top level that encodes nothing
        var writer = Writer()
        writer.bytes.reserveCapacity(1 << 16)
        writer.write(root, level: 0)
        if writer.wroteNonFinite && !zeroingNonFinite { throw Unsupported() }
        return Data(writer.bytes)
    }

    fileprivate static func node<T: Encodable>(of value: T) throws -> Node {
        // By the type's identity (a pointer compare), not a dynamic cast per value.
        if T.self == String.self { return .string(unsafeBitCast(value, to: String.self)) }
        if T.self == Int.self { return .integer(Int64(unsafeBitCast(value, to: Int.self))) }
        if T.self == Double.self { return .double(unsafeBitCast(value, to: Double.self)) }
        if T.self == UInt64.self { return .unsigned(unsafeBitCast(value, to: UInt64.self)) }
        if T.self == Bool.self { return .bool(unsafeBitCast(value, to: Bool.self)) }
        if T.self == Date.self || T.self == Data.self || T.self == URL.self || T.self == Decimal.self || T.self == Float.self {
            throw Unsupported()
        }
        let encoder = TreeEncoder()
        try value.encode(to: encoder)
        return encoder.node
    }
}

/// An encoded value before it is written: containers are references, filled as the value's
/// `encode(to:)` goes on.
fileprivate enum Node {
    case nothing  // no container asked for: written as an empty object, as JSONEncoder does
    case null
    case bool(Bool)
    case integer(Int64)
    case unsigned(UInt64)
    case finiteDouble(Double)
    case nonFinite  // a NaN or an infinity: written as 0, and said (Writer.wroteNonFinite)
    case string(String)
    case object(ObjectNode)
    case array(ArrayNode)
    case later(TreeEncoder)  // a superEncoder's value, read when written

    static func double(_ value: Double) -> Node {
        value.isFinite ? .finiteDouble(value) : .nonFinite
    }
}

fileprivate final class ObjectNode {
    var keys: [String] = []
    var values: [Node] = []
    func set(_ value: Node, for key: String) {
        keys.append(key)
        values.append(value)
    }
}

fileprivate final class ArrayNode {
    var elements: [Node] = []
}

fileprivate final class TreeEncoder: Encoder, SingleValueEncodingContainer {
    var node: Node = .nothing
    var codingPath: [any CodingKey] { [] }
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        if case .object(let object) = node { return KeyedEncodingContainer(KeyedWriter(object: object)) }
        let object = ObjectNode()
        node = .object(object)
        return KeyedEncodingContainer(KeyedWriter(object: object))
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        if case .array(let array) = node { return UnkeyedWriter(array: array) }
        let array = ArrayNode()
        node = .array(array)
        return UnkeyedWriter(array: array)
    }

    func singleValueContainer() -> any SingleValueEncodingContainer { self }

    func encodeNil() throws { node = .null }
    func encode(_ value: Bool) throws { node = .bool(value) }
    func encode(_ value: String) throws { node = .string(value) }
    func encode(_ value: Double) throws { node = .double(value) }
    func encode(_ value: Float) throws { throw PrettyJSON.Unsupported() }
    func encode(_ value: Int) throws { node = .integer(Int64(value)) }
    func encode(_ value: Int8) throws { node = .integer(Int64(value)) }
    func encode(_ value: Int16) throws { node = .integer(Int64(value)) }
    func encode(_ value: Int32) throws { node = .integer(Int64(value)) }
    func encode(_ value: Int64) throws { node = .integer(value) }
    func encode(_ value: UInt) throws { node = .unsigned(UInt64(value)) }
    func encode(_ value: UInt8) throws { node = .unsigned(UInt64(value)) }
    func encode(_ value: UInt16) throws { node = .unsigned(UInt64(value)) }
    func encode(_ value: UInt32) throws { node = .unsigned(UInt64(value)) }
    func encode(_ value: UInt64) throws { node = .unsigned(value) }
    func encode<T: Encodable>(_ value: T) throws { node = try PrettyJSON.node(of: value) }
}

fileprivate struct KeyedWriter<Key: CodingKey>: KeyedEncodingContainerProtocol {
    let object: ObjectNode
    var codingPath: [any CodingKey] { [] }

    mutating func encodeNil(forKey key: Key) throws { object.set(.null, for: key.stringValue) }
    mutating func encode(_ value: Bool, forKey key: Key) throws { object.set(.bool(value), for: key.stringValue) }
    mutating func encode(_ value: String, forKey key: Key) throws { object.set(.string(value), for: key.stringValue) }
    mutating func encode(_ value: Double, forKey key: Key) throws { object.set(.double(value), for: key.stringValue) }
    mutating func encode(_ value: Float, forKey key: Key) throws { throw PrettyJSON.Unsupported() }
    mutating func encode(_ value: Int, forKey key: Key) throws { object.set(.integer(Int64(value)), for: key.stringValue) }
    mutating func encode(_ value: Int8, forKey key: Key) throws { object.set(.integer(Int64(value)), for: key.stringValue) }
    mutating func encode(_ value: Int16, forKey key: Key) throws { object.set(.integer(Int64(value)), for: key.stringValue) }
    mutating func encode(_ value: Int32, forKey key: Key) throws { object.set(.integer(Int64(value)), for: key.stringValue) }
    mutating func encode(_ value: Int64, forKey key: Key) throws { object.set(.integer(value), for: key.stringValue) }
    mutating func encode(_ value: UInt, forKey key: Key) throws { object.set(.unsigned(UInt64(value)), for: key.stringValue) }
    mutating func encode(_ value: UInt8, forKey key: Key) throws { object.set(.unsigned(UInt64(value)), for: key.stringValue) }
    mutating func encode(_ value: UInt16, forKey key: Key) throws { object.set(.unsigned(UInt64(value)), for: key.stringValue) }
    mutating func encode(_ value: UInt32, forKey key: Key) throws { object.set(.unsigned(UInt64(value)), for: key.stringValue) }
    mutating func encode(_ value: UInt64, forKey key: Key) throws { object.set(.unsigned(value), for: key.stringValue) }
    mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws { object.set(try PrettyJSON.node(of: value), for: key.stringValue) }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type, forKey key: Key) -> KeyedEncodingContainer<NestedKey> {
        let nested = ObjectNode()
        object.set(.object(nested), for: key.stringValue)
        return KeyedEncodingContainer(KeyedWriter<NestedKey>(object: nested))
    }

    mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
        let nested = ArrayNode()
        object.set(.array(nested), for: key.stringValue)
        return UnkeyedWriter(array: nested)
    }

    mutating func superEncoder() -> any Encoder { superEncoder(named: "super") }
    mutating func superEncoder(forKey key: Key) -> any Encoder { superEncoder(named: key.stringValue) }

    private func superEncoder(named name: String) -> any Encoder {
        let encoder = TreeEncoder()
        object.set(.later(encoder), for: name)
        return encoder
    }
}

fileprivate struct UnkeyedWriter: UnkeyedEncodingContainer {
    let array: ArrayNode
    var codingPath: [any CodingKey] { [] }
    var count: Int { array.elements.count }

    mutating func encodeNil() throws { array.elements.append(.null) }
    mutating func encode(_ value: Bool) throws { array.elements.append(.bool(value)) }
    mutating func encode(_ value: String) throws { array.elements.append(.string(value)) }
    mutating func encode(_ value: Double) throws { array.elements.append(.double(value)) }
    mutating func encode(_ value: Float) throws { throw PrettyJSON.Unsupported() }
    mutating func encode(_ value: Int) throws { array.elements.append(.integer(Int64(value))) }
    mutating func encode(_ value: Int8) throws { array.elements.append(.integer(Int64(value))) }
    mutating func encode(_ value: Int16) throws { array.elements.append(.integer(Int64(value))) }
    mutating func encode(_ value: Int32) throws { array.elements.append(.integer(Int64(value))) }
    mutating func encode(_ value: Int64) throws { array.elements.append(.integer(value)) }
    mutating func encode(_ value: UInt) throws { array.elements.append(.unsigned(UInt64(value))) }
    mutating func encode(_ value: UInt8) throws { array.elements.append(.unsigned(UInt64(value))) }
    mutating func encode(_ value: UInt16) throws { array.elements.append(.unsigned(UInt64(value))) }
    mutating func encode(_ value: UInt32) throws { array.elements.append(.unsigned(UInt64(value))) }
    mutating func encode(_ value: UInt64) throws { array.elements.append(.unsigned(value)) }
    mutating func encode<T: Encodable>(_ value: T) throws { array.elements.append(try PrettyJSON.node(of: value)) }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type) -> KeyedEncodingContainer<NestedKey> {
        let nested = ObjectNode()
        array.elements.append(.object(nested))
        return KeyedEncodingContainer(KeyedWriter<NestedKey>(object: nested))
    }

    mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
        let nested = ArrayNode()
        array.elements.append(.array(nested))
        return UnkeyedWriter(array: nested)
    }

    mutating func superEncoder() -> any Encoder {
        let encoder = TreeEncoder()
        array.elements.append(.later(encoder))
        return encoder
    }
}

/// The bytes of a node tree, pretty and sorted.
fileprivate struct Writer {
    var bytes: [UInt8] = []
    /// A `.nonFinite` was written (as 0).
    var wroteNonFinite = false
    /// The sorted order of recent key lists: objects of one type list the same keys in the same
    /// order (their CodingKeys), so each type's keys are sorted once, not once per object.
    private var orders: [(keys: [String], order: [Int])] = []

    mutating func write(_ node: Node, level: Int) {
        switch node {
        case .nothing: writeObject(ObjectNode(), level: level)
        case .null: append("null")
        case .bool(let value): append(value ? "true" : "false")
        case .integer(let value):
            if value < 0 { bytes.append(UInt8(ascii: "-")) }
            writeDigits(value.magnitude)
        case .unsigned(let value): writeDigits(value)
        case .finiteDouble(let value):
            var text = value.description
            if text.hasSuffix(".0") { text.removeLast(2) }
            append(text)
        case .nonFinite:
            wroteNonFinite = true
            append("0")
        case .string(let value): writeString(value)
        case .object(let object): writeObject(object, level: level)
        case .array(let array): writeArray(array, level: level)
        case .later(let encoder): write(encoder.node, level: level)
        }
    }

    private mutating func writeDigits(_ value: UInt64) {
        var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)  // 24 bytes: UInt64.max has 20 digits
        var count = 0
        var rest = value
        withUnsafeMutableBytes(of: &digits) { buffer in
            repeat {
                buffer[23 - count] = UInt8(ascii: "0") + UInt8(rest % 10)
                rest /= 10
                count += 1
            } while rest > 0
            bytes.append(contentsOf: UnsafeRawBufferPointer(rebasing: buffer[(24 - count)...]))
        }
    }

    /// `keys`' indices sorted by the keys' UTF-8 bytes, equal keys by position.
    private mutating func order(of keys: [String]) -> [Int] {
        for known in orders where known.keys == keys { return known.order }
        let order = keys.indices.sorted { a, b in
            if keys[a] == keys[b] { return a < b }
            return keys[a].utf8.lexicographicallyPrecedes(keys[b].utf8)
        }
        if orders.count == 64 { orders.removeFirst() }
        orders.append((keys, order))
        return order
    }

    private mutating func writeObject(_ object: ObjectNode, level: Int) {
        bytes.append(UInt8(ascii: "{"))
        bytes.append(UInt8(ascii: "\n"))
        let order = order(of: object.keys)
        var wrote = false
        for (position, index) in order.enumerated() {
            // Of a key set twice, the later value (what a dictionary keeps).
            if position + 1 < order.count && object.keys[order[position + 1]] == object.keys[index] { continue }
            if wrote { bytes.append(UInt8(ascii: ",")); bytes.append(UInt8(ascii: "\n")) }
            wrote = true
            indent(level + 1)
            writeString(object.keys[index])
            append(" : ")
            write(object.values[index], level: level + 1)
        }
        bytes.append(UInt8(ascii: "\n"))
        indent(level)
        bytes.append(UInt8(ascii: "}"))
    }

    private mutating func writeArray(_ array: ArrayNode, level: Int) {
        bytes.append(UInt8(ascii: "["))
        bytes.append(UInt8(ascii: "\n"))
        for (index, element) in array.elements.enumerated() {
            if index > 0 { bytes.append(UInt8(ascii: ",")); bytes.append(UInt8(ascii: "\n")) }
            indent(level + 1)
            write(element, level: level + 1)
        }
        bytes.append(UInt8(ascii: "\n"))
        indent(level)
        bytes.append(UInt8(ascii: "]"))
    }

    private static let spaces = [UInt8](repeating: UInt8(ascii: " "), count: 64)

    private mutating func indent(_ level: Int) {
        var left = 2 * level
        while left > 0 {
            let now = min(left, Self.spaces.count)
            bytes.append(contentsOf: Self.spaces[0..<now])
            left -= now
        }
    }

    private mutating func append(_ text: StaticString) {
        bytes.append(contentsOf: UnsafeBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount))
    }

    private mutating func append(_ text: String) {
        var text = text
        text.withUTF8 { bytes.append(contentsOf: $0) }
    }

    private static let hex = Array("0123456789abcdef".utf8)

    private mutating func writeString(_ value: String) {
        bytes.append(UInt8(ascii: "\""))
        var value = value
        value.withUTF8 { utf8 in
            var start = 0
            for index in 0..<utf8.count {
                let byte = utf8[index]
                guard byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") else { continue }
                bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[start..<index]))
                start = index + 1
                bytes.append(UInt8(ascii: "\\"))
                switch byte {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"): bytes.append(byte)
                case 0x08: bytes.append(UInt8(ascii: "b"))
                case 0x0c: bytes.append(UInt8(ascii: "f"))
                case 0x0a: bytes.append(UInt8(ascii: "n"))
                case 0x0d: bytes.append(UInt8(ascii: "r"))
                case 0x09: bytes.append(UInt8(ascii: "t"))
                default:
                    bytes.append(contentsOf: [UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0"), Self.hex[Int(byte >> 4)], Self.hex[Int(byte & 15)]])
                }
            }
            bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[start...]))
        }
        bytes.append(UInt8(ascii: "\""))
    }
}
