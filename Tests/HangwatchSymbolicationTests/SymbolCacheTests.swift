// The symbol index and its on-disk cache against real modules: every address of an optimized C
// library built from this package's own C (inline chains, line tables) answered as libdw
// answers it, Swift frames checked against binutils' addr2line, symbol-only libraries, and a
// cache directory treated as hostile (truncated, crafted, swapped, linked, another user's).
// A symbolicator stores its answers when a report primes its lookups, or when asked
// (`storeAnswers`): the tests ask.
import HangwatchSnapshot
import HangwatchPlatform
import HangwatchSymbolication
import Foundation
import HangwatchTestSupport
import Testing
#if canImport(Glibc)
import Glibc
import HangwatchStageTestSupport
#endif

/// A shared library of real, optimized C with inlining: this package's symbolication and
/// ptrace shims compiled with gcc -O2 -g.
func buildOptimizedCLibrary(in directory: String) throws -> (path: String, module: ModuleSnapshot) {
    let sources = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Sources").path
    let library = directory + "/libhwsample.so"
    try runTool("/usr/bin/gcc", ["-O2", "-g", "-shared", "-fPIC", "-Wl,--build-id", "-I", sources + "/CHangwatchSymbols/include",
                                 sources + "/CHangwatchSymbols/hw_symbols.c", sources + "/CHangwatchSymbols/hw_unit_ranges.c",
                                 "-o", library, "-ldw", "-lelf"])
    return (library, ModuleSnapshot(path: library, base: 0, start: 0, end: 0x1000_0000, buildID: ELFBuildID.read(path: library) ?? ""))
}

/// (start, size) of every defined function of `path`, from `nm -S`.
func functions(of path: String, dynamic: Bool = false) throws -> [(start: UInt64, size: UInt64)] {
    try runTool("/usr/bin/nm", (dynamic ? ["-D"] : []) + ["-S", "--defined-only", path]).split(separator: "\n").compactMap { line in
        let fields = line.split(separator: " ")
        guard fields.count == 4, "tTwWiI".contains(fields[2]), let start = UInt64(fields[0], radix: 16),
              let size = UInt64(fields[1], radix: 16), size > 0 else { return nil }
        return (start, size)
    }
}

/// Addresses where the two symbolicators disagree (at most `limit` described).
private func disagreements(_ addresses: [UInt64], module: ModuleSnapshot, _ direct: Symbolicator, _ indexed: Symbolicator,
                           limit: Int = 5) -> [String] {
    var found: [String] = []
    for address in addresses {
        for isReturn in [false, true] {
            let expected = direct.symbolicate(address: address, isReturnAddress: isReturn, modules: [module])
            let actual = indexed.symbolicate(address: address, isReturnAddress: isReturn, modules: [module])
            if expected != actual && found.count < limit {
                found.append("0x\(String(address, radix: 16)) return=\(isReturn): libdw \(expected) index \(actual)")
            }
        }
    }
    return found
}

@Suite(.ownThread) struct SymbolCacheTests {
    @Test func everyAddressOfAnOptimizedCLibraryGetsLibdwsFrames() throws {
        let directory = try makeTestDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let (library, module) = try buildOptimizedCLibrary(in: directory)
        let functions = try functions(of: library)
        #expect(functions.count > 10)
        let addresses = functions.flatMap { $0.start..<($0.start + $0.size) }
        let cache = SymbolCache(path: directory + "/cache")
        let direct = Symbolicator(debugDirectories: [])
        let indexed = Symbolicator(debugDirectories: [], cache: cache)
        #expect(disagreements(addresses, module: module, direct, indexed) == [])
        // Inline chains are part of it: some address has one.
        #expect(addresses.contains { indexed.symbolicate(address: $0, isReturnAddress: false, modules: [module]).count > 1 })
        // And a fresh symbolicator reading the stored answers answers the same, without opening the library.
        indexed.storeAnswers()
        let reread = Symbolicator(debugDirectories: [], cache: cache)
        #expect(disagreements(addresses.filter { $0 % 7 == 0 }, module: module, direct, reread) == [])
        #expect(reread.modulesOpened == 0)
    }

    /// Swift output has no .debug_aranges: the index's frames (inline chains included) are
    /// checked against binutils' addr2line, an independent DWARF reader.
    @Test func swiftFramesMatchBinutilsAddr2line() throws {
        let directory = try makeTestDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let executable = try #require(currentProcessModules().first)
        let indexed = Symbolicator(cache: SymbolCache(path: directory + "/cache"))
        let all = try functions(of: executable.path)
        var sample: [UInt64] = []
        for index in stride(from: 0, to: all.count, by: max(1, all.count / 40)) { sample.append(all[index].start + all[index].size / 2) }
        // -a: each address's frames follow a line with the address; then function and
        // file:line for each frame, innermost first.
        let output = try runTool("/usr/bin/addr2line", ["-a", "-i", "-f", "-e", executable.path] + sample.map { "0x" + String($0, radix: 16) })
        var groups: [[String]] = []
        for line in output.split(separator: "\n").map(String.init) {
            if line.hasPrefix("0x") && line.count == 18 { groups.append([]) } else if !groups.isEmpty { groups[groups.count - 1].append(line) }
        }
        #expect(groups.count == sample.count)
        var compared = 0
        for (address, group) in zip(sample, groups) {
            let frames = indexed.symbolicate(address: address &+ executable.base, isReturnAddress: false, modules: [executable])
            let locations = stride(from: 1, to: group.count, by: 2).map { group[$0] }
            guard !locations.allSatisfy({ $0.hasPrefix("??") }) else { continue }
            #expect(frames.count == locations.count, "0x\(String(address, radix: 16)): \(frames) vs \(group)")
            for (frame, location) in zip(frames, locations) {
                let plain = location.components(separatedBy: " (discriminator").first ?? location
                let ours = "\(frame.file ?? "??"):\(frame.line.map(String.init) ?? "?")"
                // addr2line joins relative names to the unit's directory; libdw keeps them as recorded.
                #expect(plain == ours || plain.hasSuffix("/" + ours) || (plain.hasPrefix("??") && frame.file == nil),
                        "0x\(String(address, radix: 16)): \(plain) vs \(ours)")
            }
            compared += 1
        }
        #expect(compared >= sample.count / 2)
    }

    /// Modules with symbol tables only (the Swift runtime as shipped) and system libraries read
    /// by name only: the same names at the same offsets.
    @Test func symbolTableOnlyModulesGetTheSameNames() throws {
        let directory = try makeTestDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let modules = currentProcessModules()
        let direct = Symbolicator()
        let indexed = Symbolicator(cache: SymbolCache(path: directory + "/cache"))
        var checked = 0
        for name in ["libswiftCore.so", "libc.so.6", "libdispatch.so"] {
            guard let module = modules.first(where: { $0.path.hasSuffix("/" + name) }) else { continue }
            // Code addresses, as stacks hold: every exported function's start, and 1,500 random
            // bytes inside random functions of its symbol table. (Elsewhere — data symbols that
            // overlap with other bindings, labels in the ELF header — libdwfl's choice depends on
            // the table's order, which the index does not keep: docs/symbol-cache.md.)
            var generator = SystemRandomNumberGenerator()
            let code = try functions(of: module.path) + functions(of: module.path, dynamic: true)
            let addresses = (0..<1500).map { _ -> UInt64 in
                let function = code[Int.random(in: 0..<code.count, using: &generator)]
                return module.base &+ function.start &+ UInt64.random(in: 0..<function.size, using: &generator)
            } + (try functions(of: module.path, dynamic: true)).prefix(400).map { $0.start &+ module.base }
            #expect(disagreements(addresses, module: module, direct, indexed) == [], "\(name)")
            indexed.storeAnswers()
            let reread = Symbolicator(cache: SymbolCache(path: directory + "/cache"))
            #expect(disagreements(addresses, module: module, direct, reread) == [], "\(name), read back")
            checked += 1
        }
        #expect(checked >= 2)
    }

    @Test func aStoredIndexIsReadBackNotRebuilt() throws {
        let directory = try makeTestDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let (library, module) = try buildOptimizedCLibrary(in: directory)
        let address = try #require(functions(of: library).first).start
        let cachePath = directory + "/cache"
        let first = Symbolicator(debugDirectories: [], cache: SymbolCache(path: cachePath))
        let expected = first.symbolicate(address: address, isReturnAddress: false, modules: [module])
        first.storeAnswers()
        let stored = try #require(try FileManager.default.contentsOfDirectory(atPath: cachePath).first { $0.hasSuffix(".hwsym") })
        var before = stat()
        stat(cachePath + "/" + stored, &before)
        #expect(before.st_mode & 0o777 == 0o600)
        var directoryInfo = stat()
        stat(cachePath, &directoryInfo)
        #expect(directoryInfo.st_mode & 0o777 == 0o700)
        usleep(20_000)
        let second = Symbolicator(debugDirectories: [], cache: SymbolCache(path: cachePath))
        #expect(second.symbolicate(address: address, isReturnAddress: false, modules: [module]) == expected)
        var after = stat()
        stat(cachePath + "/" + stored, &after)
        #expect(after.st_ino == before.st_ino, "the entry was rewritten, not read")
        #expect(after.st_mtim.tv_sec * 1_000_000_000 + after.st_mtim.tv_nsec > before.st_mtim.tv_sec * 1_000_000_000 + before.st_mtim.tv_nsec,
                "a hit marks the entry used")
    }

    /// A report's lookups (`prime`) are answered and stored at once, on the first sighting; a
    /// later report of the same addresses opens nothing, one with new addresses opens the module
    /// for those alone and adds them; the entry grows with the addresses asked, not the module.
    /// A sighting mark an earlier version left goes once it is 30 days old.
    @Test func aReportsAnswersAreStoredAndOnlyNewAddressesOpenTheModule() throws {
        let directory = try makeTestDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let (library, module) = try buildOptimizedCLibrary(in: directory)
        let all = try functions(of: library).map(\.start)
        let (first, later) = (Array(all.prefix(10)), Array(all.dropFirst(10).prefix(10)))
        let direct = Symbolicator(debugDirectories: [])
        let cachePath = directory + "/cache"
        func entries() -> [String] { ((try? FileManager.default.contentsOfDirectory(atPath: cachePath)) ?? []).filter { $0.hasSuffix(".hwsym") } }
        func report(_ addresses: [UInt64]) -> Symbolicator {
            let symbolicator = Symbolicator(debugDirectories: [], cache: SymbolCache(path: cachePath))
            symbolicator.prime(addresses.map { ($0, true) }, modules: [module])
            for address in addresses {
                #expect(symbolicator.symbolicate(address: address, isReturnAddress: true, modules: [module])
                        == direct.symbolicate(address: address, isReturnAddress: true, modules: [module]))
            }
            return symbolicator
        }

        #expect(report(first).modulesOpened == 1)
        let stored = try #require(entries().first)
        var info = stat()
        #expect(stat(cachePath + "/" + stored, &info) == 0 && info.st_mode & 0o777 == 0o600)
        let firstSize = info.st_size
        #expect(report(first).modulesOpened == 0, "every address was answered from the entry")
        #expect(report(first + later).modulesOpened == 1)
        #expect(report(first + later).modulesOpened == 0)
        #expect(stat(cachePath + "/" + stored, &info) == 0 && info.st_size > firstSize && entries() == [stored])
        // Of the order of what was asked: 20 return addresses, not the library's thousands of bytes.
        #expect(info.st_size < 8 << 10, "\(info.st_size) bytes")

        // An earlier version's mark of a module never seen again goes after 30 days, at the next store.
        let mark = cachePath + "/0123456789abcdef-0123456789abcdef.hwseen"
        try Data("HWSEEN1\nhangwatch-symbols 1\n".utf8).write(to: URL(fileURLWithPath: mark))
        chmod(mark, 0o600)
        var old = [timespec(tv_sec: time(nil) - 31 * 24 * 3600, tv_nsec: 0), timespec(tv_sec: time(nil) - 31 * 24 * 3600, tv_nsec: 0)]
        #expect(utimensat(AT_FDCWD, mark, &old, 0) == 0)
        let copy = directory + "/copy.so"
        try FileManager.default.copyItem(atPath: library, toPath: copy)
        let copyModule = ModuleSnapshot(path: copy, base: 0, start: 0, end: 0x1000_0000, buildID: module.buildID)
        Symbolicator(debugDirectories: [], cache: SymbolCache(path: cachePath)).prime([(first[0], false)], modules: [copyModule])
        #expect(!FileManager.default.fileExists(atPath: mark), "an old mark is pruned")
    }

    /// Whatever sits under an entry's name — cut short, bit-flipped, another module's index,
    /// a header claiming huge tables, a link, a FIFO — is refused (never followed, never
    /// blocking, never trapping). An index of ours (its header says so) is rebuilt in its
    /// place; what has no index header (a link, a FIFO, an empty file) is not ours to remove
    /// and stays as it was.
    @Test(arguments: ["truncated", "flipped-header", "other-module", "huge-counts", "symlink", "fifo", "empty"])
    func aHostileEntryIsRefusedAndRebuilt(_ damage: String) throws {
        let directory = try makeTestDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let (library, module) = try buildOptimizedCLibrary(in: directory)
        let addresses = try functions(of: library).prefix(30).map { $0.start + 3 }
        let cachePath = directory + "/cache"
        let direct = Symbolicator(debugDirectories: [])
        let storing = Symbolicator(debugDirectories: [], cache: SymbolCache(path: cachePath))
        _ = disagreements(addresses, module: module, direct, storing)
        storing.storeAnswers()
        let name = try #require(try FileManager.default.contentsOfDirectory(atPath: cachePath).first { $0.hasSuffix(".hwsym") })
        let entry = cachePath + "/" + name
        var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: entry)))
        let outside = directory + "/outside"
        switch damage {
        case "truncated": bytes = Array(bytes.prefix(bytes.count / 2))
        case "flipped-header": bytes[21] ^= 0x5A
        case "huge-counts": for offset in 16..<36 { bytes[offset] = 0xFF }
        case "empty": bytes = []
        case "other-module":
            // A well-formed index of another file, under this file's name.
            let other = try InlineProgram()
            defer { try? FileManager.default.removeItem(atPath: other.directory) }
            let otherCache = directory + "/other-cache"
            Symbolicator(debugDirectories: [], cache: SymbolCache(path: otherCache))
                .prime([(try other.symbol("main").address, false)], modules: [other.module()])
            let otherName = try #require(try FileManager.default.contentsOfDirectory(atPath: otherCache).first { $0.hasSuffix(".hwsym") })
            bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: otherCache + "/" + otherName)))
        default: break
        }
        try FileManager.default.removeItem(atPath: entry)
        switch damage {
        case "symlink":
            try Data(bytes).write(to: URL(fileURLWithPath: outside))
            #expect(symlink(outside, entry) == 0)
        case "fifo": #expect(mkfifo(entry, 0o600) == 0)
        default: try Data(bytes).write(to: URL(fileURLWithPath: entry))
        }
        let indexed = Symbolicator(debugDirectories: [], cache: SymbolCache(path: cachePath))
        #expect(disagreements(addresses, module: module, direct, indexed) == [], "\(damage)")
        indexed.storeAnswers()
        var info = stat()
        #expect(lstat(entry, &info) == 0)
        switch damage {
        case "symlink": #expect(info.st_mode & S_IFMT == S_IFLNK, "not ours: left in place")
        case "fifo": #expect(info.st_mode & S_IFMT == S_IFIFO, "not ours: left in place")
        case "empty": #expect(info.st_mode & S_IFMT == S_IFREG && info.st_size == 0, "not ours: left in place")
        default: #expect(info.st_mode & S_IFMT == S_IFREG && info.st_size > 0, "ours: a sound index again")
        }
        let reread = Symbolicator(debugDirectories: [], cache: SymbolCache(path: cachePath))
        #expect(disagreements(addresses, module: module, direct, reread) == [])
        #expect(reread.modulesOpened == (["symlink", "fifo", "empty"].contains(damage) ? 1 : 0), "read back: \(damage)")
        if damage == "symlink" {
            #expect(try Data(contentsOf: URL(fileURLWithPath: outside)) == Data(bytes), "the link's target was left alone")
        }
    }

    /// The tables are not checksummed (a lookup reads a few pages of a mapped file): random
    /// bytes in them can misname a frame but never make a lookup read outside the file, loop
    /// or trap. 200 scrambled copies, every lookup answered.
    @Test func scrambledTablesNeverTrapALookup() throws {
        let directory = try makeTestDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let (library, module) = try buildOptimizedCLibrary(in: directory)
        let addresses = try functions(of: library).flatMap { [$0.start, $0.start + $0.size / 2, $0.start + $0.size - 1] }
        let cachePath = directory + "/cache"
        Symbolicator(debugDirectories: [], cache: SymbolCache(path: cachePath)).prime(addresses.map { ($0, true) }, modules: [module])
        let name = try #require(try FileManager.default.contentsOfDirectory(atPath: cachePath).first { $0.hasSuffix(".hwsym") })
        let original = [UInt8](try Data(contentsOf: URL(fileURLWithPath: cachePath + "/" + name)))
        // Past the header and identity: the tables and strings.
        let tablesAt = 64 + Int(original[36]) + Int(original[37]) << 8
        var generator = SystemRandomNumberGenerator()
        var answered = 0
        for _ in 0..<200 {
            var bytes = original
            for _ in 0..<Int.random(in: 1...64, using: &generator) {
                bytes[Int.random(in: tablesAt..<bytes.count, using: &generator)] = UInt8.random(in: 0...255, using: &generator)
            }
            try FileManager.default.removeItem(atPath: cachePath + "/" + name)
            try Data(bytes).write(to: URL(fileURLWithPath: cachePath + "/" + name))
            let symbolicator = Symbolicator(debugDirectories: [], cache: SymbolCache(path: cachePath))
            for address in addresses.prefix(40) {
                let frames = symbolicator.symbolicate(address: address, isReturnAddress: true, modules: [module])
                #expect(!frames.isEmpty && frames.count <= 32)
                answered += 1
            }
        }
        #expect(answered == 200 * min(40, addresses.count))
    }

    /// A build-id is only a claim: another program with the same (forged) build-id at the same
    /// path is another file (inode, size, time), so it gets its own entry and its own names.
    @Test func aReplacedModuleWithAForgedBuildIDGetsItsOwnEntry() throws {
        let directory = try makeTestDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/program"
        let cache = directory + "/cache"
        var names: [String] = []
        for function in ["first_function_name", "second_function_name"] {
            try "__attribute__((noinline)) int \(function)(int x) { return x * 3 + 1; }\nint main(void) { return \(function)(2); }\n"
                .write(toFile: directory + "/p.c", atomically: true, encoding: .utf8)
            unlink(path)
            try runTool("/usr/bin/gcc", ["-O1", "-g", "-Wl,--build-id=0x0123456789abcdef0123456789abcdef01234567", "-o", path, directory + "/p.c"])
            let symbol = try #require(try functions(of: path).first { _ in true })
            let start = try runTool("/usr/bin/nm", [path]).split(separator: "\n").first { $0.hasSuffix(" " + function) }
                .flatMap { UInt64($0.prefix(16), radix: 16) } ?? symbol.start
            let module = ModuleSnapshot(path: path, base: 0, start: 0, end: 0x1000_0000, buildID: "0123456789abcdef0123456789abcdef01234567")
            let symbolicator = Symbolicator(debugDirectories: [], cache: SymbolCache(path: cache))
            symbolicator.prime([(start, false)], modules: [module])
            names.append(symbolicator.symbolicate(address: start, isReturnAddress: false, modules: [module]).last?.function ?? "")
        }
        #expect(names == ["first_function_name", "second_function_name"])
        #expect(try FileManager.default.contentsOfDirectory(atPath: cache).filter { $0.hasSuffix(".hwsym") }.count == 2)
    }

    @Test func theCacheIsPrunedLeastRecentlyUsedFirst() throws {
        let directory = try makeTestDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let (library, module) = try buildOptimizedCLibrary(in: directory)
        let address = try #require(functions(of: library).first).start
        let cachePath = directory + "/cache"
        // One index of this library first, to learn its size.
        Symbolicator(debugDirectories: [], cache: SymbolCache(path: cachePath)).prime([(address, false)], modules: [module])
        let first = try #require(try FileManager.default.contentsOfDirectory(atPath: cachePath).first { $0.hasSuffix(".hwsym") })
        // Counted as the prune counts it: in disk blocks.
        var info = stat()
        #expect(stat(cachePath + "/" + first, &info) == 0)
        let size = Int(info.st_blocks) * 512
        // Then copies of it (other files, other keys) into a cache that holds two entries.
        var copies: [String] = []
        for index in 0..<3 {
            let copy = directory + "/copy\(index).so"
            try FileManager.default.copyItem(atPath: library, toPath: copy)
            copies.append(copy)
            usleep(20_000)
            let cache = SymbolCache(path: cachePath, maximumTotalBytes: Int64(size * 2 + size / 2))
            let copyModule = ModuleSnapshot(path: copy, base: 0, start: 0, end: 0x1000_0000, buildID: module.buildID)
            let symbolicator = Symbolicator(debugDirectories: [], cache: cache)
            symbolicator.prime([(address, false)], modules: [copyModule])
            #expect(symbolicator.symbolicate(address: address, isReturnAddress: false, modules: [copyModule]).last?.function != nil)
        }
        let left = try FileManager.default.contentsOfDirectory(atPath: cachePath).filter { $0.hasSuffix(".hwsym") }
        #expect(left.count == 2)
        #expect(!left.contains(first), "the least recently used entry went first")
    }

    /// A cache directory another user owns is not written to or read from (its owner could
    /// plant indexes): symbolication goes on through libdw.
    @Test(.enabled(if: getuid() == 0)) func aCacheDirectoryOfAnotherUserIsNotUsed() throws {
        let directory = try makeTestDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let (library, module) = try buildOptimizedCLibrary(in: directory)
        let cachePath = directory + "/cache"
        #expect(mkdir(cachePath, 0o700) == 0 && chown(cachePath, 65534, 65534) == 0)
        let address = try #require(functions(of: library).first).start
        let frames = Symbolicator(debugDirectories: [], cache: SymbolCache(path: cachePath))
            .symbolicate(address: address, isReturnAddress: false, modules: [module])
        #expect(frames.last?.function != nil)
        #expect(try FileManager.default.contentsOfDirectory(atPath: cachePath).isEmpty)
    }

    /// A cache left 0777 held an entry another user forged (a sound index whose names were
    /// changed): root's dump printed `FORGED_BY_NOBODY`. Entries that are not the user's own,
    /// or that others may write, are never read; the directory is tightened to 0700.
    @Test(.enabled(if: getuid() == 0, "only root can give a file to another user"),
          arguments: ["owned-by-nobody", "group-and-other-writable"])
    func anEntryOthersCouldHaveWrittenIsNeverRead(_ how: String) throws {
        let directory = try makeTestDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let (library, module) = try buildOptimizedCLibrary(in: directory)
        let address = try #require(functions(of: library).first).start
        let cachePath = directory + "/cache"
        let storing = Symbolicator(debugDirectories: [], cache: SymbolCache(path: cachePath))
        storing.prime([(address, false)], modules: [module])
        let honest = storing.symbolicate(address: address, isReturnAddress: false, modules: [module])
        let name = try #require(honest.last?.function)
        let entry = cachePath + "/" + (try #require(try FileManager.default.contentsOfDirectory(atPath: cachePath).first { $0.hasSuffix(".hwsym") }))
        // The forgery: the same index with the function's name overwritten (names are not checksummed).
        var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: entry)))
        let forged = Array(String(repeating: "F", count: name.utf8.count).utf8)
        let places = (0...(bytes.count - forged.count)).filter { bytes[$0..<($0 + forged.count)].elementsEqual(name.utf8) }
        try #require(!places.isEmpty)
        for at in places { bytes.replaceSubrange(at..<(at + forged.count), with: forged) }
        try Data(bytes).write(to: URL(fileURLWithPath: entry))
        chmod(entry, 0o600)
        // Ours, the forgery is believed (the test can tell a read entry from an ignored one).
        let believed = Symbolicator(debugDirectories: [], cache: SymbolCache(path: cachePath))
            .symbolicate(address: address, isReturnAddress: false, modules: [module])
        #expect(believed.last?.function == String(decoding: forged, as: UTF8.self))
        chmod(cachePath, 0o777)
        if how == "owned-by-nobody" { #expect(chown(entry, 65534, 65534) == 0) } else { chmod(entry, 0o666) }
        let frames = Symbolicator(debugDirectories: [], cache: SymbolCache(path: cachePath))
            .symbolicate(address: address, isReturnAddress: false, modules: [module])
        #expect(frames.last?.function == name, "an entry others could write was read")
        var info = stat()
        #expect(lstat(entry, &info) == 0 && info.st_size == bytes.count, "not ours: neither removed nor replaced")
        #expect(lstat(cachePath, &info) == 0 && info.st_mode & 0o777 == 0o700)
    }

    /// An entry cut short while readers use it killed `dump --pid` and `show` with SIGBUS
    /// (a mapped page gone). Entries are read with pread, a chunk at a time (IndexBytes):
    /// readers running against a writer that truncates and restores the entry in a loop never
    /// crash and give libdw's frames — from a whole index, or from libdw itself once a chunk
    /// read short (the index is two chunks: the second is read by lookups, not with the header).
    @Test func anEntryTruncatedWhileInUseNeverCrashesAReader() throws {
        let directory = try makeTestDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let (library, module) = try buildOptimizedCLibrary(in: directory)
        let addresses = try functions(of: library).prefix(40).map { $0.start + 1 }
        let cachePath = directory + "/cache"
        let direct = Symbolicator(debugDirectories: [])
        // Every byte of the library asked: an entry of several chunks.
        Symbolicator(debugDirectories: [], cache: SymbolCache(path: cachePath))
            .prime(try functions(of: library).flatMap { $0.start..<($0.start + $0.size) }.map { ($0, false) }, modules: [module])
        let entry = cachePath + "/" + (try #require(try FileManager.default.contentsOfDirectory(atPath: cachePath).first { $0.hasSuffix(".hwsym") }))
        let whole = try Data(contentsOf: URL(fileURLWithPath: entry))
        #expect(whole.count > 16 << 10, "lookups read a chunk beyond the header's (IndexBytes.chunkSize)")
        final class Flag: @unchecked Sendable {
            private let lock = NSLock()
            private var raised = false
            func raise() { lock.withLock { raised = true } }
            var isRaised: Bool { lock.withLock { raised } }
        }
        let stop = Flag()
        let writer = Thread {
            let fd = open(entry, O_WRONLY)
            defer { close(fd) }
            var cut = 0
            while !stop.isRaised {
                ftruncate(fd, off_t(whole.count / 2 - (cut % 4096)))
                cut += 977
                _ = whole.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) }
            }
        }
        writer.start()
        defer { stop.raise() }
        for _ in 0..<300 {
            let indexed = Symbolicator(debugDirectories: [], cache: SymbolCache(path: cachePath))
            #expect(disagreements(Array(addresses.prefix(8)), module: module, direct, indexed) == [])
        }
    }

    /// A cache an earlier version made holds index entries and no CACHEDIR.TAG: it is adopted
    /// (marked, its entries used), not refused, while a directory with anything else stays refused.
    @Test func aCacheOfAnEarlierVersionIsAdopted() throws {
        let directory = try makeTestDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let (library, module) = try buildOptimizedCLibrary(in: directory)
        let address = try #require(functions(of: library).first).start
        let cachePath = directory + "/cache"
        let storing = Symbolicator(debugDirectories: [], cache: SymbolCache(path: cachePath))
        storing.prime([(address, false)], modules: [module])
        let expected = storing.symbolicate(address: address, isReturnAddress: false, modules: [module])
        #expect(unlink(cachePath + "/CACHEDIR.TAG") == 0)
        let entry = cachePath + "/" + (try #require(try FileManager.default.contentsOfDirectory(atPath: cachePath).first { $0.hasSuffix(".hwsym") }))
        var before = stat()
        stat(entry, &before)
        #expect(Symbolicator(debugDirectories: [], cache: SymbolCache(path: cachePath))
            .symbolicate(address: address, isReturnAddress: false, modules: [module]) == expected)
        var after = stat()
        stat(entry, &after)
        #expect(after.st_ino == before.st_ino, "the entry was read, not rebuilt")
        #expect(FileManager.default.fileExists(atPath: cachePath + "/CACHEDIR.TAG"))
        // The same directory with a file that is not ours in it: not a cache.
        #expect(unlink(cachePath + "/CACHEDIR.TAG") == 0)
        try Data("mine".utf8).write(to: URL(fileURLWithPath: cachePath + "/notes.txt"))
        #expect(!SymbolCache(path: cachePath).isUsable)
        #expect(!FileManager.default.fileExists(atPath: cachePath + "/CACHEDIR.TAG"))
    }
}
