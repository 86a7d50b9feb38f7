// What symbolicating a module's addresses gave, kept as one compact, position-independent
// table: lookup address → function, file, line and inline chain, for exactly the addresses a
// report asked about (its stacks), whatever the module's size. Any process that symbolicates
// the same file reads it back (SymbolCache.swift keeps them on disk) and asks the module itself
// only about addresses not in it. Answers are what `hws_module_symbolicate`
// (Sources/CHangwatchSymbols/hw_symbols.c) or a system library's symbol table gave; the file
// format is in docs/symbol-cache.md. A file read back is untrusted: every count, offset and
// chain is checked, and a bad file is refused, never trapped on.
import HangwatchPlatform
#if canImport(Glibc)
import Glibc
#endif

package struct SymbolIndex: Sendable {
    static let magic: [UInt8] = Array("HWSYMIX1".utf8)
    /// 2: the pieces are answers, every other address is unknown (1 indexed whole modules).
    static let formatVersion: UInt32 = 2
    package static let headerSize = 64
    static let symbolRecordSize = 20   // u64 start, u64 symbol start, u32 name
    static let lineRecordSize = 20     // u64 start, u32 file, i32 line, i32 column
    static let scopeSegmentRecordSize = 12  // u64 start, u32 scope
    static let scopeRecordSize = 24    // u32 function, u32 parent, u32 inlined, u32 call file, i32 call line, i32 call column
    static let none = UInt32.max
    /// A symbol piece's name for an answered address without a symbol: known, where `none` is unknown.
    static let known = UInt32.max - 1
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

    /// Frames for one link-time address, innermost inlined function first (empty: nothing is
    /// known there), or nil when the address is not among the index's answers. Names are raw
    /// (mangled) as in the ELF file and DWARF.
    package func answer(at address: UInt64) -> [IndexedFrame]? {
        guard let answered = lookup(address, count: symbolCount, at: symbolsAt, recordSize: Self.symbolRecordSize, valueAt: 16) else {
            return nil
        }
        let symbol = string(u32(answered + 16)).map { (name: $0, offset: address &- u64(answered + 8)) }
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

    /// The most lookups one index keeps: what a module's stacks needed, however large the module.
    package static let maximumAnswers = 1 << 16

    /// An index of `answers`: each link-time lookup address with the frames a direct lookup gave
    /// for it (raw names, innermost first; empty: nothing is known there). Every other address
    /// stays unknown (`answer(at:)` is nil there). nil when it would exceed `maximumBytes`.
    package static func build(answers: [UInt64: [IndexedFrame]], identity: String, namesOnly: Bool,
                              maximumBytes: Int = SymbolCache.defaultMaximumEntryBytes) -> SymbolIndex? {
        var tables = Tables()
        let addresses = answers.keys.sorted()
        for (position, address) in addresses.enumerated() {
            tables.add(address, Array(answers[address]!.prefix(maximumChain)))
            // The next address is unknown unless it is answered too.
            if address != UInt64.max && (position + 1 == addresses.count || addresses[position + 1] != address + 1) {
                tables.addGap(at: address + 1)
            }
        }
        return tables.finish(identity: identity, namesOnly: namesOnly, maximumBytes: maximumBytes)
    }

    /// The link-time addresses the index answers (one per answer), to add to it.
    package var answeredAddresses: [UInt64] {
        (0..<symbolCount).compactMap { position in
            let record = symbolsAt + position * Self.symbolRecordSize
            return u32(record + 16) == Self.none ? nil : u64(record)
        }
    }

    /// The four tables and the strings of an index being built, in address order.
    private struct Tables {
        var strings: [UInt8] = []
        var stringOffsets: [String: UInt32] = [:]
        var symbols: [(start: UInt64, symbolStart: UInt64, name: UInt32)] = []
        var lines: [(start: UInt64, file: UInt32, line: Int32, column: Int32)] = []
        var segments: [(start: UInt64, scope: UInt32)] = []
        var scopes: [(function: UInt32, parent: UInt32, inlined: UInt32, callFile: UInt32, callLine: Int32, callColumn: Int32)] = []

        mutating func intern(_ text: String?) -> UInt32 {
            guard let text else { return SymbolIndex.none }
            if let known = stringOffsets[text] { return known }
            let offset = UInt32(truncatingIfNeeded: strings.count)
            strings.append(contentsOf: text.utf8.prefix(BoundedText.maximumBytes))
            strings.append(0)
            stringOffsets[text] = offset
            return offset
        }

        /// One answer: its symbol piece always (`known` without a symbol, so the address counts as
        /// answered), its line piece and its chain of scopes, outermost first so that every
        /// parent comes before its child (the reader follows parents downwards only).
        mutating func add(_ address: UInt64, _ frames: [IndexedFrame]) {
            let outer = frames.last
            if let outer, let offset = outer.functionOffset, outer.function != nil {
                symbols.append((address, address &- offset, intern(outer.function)))
            } else {
                symbols.append((address, 0, SymbolIndex.known))
            }
            if let inner = frames.first, inner.file != nil || inner.line > 0 {
                // A row without a file is still a row (line known, file not): kept apart from a gap.
                let file = inner.file == nil ? SymbolIndex.none - 1 : intern(inner.file)
                lines.append((address, file, Int32(clamping: inner.line), Int32(clamping: inner.column)))
            } else {
                lines.append((address, SymbolIndex.none, 0, 0))
            }
            var parent = SymbolIndex.none
            for position in frames.indices.reversed() {
                let frame = frames[position], caller = position + 1 < frames.count ? frames[position + 1] : nil
                scopes.append((intern(frame.function), parent, frame.isInlined ? 1 : 0, intern(caller?.file),
                               Int32(clamping: caller?.line ?? 0), Int32(clamping: caller?.column ?? 0)))
                parent = UInt32(truncatingIfNeeded: scopes.count - 1)
            }
            segments.append((address, parent))
        }

        mutating func addGap(at address: UInt64) {
            symbols.append((address, 0, SymbolIndex.none))
            lines.append((address, SymbolIndex.none, 0, 0))
            segments.append((address, SymbolIndex.none))
        }

        func finish(identity: String, namesOnly: Bool, maximumBytes: Int) -> SymbolIndex? {
            let identityBytes = Array(identity.utf8)
            guard strings.count < Int(SymbolIndex.known), scopes.count < Int(SymbolIndex.known) else { return nil }
            let size = SymbolIndex.headerSize + identityBytes.count + symbols.count * SymbolIndex.symbolRecordSize
                + lines.count * SymbolIndex.lineRecordSize + segments.count * SymbolIndex.scopeSegmentRecordSize
                + scopes.count * SymbolIndex.scopeRecordSize + strings.count
            guard size <= maximumBytes else { return nil }
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
            for count in [symbols.count, lines.count, segments.count, scopes.count, strings.count, identityBytes.count] {
                put32(UInt32(truncatingIfNeeded: count))
            }
            put64(0)  // checksum, filled in below
            while at < SymbolIndex.headerSize { put32(0) }
            put(identityBytes)
            for symbol in symbols { put64(symbol.start); put64(symbol.symbolStart); put32(symbol.name) }
            for line in lines { put64(line.start); put32(line.file); put32(UInt32(bitPattern: line.line)); put32(UInt32(bitPattern: line.column)) }
            for segment in segments { put64(segment.start); put32(segment.scope) }
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
    /// The maximum number of chunks kept in memory (16 MiB); all are dropped when one more is needed.
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

/// How many of `count` ascending starts (`start(i)`) are at or below `address`: a binary search,
/// for the index's tables, a symbol table and a Breakpad file alike.
func countStarting(atOrBelow address: UInt64, count: Int, start: (Int) -> UInt64) -> Int {
    var low = 0, high = count
    while low < high {
        let middle = (low + high) / 2
        if start(middle) <= address { low = middle + 1 } else { high = middle }
    }
    return low
}
