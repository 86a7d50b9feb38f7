// Symbolication against real binaries: this debug test executable, libc, and C programs
// compiled by gcc during the test.
import HangwatchSnapshot
import HangwatchPlatform
import HangwatchRemoteCapture
import HangwatchSymbolication
import CHangwatchSymbols
import Foundation
import HangwatchTestSupport
import Testing
#if canImport(Glibc)
import Glibc
import HangwatchStageTestSupport
#endif

@Suite(.ownThread) struct SymbolicatorTests {
    /// The sorted symbol table (hws_symbol_at in Sources/CHangwatchSymbols/hw_symbols.c) names
    /// the symbol libdwfl's dwfl_module_addrinfo names, at the same offset, around symbols of
    /// every kind: this test binary (Swift, locals and globals), the Swift runtime, libc, and an
    /// optimized C library with static functions — at starts, middles, last bytes, ends and the
    /// byte before each.
    @Test func theSortedSymbolTableChoosesWhatLibdwflChooses() throws {
        let directory = try makeTestDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let modules = currentProcessModules()
        var paths = [try buildOptimizedCLibrary(in: directory).path, try #require(modules.first).path]
        for name in ["libswiftCore.so", "libc.so.6", "libFoundationEssentials.so"] {
            if let module = modules.first(where: { $0.path.hasSuffix("/" + name) }) { paths.append(module.path) }
        }
        #expect(paths.count >= 4)
        for path in paths {
            let handle = try #require(hws_module_open(path, nil, nil, 0), "\(path)")
            defer { hws_module_close(handle) }
            var symbols: [(start: UInt64, size: UInt64)] = []
            _ = withUnsafeMutablePointer(to: &symbols) { list in
                hws_module_each_symbol(handle, { context, entry in
                    guard let context, let entry else { return 1 }
                    context.assumingMemoryBound(to: [(start: UInt64, size: UInt64)].self).pointee.append((entry.pointee.start, entry.pointee.size))
                    return 0
                }, list)
            }
            #expect(symbols.count > 20, "\(path)")
            var addresses: Set<UInt64> = []
            for index in stride(from: 0, to: symbols.count, by: max(1, symbols.count / 50)) {
                let (start, size) = symbols[index]
                addresses.formUnion([start, start &- 1, start &+ size / 2, start &+ max(size, 1) &- 1, start &+ size])
            }
            // Where the choice is made: symbols sharing a start (aliases of other bindings and
            // sizes), and symbols inside others.
            let starts = Dictionary(grouping: symbols, by: \.start).filter { $0.value.count > 1 }.keys.sorted()
            for start in stride(from: 0, to: starts.count, by: max(1, starts.count / 60)).map({ starts[$0] }) {
                addresses.formUnion([start, start + 1])
            }
            let sorted = symbols.filter { $0.size > 0 }.sorted { $0.start < $1.start }
            var nested = 0
            for (outer, inner) in zip(sorted, sorted.dropFirst()) where inner.start > outer.start && inner.start < outer.start + outer.size && nested < 40 {
                addresses.formUnion([inner.start, inner.start &+ inner.size])
                nested += 1
            }
            // How `other`'s answer at `address` differs from libdwfl's own (through `handle`); nil if not.
            func difference(at address: UInt64, of other: OpaquePointer, _ label: String) -> String? {
                var expectedOffset: UInt64 = 0, offset: UInt64 = 0
                let expected = hws_module_symbol(handle, address, &expectedOffset, 1).map { String(cString: $0) }
                let actual = hws_module_symbol(other, address, &offset, 0).map { String(cString: $0) }
                guard expected != actual || (expected != nil && expectedOffset != offset) else { return nil }
                return "0x\(String(address, radix: 16)): libdwfl \(expected ?? "none")+\(expectedOffset), \(label) \(actual ?? "none")+\(offset)"
            }
            let differing = addresses.sorted().compactMap { difference(at: $0, of: handle, "table") }
            #expect(differing.isEmpty, "\(path): \(differing.count) of \(addresses.count) differ: \(differing.prefix(5))")
            // The table answered most of them (the rest, between symbols, are libdwfl's).
            #expect(Int(hws_module_symbol_table_answers(handle)) > addresses.count / 2, "\(path)")

            // Primed (hws_module_prime_symbols, what a report does first): the same choices from
            // one pass over the table, the sorted table never built.
            let primed = try #require(hws_module_open(path, nil, nil, 0), "\(path)")
            defer { hws_module_close(primed) }
            let list = addresses.sorted()
            #expect(list.withUnsafeBufferPointer { hws_module_prime_symbols(primed, $0.baseAddress, $0.count) } == 0)
            let primedDiffering = list.compactMap { difference(at: $0, of: primed, "primed") }
            #expect(primedDiffering.isEmpty, "\(path): \(primedDiffering.count) of \(list.count) differ: \(primedDiffering.prefix(5))")
            #expect(Int(hws_module_primed_answers(primed)) > list.count / 2, "\(path)")
            #expect(hws_module_symbol_table_answers(primed) == 0, "\(path): the sorted table was built")
            // An address it was not told of still gets libdwfl's symbol (the table is built for it).
            if let (start, _) = symbols.first(where: { $0.size > 1 && !addresses.contains($0.start + 1) }) {
                #expect(difference(at: start + 1, of: primed, "not primed") == nil, "\(path)")
            }
        }
    }

    /// The inline chain from the unit's function index (hws_scope_path in
    /// Sources/CHangwatchSymbols/hw_symbols.c, one walk of a unit) is the one libdw's
    /// dwarf_getscopes and dwarf_getscopes_die give (two walks of the unit per address): every
    /// frame's function, file, line, column and inlined flag, at addresses through whole functions
    /// of an optimized C library (inlining at every level) and of this test binary. Where they
    /// differ — libdw leaves out the inlined frame Swift puts at a trap ("Swift runtime failure:
    /// arithmetic overflow") — binutils' `addr2line -i` shows the frames the index shows.
    @Test func theInlineChainIsLibdwsOwn() throws {
        let directory = try makeTestDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let library = try buildOptimizedCLibrary(in: directory).path
        let executable = try #require(currentProcessModules().first).path
        var inlinedSeen = 0
        for path in [library, executable] {
            let handle = try #require(hws_module_open(path, nil, nil, 0), "\(path)")
            defer { hws_module_close(handle) }
            let functions = try functions(of: path)
            #expect(functions.count > 20, "\(path)")
            var addresses: [UInt64] = []
            // A spread of functions, a spread of addresses through each: inlined code anywhere.
            // (The libdw side walks the unit twice an address: 2,000 functions of this binary
            // take about 10 s.)
            for (start, size) in stride(from: 0, to: functions.count, by: max(1, functions.count / 2000)).map({ functions[$0] }) {
                let step = max(1, size / 24)
                addresses.append(contentsOf: stride(from: start, to: start + size, by: Int(step)))
            }
            var differing: [(address: UInt64, index: [CopiedFrame])] = []
            var compared = 0
            for address in addresses {
                let (expected, actual) = (chain(handle, address, throughLibdw: true), chain(handle, address, throughLibdw: false))
                if describe(expected) != describe(actual) { differing.append((address, actual)) }
                inlinedSeen += expected.filter { $0.inlined }.count
                compared += 1
            }
            #expect(differing.count * 50 < compared, "\(path): \(differing.count) of \(compared) differ from libdw")
            // binutils' reading of those: each frame's file and line, innermost first.
            let sample = Array(differing.prefix(200))
            guard !sample.isEmpty else { continue }
            let printed = try runTool("/usr/bin/addr2line", ["-i", "-a", "-e", path] + sample.map { "0x" + String($0.address, radix: 16) })
            var binutils: [UInt64: [String]] = [:]
            var current: UInt64 = 0
            for line in printed.split(separator: "\n") {
                if line.hasPrefix("0x"), let address = UInt64(line.dropFirst(2), radix: 16) { current = address; continue }
                let location = String(line.split(separator: " (discriminator").first ?? line[...]).replacingOccurrences(of: ":?", with: ":0")
                binutils[current, default: []].append(location)
            }
            let disagreeing = sample.filter { entry in
                binutils[entry.address] != entry.index.map { "\($0.file ?? "??"):\($0.line)" }
            }
            #expect(disagreeing.isEmpty, "\(path): \(disagreeing.prefix(3).map { "0x\(String($0.address, radix: 16)) index \(describe($0.index)) binutils \(binutils[$0.address] ?? [])" })")
        }
        #expect(inlinedSeen > 100, "the compared addresses hold inlined frames")
    }

    /// A unit's lines, functions and scopes read straight from the file's bytes
    /// (Sources/CHangwatchSymbols/hw_unit_reader.c) give libdw's frames — function, file, line,
    /// column, inlined — at every compared address, and answer nearly all of them themselves:
    /// in this Swift test binary (DWARF 4, hundreds of units naming Clang modules) and in C
    /// libraries clang built optimized with DWARF 5 (line_strp and strx strings, addrx and
    /// rnglistx ranges) and DWARF 4, and unoptimized. gcc's output has .debug_aranges, where
    /// libdwfl finds units and lines itself: that file is left to libdw.
    @Test func theDirectReaderGivesLibdwsFrames() throws {
        let directory = try makeTestDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let sources = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Sources/CHangwatchSymbols").path
        var subjects: [(path: String, direct: Bool)] = [(try #require(currentProcessModules().first).path, true)]
        let builds = [("clang-v5", swiftToolchainClang(), ["-O2", "-gdwarf-5"], true),
                      ("clang-v4", swiftToolchainClang(), ["-O2", "-gdwarf-4"], true),
                      ("clang-O0", swiftToolchainClang(), ["-O0", "-gdwarf-5"], true),
                      ("gcc", "/usr/bin/gcc", ["-O2", "-gdwarf-5"], false)]
        for (name, compiler, flags, direct) in builds {
            let library = directory + "/libreader-\(name).so"
            try runTool(compiler, ["-shared", "-fPIC"] + flags + ["-I", sources + "/include", sources + "/hw_symbols.c",
                        sources + "/hw_unit_ranges.c", sources + "/hw_unit_reader.c", sources + "/hw_libdw.c", "-o", library])
            subjects.append((library, direct))
        }
        for (path, direct) in subjects {
            let handle = try #require(hws_module_open(path, nil, nil, 0), "\(path)")
            defer { hws_module_close(handle) }
            let functions = try functions(of: path)
            var addresses: [UInt64] = []
            for (start, size) in stride(from: 0, to: functions.count, by: max(1, functions.count / 4000)).map({ functions[$0] }) {
                addresses.append(contentsOf: stride(from: start, to: start + size, by: Int(max(1, size / 16))))
            }
            var differing: [String] = []
            var inlined = 0
            for address in addresses {
                let viaLibdw = describe(chain(handle, address, way: HWS_THROUGH_INDEX))
                let read = describe(chain(handle, address, way: HWS_DIRECTLY_OR_INDEX))
                if viaLibdw != read, differing.count < 5 { differing.append("0x\(String(address, radix: 16)): libdw \(viaLibdw) read \(read)") }
                inlined += read.filter { $0.hasSuffix(" inlined") }.count
            }
            #expect(differing.isEmpty, "\(path): \(differing)")
            let answered = Int(hws_module_direct_answers(handle))
            if direct {
                #expect(answered * 100 >= addresses.count * 99, "\(path): \(answered) of \(addresses.count) read directly")
                #expect(inlined > 0 || path.contains("O0"), "\(path): inlined frames compared")
            } else {
                #expect(answered == 0, "\(path): a file with .debug_aranges is libdw's")
            }
        }
    }

    private func describe(_ frames: [CopiedFrame]) -> [String] {
        frames.map { frame in
            "\(frame.function ?? "-") \(frame.file ?? "-"):\(frame.line):\(frame.column)" + (frame.inlined ? " inlined" : "")
        }
    }

    /// The compilation units' code ranges read from the unit DIEs (Sources/CHangwatchSymbols/
    /// hw_unit_ranges.c) are the ones libdw's dwarf_ranges gives, unit by unit, in the same
    /// order: in a Swift debug build (DWARF 4, .debug_ranges lists), in a C library gcc built
    /// with DWARF 5 (.debug_rnglists, .debug_addr) and with DWARF 4, each function in its own
    /// section, and in one built at -O0 (low and high pc).
    @Test func unitRangesReadFromTheUnitDIEsAreLibdwsOwn() throws {
        let directory = try makeTestDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let sources = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Sources").path
        var paths = [try #require(currentProcessModules().first).path]
        // clang (Swift's) and gcc write DWARF 5 unit lists differently: through rnglistx and
        // .debug_addr indexes, and with plain addresses.
        let compilers = [("gcc-v5", "/usr/bin/gcc", ["-O2", "-gdwarf-5", "-ffunction-sections"]),
                         ("gcc-v4", "/usr/bin/gcc", ["-O2", "-gdwarf-4", "-ffunction-sections"]),
                         ("gcc-contiguous", "/usr/bin/gcc", ["-O0", "-gdwarf-5"]),
                         ("clang-v5", swiftToolchainClang(), ["-O2", "-gdwarf-5", "-ffunction-sections"])]
        for (name, compiler, flags) in compilers {
            let library = directory + "/libunits-\(name).so"
            try runTool(compiler, ["-shared", "-fPIC"] + flags + ["-I", sources + "/CHangwatchSymbols/include",
                        sources + "/CHangwatchSymbols/hw_symbols.c", sources + "/CHangwatchSymbols/hw_unit_ranges.c",
                        "-o", library, "-ldw", "-lelf"])
            paths.append(library)
        }
        for path in paths {
            let handle = try #require(hws_module_open(path, nil, nil, 0), "\(path)")
            defer { hws_module_close(handle) }
            let libdw = unitRanges(handle, throughLibdw: true), own = unitRanges(handle, throughLibdw: false)
            #expect(libdw.count > 1, "\(path)")
            #expect(own == libdw, "\(path): \(own.count) ranges read, libdw \(libdw.count); first differing: \(zip(own, libdw).first { $0 != $1 }.map { "\($0)" } ?? "-")")
            // The fuzzer's entry (scripts/fuzz unit-ranges) reads the same sections packed.
            if path.hasSuffix(".so") {
                let packed = try packedSections(of: path, in: directory)
                #expect(packed.withUnsafeBufferPointer { hws_unit_ranges_packed($0.baseAddress, $0.count) } == libdw.count, "\(path)")
            }
        }
    }

    /// `path`'s .debug_info, .debug_abbrev, .debug_ranges, .debug_rnglists and .debug_addr as
    /// `hws_unit_ranges_packed` reads them (four u32 sizes, then the sections).
    private func packedSections(of path: String, in directory: String) throws -> [UInt8] {
        var parts: [[UInt8]] = []
        for name in [".debug_info", ".debug_abbrev", ".debug_ranges", ".debug_rnglists", ".debug_addr"] {
            let out = directory + "/section" + name
            // A section the file lacks is no file (and, depending on binutils, an error or a warning).
            _ = try? runTool("/usr/bin/objcopy", ["--dump-section", "\(name)=\(out)", path, directory + "/discarded"])
            parts.append(FileManager.default.contents(atPath: out).map { [UInt8]($0) } ?? [])
            try? FileManager.default.removeItem(atPath: out)
        }
        var bytes: [UInt8] = []
        for part in parts.prefix(4) { withUnsafeBytes(of: UInt32(part.count).littleEndian) { bytes += $0 } }
        return bytes + parts.joined()
    }

    /// A crafted file: bytes of the unit DIEs, abbreviations, range lists and address table of
    /// real libraries overwritten at random (400 files, fixed seeds) are read without a fault,
    /// an endless loop or an unbounded allocation: each gives ranges or declines (-1, libdw's
    /// turn), and symbolicating in it still returns.
    @Test func unitRangesOfACraftedFileAreBoundedOrDeclined() throws {
        let directory = try makeTestDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let sources = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Sources").path
        var generator = SeededGenerator(seed: 29)
        var declined = 0, read = 0
        for (name, compiler, version) in [("clang", swiftToolchainClang(), "-gdwarf-5"), ("gcc", "/usr/bin/gcc", "-gdwarf-4")] {
            let original = directory + "/lib\(name).so"
            try runTool(compiler, ["-shared", "-fPIC", "-O2", version, "-ffunction-sections", "-I", sources + "/CHangwatchSymbols/include",
                                   sources + "/CHangwatchSymbols/hw_unit_ranges.c", "-o", original])
            let bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: original)))
            // (offset, size) of the sections the reader reads, from readelf.
            let sections = try runTool("/usr/bin/readelf", ["-S", "-W", original]).split(separator: "\n").compactMap { line -> (Int, Int)? in
                let fields = line.split(separator: " ").map(String.init)
                guard let at = fields.firstIndex(where: { [".debug_info", ".debug_abbrev", ".debug_rnglists", ".debug_ranges", ".debug_addr"].contains($0) }),
                      fields.count > at + 4, let offset = Int(fields[at + 3], radix: 16), let size = Int(fields[at + 4], radix: 16) else { return nil }
                return (offset, min(size, 512))  // the unit DIEs and list heads are at the start
            }
            #expect(sections.count >= 3, "\(name)")
            for round in 0..<200 {
                var crafted = bytes
                for _ in 0..<(1 + round % 8) {
                    let (offset, size) = sections[Int(generator.next() % UInt64(sections.count))]
                    crafted[offset + Int(generator.next() % UInt64(size))] = UInt8(truncatingIfNeeded: generator.next())
                }
                let path = directory + "/crafted.so"
                try Data(crafted).write(to: URL(fileURLWithPath: path))
                guard let handle = hws_module_open(path, nil, nil, 0) else { continue }
                defer { hws_module_close(handle) }
                let count = hws_module_unit_ranges(handle, 0, nil, nil, nil, 0)
                if count < 0 { declined += 1 } else { read += 1 }
                #expect(count <= Int(HWS_MAX_UNIT_RANGES))
                var frames = [hws_frame](repeating: hws_frame(), count: 8)
                for address: UInt64 in [0x1000, 0x1100, 0x1200] {
                    _ = frames.withUnsafeMutableBufferPointer { hws_module_symbolicate(handle, address, $0.baseAddress, 8) }
                }
            }
        }
        #expect(declined > 0 && read > 0, "declined \(declined), read \(read)")
    }

    /// A system library's names come from its symbol table alone (ELFSymbolTable): of the
    /// names at one address the global one, else the weak one, else the local one, whatever
    /// their order in the table; an address past a function's end is no function's.
    @Test func aSymbolTableNamesAnAddressByItsStrongestName() throws {
        let directory = try makeTestDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let library = try aliasesLibrary(in: directory)
        let table = try #require(ELFSymbolTable(path: library))
        let symbols = try functions(of: library)
        let nm = try runTool("/usr/bin/nm", ["--defined-only", library])
        func address(of name: String) throws -> UInt64 {
            let line = try #require(nm.split(separator: "\n").first { $0.hasSuffix(" " + name) })
            return try #require(UInt64(line.split(separator: " ")[0], radix: 16))
        }
        #expect(table.lookup(try address(of: "local_only"))?.name == "global_name")
        #expect(table.lookup(try address(of: "local_then_weak") + 1)?.name == "weak_second")
        #expect(table.lookup(try address(of: "local_then_weak") + 1)?.offset == 1)
        #expect(table.lookup(try address(of: "alone"))?.name == "alone")
        let alone = try #require(symbols.first { $0.start == (try? address(of: "alone")) })
        #expect(table.lookup(alone.start + alone.size)?.name != "alone")
    }

    /// A table made for some addresses (`ELFSymbolTable(path:near:)`, what a report's priming
    /// makes for a system library) answers each of them as the whole table does — starts,
    /// middles, last bytes, ends and the byte before each function of libc and of a library of
    /// aliases, in groups of up to `primeLimit` — and says it answers no other address.
    @Test func aSymbolTableMadeForSomeAddressesAnswersAsTheWholeOne() throws {
        let directory = try makeTestDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var paths = [try aliasesLibrary(in: directory)]
        if let libc = currentProcessModules().first(where: { $0.path.hasSuffix("/libc.so.6") }) { paths.append(libc.path) }
        #expect(paths.count == 2)
        for path in paths {
            let whole = try #require(ELFSymbolTable(path: path), "\(path)")
            var addresses: [UInt64] = [0, 1]
            let symbols = try functions(of: path)
            for (start, size) in stride(from: 0, to: symbols.count, by: max(1, symbols.count / 300)).map({ symbols[$0] }) {
                addresses += [start &- 1, start, start + size / 2, start + max(size, 1) - 1, start + size]
            }
            addresses.shuffle()
            var differing: [String] = []
            for group in stride(from: 0, to: addresses.count, by: ELFSymbolTable.primeLimit).map({ addresses[$0..<min($0 + ELFSymbolTable.primeLimit, addresses.count)] }) {
                let made = try #require(ELFSymbolTable(path: path, near: Array(group)), "\(path)")
                for address in group {
                    #expect(made.answers(address))
                    let (expected, actual) = (whole.lookup(address), made.lookup(address))
                    if expected?.name != actual?.name || expected?.offset != actual?.offset {
                        differing.append("0x\(String(address, radix: 16)): whole \(expected.map { "\($0.name)+\($0.offset)" } ?? "none"), made \(actual.map { "\($0.name)+\($0.offset)" } ?? "none")")
                    }
                }
                if let other = addresses.first(where: { !group.contains($0) }) { #expect(!made.answers(other)) }
            }
            #expect(differing.isEmpty, "\(path): \(differing.count) of \(addresses.count) differ: \(differing.prefix(5))")
            #expect(whole.answers(12345))
        }
    }

    /// Past `primeLimit` addresses, or a table whose symbols × addresses pass the offer budget
    /// (a crafted file's size must not make the narrow table's work unbounded), the whole table
    /// is built instead (`madeFor` nil): a library of 70,000 functions asked 64 addresses, and
    /// 65 addresses of libc, answer as the whole table does.
    @Test func aTooLargeAskGetsTheWholeSymbolTable() throws {
        let directory = try makeTestDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var assembly = ".text\n"
        for index in 0..<70_000 {
            assembly += ".globl f\(index)\n.type f\(index),@function\nf\(index):\nnop\nret\n.size f\(index),2\n"
        }
        try assembly.write(toFile: directory + "/many.s", atomically: true, encoding: .utf8)
        let library = directory + "/libmany.so"
        try runTool("/usr/bin/gcc", ["-shared", "-nostdlib", "-o", library, directory + "/many.s"])
        var asks: [(path: String, addresses: [UInt64])] = []
        let many = try functions(of: library)
        #expect(many.count == 70_000)
        asks.append((library, stride(from: 0, to: many.count, by: max(1, many.count / 64)).prefix(64).map { many[$0].start + 1 }))
        if let libc = currentProcessModules().first(where: { $0.path.hasSuffix("/libc.so.6") }) {
            let symbols = try functions(of: libc.path, dynamic: true)  // libc keeps only its .dynsym
            #expect(symbols.count > 1000)
            asks.append((libc.path, stride(from: 0, to: symbols.count, by: max(1, symbols.count / 65)).prefix(65).map { symbols[$0].start }))
        }
        #expect(asks.count == 2 && asks[1].addresses.count == ELFSymbolTable.primeLimit + 1)
        for (path, addresses) in asks {
            let whole = try #require(ELFSymbolTable(path: path), "\(path)")
            let made = try #require(ELFSymbolTable(path: path, near: addresses), "\(path)")
            #expect(made.madeFor == nil, "\(path): the whole table")
            for address in addresses {
                #expect(made.lookup(address)?.name == whole.lookup(address)?.name, "\(path) 0x\(String(address, radix: 16))")
                #expect(made.lookup(address) != nil)
            }
        }
    }

    /// A shared library whose functions have several names at one address: a static one with
    /// a global and a weak alias, a static one with a weak alias, one alone.
    private func aliasesLibrary(in directory: String) throws -> String {
        let source = directory + "/aliases.c"
        try """
        static int local_only(int x) { return x * 3 + 1; }
        int global_name(int x) __attribute__((alias("local_only")));
        int weak_name(int x) __attribute__((weak, alias("local_only")));
        static int local_then_weak(int x) { return x * 5 + 2; }
        int weak_second(int x) __attribute__((weak, alias("local_then_weak")));
        static int alone(int x) { return x * 7 + 3; }
        int (*keep[])(int) = { local_only, local_then_weak, alone };
        """.write(toFile: source, atomically: true, encoding: .utf8)
        let library = directory + "/libaliases.so"
        _ = try runTool("/usr/bin/gcc", ["-O1", "-shared", "-fPIC", source, "-o", library])
        return library
    }

    /// The clang beside the Swift compiler that runs these tests.
    private func swiftToolchainClang() -> String {
        let swift = (try? runTool("/usr/bin/env", ["which", "swift"]))?.trimmingCharacters(in: .whitespacesAndNewlines) ?? ""
        let beside = URL(fileURLWithPath: swift).resolvingSymlinksInPath().deletingLastPathComponent().appendingPathComponent("clang").path
        return FileManager.default.isExecutableFile(atPath: beside) ? beside : "/opt/swift/usr/bin/clang"
    }

    private func unitRanges(_ handle: OpaquePointer, throughLibdw: Bool) -> [[UInt64]] {
        let count = hws_module_unit_ranges(handle, throughLibdw ? 1 : 0, nil, nil, nil, 0)
        guard count > 0 else { return [] }
        var lows = [UInt64](repeating: 0, count: count), highs = lows, units = lows
        _ = hws_module_unit_ranges(handle, throughLibdw ? 1 : 0, &lows, &highs, &units, count)
        return (0..<count).map { [lows[$0], highs[$0], units[$0]] }
    }

    /// A unit's line table too big to keep (past 524,288 rows) is looked up by running its line
    /// program again for each address: the same rows as the kept, sorted table gives. Here every
    /// unit of this test binary (Swift and C, no .debug_aranges) is made "too big" (8 rows).
    @Test func aLineTableTooBigToKeepGivesTheRowsOfAKeptOne() throws {
        let executable = try #require(currentProcessModules().first).path
        let kept = try #require(hws_module_open(executable, nil, nil, 0))
        let streamed = try #require(hws_module_open(executable, nil, nil, 0))
        defer { hws_module_close(kept); hws_module_close(streamed) }
        hws_module_set_unit_row_bound(streamed, 8)
        let functions = try functions(of: executable)
        var addresses: [UInt64] = []
        for (start, size) in stride(from: 0, to: functions.count, by: max(1, functions.count / 300)).map({ functions[$0] }) {
            addresses.append(contentsOf: [start, start + size / 2, start + size - 1])
        }
        var differing: [String] = []
        for address in addresses {
            let (expected, actual) = (describe(chain(kept, address, throughLibdw: false)), describe(chain(streamed, address, throughLibdw: false)))
            if expected != actual && differing.count < 5 { differing.append("0x\(String(address, radix: 16)): \(expected) vs \(actual)") }
        }
        #expect(differing.isEmpty, "\(differing)")
        #expect(hws_module_direct_answers(streamed) > UInt32(addresses.count / 2), "the direct reader answered them")
        #expect(addresses.contains { chain(streamed, $0, throughLibdw: false).first?.line ?? 0 > 0 }, "with lines")
    }

    /// The frames at `address` (their strings belong to `handle`).
    /// A frame's strings copied at once: a unit's file names are let go of when a later lookup
    /// reads past the unit reader's budget (Sources/CHangwatchSymbols/include/hw_symbols.h).
    private struct CopiedFrame {
        var function: String?
        var file: String?
        var line: Int32
        var column: Int32
        var inlined: Bool
    }

    private func chain(_ handle: OpaquePointer, _ address: UInt64, throughLibdw: Bool) -> [CopiedFrame] {
        chain(handle, address, way: throughLibdw ? HWS_THROUGH_LIBDW : HWS_DIRECTLY_OR_INDEX)
    }

    private func chain(_ handle: OpaquePointer, _ address: UInt64, way: Int) -> [CopiedFrame] {
        var frames = [hws_frame](repeating: hws_frame(), count: 32)
        let count = Int(frames.withUnsafeMutableBufferPointer {
            hws_module_symbolicate_scopes(handle, address, $0.baseAddress, 32, Int32(way))
        })
        return frames.prefix(count).map { frame in
            CopiedFrame(function: frame.function.map { String(cString: $0) }, file: frame.file.map { String(cString: $0) },
                        line: frame.line, column: frame.column, inlined: frame.inlined != 0)
        }
    }

    let symbolicator = Symbolicator()

    @Test func symbolicatesOwnFunctionsToFileAndLine() throws {
        let (captured, callerLine) = (symbolTestCaptureOwnStack(), #line)
        let modules = currentProcessModules()
        let executable = try #require(modules.first)
        #expect(!executable.buildID.isEmpty)

        let stacks = symbolicator.symbolicate(stack: [0] + captured.addresses, modules: modules).dropFirst()
        let frames = stacks.flatMap { $0 }
        let callee = try #require(frames.first { $0.function?.contains("symbolTestCaptureOwnStack") == true })
        #expect(callee.function?.hasPrefix("HangwatchStageTestSupport.symbolTestCaptureOwnStack()") == true)
        #expect(callee.file?.hasSuffix("/Tests/StageSupport/SymbolTestSupport.swift") == true)
        #expect(callee.line == captured.line)
        #expect(callee.modulePath == executable.path)
        #expect(callee.moduleOffset == callee.address - executable.base)
        #expect(callee.functionOffset.map { $0 > 0 } == true)

        let caller = try #require(frames.first { $0.function?.contains("symbolicatesOwnFunctionsToFileAndLine") == true })
        #expect(caller.file?.hasSuffix("SymbolicatorTests.swift") == true)
        #expect(caller.line == callerLine)
    }

    @Test func libcFunctionGetsItsName() throws {
        let address = UInt64(UInt(bitPattern: try #require(dlsym(UnsafeMutableRawPointer(bitPattern: 0), "getpid") as UnsafeMutableRawPointer?)))
        let modules = currentProcessModules()
        let frames = symbolicator.symbolicate(address: address, isReturnAddress: false, modules: modules)
        let frame = try #require(frames.last)
        #expect(frame.modulePath?.contains("libc.so") == true)
        #expect(frame.function?.contains("getpid") == true)
        #expect(frame.functionOffset == 0)
        #expect(frame.symbolsUnavailableReason == nil)
    }

    /// An ELF file can carry a symbol name of megabytes (here 1 MiB, in .symtab and in DWARF):
    /// what symbolication hands on is at most 4 KiB, marked as cut.
    @Test func hugeSymbolNamesAreCut() throws {
        let directory = try makeTestDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let huge = String(repeating: "x", count: 1 << 20)
        let source = directory + "/huge.c"
        try "__attribute__((noinline)) int huge(int x) __asm__(\"\(huge)\");\nint huge(int x) { return x + 1; }\nint main(void) { return huge(1); }\n"
            .write(toFile: source, atomically: true, encoding: .utf8)
        let executable = directory + "/huge"
        try runTool("/usr/bin/gcc", ["-O1", "-g", "-Wl,--build-id", "-o", executable, source])
        let listing = try runTool("/usr/bin/nm", [executable])
        let line = try #require(listing.split(separator: "\n").first { $0.hasSuffix(" " + huge) })
        let address = try #require(UInt64(line.prefix(16), radix: 16))
        let module = ModuleSnapshot(path: executable, base: 0, start: 0, end: 0x1000_0000,
                                    buildID: ELFBuildID.read(path: executable) ?? "")
        for symbolicator in [Symbolicator(), Symbolicator(debugDirectories: [], maximumOpenModules: 4, systemLibraryLines: false)] {
            let name = try #require(symbolicator.symbolicate(address: address, isReturnAddress: false, modules: [module]).last?.function)
            #expect(name.utf8.count <= BoundedText.maximumBytes && name.hasSuffix("…") && name.hasPrefix("xxxx"), "\(name.utf8.count) bytes")
        }
    }

    @Test func addressOutsideEveryModuleKeepsOnlyTheAddress() {
        let frames = symbolicator.symbolicate(address: 0x10, isReturnAddress: true, modules: currentProcessModules())
        #expect(frames == [SymbolicatedFrame(address: 0x10)])
    }

    @Test func buildIDMismatchIsReportedAndNotSymbolicated() throws {
        var modules = currentProcessModules()
        let real = modules[0]
        modules[0].buildID = String(repeating: "ab", count: 20)
        let returnAddress = try #require(symbolTestCaptureOwnStack().addresses.first { real.start <= $0 && $0 < real.end })

        let frames = symbolicator.symbolicate(address: returnAddress, isReturnAddress: true, modules: modules)
        #expect(frames.count == 1)
        let frame = try #require(frames.first)
        #expect(frame.function == nil)
        #expect(frame.file == nil)
        #expect(frame.modulePath == real.path)
        #expect(frame.moduleOffset == returnAddress - real.base)
        #expect(frame.symbolsUnavailableReason?.contains("mismatched") == true)
        #expect(symbolicator.resolution(of: modules[0]) == .mismatched(expected: modules[0].buildID, found: real.buildID))
        // The same module with its true build-id still symbolicates.
        let good = symbolicator.symbolicate(address: returnAddress, isReturnAddress: true, modules: [real])
        #expect(good.last?.function != nil)
    }

    @Test func missingModuleFileKeepsModuleAndOffset() throws {
        let module = ModuleSnapshot(path: "/nonexistent/hangwatch/libgone.so", base: 0x7000_0000,
                                    start: 0x7000_0000, end: 0x7001_0000, buildID: "0123456789abcdef")
        let frames = symbolicator.symbolicate(address: 0x7000_1234, isReturnAddress: false, modules: [module])
        #expect(frames == [SymbolicatedFrame(
            address: 0x7000_1234, modulePath: module.path, moduleOffset: 0x1234,
            symbolsUnavailableReason: ModuleResolution.missing(path: module.path).unavailableReason)])
    }

    @Test func hostileBuildIDNeverBecomesAPath() {
        let module = ModuleSnapshot(path: "/nonexistent/x", base: 0, start: 0, end: 0x1000, buildID: "../../../etc/passwd")
        #expect(symbolicator.resolution(of: module) == .missing(path: "/nonexistent/x"))
    }

    @Test func inlinedFramesInnermostFirstLikeEuAddr2line() throws {
        let program = try InlineProgram()
        defer { try? FileManager.default.removeItem(atPath: program.directory) }
        let outer = try program.symbol("hw_outer")
        let module = program.module()
        #expect(!module.buildID.isEmpty)

        // Find the instructions of hw_outer that belong to the inlined leaf (the call to hw_sink).
        var inlinedAt: (address: UInt64, frames: [SymbolicatedFrame])?
        for address in outer.address..<(outer.address + outer.size) {
            let frames = symbolicator.symbolicate(address: address, isReturnAddress: false, modules: [module])
            if frames.count == 2 {
                inlinedAt = (address, frames)
                break
            }
        }
        let (address, frames) = try #require(inlinedAt)
        #expect(frames[0].function == "hw_inlined_leaf")
        #expect(frames[0].isInlined)
        #expect(frames[0].functionOffset == nil)
        #expect(frames[0].file == program.sourcePath)
        #expect(frames[0].line == InlineProgram.leafLine)
        #expect(frames[1].function == "hw_outer")
        #expect(!frames[1].isInlined)
        #expect(frames[1].file == program.sourcePath)
        #expect(frames[1].line == InlineProgram.callLine)
        #expect(frames[1].functionOffset == address - outer.address)

        // Cross-check with elfutils' own tool on the same address.
        let reference = try runTool("/usr/bin/eu-addr2line", ["-i", "-f", "-e", program.executable, "0x" + String(address, radix: 16)])
            .split(separator: "\n").map(String.init)
        #expect(reference.count == 4)
        if reference.count == 4 {
            #expect(reference[0] == "hw_inlined_leaf inlined at \(program.sourcePath):\(InlineProgram.callLine):\(frames[1].column ?? 0) in hw_outer"
                    || reference[0].hasPrefix("hw_inlined_leaf"))
            #expect(reference[1].hasPrefix("\(program.sourcePath):\(InlineProgram.leafLine)"))
            #expect(reference[2] == "hw_outer")
            #expect(reference[3].hasPrefix("\(program.sourcePath):\(InlineProgram.callLine)"))
        }
    }

    @Test func returnAddressIsLookedUpAtTheCallInstruction() throws {
        let program = try InlineProgram()
        defer { try? FileManager.default.removeItem(atPath: program.directory) }
        let main = try program.symbol("main")
        let module = program.module()
        // In main, the instruction after `call hw_outer` belongs to main's line; as a return
        // address it must still resolve to the call (line 8, where main is).
        var sawReturnIntoMain = false
        for address in (main.address + 1)..<(main.address + main.size) {
            let asReturn = symbolicator.symbolicate(address: address, isReturnAddress: true, modules: [module])
            let asPC = symbolicator.symbolicate(address: address - 1, isReturnAddress: false, modules: [module])
            #expect(asReturn.map(\.line) == asPC.map(\.line))
            #expect(asReturn.last?.functionOffset == asPC.last?.functionOffset.map { $0 + 1 })
            sawReturnIntoMain = sawReturnIntoMain || asReturn.last?.function == "main"
        }
        #expect(sawReturnIntoMain)
    }

    @Test func separateDebugFileFoundByBuildID() throws {
        let program = try InlineProgram()
        defer { try? FileManager.default.removeItem(atPath: program.directory) }
        let buildID = try #require(ELFBuildID.read(path: program.executable))
        let outer = try program.symbol("hw_outer")
        let debugRoot = program.directory + "/debug"
        let debugDirectory = "\(debugRoot)/.build-id/\(buildID.prefix(2))"
        try FileManager.default.createDirectory(atPath: debugDirectory, withIntermediateDirectories: true)
        let debugFile = "\(debugDirectory)/\(buildID.dropFirst(2)).debug"
        try runTool("/usr/bin/objcopy", ["--only-keep-debug", program.executable, debugFile])
        let stripped = program.directory + "/inline_test.stripped"
        try runTool("/usr/bin/strip", ["-o", stripped, program.executable])
        #expect(ELFBuildID.read(path: stripped) == buildID)

        let symbolicator = Symbolicator(debugDirectories: [debugRoot])
        // Stripped file at the path, debug file found through elfutils' build-id search.
        let strippedFrames = symbolicator.symbolicate(address: outer.address, isReturnAddress: false,
                                                      modules: [program.module(path: stripped)])
        #expect(strippedFrames.last?.function == "hw_outer")
        #expect(strippedFrames.last?.file == program.sourcePath)

        // The file at the path is another program: the build-id debug file is used instead.
        let other = program.module(buildID: buildID, path: "/bin/true")
        #expect(symbolicator.resolution(of: other) == .debugFile(path: debugFile))
        let frames = symbolicator.symbolicate(address: outer.address, isReturnAddress: false, modules: [other])
        #expect(frames.last?.function == "hw_outer")
        #expect(frames.last?.modulePath == "/bin/true")
        #expect(frames.last?.symbolsUnavailableReason == nil)
    }

    @Test func demanglesSwiftAndCxxAndLeavesCAlone() {
        #expect(Demangler.demangle("$sSi1poiyS2i_SitFZ") == "static Swift.Int.+ infix(Swift.Int, Swift.Int) -> Swift.Int")
        #expect(Demangler.demangle("_ZN3foo3barEi") == "foo::bar(int)")
        #expect(Demangler.demangle("getpid") == "getpid")
        #expect(Demangler.demangle("$sNotReallyMangled") == "$sNotReallyMangled")
    }

    @Test func libdwDoesNotExportUnwindSymbols() throws {
        // Linking libdw must not take over _Unwind_* (docs/platform-facts.md fact 3): still libgcc_s.
        let raise = try #require(dlsym(UnsafeMutableRawPointer(bitPattern: 0), "_Unwind_RaiseException") as UnsafeMutableRawPointer?)
        let address = UInt64(UInt(bitPattern: raise))
        let owner = currentProcessModules().first { $0.start <= address && address < $0.end }
        #expect(owner?.path.contains("libgcc_s") == true)
        // libdw is loaded by the first module read through it (hw_libdw.c), whichever test runs first.
        let executable = try #require(currentProcessModules().first)
        _ = Symbolicator(debugDirectories: []).symbolicate(address: executable.start, isReturnAddress: false, modules: [executable])
        #expect(currentProcessModules().contains { $0.path.contains("libdw") })
    }
}
