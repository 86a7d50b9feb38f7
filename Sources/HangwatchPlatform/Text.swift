// Small text helpers the stages share, without Foundation's String extensions (which live in
// the full Foundation, not FoundationEssentials).
#if canImport(Glibc)
import Glibc
#endif

package enum Text {
    /// The value of one ASCII hex digit (either case), nil for any other byte.
    package static func hexDigit(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return byte - UInt8(ascii: "A") + 10
        default: return nil
        }
    }

    /// Without leading and trailing spaces, tabs, carriage returns and newlines.
    package static func trimmed(_ text: some StringProtocol) -> String {
        let blank: (Character) -> Bool = { $0 == " " || $0 == "\t" || $0 == "\n" || $0 == "\r" }
        guard let first = text.firstIndex(where: { !blank($0) }), let last = text.lastIndex(where: { !blank($0) }) else { return "" }
        return String(text[first...last])
    }

    /// `value` with exactly `decimals` digits after the point, rounded to nearest, as
    /// printf's "%.Nf" writes it ("nan", "inf" and "-inf" for those).
    package static func fixed(_ value: Double, decimals: Int) -> String {
        guard value.isFinite else { return value.isNaN ? "nan" : (value < 0 ? "-inf" : "inf") }
        let places = max(0, min(decimals, 15))
        var scale: UInt64 = 1
        for _ in 0..<places { scale *= 10 }
        let scaled = (value.magnitude * Double(scale)).rounded()
        // Beyond 2^53 integers are no longer exact: Swift's own shortest spelling is as good.
        guard scaled < 9_007_199_254_740_992 else { return String(value) }
        let whole = UInt64(scaled)
        var text = (value < 0 && whole != 0 ? "-" : "") + String(whole / scale)
        if places > 0 {
            let fraction = String(whole % scale)
            text += "." + String(repeating: "0", count: places - fraction.count) + fraction
        }
        return text
    }

    /// `count` and `noun`, the noun plural unless the count is one: "1 thread", "3 threads".
    package static func counted(_ count: Int, _ noun: String) -> String {
        "\(count) \(noun)\(count == 1 ? "" : "s")"
    }

    /// `text` followed by spaces up to `width` characters (never cut).
    package static func padded(_ text: String, to width: Int) -> String {
        text + String(repeating: " ", count: max(0, width - text.count))
    }
}

/// Path pieces as NSString spelled them (which the full Foundation holds).
package enum Paths {
    /// "b" of "/a/b" (and of "b"); "" for a path ending in "/".
    package static func lastComponent(of path: String) -> String {
        path.lastIndex(of: "/").map { String(path[path.index(after: $0)...]) } ?? path
    }

    /// "/a" of "/a/b", "/" of "/b", "." of "b".
    package static func parent(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        return slash == path.startIndex ? "/" : String(path[..<slash])
    }
}

/// One line on stderr, "hangwatch: LINE": whatever `line` holds (a path, a name, an error from
/// outside) stays on that one line (`Text.singleLine`). The executables' and `hangwatch run`'s
/// supervision's diagnostics.
package func warn(_ line: String) {
    StandardStream.print("hangwatch: \(Text.singleLine(line))\n", to: STDERR_FILENO)
}

/// Writing to the standard streams without FileHandle (full Foundation): the whole buffer,
/// restarted after signals; an error (a closed pipe) ends the write.
package enum StandardStream {
    /// Writes all of `bytes` (restarting after signals and short writes); false on an error
    /// such as EPIPE, when the rest is not written.
    @discardableResult
    package static func write(_ bytes: UnsafeRawBufferPointer, to fd: Int32) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let written = Glibc.write(fd, bytes.baseAddress! + offset, bytes.count - offset)
            if written < 0 {
                if errno == EINTR || errno == EAGAIN { continue }
                return false
            }
            offset += written
        }
        return true
    }

    @discardableResult
    package static func write(_ bytes: some Collection<UInt8>, to fd: Int32) -> Bool {
        // A report is hundreds of KB: no copy when the bytes are contiguous already (Data, arrays).
        if let written = bytes.withContiguousStorageIfAvailable({ write(UnsafeRawBufferPointer($0), to: fd) }) { return written }
        return Array(bytes).withUnsafeBytes { write($0, to: fd) }
    }

    package static func print(_ text: String, to fd: Int32 = STDOUT_FILENO) { write(Array(text.utf8), to: fd) }
}

extension Text {
    /// `text` made safe to print on a terminal: control characters (C0 but newline and tab, DEL,
    /// C1) become visible escapes (`\e`, `\r`, `\x07`, `\u{9b}`), so names, arguments, stderr
    /// lines or server answers that a target or a server controls cannot move the cursor,
    /// rewrite what was printed, or send commands to the terminal. So do the invisible format
    /// characters (Unicode category Cf: the bidi controls U+061C, U+200E, U+200F, U+202A–U+202E,
    /// U+2066–U+2069, zero-width ones, U+00AD, U+FEFF, tags U+E0001…) and the line and paragraph
    /// separators U+2028 and U+2029 (`\u{202e}`): a symbol name carrying U+202E would otherwise
    /// make a frame line read in another order than it is written.
    package static func terminalSafe(_ text: String) -> String {
        var copy = text
        guard copy.withUTF8(holdsControl) else { return text }
        return escaped(text, lineBreaksToo: false)
    }

    private static func escaped(_ text: String, lineBreaksToo: Bool) -> String {
        var out = ""
        out.reserveCapacity(text.utf8.count + 16)
        for scalar in text.unicodeScalars {
            guard isEscaped(scalar) || (lineBreaksToo && (scalar == "\n" || scalar == "\t")) else {
                out.unicodeScalars.append(scalar)
                continue
            }
            switch scalar.value {
            case 0x0A: out += "\\n"
            case 0x09: out += "\\t"
            case 0x1B: out += "\\e"
            case 0x0D: out += "\\r"
            case 0x00...0x1F, 0x7F:
                let hex = String(scalar.value, radix: 16)
                out += "\\x" + (hex.count == 1 ? "0" + hex : hex)
            default: out += "\\u{\(String(scalar.value, radix: 16))}"
            }
        }
        return out
    }

    /// `text` for one line of output: what `terminalSafe` escapes, and newlines and tabs too
    /// (`\n`, `\t`), so nothing a target or a server controls (an argument, a thread name, a
    /// liveness target, a server's answer) can start a line of its own — a forged
    /// "hangwatch: report … saved to …" — or shift the columns of the line it is in.
    package static func singleLine(_ text: String) -> String {
        var copy = text
        guard copy.withUTF8({ holdsControl($0) || holdsLineBreakOrTab($0) }) else { return text }
        return escaped(text, lineBreaksToo: true)
    }

    /// Whether these UTF-8 bytes hold a newline or a tab (what `singleLine` adds to `terminalSafe`).
    /// memchr's vector scan: a report's text asks this of each of its thousands of names and
    /// paths, where a byte-by-byte scan was a quarter of the rendering.
    package static func holdsLineBreakOrTab(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        guard let base = bytes.baseAddress, !bytes.isEmpty else { return false }
        return memchr(base, 0x0A, bytes.count) != nil || memchr(base, 0x09, bytes.count) != nil
    }

    /// Whether `terminalSafe` would change these UTF-8 bytes (valid UTF-8, as a String holds).
    /// Sixteen bytes at a time: a chunk of plain ASCII text (a 700 KB report is mostly that) is
    /// cleared by one vector test; only a chunk with a control byte or the lead byte of a
    /// non-ASCII character (≥ 0xC2: "°", the " — " of a thread's header line) is looked at
    /// character by character (`escapedCharacter(at:in:)`).
    package static func holdsControl(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        let raw = UnsafeRawBufferPointer(bytes)
        let space = SIMD16<UInt8>(repeating: 0x20), newline = SIMD16<UInt8>(repeating: 0x0A)
        let tab = SIMD16<UInt8>(repeating: 0x09), delete = SIMD16<UInt8>(repeating: 0x7F), lead = SIMD16<UInt8>(repeating: 0xC2)
        var offset = 0
        while offset + 16 <= raw.count {
            let chunk = raw.loadUnaligned(fromByteOffset: offset, as: SIMD16<UInt8>.self)
            let control = (chunk .< space) .& (chunk .!= newline) .& (chunk .!= tab)
            if any(control .| (chunk .== delete) .| (chunk .>= lead)),
               (offset..<(offset + 16)).contains(where: { escapedCharacter(at: $0, in: bytes) }) {
                return true
            }
            offset += 16
        }
        return (offset..<bytes.count).contains { escapedCharacter(at: $0, in: bytes) }
    }

    /// Whether the character that starts at byte `index` is one `terminalSafe` escapes (false
    /// for a continuation byte: its character was judged at its lead byte, wherever that is).
    static func escapedCharacter(at index: Int, in bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        let byte = bytes[index]
        if byte < 0x80 { return (byte < 0x20 && byte != 0x0A && byte != 0x09) || byte == 0x7F }
        guard byte >= 0xC2 else { return false }  // a continuation byte (0xC0, 0xC1: never in UTF-8)
        let length = byte >= 0xF0 ? 4 : byte >= 0xE0 ? 3 : 2
        guard index + length <= bytes.count else { return false }
        var value = UInt32(byte) & (byte >= 0xF0 ? 0x07 : byte >= 0xE0 ? 0x0F : 0x1F)
        for next in (index + 1)..<(index + length) { value = value << 6 | UInt32(bytes[next] & 0x3F) }
        return Unicode.Scalar(value).map(isEscaped) ?? false
    }

    /// C0 but newline and tab, DEL, C1; invisible format characters (category Cf, the bidi
    /// controls among them); the line and paragraph separators.
    static func isEscaped(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x0A, 0x09: return false
        case 0x00...0x1F, 0x7F...0x9F: return true
        case 0x20...0x7E: return false
        default:
            switch scalar.properties.generalCategory {
            case .format, .lineSeparator, .paragraphSeparator: return true
            default: return false
            }
        }
    }
}
