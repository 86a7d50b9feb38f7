// A local symbol store of Breakpad .sym files (what `hangwatch symbols --store` writes, in the
// layout symbol servers and rust-minidump use: DIR/<name>/<debug id>/<name>.sym), read when a
// module's file no longer matches the build-id a dump recorded: the binary was replaced by a
// redeploy, yet its names come back. docs/symbol-cache.md, "Names after a redeploy". A .sym file
// is input like any other: bounded in size, every record checked, a malformed one skipped, and
// one whose MODULE line names another id refused.
import HangwatchDatabase
import HangwatchSnapshot
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

package enum BreakpadSymbolStore {
    /// Largest .sym file read (libswiftCore's is ~40 MiB).
    package static let maximumFileBytes: Int64 = 512 << 20

    /// `HANGWATCH_SYMBOL_STORE`: directories, `:`-separated; relative ones are ignored.
    package static func directories(environment: [String: String]) -> [String] {
        (environment["HANGWATCH_SYMBOL_STORE"] ?? "").split(separator: ":").map(String.init).filter { $0.hasPrefix("/") }
    }

    /// Where `module`'s .sym file lives under `directory`: nil when the build-id or the name
    /// cannot be part of a path (they come from a dump).
    package static func path(in directory: String, modulePath: String, buildID: String) -> String? {
        guard BuildID.isPathSafe(buildID), let id = BreakpadSymbols.debugID(buildID: buildID) else { return nil }
        guard let name = modulePath.split(separator: "/").last.map(String.init), name != ".", name != "..",
              !name.utf8.contains(where: { $0 < 0x20 }) else { return nil }
        return "\(directory)/\(name)/\(id)/\(name).sym"
    }

    /// The first store's .sym file for `module` whose MODULE line has the build-id's debug id.
    /// A store that is no directory, or a file there that is not used (a link, too large, not a
    /// regular file, another module's), is told to `notice` with why; a store without the file
    /// is not (most modules are in none).
    static func find(in directories: [String], modulePath: String, buildID: String,
                     notice: (String) -> Void = { _ in }) -> BreakpadSymbolFile? {
        guard let debugID = BreakpadSymbols.debugID(buildID: buildID) else { return nil }
        for directory in directories {
            guard let path = path(in: directory, modulePath: modulePath, buildID: buildID) else { continue }
            var info = stat()
            guard stat(directory, &info) == 0, info.st_mode & S_IFMT == S_IFDIR else {
                notice("symbol store \(directory) not used: it is not a directory")
                continue
            }
            let data: Data
            do {
                data = try BreakpadSymbolFile.read(path)
            } catch DatabaseError.system(_, _, let code) where code == ENOENT {
                continue
            } catch {
                notice("symbol store file not used: \(error)")
                continue
            }
            guard let file = BreakpadSymbolFile(bytes: [UInt8](data), path: path, debugID: debugID) else {
                notice("symbol store file \(path) not used: its MODULE line does not name debug id \(debugID)")
                continue
            }
            return file
        }
        return nil
    }
}

/// One Breakpad .sym file read into tables: FUNC records with their line records and INLINE
/// records, and PUBLIC symbols; looked up by link-time address as the symbol index is.
package final class BreakpadSymbolFile: @unchecked Sendable {
    package let path: String

    struct Function {
        var low: UInt64
        var high: UInt64
        var name: String
        var lines: Range<Int>
        var inlines: Range<Int>
    }

    struct LineRecord {
        var low: UInt64
        var high: UInt64
        var line: Int
        var file: Int
    }

    struct Inline {
        var depth: Int
        var callLine: Int
        var callFile: Int
        var origin: Int
        var ranges: [(low: UInt64, high: UInt64)]
    }

    private(set) var functions: [Function] = []
    private var lines: [LineRecord] = []
    private var inlines: [Inline] = []
    private var publics: [(address: UInt64, name: String)] = []
    private var files: [Int: String] = [:]
    private var origins: [Int: String] = [:]

    /// The file at `path` (a regular file, not a link, at most `maximumFileBytes`) if its
    /// MODULE line names `debugID`; nil otherwise.
    package convenience init?(path: String, debugID: String) {
        guard let data = try? Self.read(path) else { return nil }
        self.init(bytes: [UInt8](data), path: path, debugID: debugID)
    }

    /// A .sym file's bytes, read from `path` (`debugID` as above; the fuzz harness, `breakpad-sym`,
    /// gives any bytes).
    package init?(bytes: [UInt8], path: String, debugID: String) {
        self.path = path
        var parser = Parser(bytes: bytes)
        // MODULE os arch id name
        guard let module = parser.nextLine(), module.starts(with: "MODULE ".utf8) else { return nil }
        let header = Self.fields(afterKeyword: module, 4)
        guard header.count == 4, header[2] == debugID else { return nil }
        while let line = parser.nextLine() { record(line) }
        closeFunction()
        functions.sort { $0.low < $1.low }
        publics.sort { $0.address < $1.address }
    }

    static func read(_ path: String) throws -> Data {
        let (directory, name) = try DatabaseDirectory.openParent(of: path)
        defer { directory.closeDirectory() }
        return try directory.readFile(name, limit: BreakpadSymbolStore.maximumFileBytes)
    }

    /// Up to `count` space-separated fields, the last one running to the end of the line.
    private static func fields(_ line: ArraySlice<UInt8>, _ count: Int) -> [String] {
        line.split(separator: 0x20, maxSplits: count - 1, omittingEmptySubsequences: true).map { BoundedText.string($0) }
    }

    /// The fields after a record's keyword (and after FUNC's and PUBLIC's optional `m`).
    private static func fields(afterKeyword line: ArraySlice<UInt8>, _ count: Int) -> [String] {
        var rest = line.drop { $0 != 0x20 }.drop { $0 == 0x20 }
        if rest.starts(with: "m ".utf8) { rest = rest.dropFirst(2) }
        return fields(rest, count)
    }

    private var pending: Function?

    private func closeFunction() {
        guard var function = pending else { return }
        function.lines = function.lines.lowerBound..<lines.count
        function.inlines = function.inlines.lowerBound..<inlines.count
        functions.append(function)
        pending = nil
    }

    private func record(_ line: ArraySlice<UInt8>) {
        guard let first = line.first else { return }
        let isHexDigit = (0x30...0x39).contains(first) || (0x61...0x66).contains(first) || (0x41...0x46).contains(first)
        if isHexDigit && !line.starts(with: "FUNC ".utf8) && !line.starts(with: "FILE ".utf8) {
            // A line record of the open FUNC: address size line file.
            let parts = Self.fields(line, 4)
            guard pending != nil, parts.count == 4, let low = UInt64(parts[0], radix: 16), let size = UInt64(parts[1], radix: 16),
                  let number = Int(parts[2]), let file = Int(parts[3]), low <= UInt64.max - size else { return }
            lines.append(LineRecord(low: low, high: low + size, line: number, file: file))
            return
        }
        let keyword = line.prefix { $0 != 0x20 }
        switch String(decoding: keyword, as: UTF8.self) {
        case "FUNC": function(line)
        case "FILE", "INLINE_ORIGIN":
            let parts = Self.fields(afterKeyword: line, 2)
            guard parts.count == 2, let number = Int(parts[0]), number >= 0 else { return }
            if line.first == UInt8(ascii: "F") { files[number] = parts[1] } else { origins[number] = parts[1] }
        case "INLINE": inline(line)
        case "PUBLIC":
            // PUBLIC [m] address parameter_size name
            let parts = Self.fields(afterKeyword: line, 3)
            guard parts.count == 3, let address = UInt64(parts[0], radix: 16) else { return }
            publics.append((address, parts[2]))
        case "STACK": closeFunction()
        default: break    // INFO, and what this reader does not know (a damaged line): skipped
        }
    }

    private func function(_ line: ArraySlice<UInt8>) {
        closeFunction()
        // FUNC [m] address size parameter_size name
        let parts = Self.fields(afterKeyword: line, 4)
        guard parts.count == 4, let low = UInt64(parts[0], radix: 16), let size = UInt64(parts[1], radix: 16),
              size > 0, low <= UInt64.max - size else { return }
        pending = Function(low: low, high: low + size, name: parts[3], lines: lines.count..<lines.count, inlines: inlines.count..<inlines.count)
    }

    private func inline(_ line: ArraySlice<UInt8>) {
        let parts = line.split(separator: 0x20).map { String(decoding: $0, as: UTF8.self) }
        guard pending != nil, parts.count >= 7, parts.count.isMultiple(of: 2) == false,
              let depth = Int(parts[1]), (0..<BreakpadSymbolFile.maximumFrames).contains(depth),
              let callLine = Int(parts[2]), let callFile = Int(parts[3]), let origin = Int(parts[4]) else { return }
        var ranges: [(low: UInt64, high: UInt64)] = []
        var index = 5
        while index + 1 < parts.count {
            guard let low = UInt64(parts[index], radix: 16), let size = UInt64(parts[index + 1], radix: 16),
                  low <= UInt64.max - size else { return }
            ranges.append((low, low + size))
            index += 2
        }
        inlines.append(Inline(depth: depth, callLine: callLine, callFile: callFile, origin: origin, ranges: ranges))
    }

    /// Frames kept at most for one address (as the symbol index).
    package static let maximumFrames = 32

    /// The frames at link-time address `offset`, inlined ones first, the real function last
    /// (each with its offset from the function's start); empty when no record covers it.
    package func frames(at offset: UInt64) -> [(function: String, file: String?, line: Int?, functionOffset: UInt64?, inlined: Bool)] {
        let index = countStarting(atOrBelow: offset, count: functions.count) { functions[$0].low }
        guard index > 0, offset < functions[index - 1].high else {
            // A PUBLIC symbol runs to the next symbol, FUNC or PUBLIC (it has no size).
            let symbol = countStarting(atOrBelow: offset, count: publics.count) { publics[$0].address }
            guard symbol > 0, index == 0 || functions[index - 1].low < publics[symbol - 1].address else { return [] }
            return [(publics[symbol - 1].name, nil, nil, offset - publics[symbol - 1].address, false)]
        }
        let function = functions[index - 1]
        let row = lines[function.lines].last { $0.low <= offset && offset < $0.high }
        // The inlined calls at this address, outermost (depth 0) first.
        var chain = inlines[function.inlines].filter { $0.ranges.contains { $0.low <= offset && offset < $0.high } }
        chain.sort { $0.depth < $1.depth }
        var frames: [(function: String, file: String?, line: Int?, functionOffset: UInt64?, inlined: Bool)] = []
        // The innermost frame is where the line record points; each outer one is where the call inside it was.
        var file = row.flatMap { files[$0.file] }
        var line = row?.line
        for call in chain.reversed() {
            frames.append((origins[call.origin] ?? "<name omitted>", file, line, nil, true))
            file = files[call.callFile]
            line = call.callLine
        }
        frames.append((function.name, file, line, offset - function.low, false))
        return Array(frames.suffix(Self.maximumFrames))
    }
}

/// Lines of a byte buffer, without their line ends.
private struct Parser {
    let bytes: [UInt8]
    var position = 0

    mutating func nextLine() -> ArraySlice<UInt8>? {
        guard position < bytes.count else { return nil }
        let end = bytes[position...].firstIndex(of: 0x0A) ?? bytes.count
        var line = bytes[position..<end]
        position = end + 1
        if line.last == 0x0D { line = line.dropLast() }
        return line
    }
}
