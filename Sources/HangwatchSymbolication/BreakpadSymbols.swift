// A module's symbols in Breakpad's text format (what `dump_syms` writes, and Socorro, Sentry
// and rust-minidump read): MODULE, INFO CODE_ID, FILE, INLINE_ORIGIN, FUNC with its line
// records and INLINE records, PUBLIC for symbols no FUNC covers. The module id is the one our
// minidumps give the same file (its ELF build-id as a GUID, HangwatchMinidump), so a symbol
// server holding this file symbolicates them. Built from the same libdw walks as the symbol
// index (SymbolIndex.swift); docs/symbol-cache.md, "Breakpad symbols".
import CHangwatchSymbols
import HangwatchSnapshot
import HangwatchPlatform
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

package enum BreakpadSymbols {
    package struct Failure: Error, CustomStringConvertible {
        package var description: String
    }

    /// The Breakpad debug id of an ELF build-id: its first 16 bytes as a GUID (the first three
    /// fields byte-swapped, as Breakpad reads them little-endian), zero-padded, then age 0.
    package static func debugID(buildID: String) -> String? {
        var bytes: [UInt8] = []
        var index = buildID.startIndex
        while index < buildID.endIndex {
            let next = buildID.index(index, offsetBy: 2, limitedBy: buildID.endIndex) ?? buildID.endIndex
            guard let byte = UInt8(buildID[index..<next], radix: 16) else { return nil }
            bytes.append(byte)
            index = next
        }
        guard !bytes.isEmpty else { return nil }
        var guid = Array(bytes.prefix(16))
        guid += [UInt8](repeating: 0, count: 16 - guid.count)
        let swapped = Array(guid[0..<4].reversed()) + Array(guid[4..<6].reversed()) + Array(guid[6..<8].reversed()) + Array(guid[8..<16])
        return BuildID.hex(swapped).uppercased() + "0"
    }

    /// Breakpad's name for the ELF file's machine (x86_64, arm64), nil for others.
    package static func architecture(of path: String) -> String? {
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var header = [UInt8](repeating: 0, count: 20)
        guard pread(fd, &header, header.count, 0) == header.count, header[0...3] == [0x7F, 0x45, 0x4C, 0x46], header[5] == 1 else { return nil }
        switch UInt16(header[18]) | UInt16(header[19]) << 8 {
        case 62: return "x86_64"
        case 183: return "arm64"
        default: return nil
        }
    }

    /// A record's last field runs to the end of its line: a name or path from the file must
    /// not end the line early (Breakpad has no escapes).
    private static func field(_ text: String) -> String {
        guard text.utf8.contains(where: { $0 == 0x0A || $0 == 0x0D || $0 == 0 }) else { return text }
        return String(text.map { $0 == "\n" || $0 == "\r" || $0 == "\0" || $0 == "\r\n" ? " " : $0 })
    }

    /// The text for the ELF file at `path`, whose separate debug file (if any) is looked up by
    /// build-id in `debugDirectories`.
    package static func text(module path: String, debugDirectories: [String]) throws -> String {
        guard let architecture = architecture(of: path) else {
            throw Failure(description: "\(path) is not a 64-bit little-endian x86_64 or arm64 ELF file")
        }
        guard let buildID = ELFBuildID.read(path: path), let id = debugID(buildID: buildID) else {
            throw Failure(description: "\(path) has no GNU build-id: Breakpad symbols are keyed by it")
        }
        let opened = ModuleWalk.open(path, debugDirectories: debugDirectories.filter { $0.hasPrefix("/") })
        guard let handle = opened.handle else { throw Failure(description: "cannot read \(path): " + opened.error) }
        defer { hws_module_close(handle) }
        var walk = Walk()
        ModuleWalk.walk(handle, &walk)
        let name = path.split(separator: "/").last.map(String.init) ?? path
        return walk.render(header: "MODULE Linux \(architecture) \(id) \(field(name))\nINFO CODE_ID \(buildID.uppercased())\n")
    }

    private struct Scope {
        var parent: Int?
        var name: String
        var inlined: Bool
        var callFile: String?
        var callLine: Int
        var ranges: [(low: UInt64, high: UInt64)]
    }

    private struct Walk: ModuleVisitor {
        var symbols: [(start: UInt64, size: UInt64, name: String)] = []
        var lines: [(low: UInt64, high: UInt64, file: String?, line: Int)] = []
        var unit = LineUnit<(file: String?, line: Int)>()
        var scopes: [Scope] = []
        var scopeIndex: [UInt64: Int] = [:]
        var demangled = DemangledNames()

        mutating func name(_ raw: String) -> String { BreakpadSymbols.field(demangled(raw)) }

        mutating func visit(symbol entry: hws_symbol_entry) -> Bool {
            // Code only: functions, GNU indirect functions, and untyped labels.
            if entry.type == 2 || entry.type == 10 || entry.type == 0, entry.section < 0xff00 {
                symbols.append((entry.start, entry.size, name(BoundedText.string(entry.name))))
            }
            return true
        }

        mutating func visit(line entry: hws_line_entry) -> Bool {
            if entry.end_sequence == 2 {
                unit.drain { low, high, row in lines.append((low, high, row.file, row.line)) }
            } else {
                unit.append(address: entry.address, endsSequence: entry.end_sequence != 0,
                            (entry.file.map { BreakpadSymbols.field(BoundedText.string($0)) }, Int(entry.line)))
            }
            return true
        }

        mutating func visit(scope entry: hws_scope_entry) -> Bool {
            let ranges = (0..<entry.range_count).map { (entry.ranges[2 * $0], entry.ranges[2 * $0 + 1]) }
            scopeIndex[entry.id] = scopes.count
            scopes.append(Scope(parent: entry.parent == UInt64.max ? nil : scopeIndex[entry.parent],
                                name: entry.function.map { name(BoundedText.string($0)) } ?? "<name omitted>",
                                inlined: entry.inlined != 0, callFile: entry.call_file.map { BreakpadSymbols.field(BoundedText.string($0)) },
                                callLine: Int(entry.call_line), ranges: ranges))
            return true
        }

        func render(header: String) -> String {
            var files: [String: Int] = [:]
            var fileOrder: [String] = []
            func fileNumber(_ path: String?) -> Int {
                let path = path ?? "<unknown>"
                if let known = files[path] { return known }
                files[path] = fileOrder.count
                fileOrder.append(path)
                return fileOrder.count - 1
            }
            var origins: [String: Int] = [:]
            var originOrder: [String] = []
            func origin(_ name: String) -> Int {
                if let known = origins[name] { return known }
                origins[name] = originOrder.count
                originOrder.append(name)
                return originOrder.count - 1
            }
            let sortedLines = lines.sorted { $0.low < $1.low }
            // The real functions (not inlined), and under each the inlined scopes it contains.
            var inlinedBy: [Int: [Int]] = [:]
            for (index, scope) in scopes.enumerated() where scope.inlined {
                var root = scope.parent
                while let parent = root, scopes[parent].inlined { root = scopes[parent].parent }
                if let root { inlinedBy[root, default: []].append(index) }
            }
            var functions: [(low: UInt64, high: UInt64, scope: Int)] = []
            for (index, scope) in scopes.enumerated() where !scope.inlined {
                for range in scope.ranges where range.high > range.low { functions.append((range.low, range.high, index)) }
            }
            functions.sort { $0.low < $1.low }

            var body = ""
            var covered: [(low: UInt64, high: UInt64)] = []
            var previousEnd: UInt64 = 0
            for function in functions where function.low >= previousEnd {   // overlapping duplicates: the first wins
                previousEnd = function.high
                covered.append((function.low, function.high))
                let scope = scopes[function.scope]
                body += "FUNC \(String(function.low, radix: 16)) \(String(function.high - function.low, radix: 16)) 0 \(scope.name)\n"
                for inner in inlinedBy[function.scope] ?? [] {
                    let inlined = scopes[inner]
                    let ranges = inlined.ranges.filter { $0.low >= function.low && $0.high <= function.high && $0.high > $0.low }
                    guard !ranges.isEmpty else { continue }
                    var depth = 0
                    var parent = inlined.parent
                    while let index = parent, scopes[index].inlined { depth += 1; parent = scopes[index].parent }
                    body += "INLINE \(depth) \(inlined.callLine) \(fileNumber(inlined.callFile)) \(origin(inlined.name))"
                        + ranges.map { " \(String($0.low, radix: 16)) \(String($0.high - $0.low, radix: 16))" }.joined() + "\n"
                }
                var index = firstLine(endingAfter: function.low, in: sortedLines)
                while index < sortedLines.count, sortedLines[index].low < function.high {
                    let line = sortedLines[index]
                    let low = max(line.low, function.low), high = min(line.high, function.high)
                    if high > low {
                        body += "\(String(low, radix: 16)) \(String(high - low, radix: 16)) \(line.line) \(fileNumber(line.file))\n"
                    }
                    index += 1
                }
            }
            // Symbols no FUNC covers (no DWARF for them): PUBLIC, once per address.
            var publicAddresses = Set<UInt64>()
            for symbol in symbols.sorted(by: { $0.start < $1.start }) where !isCovered(symbol.start, covered) {
                guard publicAddresses.insert(symbol.start).inserted else { continue }
                body += "PUBLIC \(String(symbol.start, radix: 16)) 0 \(symbol.name)\n"
            }
            var out = header
            for (number, path) in fileOrder.enumerated() { out += "FILE \(number) \(path)\n" }
            for (number, name) in originOrder.enumerated() { out += "INLINE_ORIGIN \(number) \(name)\n" }
            return out + body
        }

        private func firstLine(endingAfter address: UInt64, in lines: [(low: UInt64, high: UInt64, file: String?, line: Int)]) -> Int {
            let low = countStarting(atOrBelow: address, count: lines.count) { lines[$0].low }
            // Rows are contiguous pieces; the one holding `address` starts at most one before.
            return low > 0 && lines[low - 1].high > address ? low - 1 : low
        }

        private func isCovered(_ address: UInt64, _ ranges: [(low: UInt64, high: UInt64)]) -> Bool {
            let low = countStarting(atOrBelow: address, count: ranges.count) { ranges[$0].low }
            return low > 0 && address < ranges[low - 1].high
        }
    }
}
