// The protobuf wire format, as much of it as pprof's profile.proto needs (Pprof.swift): varints,
// and length-delimited fields (strings, nested messages, packed repeated varints). Scalars equal
// to zero are left out, as proto3 does; a string is always written (a string table's entries
// keep their positions, the empty one first).

struct ProtobufWriter {
    private(set) var bytes: [UInt8] = []

    private enum WireType: UInt64 {
        case varint = 0
        case lengthDelimited = 2
    }

    private mutating func varint(_ value: UInt64) {
        var rest = value
        while rest >= 0x80 {
            bytes.append(UInt8(truncatingIfNeeded: rest) | 0x80)
            rest >>= 7
        }
        bytes.append(UInt8(rest))
    }

    private mutating func key(_ field: Int, _ type: WireType) {
        varint(UInt64(field) << 3 | type.rawValue)
    }

    /// A `uint64` field.
    mutating func uint(_ field: Int, _ value: UInt64) {
        guard value != 0 else { return }
        key(field, .varint)
        varint(value)
    }

    /// An `int64` field (a negative value takes ten bytes, as protobuf's int64 does).
    mutating func int(_ field: Int, _ value: Int64) {
        uint(field, UInt64(bitPattern: value))
    }

    /// A `bool` field.
    mutating func bool(_ field: Int, _ value: Bool) {
        uint(field, value ? 1 : 0)
    }

    /// A `string` field, written even when empty.
    mutating func string(_ field: Int, _ value: String) {
        key(field, .lengthDelimited)
        varint(UInt64(value.utf8.count))
        bytes.append(contentsOf: value.utf8)
    }

    /// A packed `repeated uint64` (or int64 of non-negative values); nothing when empty.
    mutating func packed(_ field: Int, _ values: [UInt64]) {
        guard !values.isEmpty else { return }
        var inner = ProtobufWriter()
        for value in values { inner.varint(value) }
        embed(field, inner.bytes)
    }

    /// A nested message, written by `body`.
    mutating func message(_ field: Int, _ body: (inout ProtobufWriter) -> Void) {
        var inner = ProtobufWriter()
        body(&inner)
        embed(field, inner.bytes)
    }

    private mutating func embed(_ field: Int, _ inner: [UInt8]) {
        key(field, .lengthDelimited)
        varint(UInt64(inner.count))
        bytes.append(contentsOf: inner)
    }
}
