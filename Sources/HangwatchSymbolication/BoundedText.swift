// Names and paths read from ELF files and DWARF are input like any other: a file can carry a
// symbol name of megabytes. Everything symbolication hands on is cut to these bounds.
#if canImport(Glibc)
import Glibc
#endif

package enum BoundedText {
    /// Longest function name or file path kept (bytes), before demangling and after.
    package static let maximumBytes = 4096

    /// A NUL-terminated string, at most `maximumBytes` of it read; a longer one is cut and ends in "…".
    package static func string(_ pointer: UnsafePointer<CChar>) -> String {
        let length = strnlen(pointer, maximumBytes + 1)
        return string(UnsafeRawBufferPointer(start: pointer, count: length))
    }

    /// At most `maximumBytes` of `bytes`, cut at a character boundary and marked "…" when longer.
    package static func string(_ bytes: some Collection<UInt8>) -> String {
        guard bytes.count > maximumBytes else { return String(decoding: bytes, as: UTF8.self) }
        var text = String(decoding: bytes.prefix(maximumBytes), as: UTF8.self)
        // A cut multi-byte character decodes as U+FFFD: drop it with the rest.
        while text.utf8.count > maximumBytes - 3 || text.hasSuffix("\u{FFFD}") { text.removeLast() }
        return text + "…"
    }
}
