// A module's symbols as one compact, position-independent table: address → function, file,
// line and inline chain, built once from the ELF symbol table and DWARF (libdw) and then read
// by any process that symbolicates the same file (SymbolCache.swift keeps them on disk).
// Lookups give what `hws_module_symbolicate` (Sources/CHangwatchSymbols/hw_symbols.c) gives
// for the same link-time address; SymbolCacheTests compare the two over whole modules.
// The file format is in docs/symbol-cache.md. A file read back is untrusted: every count,
// offset and chain is checked, and a bad file is refused, never trapped on.
import CHangwatchSymbols
import HangwatchPlatform
#if canImport(Glibc)
import Glibc
#endif

package struct SymbolIndex: Sendable {
    static let magic: [UInt8] = Array("HWSYMIX1".utf8)
    static let formatVersion: UInt32 = 1
    package static let headerSize = 64
    static let symbolRecordSize = 20   // u64 start, u64 symbol start, u32 name
    static let lineRecordSize = 20     // u64 start, u32 file, i32 line, i32 column
    static let scopeSegmentRecordSize = 12  // u64 start, u32 scope
    static let scopeRecordSize = 24    // u32 function, u32 parent, u32 inlined, u32 call file, i32 call line, i32 call column
    static let none = UInt32.max
    /// Inline chains longer than this are cut (the capacity `hws_module_symbolicate` is called with).
    package static let maximumChain = 32

    /// The file's bytes: header, identity, tables, strings (docs/symbol-cache.md).
    package let storage: IndexBytes
    /// What the index was built from (SymbolCache's key text); checked when read back.
    package let identity: String
    /// Built from the symbol table only (a system library's names), no lines or inline frames.
    package let namesOnly: Bool

    private let symbolCount: Int, lineCount: Int, scopeSegmentCount: Int, scopeCount: Int
    private let symbolsAt: Int, linesAt: Int, scopeSegmentsAt: Int, scopesAt: Int, stringsAt: Int, stringBytes: Int

    // MARK: - Lookup

    /// False once the file behind the index was found cut short while in use (IndexBytes): its
    /// answers are then not to be trusted.
    package var isWhole: Bool { !storage.isCutShort }

    /// Frames for one link-time address, innermost inlined function first; empty when the
    /// index knows nothing of it. Names are raw (mangled) as in the ELF file and DWARF.
    package func frames(at address: UInt64) -> [IndexedFrame] {
        let symbol = lookup(address, count: symbolCount, at: symbolsAt, recordSize: Self.symbolRecordSize, valueAt: 16)
            .flatMap { record -> (name: String, offset: UInt64)? in
                string(u32(record + 16)).map { ($0, address &- u64(record + 8)) }
            }
        var file: String?, line = 0, column = 0
        if let record = lookup(address, count: lineCount, at: linesAt, recordSize: Self.lineRecordSize, valueAt: 8) {
            file = string(u32(record + 8))
            line = Int(i32(record + 12))
            column = Int(i32(record + 16))
        }
        var frames: [IndexedFrame] = []
        if let segment = lookup(address, count: scopeSegmentCount, at: scopeSegmentsAt, recordSize: Self.scopeSegmentRecordSize, valueAt: 8) {
            var scope = u32(segment + 8)
            while scope != Self.none, Int(scope) < scopeCount, frames.count < Self.maximumChain {
                let record = scopesAt + Int(scope) * Self.scopeRecordSize
                frames.append(IndexedFrame(function: string(u32(record)), file: file, line: line, column: column, isInlined: false))
                guard u32(record + 8) != 0 else { break }  // the real function: outermost frame
                frames[frames.count - 1].isInlined = true
                // The caller's location is where this instance was inlined.
                file = string(u32(record + 12))
                line = Int(i32(record + 16))
                column = Int(i32(record + 20))
                let parent = u32(record + 4)
                // Parents come before their children: a chain can only go down, never loop.
                guard parent == Self.none || parent < scope else { break }
                scope = parent
            }
        }
        if frames.isEmpty {
            guard symbol != nil || file != nil else { return [] }
            frames.append(IndexedFrame(function: nil, file: file, line: line, column: column, isInlined: false))
        }
        if let symbol {
            if frames[frames.count - 1].function == nil { frames[frames.count - 1].function = symbol.name }
            frames[frames.count - 1].functionOffset = symbol.offset
        }
        return frames
    }

    /// The record of the table piece holding `address` (the last start ≤ address), nil when
    /// the address is below the first piece or the piece is a gap (`none` at `valueAt`).
    private func lookup(_ address: UInt64, count: Int, at base: Int, recordSize: Int, valueAt: Int) -> Int? {
        let low = countStarting(atOrBelow: address, count: count) { u64(base + $0 * recordSize) }
        guard low > 0 else { return nil }
        let record = base + (low - 1) * recordSize
        return u32(record + valueAt) == Self.none ? nil : record
    }

    private func string(_ offset: UInt32) -> String? {
        guard offset != Self.none, Int(offset) < stringBytes else { return nil }
        let start = stringsAt + Int(offset), end = stringsAt + stringBytes
        // Bounded like every name read from a file (BoundedText), and NUL-terminated in bounds.
        let limit = min(end, start + BoundedText.maximumBytes + 1)
        return storage.withBytes(start..<limit) { name -> String? in
            guard let terminator = name.firstIndex(of: 0) ?? (limit < end ? name.count : nil) else { return nil }
            return BoundedText.string(name[..<terminator])
        }
    }

    private func u32(_ at: Int) -> UInt32 { storage.u32(at) }
    private func i32(_ at: Int) -> Int32 { Int32(bitPattern: u32(at)) }
    private func u64(_ at: Int) -> UInt64 { storage.u64(at) }

    // MARK: - Reading back

    package enum ReadError: Error, Equatable, CustomStringConvertible {
        case malformed(String)
        case otherIdentity
        package var description: String {
            switch self {
            case .malformed(let why): return "malformed symbol index: \(why)"
            case .otherIdentity: return "symbol index of another file"
            }
        }
    }

    /// Checks a file read back: the header, sizes adding up to the file's length, the header's
    /// checksum, and that it was built from `expectedIdentity`. The tables are not checksummed
    /// (an index is megabytes and a lookup touches a few pages of it): every offset a lookup
    /// follows is checked when it is followed, so a damaged table can misname a frame but never
    /// read outside the file or loop.
    package init(storage: IndexBytes, expectedIdentity: String) throws {
        guard storage.count >= Self.headerSize else { throw ReadError.malformed("not a hangwatch symbol index") }
        let header = storage.withBytes(0..<Self.headerSize) { Array($0) }
        func header32(_ at: Int) -> Int { Int(UInt32(littleEndian: header.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: at, as: UInt32.self) })) }
        guard Array(header[0..<8]) == Self.magic else { throw ReadError.malformed("not a hangwatch symbol index") }
        guard header32(8) == Int(Self.formatVersion) else { throw ReadError.malformed("format version \(header32(8))") }
        let flags = header32(12)
        let counts = (symbols: header32(16), lines: header32(20), scopeSegments: header32(24), scopes: header32(28))
        let stringBytes = header32(32), identityBytes = header32(36)
        // Each count is below 2^32, so these sums cannot overflow Int.
        let expectedSize = Self.headerSize + identityBytes + counts.symbols * Self.symbolRecordSize
            + counts.lines * Self.lineRecordSize + counts.scopeSegments * Self.scopeSegmentRecordSize
            + counts.scopes * Self.scopeRecordSize + stringBytes
        guard expectedSize == storage.count else { throw ReadError.malformed("\(storage.count) bytes where the header says \(expectedSize)") }
        let storedChecksum = UInt64(littleEndian: header.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: 40, as: UInt64.self) })
        let (checksum, identity) = storage.withBytes(0..<(Self.headerSize + identityBytes)) { bytes in
            (Self.headerChecksum(bytes, identityBytes: identityBytes),
             String(decoding: UnsafeRawBufferPointer(rebasing: bytes[Self.headerSize...]), as: UTF8.self))
        }
        guard checksum == storedChecksum else { throw ReadError.malformed("header checksum mismatch") }
        guard identity == expectedIdentity else { throw ReadError.otherIdentity }
        self.init(storage: storage, identity: identity, namesOnly: flags & 1 != 0, symbolCount: counts.symbols, lineCount: counts.lines,
                  scopeSegmentCount: counts.scopeSegments, scopeCount: counts.scopes, identityBytes: identityBytes, stringBytes: stringBytes)
    }

    /// An index whatever identity it was built from (the fuzz harness: a file's own identity is
    /// taken as the expected one, so only the structure is checked).
    package init(anyIdentity bytes: [UInt8]) throws {
        guard bytes.count >= Self.headerSize else { throw ReadError.malformed("shorter than its header") }
        let identityBytes = Int(UInt32(littleEndian: bytes.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: 36, as: UInt32.self) }))
        guard identityBytes <= bytes.count - Self.headerSize else { throw ReadError.malformed("identity runs past the end") }
        let identity = String(decoding: bytes[Self.headerSize..<(Self.headerSize + identityBytes)], as: UTF8.self)
        try self.init(storage: IndexBytes(copying: bytes), expectedIdentity: identity)
    }

    private init(storage: IndexBytes, identity: String, namesOnly: Bool, symbolCount: Int, lineCount: Int,
                 scopeSegmentCount: Int, scopeCount: Int, identityBytes: Int, stringBytes: Int) {
        self.storage = storage
        self.identity = identity
        self.namesOnly = namesOnly
        self.symbolCount = symbolCount
        self.lineCount = lineCount
        self.scopeSegmentCount = scopeSegmentCount
        self.scopeCount = scopeCount
        self.stringBytes = stringBytes
        symbolsAt = Self.headerSize + identityBytes
        linesAt = symbolsAt + symbolCount * Self.symbolRecordSize
        scopeSegmentsAt = linesAt + lineCount * Self.lineRecordSize
        scopesAt = scopeSegmentsAt + scopeSegmentCount * Self.scopeSegmentRecordSize
        stringsAt = scopesAt + scopeCount * Self.scopeRecordSize
    }

    /// FNV-1a of the header (its checksum field as zero) and the identity.
    package static func headerChecksum(_ bytes: UnsafeRawBufferPointer, identityBytes: Int) -> UInt64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for offset in 0..<(headerSize + identityBytes) where !(40..<48).contains(offset) {
            hash = (hash ^ UInt64(bytes[offset])) &* 0x100_0000_01b3
        }
        return hash
    }

    /// FNV-1a of a text (the cache names its entries by their identity's).
    static func hash(_ text: String) -> UInt64 {
        text.utf8.reduce(0xcbf2_9ce4_8422_2325) { ($0 ^ UInt64($1)) &* 0x100_0000_01b3 }
    }

    // MARK: - Building

    /// Indexes the module `handle` was opened on: its symbols, and unless `namesOnly` its
    /// lines and inline scopes. `preferred` function symbols (a system library's names from
    /// its debug file's table, ELFSymbolTable) name what they cover ahead of the module's own.
    /// nil when the index would exceed `maximumBytes` (then libdw answers for this module).
    package static func build(module handle: OpaquePointer?, preferring preferred: [(start: UInt64, size: UInt64, name: String)] = [],
                              identity: String, namesOnly: Bool,
                              maximumBytes: Int = SymbolCache.defaultMaximumEntryBytes) -> SymbolIndex? {
        var builder = Builder(identity: identity, namesOnly: namesOnly, maximumBytes: maximumBytes)
        for symbol in preferred {
            let name = builder.intern(symbol.name)
            builder.sized.append(AddressInterval(low: symbol.start, high: symbol.start &+ symbol.size,
                                                 priority: (3, symbol.start, 0, 0), value: builder.symbolRecord(start: symbol.start, name: name)))
        }
        if let handle { ModuleWalk.walk(handle, &builder, namesOnly: namesOnly) }
        return builder.finish()
    }

    private struct Builder: ModuleVisitor {
        let identity: String
        let namesOnly: Bool
        let maximumBytes: Int
        var strings: [UInt8] = []
        var stringOffsets: [String: UInt32] = [:]
        var pointerOffsets: [UInt: UInt32] = [:]
        var sections: [(index: UInt32, start: UInt64, end: UInt64)] = []
        var symbolStarts: [UInt64] = []
        var symbolNames: [UInt32] = []
        var sized: [AddressInterval] = []
        var sizeless: [(start: UInt64, binding: Int32, section: UInt32, name: UInt32)] = []
        var lines: [AddressInterval] = []
        var lineValues: [(file: UInt32, line: Int32, column: Int32)] = []
        var unit = LineUnit<(file: UInt32, line: Int32, column: Int32)>()
        var scopes: [(function: UInt32, parent: UInt32, inlined: UInt32, callFile: UInt32, callLine: Int32, callColumn: Int32)] = []
        var scopeIndex: [UInt64: (index: UInt32, depth: UInt64)] = [:]
        var scopeRanges: [AddressInterval] = []
        var tooLarge = false

        init(identity: String, namesOnly: Bool, maximumBytes: Int) {
            self.identity = identity
            self.namesOnly = namesOnly
            self.maximumBytes = maximumBytes
        }

        /// A rough running size, so a huge module stops the walk early instead of after it.
        var estimatedBytes: Int {
            strings.count + sized.count * 2 * Self.perInterval + lines.count * 2 * Self.perInterval + scopeRanges.count * 2 * Self.perInterval
        }
        static let perInterval = 24

        /// false (and the walk stops) once the index would exceed `maximumBytes`.
        mutating func withinBounds() -> Bool {
            if estimatedBytes > maximumBytes { tooLarge = true }
            return !tooLarge
        }

        mutating func intern(_ text: String) -> UInt32 {
            if let known = stringOffsets[text] { return known }
            let offset = UInt32(truncatingIfNeeded: strings.count)
            strings.append(contentsOf: text.utf8.prefix(BoundedText.maximumBytes))
            strings.append(0)
            stringOffsets[text] = offset
            return offset
        }

        /// libdw hands out the same pointer for the same string (a unit's file table, a name in
        /// .debug_str), millions of times for a big module: those are interned by address, and
        /// copied as bytes without becoming Swift strings; only a name too long to keep whole
        /// (BoundedText) takes the slow path.
        mutating func intern(_ pointer: UnsafePointer<CChar>?) -> UInt32 {
            guard let pointer else { return SymbolIndex.none }
            let address = UInt(bitPattern: pointer)
            if let known = pointerOffsets[address] { return known }
            let length = strnlen(pointer, BoundedText.maximumBytes + 1)
            let offset: UInt32
            if length > BoundedText.maximumBytes {
                offset = intern(BoundedText.string(pointer))
            } else {
                offset = UInt32(truncatingIfNeeded: strings.count)
                pointer.withMemoryRebound(to: UInt8.self, capacity: length) { strings.append(contentsOf: UnsafeBufferPointer(start: $0, count: length)) }
                strings.append(0)
            }
            pointerOffsets[address] = offset
            return offset
        }

        mutating func symbolRecord(start: UInt64, name: UInt32) -> UInt32 {
            symbolStarts.append(start)
            symbolNames.append(name)
            return UInt32(truncatingIfNeeded: symbolStarts.count - 1)
        }

        mutating func visit(section index: UInt32, start: UInt64, end: UInt64) {
            sections.append((index, start, end))
        }

        mutating func visit(symbol entry: hws_symbol_entry) -> Bool {
            let name = intern(entry.name)
            if entry.size > 0 {
                // libdwfl looks at local symbols only where no global or weak one covers the
                // address (class 2 over 1; a label, class 0, only where no sized symbol does);
                // among those it takes the one starting closest below the address, then the
                // stronger binding (global over weak), then the smaller. Where overlapping
                // symbols differ in binding its choice also depends on their order in the
                // table, which is not kept (docs/symbol-cache.md).
                let binding: UInt64 = entry.binding == 1 ? 3 : entry.binding == 2 ? 2 : 1
                sized.append(AddressInterval(low: entry.start, high: entry.start &+ entry.size,
                                             priority: (binding > 1 ? 2 : 1, entry.start, binding, UInt64.max - entry.size),
                                             value: symbolRecord(start: entry.start, name: name)))
            } else if entry.section < 0xff00 {
                sizeless.append((entry.start, entry.binding, entry.section, name))
            }
            return withinBounds()
        }

        mutating func visit(line entry: hws_line_entry) -> Bool {
            if entry.end_sequence == 2 {
                unit.drain { low, high, row in
                    lineValues.append(row)
                    lines.append(AddressInterval(low: low, high: high, priority: (low, 0, 0, 0),
                                                 value: UInt32(truncatingIfNeeded: lineValues.count - 1)))
                }
                return withinBounds()
            }
            unit.append(address: entry.address, endsSequence: entry.end_sequence != 0, (intern(entry.file), entry.line, entry.column))
            return true
        }

        mutating func visit(scope entry: hws_scope_entry) -> Bool {
            let parent = entry.parent == UInt64.max ? nil : scopeIndex[entry.parent]
            let index = UInt32(truncatingIfNeeded: scopes.count)
            let depth = (parent?.depth ?? 0) + 1
            scopes.append((intern(entry.function), parent?.index ?? SymbolIndex.none, entry.inlined != 0 ? 1 : 0,
                           intern(entry.call_file), entry.call_line, entry.call_column))
            scopeIndex[entry.id] = (index, depth)
            for range in 0..<entry.range_count {
                let low = entry.ranges[2 * range], high = entry.ranges[2 * range + 1]
                // The innermost scope wins: deepest first, then the one starting closest.
                scopeRanges.append(AddressInterval(low: low, high: high, priority: (depth, low, 0, 0), value: index))
            }
            return withinBounds()
        }

        /// Sizeless symbols (assembly labels) name the addresses from them up to the next
        /// symbol in their own section, where no sized symbol does (libdwfl's fallback).
        mutating func sizelessIntervals(covered: AddressPartition) -> [AddressInterval] {
            guard !sizeless.isEmpty else { return [] }
            let starts = (sized.map(\.low) + sizeless.map(\.start)).sorted()
            var intervals: [AddressInterval] = []
            for label in sizeless where covered.value(at: label.start) == nil {
                guard let section = sections.first(where: { $0.index == label.section && $0.start <= label.start && label.start < $0.end })
                else { continue }
                let low = countStarting(atOrBelow: label.start, count: starts.count) { starts[$0] }
                let end = min(low < starts.count ? starts[low] : UInt64.max, section.end)
                intervals.append(AddressInterval(low: label.start, high: end, priority: (0, label.start, UInt64(max(0, label.binding)), 0),
                                                 value: symbolRecord(start: label.start, name: label.name)))
            }
            return intervals
        }

        mutating func finish() -> SymbolIndex? {
            guard !tooLarge else { return nil }
            let sizedOnly = AddressPartition(sized)
            let labels = sizelessIntervals(covered: sizedOnly)
            let symbols = labels.isEmpty ? sizedOnly : AddressPartition(sized + labels)
            let lineTable = AddressPartition(lines)
            let scopeTable = AddressPartition(scopeRanges)
            let identityBytes = Array(identity.utf8)

            guard strings.count < Int(UInt32.max - 1), symbols.starts.count < Int(UInt32.max),
                  lineTable.starts.count < Int(UInt32.max), scopeTable.starts.count < Int(UInt32.max) else { return nil }
            let size = SymbolIndex.headerSize + identityBytes.count + symbols.starts.count * SymbolIndex.symbolRecordSize
                + lineTable.starts.count * SymbolIndex.lineRecordSize + scopeTable.starts.count * SymbolIndex.scopeSegmentRecordSize
                + scopes.count * SymbolIndex.scopeRecordSize + strings.count
            guard size <= maximumBytes else { return nil }
            // Megabytes for a big module: written in place into its final buffer.
            let out = UnsafeMutableRawBufferPointer.allocate(byteCount: size, alignment: 8)
            var at = 0
            func put32(_ value: UInt32) { out.storeBytes(of: value.littleEndian, toByteOffset: at, as: UInt32.self); at += 4 }
            func put64(_ value: UInt64) { out.storeBytes(of: value.littleEndian, toByteOffset: at, as: UInt64.self); at += 8 }
            func put(_ bytes: [UInt8]) {
                bytes.withUnsafeBytes { UnsafeMutableRawBufferPointer(rebasing: out[at..<(at + $0.count)]).copyMemory(from: $0) }
                at += bytes.count
            }
            put(SymbolIndex.magic)
            put32(SymbolIndex.formatVersion)
            put32(namesOnly ? 1 : 0)
            put32(UInt32(truncatingIfNeeded: symbols.starts.count))
            put32(UInt32(truncatingIfNeeded: lineTable.starts.count))
            put32(UInt32(truncatingIfNeeded: scopeTable.starts.count))
            put32(UInt32(truncatingIfNeeded: scopes.count))
            put32(UInt32(truncatingIfNeeded: strings.count))
            put32(UInt32(truncatingIfNeeded: identityBytes.count))
            put64(0)  // checksum, filled in below
            while at < SymbolIndex.headerSize { put32(0) }
            put(identityBytes)
            for (start, value) in zip(symbols.starts, symbols.values) {
                put64(start)
                if let value {
                    put64(symbolStarts[Int(value)])
                    put32(symbolNames[Int(value)])
                } else {
                    put64(0)
                    put32(SymbolIndex.none)
                }
            }
            for (start, value) in zip(lineTable.starts, lineTable.values) {
                put64(start)
                let row: (file: UInt32, line: Int32, column: Int32) = value.map { lineValues[Int($0)] } ?? (SymbolIndex.none, 0, 0)
                // A row without a file is still a row (line known, file not): keep it apart from a gap.
                put32(value == nil ? SymbolIndex.none : (row.file == SymbolIndex.none ? SymbolIndex.none - 1 : row.file))
                put32(UInt32(bitPattern: row.line))
                put32(UInt32(bitPattern: row.column))
            }
            for (start, value) in zip(scopeTable.starts, scopeTable.values) {
                put64(start)
                put32(value ?? SymbolIndex.none)
            }
            for scope in scopes {
                put32(scope.function)
                put32(scope.parent)
                put32(scope.inlined)
                put32(scope.callFile)
                put32(UInt32(bitPattern: scope.callLine))
                put32(UInt32(bitPattern: scope.callColumn))
            }
            put(strings)
            precondition(at == size, "the index's size was computed wrong")
            let checksum = SymbolIndex.headerChecksum(UnsafeRawBufferPointer(out), identityBytes: identityBytes.count)
            out.storeBytes(of: checksum.littleEndian, toByteOffset: 40, as: UInt64.self)
            return try? SymbolIndex(storage: IndexBytes(taking: out), expectedIdentity: identity)
        }
    }
}

/// An index's bytes: a copy in memory (built here, or a test's), or a cache file read a chunk at
/// a time as lookups reach it (SymbolCache.load). An index is megabytes and a dump's lookups
/// touch a few dozen chunks: reading it whole cost a warm `hangwatch dump` 20 ms. Read with
/// pread, never mapped: a file someone cuts short while it is in use would kill a reader of a
/// mapping with SIGBUS; here a chunk that reads short marks the bytes cut short (`isCutShort`)
/// and its missing bytes read as zero, which a lookup meets like any other damage (every
/// offset it follows is checked, SymbolIndex.init) before its answer is dropped.
package final class IndexBytes: @unchecked Sendable {
    static let chunkSize = 16 << 10
    /// Chunks held at most (16 MiB); all are dropped when one more is needed.
    static let maximumChunks = 1024

    package let count: Int
    private let memory: UnsafeRawBufferPointer?
    private let file: Int32
    private let lock = Lock()
    private var chunks: [Int: UnsafeMutableRawBufferPointer] = [:]  // under `lock`
    private var cutShort = false  // under `lock`

    /// Takes over memory from `UnsafeMutableRawBufferPointer.allocate`.
    init(taking memory: UnsafeMutableRawBufferPointer) {
        self.memory = UnsafeRawBufferPointer(memory)
        count = memory.count
        file = -1
    }

    convenience init(copying bytes: [UInt8]) {
        let copy = UnsafeMutableRawBufferPointer.allocate(byteCount: bytes.count, alignment: 8)
        bytes.withUnsafeBytes { copy.copyMemory(from: $0) }
        self.init(taking: copy)
    }

    /// Takes over `file` (open for reading, `size` bytes long when opened).
    init(file: Int32, size: Int) {
        memory = nil
        self.file = file
        count = size
    }

    deinit {
        if let memory { UnsafeMutableRawBufferPointer(mutating: memory).deallocate() }
        if file >= 0 { close(file) }
        chunks.values.forEach { $0.deallocate() }
    }

    /// Whether a chunk of the file read shorter than the file was when opened: it was cut
    /// short in place (hangwatch never does; it renames), so what was read may be zeros.
    var isCutShort: Bool {
        lock.lock()
        defer { lock.unlock() }
        return cutShort
    }

    /// The bytes of an index held in memory (one being stored); nil for one read from a file.
    var inMemory: UnsafeRawBufferPointer? { memory }

    /// `body` over the bytes in `range` (within `0..<count`).
    func withBytes<R>(_ range: Range<Int>, _ body: (UnsafeRawBufferPointer) -> R) -> R {
        precondition(range.lowerBound >= 0 && range.upperBound <= count, "index bytes out of range")
        if let memory { return body(UnsafeRawBufferPointer(rebasing: memory[range])) }
        let size = Self.chunkSize
        let first = range.lowerBound / size, last = range.isEmpty ? first : (range.upperBound - 1) / size
        lock.lock()
        defer { lock.unlock() }
        if first == last {
            let chunk = chunk(first)
            let offset = range.lowerBound - first * size
            return body(UnsafeRawBufferPointer(rebasing: chunk[offset..<(offset + range.count)]))
        }
        // Across chunks (a name, a header): copied together.
        var joined = [UInt8]()
        joined.reserveCapacity(range.count)
        for index in first...last {
            let chunk = chunk(index)
            let low = max(range.lowerBound, index * size) - index * size
            let high = min(range.upperBound, (index + 1) * size) - index * size
            joined.append(contentsOf: UnsafeRawBufferPointer(rebasing: chunk[low..<high]))
        }
        return joined.withUnsafeBytes(body)
    }

    func u32(_ at: Int) -> UInt32 { withBytes(at..<(at + 4)) { UInt32(littleEndian: $0.loadUnaligned(as: UInt32.self)) } }
    func u64(_ at: Int) -> UInt64 { withBytes(at..<(at + 8)) { UInt64(littleEndian: $0.loadUnaligned(as: UInt64.self)) } }

    /// Chunk `index` of the file, read on first use (call under `lock`); what the file no longer
    /// has reads as zero and marks the bytes cut short.
    private func chunk(_ index: Int) -> UnsafeMutableRawBufferPointer {
        if let chunk = chunks[index] { return chunk }
        if chunks.count >= Self.maximumChunks {
            chunks.values.forEach { $0.deallocate() }
            chunks.removeAll()
        }
        let size = Self.chunkSize
        let chunk = UnsafeMutableRawBufferPointer.allocate(byteCount: size, alignment: 8)
        chunk.initializeMemory(as: UInt8.self, repeating: 0)
        let wanted = min(size, count - index * size)
        var done = 0
        while done < wanted {
            let got = pread(file, chunk.baseAddress! + done, wanted - done, off_t(index * size + done))
            if got < 0 && errno == EINTR { continue }
            guard got > 0 else { break }
            done += got
        }
        if done < wanted { cutShort = true }
        chunks[index] = chunk
        return chunk
    }
}

/// One frame the index gives for an address (names raw, as in the file).
package struct IndexedFrame: Sendable, Equatable {
    package var function: String?
    package var file: String?
    package var line: Int
    package var column: Int
    package var isInlined: Bool
    /// Offset from the ELF symbol's start; only on the outermost frame.
    package var functionOffset: UInt64?

    init(function: String?, file: String?, line: Int, column: Int, isInlined: Bool, functionOffset: UInt64? = nil) {
        self.function = function
        self.file = file
        self.line = line
        self.column = column
        self.isInlined = isInlined
        self.functionOffset = functionOffset
    }
}
