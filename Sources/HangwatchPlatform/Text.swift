// Small text helpers the stages share, without Foundation's String extensions (which live in
// the full Foundation, not FoundationEssentials).
#if canImport(Glibc)
import Glibc
#endif

package enum Text {
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

/// Writing to the standard streams without FileHandle (full Foundation): the whole buffer,
/// restarted after signals; an error (a closed pipe) ends the write quietly.
package enum StandardStream {
    package static func write(_ bytes: some Collection<UInt8>, to fd: Int32) {
        var remaining = Array(bytes)[...]
        while !remaining.isEmpty {
            let written = remaining.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
            if written < 0 {
                if errno == EINTR { continue }
                return
            }
            remaining = remaining.dropFirst(written)
        }
    }

    package static func print(_ text: String, to fd: Int32 = STDOUT_FILENO) { write(Array(text.utf8), to: fd) }
}
