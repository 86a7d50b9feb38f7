// A text report as UTF-8 bytes, grown in place. A 65-thread report is 2,500 frame lines:
// written piece by piece — numbers digit by digit, strings as their bytes — it costs no
// String per number and no String growth checks per append.

struct TextBuffer {
    private(set) var bytes: [UInt8] = []

    init(capacity: Int) { bytes.reserveCapacity(capacity) }

    static func += (buffer: inout TextBuffer, text: String) {
        var text = text
        text.withUTF8 { buffer.bytes.append(contentsOf: $0) }
    }

    static func += (buffer: inout TextBuffer, text: Substring) {
        if text.utf8.withContiguousStorageIfAvailable({ buffer.bytes.append(contentsOf: $0) }) == nil {
            buffer.bytes.append(contentsOf: text.utf8)
        }
    }

    mutating func append(decimal value: Int) {
        if value < 0 { bytes.append(UInt8(ascii: "-")) }
        append(decimal: UInt64(value.magnitude))
    }

    mutating func append(decimal value: UInt64) {
        var magnitude = value
        var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)  // 24 bytes: UInt64.max has 20 digits
        withUnsafeMutableBytes(of: &digits) { raw in
            var position = raw.count
            repeat {
                position -= 1
                raw[position] = UInt8(ascii: "0") + UInt8(magnitude % 10)
                magnitude /= 10
            } while magnitude > 0
            bytes.append(contentsOf: raw[position...])
        }
    }

    /// "0x" and 16 lowercase hex digits, as ReportFormatting.address writes an address.
    mutating func append(address value: UInt64) {
        bytes.append(UInt8(ascii: "0"))
        bytes.append(UInt8(ascii: "x"))
        for position in 0..<16 {
            let nibble = UInt8((value >> UInt64(60 - 4 * position)) & 0xF)
            bytes.append(nibble < 10 ? UInt8(ascii: "0") + nibble : UInt8(ascii: "a") + nibble - 10)
        }
    }

    var string: String { String(decoding: bytes, as: UTF8.self) }
}
