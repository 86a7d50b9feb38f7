import CHangwatchSymbols

public enum ELFBuildID {
    /// The GNU build-id of the ELF file at `path` as lowercase hex: "" when the file has
    /// none, nil when it is missing, unreadable or not a regular ELF file.
    public static func read(path: String) -> String? {
        var bytes = [UInt8](repeating: 0, count: 64)
        let length = bytes.withUnsafeMutableBufferPointer { hws_file_build_id(path, $0.baseAddress, $0.count) }
        if length < 0 { return nil }
        return hex(bytes.prefix(min(Int(length), bytes.count)))
    }

    static func hex<Bytes: Sequence<UInt8>>(_ bytes: Bytes) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out = [UInt8]()
        for byte in bytes {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0xf)])
        }
        return String(decoding: out, as: UTF8.self)
    }
}
