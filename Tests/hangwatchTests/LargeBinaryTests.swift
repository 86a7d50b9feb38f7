// hangwatch on a program at real size (issue 46): the Swift toolchain's own sourcekit-lsp, a
// binary of about 240 MB with DWARF for its Swift code (a production server's size), as a live
// process. Memory is a fixed budget whatever the binary's size, measured in a process of its own
// (runMeasured), at every sighting of the binary: never seen, seen once, warm.
import Foundation
import HangwatchReport
import HangwatchSnapshot
import HangwatchTestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

@Suite("real programs at real size", .ownThread)
struct LargeBinaryTests {
    /// The toolchain's sourcekit-lsp, beside the `swift` on PATH (nil where there is none).
    static let languageServer: String? = {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
        for directory in path.split(separator: ":") where access("\(directory)/swift", X_OK) == 0 {
            guard let resolved = realpath("\(directory)/swift", nil) else { continue }
            defer { free(resolved) }
            let server = (String(cString: resolved) as NSString).deletingLastPathComponent + "/sourcekit-lsp"
            return access(server, X_OK) == 0 ? server : nil
        }
        return nil
    }()

    @Test(.enabled(if: languageServer != nil, "the toolchain's sourcekit-lsp"))
    func aLiveTwoHundredMegabyteBinaryIsDumpedWithinTheBudgetAtEverySighting() throws {
        let server = try #require(Self.languageServer)
        var size = stat()
        #expect(stat(server, &size) == 0 && size.st_size > 100 << 20, "a big binary: \(size.st_size) bytes")
        let directory = try makeTemporaryDirectory("hangwatch-large")
        defer { removeTemporaryDirectory(directory) }
        // It waits for its first request on stdin, kept open.
        var input: [Int32] = [0, 0]
        #expect(pipe(&input) == 0)
        defer { close(input[1]) }
        let target = try ChildProcess(server, [], stdinDescriptor: input[0])
        close(input[0])
        defer { target.signal(SIGKILL) }
        usleep(1_500_000)

        let cache = directory + "/symbols"
        var peaks: [Int] = []
        for sighting in ["never seen", "seen once", "warm"] {
            let dump = try runMeasured(try productPath("hangwatch"), ["dump", "--pid", "\(target.pid)", "--database", directory + "/db"],
                                       environment: ["HANGWATCH_SYMBOL_CACHE": cache])
            #expect(dump.status == 0, "\(sighting): \(dump.stderr)")
            #expect(dump.stdout.contains("in sourcekit-lsp"), "\(sighting): a frame of the binary named")
            #expect(dump.peakKiB <= 64 * 1024, "\(sighting): dump peaked at \(dump.peakKiB / 1024) MiB")
            peaks.append(dump.peakKiB)
        }
        // The binary's answers are kept (a few KiB), not an index of the whole binary.
        let entries = try FileManager.default.contentsOfDirectory(atPath: cache).filter { $0.hasSuffix(".hwsym") }
        let sizes = try entries.map { try FileManager.default.attributesOfItem(atPath: cache + "/" + $0)[.size] as? Int ?? .max }
        #expect(!entries.isEmpty && sizes.allSatisfy { $0 < 1 << 20 }, "\(zip(entries, sizes).map { "\($0) \($1)" })")
    }

    /// A crafted binary with 10 million function symbols (a 240 MB symbol table; its code is a
    /// NOBITS section, so the file is the table): `show` of a dump with a frame in it names the
    /// frame as the table does, and stays within the budget: the table is read in one pass whose
    /// pages are let go of as it goes.
    @Test func tenMillionSymbolsAreReadWithinTheBudget() throws {
        let directory = try makeTemporaryDirectory("hangwatch-large")
        defer { removeTemporaryDirectory(directory) }
        let binary = directory + "/ten-million-symbols"
        let count = 10_000_000
        _ = try runTool("/usr/bin/python3", ["-c", Self.craftedELF, binary, "\(count)"])
        var info = stat()
        #expect(stat(binary, &info) == 0 && info.st_size > 200 << 20, "\(info.st_size) bytes")
        // Symbol i is f<i % 1000>, 16 bytes at 0x1000 + 16 i; the module loaded at `base`.
        let base: UInt64 = 0x5555_0000_0000
        let symbol = 7_654_321
        let address = base + 0x1000 + UInt64(symbol) * 16 + 4
        let module = ModuleSnapshot(path: binary, base: base, start: base, end: base + 0x2000 + UInt64(count) * 16,
                                    buildID: "0123456789abcdef0123456789abcdef01234567")
        let (shown, report) = try Self.show(frames: [address], of: module, in: directory)
        let frame = try #require(report.threads.first?.frames.first)
        #expect(frame.function == "f\(symbol % 1000)" && frame.offset == 4, "\(frame)")
        #expect(shown.peakKiB <= 64 * 1024, "show peaked at \(shown.peakKiB / 1024) MiB")
    }

    /// A crafted binary with one compilation unit of 100 MB (6.7 million functions) and a line
    /// table of 64 million rows (a 64 MB program): `show` names the frame from the symbol table,
    /// gives the line the table gives for it, says beside the module in the report that the
    /// unit's inline frames were not read, and stays within the budget. The rows are not kept (past 524,288 a lookup runs the
    /// program again), the functions not indexed (past 524,288 ranges).
    @Test func aHundredMegabyteUnitAndItsHugeLineTableAreReadWithinTheBudget() throws {
        let directory = try makeTemporaryDirectory("hangwatch-large")
        defer { removeTemporaryDirectory(directory) }
        let binary = directory + "/huge-unit"
        let (functions, rows) = (6_700_000, 64_000_000)
        _ = try runTool("/usr/bin/python3", ["-c", Self.craftedUnit, binary, "\(functions)", "\(rows)"])
        let base: UInt64 = 0x5555_0000_0000
        // Row i (1 …) is at 0x1000 + i, line 1 + i. Three frames of the unit: one run of its line
        // program answers them all (a return address is looked up one byte before it).
        let row = 48_765_432, callers = [1_234_567, 63_999_000]
        let address = base + 0x1000 + UInt64(row)
        let module = ModuleSnapshot(path: binary, base: base, start: base, end: base + 0x2000 + UInt64(rows),
                                    buildID: "89abcdef0123456789abcdef0123456789abcdef")
        let (shown, report) = try Self.show(frames: [address] + callers.map { base + 0x1000 + UInt64($0) }, of: module, in: directory)
        let frames = try #require(report.threads.first?.frames)
        #expect(frames.map(\.line) == [1 + row] + callers.map { 1 + $0 - 1 }, "\(frames)")
        let frame = try #require(frames.first)
        #expect(frame.function == "crafted_function" && frame.file?.hasSuffix("crafted.c") == true, "\(frame)")
        #expect(report.modules.first?.symbolsNote == "1 compilation unit with more functions than hangwatch reads for one (524,288): no inline frames there")
        #expect(ReportRenderer.text(report).contains("\(binary) build-id 89abcdef0123456789abcdef0123456789abcdef (1 compilation unit with more"),
                "the text report's module line says it")
        #expect(shown.peakKiB <= 64 * 1024, "show peaked at \(shown.peakKiB / 1024) MiB")
    }

    /// `hangwatch show --format json` of a dump (written in `directory`) whose one thread has
    /// `frames` in `module`, measured in a process of its own; its report.
    static func show(frames: [UInt64], of module: ModuleSnapshot, in directory: String) throws -> (MeasuredRun, Report) {
        let thread = ThreadSnapshot(tid: 1, name: "main", state: "S", syscall: "running", roles: .mainThread, status: .captured, frames: frames)
        let snapshot = ProcessSnapshot(reason: .dumpRequested, timestamp: 1_714_564_800,
                                       process: ProcessIdentity(pid: 1, name: "crafted", executable: module.path, arguments: [module.path], bundleID: "crafted"),
                                       threads: [thread], modules: [module], annotations: [:], captureDurationSeconds: 0)
        let dump = directory + "/crafted.hwdump"
        try Data(IntermediateDumpWriter.encode(snapshot)).write(to: URL(fileURLWithPath: dump))
        let shown = try runMeasured(try productPath("hangwatch"), ["show", dump, "--format", "json", "--database", directory + "/db"],
                                    environment: ["HANGWATCH_SYMBOL_CACHE": directory + "/cache"])
        #expect(shown.status == 0, "\(shown.stderr)")
        return (shown, try Report.decode(from: Data(shown.stdout.utf8)))
    }

    /// python3 CRAFTED-PATH FUNCTIONS ROWS: an x86_64 ELF shared object with a GNU build-id, a
    /// NOBITS .text at 0x1000, one symbol `crafted_function` over it, and DWARF 4: one unit
    /// (crafted.c, 0x1000 + ROWS + 1 bytes of code) holding FUNCTIONS subprograms, and its line
    /// program: ROWS rows, row i at 0x1000 + i and line 1 + i (one special opcode each).
    static let craftedUnit = """
        import struct, sys
        path, functions, rows = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
        text_size = rows + 0x1000
        abbrev = bytes([1, 0x11, 1, 0x03, 0x08, 0x10, 0x17, 0x11, 0x01, 0x12, 0x07, 0, 0,
                        2, 0x2e, 0, 0x03, 0x08, 0x11, 0x01, 0x12, 0x06, 0, 0, 0])
        unit_die = b"\\x01crafted.c\\0" + struct.pack("<IQQ", 0, 0x1000, text_size)
        function_die = b"\\x02f\\0" + struct.pack("<QI", 0x1000, 16)
        body = struct.pack("<HIB", 4, 0, 8) + unit_die + function_die * functions + b"\\0"
        info = struct.pack("<I", len(body)) + body
        header_rest = bytes([1, 1, 1, 0xfb, 14, 13, 0, 1, 1, 1, 1, 0, 0, 0, 1, 0, 0, 1]) + b"\\0" + b"crafted.c\\0\\0\\0\\0" + b"\\0"
        program = b"\\0\\x09\\x02" + struct.pack("<Q", 0x1000) + b"\\x21" * rows + b"\\0\\x01\\x01"
        line_body = struct.pack("<HI", 4, len(header_rest)) + header_rest + program
        line = struct.pack("<I", len(line_body)) + line_body
        symstr = b"\\0crafted_function\\0"
        symtab = bytes(24) + struct.pack("<IBBHQQ", 1, 0x12, 0, 1, 0x1000, text_size)
        shstr = b"\\0.text\\0.note.gnu.build-id\\0.symtab\\0.strtab\\0.shstrtab\\0.debug_abbrev\\0.debug_info\\0.debug_line\\0"
        def name(n): return shstr.index(n.encode() + b"\\0")
        note = struct.pack("<III", 4, 20, 3) + b"GNU\\0" + bytes.fromhex("89abcdef0123456789abcdef0123456789abcdef")
        parts = [(".note.gnu.build-id", note), (".symtab", symtab), (".strtab", symstr), (".shstrtab", shstr),
                 (".debug_abbrev", abbrev), (".debug_info", info), (".debug_line", line)]
        at, offsets = 0x1000, {}
        for section, data in parts:
            offsets[section] = at
            at = (at + len(data) + 7) & ~7
        shdr_at = at
        with open(path, "wb") as f:
            f.write(struct.pack("<4sBBBBBxxxxxxxHHIQQQIHHHHHH", b"\\x7fELF", 2, 1, 1, 0, 0, 3, 62, 1, 0, 64, shdr_at, 0, 64, 56, 1, 64, 9, 5))
            f.write(struct.pack("<IIQQQQQQ", 1, 5, 0, 0, 0, 0x1000, 0x1000 + text_size, 0x1000))
            for section, data in parts:
                f.seek(offsets[section]); f.write(data)
            f.seek(shdr_at)
            f.write(bytes(64))
            f.write(struct.pack("<IIQQQQIIQQ", name(".text"), 8, 6, 0x1000, 0x1000, text_size, 0, 0, 16, 0))
            kinds = {".note.gnu.build-id": (7, 2, 0, 0, 4, 0), ".symtab": (2, 0, 4, 1, 8, 24), ".strtab": (3, 0, 0, 0, 1, 0),
                     ".shstrtab": (3, 0, 0, 0, 1, 0), ".debug_abbrev": (1, 0, 0, 0, 1, 0), ".debug_info": (1, 0, 0, 0, 1, 0),
                     ".debug_line": (1, 0, 0, 0, 1, 0)}
            for section, data in parts:
                kind, flags, link, info_field, align, entsize = kinds[section]
                address = offsets[section] if flags else 0
                f.write(struct.pack("<IIQQQQIIQQ", name(section), kind, flags, address, offsets[section], len(data), link, info_field, align, entsize))
        """

    /// python3 CRAFTED-PATH COUNT: an x86_64 ELF shared object with a GNU build-id, a NOBITS
    /// .text at 0x1000 of 16 bytes a symbol, and COUNT global function symbols in .symtab.
    static let craftedELF = """
        import struct, sys
        from array import array
        path, count = sys.argv[1], int(sys.argv[2])
        names = b"\\0" + b"".join(b"f%d\\0" % i for i in range(1000))
        offsets = []
        at = 1
        for i in range(1000):
            offsets.append(at)
            at += len(b"f%d" % i) + 1
        shstr = b"\\0.text\\0.note.gnu.build-id\\0.symtab\\0.strtab\\0.shstrtab\\0"
        def name(n): return shstr.index(n.encode() + b"\\0")
        note = struct.pack("<III", 4, 20, 3) + b"GNU\\0" + bytes.fromhex("0123456789abcdef0123456789abcdef01234567")
        note_at = 0x200
        symtab_at = 0x1000
        symtab_size = 24 * (count + 1)
        strtab_at = symtab_at + symtab_size
        shstr_at = strtab_at + len(names)
        shdr_at = (shstr_at + len(shstr) + 7) & ~7
        text_size = 16 * count
        with open(path, "wb") as f:
            f.write(struct.pack("<4sBBBBBxxxxxxxHHIQQQIHHHHHH", b"\\x7fELF", 2, 1, 1, 0, 0, 3, 62, 1, 0, 64, shdr_at, 0, 64, 56, 1, 64, 6, 5))
            f.write(struct.pack("<IIQQQQQQ", 1, 5, 0, 0, 0, 0x1000, 0x2000 + text_size, 0x1000))
            f.seek(note_at); f.write(note)
            f.seek(symtab_at); f.write(b"\\0" * 24)
            word0 = array("Q", [offsets[i] | (0x12 << 32) | (1 << 48) for i in range(1000)])
            values = array("Q", bytes(24 * count))
            values[0::3] = word0 * (count // 1000)
            values[1::3] = array("Q", range(0x1000, 0x1000 + 16 * count, 16))
            values[2::3] = array("Q", [16]) * count
            values.tofile(f)
            f.write(names); f.write(shstr)
            f.seek(shdr_at)
            f.write(bytes(64))
            f.write(struct.pack("<IIQQQQIIQQ", name(".text"), 8, 6, 0x1000, 0x1000, text_size, 0, 0, 16, 0))
            f.write(struct.pack("<IIQQQQIIQQ", name(".note.gnu.build-id"), 7, 2, note_at, note_at, len(note), 0, 0, 4, 0))
            f.write(struct.pack("<IIQQQQIIQQ", name(".symtab"), 2, 0, 0, symtab_at, symtab_size, 4, 1, 8, 24))
            f.write(struct.pack("<IIQQQQIIQQ", name(".strtab"), 3, 0, 0, strtab_at, len(names), 0, 0, 1, 0))
            f.write(struct.pack("<IIQQQQIIQQ", name(".shstrtab"), 3, 0, 0, shstr_at, len(shstr), 0, 0, 1, 0))
        """
}
