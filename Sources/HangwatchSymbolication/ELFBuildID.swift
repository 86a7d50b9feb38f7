import CHangwatchSymbols
import HangwatchSnapshot

package enum ELFBuildID {
    /// The GNU build-id of the ELF file at `path` as lowercase hex: "" when the file has
    /// none, nil when it is missing, unreadable or not a regular ELF file.
    package static func read(path: String) -> String? {
        var bytes = [UInt8](repeating: 0, count: 64)
        let length = bytes.withUnsafeMutableBufferPointer { hws_file_build_id(path, $0.baseAddress, $0.count) }
        if length < 0 { return nil }
        return BuildID.hex(Array(bytes.prefix(min(Int(length), bytes.count))))
    }
}
