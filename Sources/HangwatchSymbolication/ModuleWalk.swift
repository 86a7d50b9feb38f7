// Reading a whole module through libdw (Sources/CHangwatchSymbols/include/hw_symbols.h): the
// walks over its sections, symbols, line rows and function scopes that the symbol index
// (SymbolIndex.swift) and the Breakpad writer (BreakpadSymbols.swift) are both built from.
import CHangwatchSymbols

/// Takes a module's tables one entry at a time; a visitor returning false stops that walk.
protocol ModuleVisitor {
    mutating func visit(section index: UInt32, start: UInt64, end: UInt64)
    mutating func visit(symbol entry: hws_symbol_entry) -> Bool
    mutating func visit(line entry: hws_line_entry) -> Bool
    mutating func visit(scope entry: hws_scope_entry) -> Bool
}

extension ModuleVisitor {
    mutating func visit(section index: UInt32, start: UInt64, end: UInt64) {}
}

enum ModuleWalk {
    /// Opens `path` at link-time addresses, its separate debug file looked up by build-id in
    /// `debugDirectories` (none: the file alone). The handle, or libdw's reason why not.
    static func open(_ path: String, debugDirectories: [String]) -> (handle: OpaquePointer?, error: String) {
        var message = [CChar](repeating: 0, count: 256)
        let searchPath = ([":.debug"] + debugDirectories).joined(separator: ":")
        let handle = message.withUnsafeMutableBufferPointer { hws_module_open(path, searchPath, $0.baseAddress, $0.count) }
        return (handle, String(decoding: message.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
    }

    /// Hands `visitor` the module's sections and symbols, then (unless `namesOnly`) its line
    /// rows and function scopes.
    static func walk<Visitor: ModuleVisitor>(_ handle: OpaquePointer, _ visitor: inout Visitor, namesOnly: Bool = false) {
        // The C walks take a context pointer, not a Swift closure. The visitor is passed through
        // that pointer as an existential, and is read back, modified, afterwards.
        var erased: any ModuleVisitor = visitor
        withUnsafeMutablePointer(to: &erased) { pointer in
            let context = UnsafeMutableRawPointer(pointer)
            _ = hws_module_each_section(handle, { context, index, start, end in
                context!.assumingMemoryBound(to: (any ModuleVisitor).self).pointee.visit(section: index, start: start, end: end)
                return 0
            }, context)
            _ = hws_module_each_symbol(handle, { context, entry in
                context!.assumingMemoryBound(to: (any ModuleVisitor).self).pointee.visit(symbol: entry!.pointee) ? 0 : 1
            }, context)
            guard !namesOnly else { return }
            _ = hws_module_each_line(handle, { context, entry in
                context!.assumingMemoryBound(to: (any ModuleVisitor).self).pointee.visit(line: entry!.pointee) ? 0 : 1
            }, context)
            _ = hws_module_each_scope(handle, { context, entry in
                context!.assumingMemoryBound(to: (any ModuleVisitor).self).pointee.visit(scope: entry!.pointee) ? 0 : 1
            }, context)
        }
        // `erased` was made from a Visitor and only mutated in place.
        visitor = erased as! Visitor
    }
}

/// One compilation unit's line-table rows as `hws_module_each_line` gives them (address order),
/// turned into address ranges: a row names the addresses up to the next row's, where several
/// rows share an address the last one counts, and an end-of-sequence row names none. The
/// symbol index and the Breakpad writer both read line tables through it.
struct LineUnit<Payload> {
    private var rows: [(address: UInt64, endsSequence: Bool, payload: Payload)] = []

    mutating func append(address: UInt64, endsSequence: Bool, _ payload: Payload) {
        rows.append((address, endsSequence, payload))
    }

    /// Calls `body(low, high, payload)` for each row's range, then empties the unit.
    mutating func drain(_ body: (UInt64, UInt64, Payload) -> Void) {
        for (index, row) in rows.enumerated() where !row.endsSequence && index + 1 < rows.count
            && rows[index + 1].address > row.address {
            body(row.address, rows[index + 1].address, row.payload)
        }
        rows.removeAll(keepingCapacity: true)
    }
}
