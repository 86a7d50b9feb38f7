// Function names from .symtab/DWARF are mangled; reports show them demangled.
import HangwatchSnapshot
import CHangwatchSymbols
#if canImport(Glibc)
import Glibc
#endif

// Exported by libswiftCore with the C calling convention; returns a malloc'd string.
@_silgen_name("swift_demangle")
private func _swiftDemangle(_ mangledName: UnsafePointer<CChar>?, _ mangledNameLength: Int,
                            _ outputBuffer: UnsafeMutablePointer<CChar>?,
                            _ outputBufferSize: UnsafeMutablePointer<Int>?,
                            _ flags: UInt32) -> UnsafeMutablePointer<CChar>?

package enum Demangler {
    /// Demangles Swift ("$s…", "_$s…", older "_T0…") and C++ ("_Z…") names; anything else
    /// (C names, unknown schemes, undemanglable input) is returned unchanged.
    package static func demangle(_ name: String) -> String {
        if isSwiftMangled(name) {
            let utf8 = Array(name.utf8CString)
            let result = utf8.withUnsafeBufferPointer { buffer in
                _swiftDemangle(buffer.baseAddress, buffer.count - 1, nil, nil, 0)
            }
            if let result {
                defer { free(result) }
                return BoundedText.string(result)
            }
            return name
        }
        if name.hasPrefix("_Z"), let result = hws_cxx_demangle(name) {
            defer { free(result) }
            return BoundedText.string(result)
        }
        return name
    }

    static func isSwiftMangled(_ name: String) -> Bool {
        for prefix in ["$s", "_$s", "$S", "_$S", "$e", "_$e", "_T0"] where name.hasPrefix(prefix) {
            return true
        }
        return false
    }
}

/// Names demangled once each: a stack names the same few functions again and again (64
/// threads in one loop). At most `maximumCount` are kept; then it starts over.
struct DemangledNames {
    static let maximumCount = 65_536
    private var known: [String: String] = [:]

    mutating func callAsFunction(_ name: String) -> String {
        if let result = known[name] { return result }
        if known.count >= Self.maximumCount { known.removeAll(keepingCapacity: true) }
        let result = Demangler.demangle(name)
        known[name] = result
        return result
    }
}
