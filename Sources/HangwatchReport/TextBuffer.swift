// A text report as UTF-8 bytes, grown in place. A 65-thread report is 2,500 frame lines of
// a dozen pieces each: written straight into one buffer — literals and strings as their
// bytes, numbers digit by digit — a piece costs a capacity check and a copy, not a String
// (or Array.append's generic machinery, ~90 instructions a call; CHANGELOG.md, issue 15).
import HangwatchPlatform

final class TextBuffer {
    private var storage: UnsafeMutablePointer<UInt8>
    private var capacity: Int
    private var count = 0

    init(capacity: Int) {
        self.capacity = max(capacity, 64)
        storage = .allocate(capacity: self.capacity)
    }

    deinit { storage.deallocate() }

    func withBytes<Result>(_ body: (UnsafeBufferPointer<UInt8>) throws -> Result) rethrows -> Result {
        try body(UnsafeBufferPointer(start: storage, count: count))
    }

    var string: String { withBytes { String(decoding: $0, as: UTF8.self) } }

    /// A piece of one line. A newline or a tab in it (a name, an argument, a symbol: what the
    /// target controls) is written as `\n` or `\t`, so it cannot start a line of its own or
    /// shift the columns; line ends are written as literals (`write("\n")`).
    static func += (buffer: TextBuffer, text: String) {
        var text = text
        text.withUTF8 { buffer.appendInLine($0) }
    }

    static func += (buffer: TextBuffer, text: Substring) {
        if text.utf8.withContiguousStorageIfAvailable({ buffer.appendInLine($0) }) == nil {
            buffer += String(text)
        }
    }

    private func appendInLine(_ utf8: UnsafeBufferPointer<UInt8>) {
        guard Text.holdsLineBreakOrTab(utf8) else { return append(utf8) }
        for byte in utf8 {
            switch byte {
            case 0x0A: write("\\n")
            case 0x09: write("\\t")
            default: append(byte)
            }
        }
    }

    /// A literal: its bytes are in the binary already.
    @inline(__always)
    func write(_ literal: StaticString) {
        append(UnsafeBufferPointer(start: literal.utf8Start, count: literal.utf8CodeUnitCount))
    }

    @inline(__always)
    func append(_ utf8: UnsafeBufferPointer<UInt8>) {
        guard let source = utf8.baseAddress, utf8.count > 0 else { return }
        reserve(utf8.count)
        (storage + count).update(from: source, count: utf8.count)
        count += utf8.count
    }

    func append(_ byte: UInt8) {
        reserve(1)
        storage[count] = byte
        count += 1
    }

    func append(decimal value: Int) {
        if value < 0 { append(UInt8(ascii: "-")) }
        append(decimal: UInt64(value.magnitude))
    }

    func append(decimal value: UInt64) {
        var digits = 1
        var scale: UInt64 = 1
        while value / scale >= 10 {
            scale *= 10
            digits += 1
        }
        reserve(digits)
        var remaining = value
        for position in stride(from: count + digits - 1, through: count, by: -1) {
            storage[position] = UInt8(ascii: "0") &+ UInt8(truncatingIfNeeded: remaining % 10)
            remaining /= 10
        }
        count += digits
    }

    /// "0x" and 16 lowercase hex digits, as ReportFormatting.address writes an address.
    func append(address value: UInt64) {
        reserve(18)
        storage[count] = UInt8(ascii: "0")
        storage[count + 1] = UInt8(ascii: "x")
        for position in 0..<16 {
            let nibble = UInt8(truncatingIfNeeded: value >> UInt64(60 - 4 * position)) & 0xF
            storage[count + 2 + position] = nibble < 10 ? UInt8(ascii: "0") &+ nibble : UInt8(ascii: "a") &+ nibble &- 10
        }
        count += 18
    }

    @inline(__always)
    private func reserve(_ extra: Int) {
        if count + extra > capacity { grow(count + extra) }
    }

    private func grow(_ needed: Int) {
        var grown = capacity * 2
        while grown < needed { grown *= 2 }
        let larger = UnsafeMutablePointer<UInt8>.allocate(capacity: grown)
        larger.update(from: storage, count: count)
        storage.deallocate()
        storage = larger
        capacity = grown
    }
}
