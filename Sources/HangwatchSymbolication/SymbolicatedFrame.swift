// What symbolication knows about one frame. One captured address can give several frames:
// the functions inlined at that address (innermost first) and then the real function.
import HangwatchSnapshot

package struct SymbolicatedFrame: Sendable, Equatable {
    /// The captured address (the return address itself for caller frames, not address-1).
    package var address: UInt64
    /// Path of the module containing the address; nil when no module contains it.
    package var modulePath: String?
    /// `address` minus the module's load bias: the link-time address, what
    /// `addr2line -e module` accepts. nil when no module contains the address.
    package var moduleOffset: UInt64?
    /// Demangled function name; nil when unknown.
    package var function: String?
    /// Offset of `address` from the start of the function's ELF symbol (not set for
    /// inlined frames, which have no symbol of their own).
    package var functionOffset: UInt64?
    package var file: String?
    package var line: Int?
    package var column: Int?
    /// This function was inlined into the next frame (same address).
    package var isInlined: Bool
    /// Why names are missing although the address is in a module (build-id mismatch,
    /// missing file, …); nil when symbols were looked up.
    package var symbolsUnavailableReason: String?

    package init(address: UInt64, modulePath: String? = nil, moduleOffset: UInt64? = nil,
                function: String? = nil, functionOffset: UInt64? = nil, file: String? = nil,
                line: Int? = nil, column: Int? = nil, isInlined: Bool = false,
                symbolsUnavailableReason: String? = nil) {
        self.address = address
        self.modulePath = modulePath
        self.moduleOffset = moduleOffset
        self.function = function
        self.functionOffset = functionOffset
        self.file = file
        self.line = line
        self.column = column
        self.isInlined = isInlined
        self.symbolsUnavailableReason = symbolsUnavailableReason
    }
}

/// Which file symbols for a module come from, or why there are none.
package enum ModuleResolution: Sendable, Equatable {
    /// The file at the recorded path has the recorded build-id.
    case verified(path: String)
    /// No build-id was recorded: the file at the path is used as is.
    case unverified(path: String)
    /// The file at the path differs or is gone; a separate debug file with the recorded
    /// build-id was found (e.g. /usr/lib/debug/.build-id/xx/yyyy.debug).
    case debugFile(path: String)
    /// The file at the path differs or is gone; a Breakpad .sym file with the recorded build-id's
    /// id was found in a symbol store (BreakpadSymbolStore.swift): names after a redeploy.
    case breakpadSymbols(path: String)
    /// The file at the path differs or is gone; a debuginfod server sent the debug file of the
    /// recorded build-id (Debuginfod.swift), kept at `path` in the symbol cache.
    case debuginfod(path: String)
    /// The file at the path has another build-id (`found`) and no debug file matched.
    case mismatched(expected: String, found: String)
    /// The file at the path is missing or not a readable ELF file, and no debug file matched.
    case missing(path: String)

    /// The file symbols are read from, if any.
    package var symbolFile: String? {
        switch self {
        case .verified(let path), .unverified(let path), .debugFile(let path), .breakpadSymbols(let path), .debuginfod(let path): return path
        case .mismatched, .missing: return nil
        }
    }

    /// A resolution without its paths: the value a report's module shows in `symbols` (spelled here only).
    package enum Kind: String, Sendable {
        case verified = "ok", unverified, debugFile = "debug-file", breakpadSymbols = "breakpad-symbols", debuginfod, mismatched, missing

        /// The module's frames have no names: its file has another build-id or is gone, and no
        /// other file had them.
        package var lacksNames: Bool { self == .mismatched || self == .missing }
    }

    package var kind: Kind {
        switch self {
        case .verified: return .verified
        case .unverified: return .unverified
        case .debugFile: return .debugFile
        case .breakpadSymbols: return .breakpadSymbols
        case .debuginfod: return .debuginfod
        case .mismatched: return .mismatched
        case .missing: return .missing
        }
    }

    /// Short name used in reports (`Kind`'s raw value): ok, unverified, debug-file, breakpad-symbols,
    /// debuginfod, mismatched, missing.
    package var name: String { kind.rawValue }

    package var unavailableReason: String? {
        switch self {
        case .verified, .unverified, .debugFile, .breakpadSymbols, .debuginfod: return nil
        case .mismatched(let expected, let found):
            return "module mismatched: build-id \(found.isEmpty ? "(none)" : found) on disk, \(expected) recorded"
        case .missing(let path): return "module file missing or unreadable: \(path)"
        }
    }
}
