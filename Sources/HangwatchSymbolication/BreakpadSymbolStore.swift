// A local symbol store of Breakpad .sym files (what `hangwatch symbols --store` writes, in the
// layout symbol servers and rust-minidump use: DIR/<name>/<debug id>/<name>.sym), read when a
// module's file no longer matches the build-id a dump recorded: the binary was replaced by a
// redeploy, yet its names come back. docs/symbol-cache.md, "Names after a redeploy". A .sym file
// is input like any other: bounded in size, every record checked, a malformed one skipped, and
// one whose MODULE line names another id refused. It is never read whole: a report's lookups are
// answered in one pass over it (two, for the file names), keeping only the records of the
// functions they fall in, so a 512 MiB file costs its reading time and a few MiB.
import HangwatchDatabase
import HangwatchPlatform
import HangwatchSnapshot
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

package enum BreakpadSymbolStore {
    /// Largest .sym file read (libswiftCore's is ~40 MiB; a 261 MB binary's, 140 MiB).
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
    /// regular file, another module's), is reported to `notice` with the reason; a store without
    /// the file is not (most modules are in no store).
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
            let file: BreakpadSymbolFile?
            do {
                file = try BreakpadSymbolFile(opening: path, debugID: debugID)
            } catch DatabaseError.system(_, _, let code) where code == ENOENT {
                continue
            } catch {
                notice("symbol store file not used: \(error)")
                continue
            }
            guard let file else {
                notice("symbol store file \(path) not used: its MODULE line does not name debug id \(debugID)")
                continue
            }
            return file
        }
        return nil
    }
}

/// One Breakpad .sym file, answering lookups by link-time address from the records of the
/// functions they fall in: FUNC with its line and INLINE records, the FILE and INLINE_ORIGIN
/// names those use, and PUBLIC symbols. What `prepare` is given is read in one pass; a lookup not
/// prepared reads the file again for itself.
package final class BreakpadSymbolFile: @unchecked Sendable {
    package let path: String
    private let source: Source
    private let lock = Lock()
    private var answers: [UInt64: [Frame]] = [:]  // under `lock`

    package typealias Frame = (function: String, file: String?, line: Int?, functionOffset: UInt64?, inlined: Bool)

    /// Frames kept at most for one address (as the symbol index).
    package static let maximumFrames = 32
    /// Addresses whose answers are kept, line and INLINE records kept for one function, and the
    /// bytes of a line looked at (a longer one is cut there): bounds on what a file can make us hold.
    static let maximumAnswers = 1 << 16
    static let maximumRecordsPerFunction = 1 << 16
    static let maximumLineBytes = 64 << 10

    /// Where the bytes come from: a file read a chunk at a time, or bytes in memory (the fuzzer).
    private enum Source {
        case file(path: String)
        case bytes([UInt8])
    }

    /// The file at `path` (a regular file, not a link, at most `maximumFileBytes`) if its MODULE
    /// line names `debugID`; nil otherwise (and when it cannot be read).
    package convenience init?(path: String, debugID: String) {
        guard let file = try? BreakpadSymbolFile(opening: path, debugID: debugID) else { return nil }
        self.init(file)
    }

    private init(_ other: BreakpadSymbolFile) {
        path = other.path
        source = other.source
    }

    /// As `init(path:debugID:)`, with why the file could not be read thrown; nil when its
    /// MODULE line names another id.
    init?(opening path: String, debugID: String) throws {
        self.path = path
        source = .file(path: path)
        var first: [UInt8]?
        try eachLine { line in
            first = Array(line)
            return false
        }
        guard let first, Self.moduleLineNames(debugID, first[...]) else { return nil }
    }

    /// A .sym file's bytes (`debugID` as above; the fuzz harness, `breakpad-sym`, gives any bytes).
    package init?(bytes: [UInt8], path: String, debugID: String) {
        self.path = path
        source = .bytes(bytes)
        let first = bytes.prefix { $0 != 0x0A }.prefix(Self.maximumLineBytes)
        guard Self.moduleLineNames(debugID, first) else { return nil }
    }

    /// MODULE os arch id name, with `debugID` as the id.
    private static func moduleLineNames(_ debugID: String, _ line: ArraySlice<UInt8>) -> Bool {
        var line = line
        if line.last == 0x0D { line = line.dropLast() }
        guard line.starts(with: "MODULE ".utf8) else { return false }
        let header = fields(afterKeyword: line, 4)
        return header.count == 4 && header[2] == debugID
    }

    /// The frames at link-time address `offset`, inlined ones first, the real function last
    /// (each with its offset from the function's start); empty when no record covers it.
    package func frames(at offset: UInt64) -> [Frame] {
        lock.lock()
        defer { lock.unlock() }
        if let known = answers[offset] { return known }
        let found = (try? read(for: [offset]))?[offset] ?? []
        if answers.count < Self.maximumAnswers { answers[offset] = found }
        return found
    }

    /// Answers the lookups of `offsets` in one reading of the file (a report's, before it asks them).
    package func prepare(for offsets: [UInt64]) {
        lock.lock()
        defer { lock.unlock() }
        let wanted = Array(Set(offsets.filter { answers[$0] == nil }).prefix(max(0, Self.maximumAnswers - answers.count))).sorted()
        guard !wanted.isEmpty, let found = try? read(for: wanted) else { return }
        for offset in wanted { answers[offset] = found[offset] ?? [] }
    }

    // MARK: - Reading

    /// A FUNC record kept because a wanted address is in it, with its records.
    private struct Function {
        var low: UInt64, high: UInt64, name: String
        var lines: [(low: UInt64, high: UInt64, line: Int, file: Int)] = []
        var inlines: [(depth: Int, callLine: Int, callFile: Int, origin: Int, ranges: [(low: UInt64, high: UInt64)])] = []
    }

    /// The frames of each of the sorted `wanted` offsets: a pass keeping the functions they fall
    /// in and the PUBLIC symbols nearest below them, then one for the names those records use.
    private func read(for wanted: [UInt64]) throws -> [UInt64: [Frame]] {
        var kept: [Function] = []
        var open: Function?
        // Per wanted offset: the nearest FUNC start at or below it, and the nearest PUBLIC.
        var nearestFunction = [UInt64?](repeating: nil, count: wanted.count)
        var nearestPublic = [(address: UInt64, name: String)?](repeating: nil, count: wanted.count)
        func close() {
            if let function = open { kept.append(function) }
            open = nil
        }
        try eachLine { line in
            guard let first = line.first else { return true }
            if Self.isHexDigit(first) && !line.starts(with: "FUNC ".utf8) && !line.starts(with: "FILE ".utf8) {
                // A line record of the open FUNC: address size line file.
                guard open != nil, open!.lines.count < Self.maximumRecordsPerFunction else { return true }
                let parts = Self.fields(line, 4)
                guard parts.count == 4, let low = UInt64(parts[0], radix: 16), let size = UInt64(parts[1], radix: 16),
                      let number = Int(parts[2]), let file = Int(parts[3]), low <= UInt64.max - size else { return true }
                open!.lines.append((low, low + size, number, file))
            } else if line.starts(with: "FUNC ".utf8) {
                close()
                // FUNC [m] address size parameter_size name
                let parts = Self.fields(afterKeyword: line, 4)
                guard parts.count == 4, let low = UInt64(parts[0], radix: 16), let size = UInt64(parts[1], radix: 16),
                      size > 0, low <= UInt64.max - size else { return true }
                // Noted at the first wanted offset at or above it; spread upwards after the pass.
                let at = Self.firstAtOrAbove(low, in: wanted)
                guard at < wanted.count else { return true }
                if nearestFunction[at].map({ $0 <= low }) ?? true { nearestFunction[at] = low }
                if wanted[at] < low + size { open = Function(low: low, high: low + size, name: parts[3]) }
            } else if line.starts(with: "INLINE ".utf8) {
                guard open != nil, open!.inlines.count < Self.maximumRecordsPerFunction, let inline = Self.inline(line) else { return true }
                open!.inlines.append(inline)
            } else if line.starts(with: "PUBLIC ".utf8) {
                // PUBLIC [m] address parameter_size name
                let parts = Self.fields(afterKeyword: line, 3)
                guard parts.count == 3, let address = UInt64(parts[0], radix: 16) else { return true }
                let at = Self.firstAtOrAbove(address, in: wanted)
                if at < wanted.count, nearestPublic[at].map({ $0.address <= address }) ?? true { nearestPublic[at] = (address, parts[2]) }
            } else if line.starts(with: "STACK ".utf8) {
                close()
            }
            return true
        }
        close()
        let names = try readNames(files: Set(kept.flatMap { $0.lines.map(\.file) + $0.inlines.map(\.callFile) }),
                                  origins: Set(kept.flatMap { $0.inlines.map(\.origin) }))
        // What is nearest below an offset is nearest below every offset above it too, unless nearer.
        for index in wanted.indices.dropFirst() {
            if let below = nearestFunction[index - 1], nearestFunction[index].map({ $0 < below }) ?? true { nearestFunction[index] = below }
            if let below = nearestPublic[index - 1], nearestPublic[index].map({ $0.address < below.address }) ?? true { nearestPublic[index] = below }
        }
        var keptAt: [UInt64: Int] = [:]  // the last kept FUNC starting at an address
        for (index, function) in kept.enumerated() { keptAt[function.low] = index }
        var answers: [UInt64: [Frame]] = [:]
        for (index, offset) in wanted.enumerated() {
            // The FUNC starting nearest below the offset names it if it runs that far; else a
            // PUBLIC symbol above that FUNC's start does: it runs to the next symbol (it has no size).
            let function = nearestFunction[index].flatMap { keptAt[$0] }.map { kept[$0] }.flatMap { offset < $0.high ? $0 : nil }
            if let function {
                answers[offset] = Self.frames(at: offset, in: function, names: names)
            } else if let symbol = nearestPublic[index], nearestFunction[index].map({ $0 < symbol.address }) ?? true {
                answers[offset] = [(symbol.name, nil, nil, offset - symbol.address, false)]
            }
        }
        return answers
    }

    /// The index of the first of the sorted `offsets` at or above `address`.
    private static func firstAtOrAbove(_ address: UInt64, in offsets: [UInt64]) -> Int {
        address == 0 ? 0 : countStarting(atOrBelow: address - 1, count: offsets.count) { offsets[$0] }
    }

    /// The FILE and INLINE_ORIGIN names of the numbers asked (a second pass over the file).
    private func readNames(files: Set<Int>, origins: Set<Int>) throws -> (files: [Int: String], origins: [Int: String]) {
        var names: (files: [Int: String], origins: [Int: String]) = ([:], [:])
        guard !files.isEmpty || !origins.isEmpty else { return names }
        try eachLine { line in
            let isFile = line.starts(with: "FILE ".utf8)
            guard isFile || line.starts(with: "INLINE_ORIGIN ".utf8) else { return true }
            let parts = Self.fields(afterKeyword: line, 2)
            guard parts.count == 2, let number = Int(parts[0]), number >= 0 else { return true }
            if isFile, files.contains(number) { names.files[number] = parts[1] }
            if !isFile, origins.contains(number) { names.origins[number] = parts[1] }
            return names.files.count < files.count || names.origins.count < origins.count
        }
        return names
    }

    /// The frames of `offset` inside `function`.
    private static func frames(at offset: UInt64, in function: Function, names: (files: [Int: String], origins: [Int: String])) -> [Frame] {
        let row = function.lines.last { $0.low <= offset && offset < $0.high }
        // The inlined calls at this address, outermost (depth 0) first.
        var chain = function.inlines.filter { $0.ranges.contains { $0.low <= offset && offset < $0.high } }
        chain.sort { $0.depth < $1.depth }
        var frames: [Frame] = []
        // The innermost frame is where the line record points; each outer one is where the call inside it was.
        var file = row.flatMap { names.files[$0.file] }
        var line = row?.line
        for call in chain.reversed() {
            frames.append((names.origins[call.origin] ?? "<name omitted>", file, line, nil, true))
            file = names.files[call.callFile]
            line = call.callLine
        }
        frames.append((function.name, file, line, offset - function.low, false))
        return Array(frames.suffix(maximumFrames))
    }

    /// INLINE depth call_line call_file origin [address size]+
    private static func inline(_ line: ArraySlice<UInt8>) -> (depth: Int, callLine: Int, callFile: Int, origin: Int, ranges: [(low: UInt64, high: UInt64)])? {
        let parts = line.split(separator: 0x20).map { String(decoding: $0, as: UTF8.self) }
        guard parts.count >= 7, parts.count.isMultiple(of: 2) == false,
              let depth = Int(parts[1]), (0..<maximumFrames).contains(depth),
              let callLine = Int(parts[2]), let callFile = Int(parts[3]), let origin = Int(parts[4]) else { return nil }
        var ranges: [(low: UInt64, high: UInt64)] = []
        var index = 5
        while index + 1 < parts.count {
            guard let low = UInt64(parts[index], radix: 16), let size = UInt64(parts[index + 1], radix: 16),
                  low <= UInt64.max - size else { return nil }
            ranges.append((low, low + size))
            index += 2
        }
        return (depth, callLine, callFile, origin, ranges)
    }

    private static func isHexDigit(_ byte: UInt8) -> Bool {
        (0x30...0x39).contains(byte) || (0x61...0x66).contains(byte) || (0x41...0x46).contains(byte)
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

    /// Each line of the source, without its line end and cut at `maximumLineBytes`, to `body`
    /// until it returns false. A file is read a megabyte at a time (pread), never whole.
    private func eachLine(_ body: (ArraySlice<UInt8>) throws -> Bool) throws {
        switch source {
        case .bytes(let bytes):
            _ = try Self.lines(of: bytes[...], carry: [], final: true, body)
        case .file(let path):
            let (directory, name) = try DatabaseDirectory.openParent(of: path)
            defer { directory.closeDirectory() }
            let (file, size) = try directory.openBounded(name, limit: BreakpadSymbolStore.maximumFileBytes)
            defer { close(file) }
            var chunk = [UInt8](repeating: 0, count: 1 << 20)
            var carry: [UInt8] = []
            var at: Int64 = 0
            while at < size {
                let count = chunk.withUnsafeMutableBytes { pread(file, $0.baseAddress, min($0.count, Int(size - at)), off_t(at)) }
                if count < 0 && errno == EINTR { continue }
                guard count > 0 else { break }  // cut short since it was opened: what was read counts
                at += Int64(count)
                guard let rest = try Self.lines(of: chunk[..<count], carry: carry, final: at >= size, body) else { return }
                carry = rest
            }
            if !carry.isEmpty { _ = try Self.lines(of: [][...], carry: carry, final: true, body) }
        }
    }

    /// Passes the complete lines of `carry` + `bytes` to `body`. Returns the remainder of an
    /// unfinished line (at most `maximumLineBytes` of it), or nil when `body` asked to stop.
    private static func lines(of bytes: ArraySlice<UInt8>, carry: [UInt8], final: Bool,
                              _ body: (ArraySlice<UInt8>) throws -> Bool) throws -> [UInt8]? {
        var carry = carry
        var start = bytes.startIndex
        while start < bytes.endIndex {
            guard let end = bytes[start...].firstIndex(of: 0x0A) else { break }
            var line: ArraySlice<UInt8>
            if carry.isEmpty {
                line = bytes[start..<min(end, start + maximumLineBytes)]
            } else {
                carry.append(contentsOf: bytes[start..<min(end, start + max(0, maximumLineBytes - carry.count))])
                line = carry[...]
            }
            if line.last == 0x0D { line = line.dropLast() }
            guard try body(line) else { return nil }
            carry = []
            start = end + 1
        }
        if start < bytes.endIndex {
            carry.append(contentsOf: bytes[start..<min(bytes.endIndex, start + max(0, maximumLineBytes - carry.count))])
        }
        if final && !carry.isEmpty {
            var line = carry[...]
            if line.last == 0x0D { line = line.dropLast() }
            guard try body(line) else { return nil }
            return []
        }
        return carry
    }
}
