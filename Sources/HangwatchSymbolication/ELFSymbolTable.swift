// Function names from an ELF file's .symtab (or .dynsym), without DWARF. Used for system
// libraries: their separate debug files (libc6-dbg) keep compressed DWARF whose decompression
// was most of a cold symbolication, while their symbol tables are plain and give the names
// (`__lll_lock_wait`, `pthread_mutex_lock`) a report needs. Bounded reads of untrusted files.
import HangwatchSnapshot
import HangwatchPlatform
#if canImport(Glibc)
import Glibc
#endif

package struct ELFSymbolTable {
    // A symbol's name stays bytes of `strings` until a lookup asks for it: a report names a
    // few of libc's 7,000 functions, and making a String of each was most of a cold report's
    // time in this type. Its end is found then too, reading no further than a name is kept
    // (BoundedText), so a string table without terminators costs no scan per symbol.
    private struct Symbol {
        var start: UInt64
        var size: UInt64
        var name: Int  // offset in `strings`
    }
    private let symbols: [Symbol]
    private let strings: [UInt8]

    /// The function symbol containing `address` (a link-time address) and the offset into it.
    package func lookup(_ address: UInt64) -> (name: String, offset: UInt64)? {
        let low = countStarting(atOrBelow: address, count: symbols.count) { symbols[$0].start }
        // Every symbol starting at or before `address`, nearest first: the first that spans it.
        var index = low - 1
        while index >= 0 && index >= low - Self.lookupWindow {
            let symbol = symbols[index]
            if address < symbol.start &+ symbol.size { return (name(of: symbol), address - symbol.start) }
            index -= 1
        }
        return nil
    }

    private func name(of symbol: Symbol) -> String {
        let limit = min(strings.count, symbol.name + BoundedText.maximumBytes + 1)
        let end = strings[symbol.name..<limit].firstIndex(of: 0) ?? limit
        return BoundedText.string(strings[symbol.name..<end])
    }

    /// The addresses this table answers for, sorted, when it was made for them alone
    /// (`init(path:near:)`); nil when it holds every function symbol.
    package let madeFor: [UInt64]?

    /// Whether `lookup(address)` gives what the whole table gives.
    package func answers(_ address: UInt64) -> Bool {
        guard let madeFor else { return true }
        let at = countStarting(atOrBelow: address, count: madeFor.count) { madeFor[$0] }
        return at > 0 && madeFor[at - 1] == address
    }

    /// Several names per address (aliases): the kept one is global before weak before local,
    /// then the first in the table.
    private struct Candidate { var start: UInt64; var size: UInt64; var rank: Int; var name: Int; var order: Int }

    /// nil when the file is not a readable 64-bit little-endian ELF file with function symbols.
    package init?(path: String) {
        guard let (entries, strings) = Self.read(path: path) else { return nil }
        let kept = Self.sortedSymbols(entries, strings)
        guard !kept.isEmpty else { return nil }
        self.init(symbols: kept, strings: strings, madeFor: nil)
    }

    private init(symbols: [Symbol], strings: [UInt8], madeFor: [UInt64]?) {
        self.symbols = symbols
        self.strings = strings
        self.madeFor = madeFor
    }

    /// Every function symbol of the table, sorted by start, one per start.
    private static func sortedSymbols(_ entries: [UInt8], _ strings: [UInt8]) -> [Symbol] {
        var candidates: [Candidate] = []
        forEachCandidate(entries, strings) { candidates.append($0) }
        // Sorting 16-byte keys, not the candidates: moving those was most of the sort's time.
        struct Key { var start: UInt64; var rankAndIndex: UInt64 }
        var keys = candidates.indices.map { Key(start: candidates[$0].start, rankAndIndex: UInt64(candidates[$0].rank) << 32 | UInt64($0)) }
        keys.sort { $0.start != $1.start ? $0.start < $1.start : $0.rankAndIndex < $1.rankAndIndex }
        var kept: [Symbol] = []
        kept.reserveCapacity(keys.count)
        for key in keys where kept.last?.start != key.start {
            let candidate = candidates[Int(key.rankAndIndex & 0xFFFF_FFFF)]
            kept.append(Symbol(start: candidate.start, size: candidate.size, name: candidate.name))
        }
        return kept
    }

    /// A table that answers `lookup` for `addresses` as the whole table does, made in one pass
    /// over the symbols without sorting them all: for each address, the symbols of the nearest
    /// starts at or below it that `lookup` looks at. A cold report asks a few addresses of libc;
    /// sorting its 7,000 functions for them was most of its time here. Any other address needs
    /// the whole table (`answers`). nil as `init(path:)`. Each symbol is offered to every
    /// address above it: for a few dozen addresses at most (`primeLimit`).
    package init?(path: String, near addresses: [UInt64]) {
        guard let (entries, strings) = Self.read(path: path) else { return nil }
        var targets: [UInt64] = []
        for address in addresses.sorted() where targets.last != address { targets.append(address) }
        // A table too large for its offers to stay few (a crafted file's): the whole one.
        guard targets.count <= Self.primeLimit, entries.count / 24 * targets.count <= Self.offerBudget else {
            let kept = Self.sortedSymbols(entries, strings)
            guard !kept.isEmpty else { return nil }
            self.init(symbols: kept, strings: strings, madeFor: nil)
            return
        }
        // Per address, its nearest distinct starts so far, nearest first, each with the
        // candidate kept for it.
        var nearest = [[Candidate]](repeating: [], count: targets.count)
        var anyCandidate = false
        Self.forEachCandidate(entries, strings) { candidate in
            anyCandidate = true
            // The addresses at or above its start (starts are never 0).
            for at in countStarting(atOrBelow: candidate.start - 1, count: targets.count, start: { targets[$0] })..<targets.count {
                Self.offer(candidate, to: &nearest[at])
            }
        }
        guard anyCandidate else { return nil }  // as `init(path:)`: no function symbols at all
        var kept: [Symbol] = []
        for candidate in nearest.joined().sorted(by: { $0.start < $1.start }) where kept.last?.start != candidate.start {
            kept.append(Symbol(start: candidate.start, size: candidate.size, name: candidate.name))
        }
        self.init(symbols: kept, strings: strings, madeFor: targets)
    }

    /// `candidate` (a start at or below the address) into an address's nearest starts: a start
    /// already there keeps the better-ranked candidate (the first in the table on a tie). A new
    /// one is added when the list has fewer entries than `lookup` examines, or when it is nearer
    /// than the farthest one.
    private static func offer(_ candidate: Candidate, to list: inout [Candidate]) {
        if list.count == lookupWindow && candidate.start < list[lookupWindow - 1].start { return }  // farther than all
        if let same = list.firstIndex(where: { $0.start == candidate.start }) {
            if (candidate.rank, candidate.order) < (list[same].rank, list[same].order) { list[same] = candidate }
            return
        }
        if list.count == lookupWindow {
            guard candidate.start > list[lookupWindow - 1].start else { return }
            list.removeLast()
        }
        let position = list.firstIndex { $0.start < candidate.start } ?? list.count
        list.insert(candidate, at: position)
    }

    /// How many of the nearest starts at or below an address `lookup` looks at.
    private static let lookupWindow = 8

    /// The most addresses `init(path:near:)` is for: past them, sorting the whole table costs less.
    package static let primeLimit = 64

    /// The most symbols × addresses `init(path:near:)` offers (libc: 7,000 × a few dozen).
    private static let offerBudget = 4_000_000

    /// Each function symbol of the table (in table order) that `lookup` may give.
    private static func forEachCandidate(_ entries: [UInt8], _ strings: [UInt8], _ body: (Candidate) -> Void) {
        entries.withUnsafeBytes { raw in
            strings.withUnsafeBufferPointer { names in
                for (order, at) in stride(from: 0, to: raw.count - raw.count % 24, by: 24).enumerated() {
                    let info = raw[at + 4]
                    let type = info & 0xF, binding = info >> 4
                    let sectionIndex = UInt16(littleEndian: raw.loadUnaligned(fromByteOffset: at + 6, as: UInt16.self))
                    let value = UInt64(littleEndian: raw.loadUnaligned(fromByteOffset: at + 8, as: UInt64.self))
                    let size = UInt64(littleEndian: raw.loadUnaligned(fromByteOffset: at + 16, as: UInt64.self))
                    guard type == 2 /* FUNC */ || type == 10 /* GNU_IFUNC */, sectionIndex != 0, value != 0, size > 0 else { continue }
                    let nameOffset = Int(UInt32(littleEndian: raw.loadUnaligned(fromByteOffset: at, as: UInt32.self)))
                    guard nameOffset < names.count, names[nameOffset] != 0 else { continue }
                    body(Candidate(start: value, size: size, rank: binding == 1 ? 0 : binding == 2 ? 1 : 2, name: nameOffset,
                                   order: order))
                }
            }
        }
    }

    /// The symbol table's entries and its string table; nil unless a readable 64-bit
    /// little-endian ELF file with an uncompressed .symtab (or .dynsym).
    private static func read(path: String) -> (entries: [UInt8], strings: [UInt8])? {
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        guard let file = RegularFile(fd: fd) else { return nil }
        func read(_ offset: UInt64, _ count: UInt64) -> [UInt8]? {
            // Symbol tables of real libraries are a few MB at most.
            count <= 64 << 20 ? file.bytes(at: offset, count: count) : nil
        }
        guard let header = read(0, 64), header[0] == 0x7F, header[1] == 0x45, header[2] == 0x4C, header[3] == 0x46,
              header[4] == 2 /* ELFCLASS64 */, header[5] == 1 /* little-endian */ else { return nil }
        let sectionOffset = Self.load(header, 0x28, UInt64.self)
        let entrySize = UInt64(Self.load(header, 0x3A, UInt16.self))
        let count = UInt64(Self.load(header, 0x3C, UInt16.self))
        guard entrySize >= 64, count > 0, let table = read(sectionOffset, entrySize * count) else { return nil }
        struct Section { var type: UInt32; var flags: UInt64; var offset: UInt64; var size: UInt64; var link: UInt32 }
        let sections = (0..<Int(count)).map { index -> Section in
            let at = index * Int(entrySize)
            return Section(type: Self.load(table, at + 4, UInt32.self), flags: Self.load(table, at + 8, UInt64.self),
                           offset: Self.load(table, at + 24, UInt64.self), size: Self.load(table, at + 32, UInt64.self),
                           link: Self.load(table, at + 40, UInt32.self))
        }
        let compressed: UInt64 = 0x800  // SHF_COMPRESSED
        guard let symtab = sections.first(where: { $0.type == 2 }) ?? sections.first(where: { $0.type == 11 }),
              symtab.flags & compressed == 0, Int(symtab.link) < sections.count,
              sections[Int(symtab.link)].flags & compressed == 0,
              let entries = read(symtab.offset, symtab.size - symtab.size % 24),
              let strings = read(sections[Int(symtab.link)].offset, sections[Int(symtab.link)].size) else { return nil }
        return (entries, strings)
    }

    private static func load<T: FixedWidthInteger>(_ bytes: [UInt8], _ offset: Int, _: T.Type) -> T {
        guard offset >= 0, offset + MemoryLayout<T>.size <= bytes.count else { return 0 }
        return bytes.withUnsafeBytes { T(littleEndian: $0.loadUnaligned(fromByteOffset: offset, as: T.self)) }
    }
}
