// GNU build-ids as snapshots and reports carry them: lowercase hex of the note's bytes.
// Both capture paths (in memory and from another process's files) and symbolication use it.
package enum BuildID {
    /// `bytes` as lowercase hex. Not generic: a generic one's first call in a process looked up
    /// conformances through every conformance record (a cold report reads a build-id per module).
    package static func hex(_ bytes: [UInt8]) -> String {
        let digits: StaticString = "0123456789abcdef"
        return String(unsafeUninitializedCapacity: bytes.count * 2) { out in
            digits.withUTF8Buffer { digits in
                for (index, byte) in bytes.enumerated() {
                    out[2 * index] = digits[Int(byte >> 4)]
                    out[2 * index + 1] = digits[Int(byte & 0xf)]
                }
            }
            return bytes.count * 2
        }
    }

    /// The same of any bytes (a slice of a note, bytes loaded one by one).
    package static func hex<Bytes: Sequence<UInt8>>(_ bytes: Bytes) -> String { hex(Array(bytes)) }

    /// Only lowercase hex digits, as `hex` writes them: what an id read from a dump must be
    /// before it becomes part of a file name.
    package static func isPlainHex(_ text: String) -> Bool {
        text.utf8.allSatisfy { ($0 >= 48 && $0 <= 57) || ($0 >= 97 && $0 <= 102) }
    }

    /// An id that may become part of a path: whole bytes, 2 to 64 of them (4 to 128 hex digits),
    /// `isPlainHex`. A symbol store's path and debuginfod's query and file names are built so.
    package static func isPathSafe(_ text: String) -> Bool {
        let digits = text.utf8.count
        return digits >= 4 && digits <= 128 && digits.isMultiple(of: 2) && isPlainHex(text)
    }
}
