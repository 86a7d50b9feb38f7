// `hangwatch symbols`' Breakpad text read back by an independent consumer: Sentry's `symbolic`
// (PyPI), which symbol servers use. Its module id must be the one symbolic computes from the
// ELF file itself, and its answers for every address of an optimized C library (functions,
// files, lines, inlined calls) must be the frames hangwatch's own symbolication gives.
import HangwatchSymbolication
import Foundation
import HangwatchTestSupport
import Testing
import HangwatchStageTestSupport

@Suite(.ownThread) struct BreakpadSymbolsTests {
    /// Prints, per address on stdin, the frames symbolic finds (innermost first), and first the
    /// two module ids: the .sym file's and the ELF file's.
    static let script = """
        import json, sys
        from symbolic import Archive
        sym = next(Archive.open(sys.argv[1]).iter_objects())
        elf = next(Archive.open(sys.argv[2]).iter_objects())
        cache = sym.make_symcache()
        out = {"ids": [str(sym.debug_id), str(elf.debug_id), str(sym.code_id), str(elf.code_id)], "frames": []}
        for line in sys.stdin:
            address = int(line, 16)
            out["frames"].append([[l.symbol, l.full_path or "", l.line] for l in cache.lookup(address)])
        print(json.dumps(out))
        """

    @Test func sentrysSymbolicReadsTheSymbolsAndAnswersAsHangwatchDoes() throws {
        guard let python = pythonImporting("symbolic") else {
            // scripts/install-deps installs it wherever pip may; CI must not skip this.
            #expect(ProcessInfo.processInfo.environment["CI"] == nil, "no python3 with the PyPI `symbolic` package")
            print("skipped: no python3 with the PyPI `symbolic` package (pip install symbolic)")
            return
        }
        let directory = try makeTestDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let (library, module) = try buildOptimizedCLibrary(in: directory)
        let symbols = directory + "/library.sym"
        try BreakpadSymbols.text(module: library, debugDirectories: []).write(toFile: symbols, atomically: true, encoding: .utf8)
        let addresses = try functions(of: library).flatMap { $0.start..<($0.start + $0.size) }
        try Self.script.write(toFile: directory + "/read.py", atomically: true, encoding: .utf8)
        try addresses.map { String($0, radix: 16) }.joined(separator: "\n").write(toFile: directory + "/addresses", atomically: true, encoding: .utf8)
        let output = try runTool("/bin/sh", ["-c", "\"$0\" \"$1\" \"$2\" \"$3\" < \"$4\"", python, directory + "/read.py", symbols, library,
                                            directory + "/addresses"])
        struct Answer: Decodable { var ids: [String]; var frames: [[[Value]]] }
        enum Value: Decodable {
            case text(String), number(Int)
            init(from decoder: Decoder) throws {
                let container = try decoder.singleValueContainer()
                if let number = try? container.decode(Int.self) { self = .number(number) } else { self = .text(try container.decode(String.self)) }
            }
            var description: String { switch self { case .text(let text): return text; case .number(let number): return String(number) } }
        }
        let answer = try JSONDecoder().decode(Answer.self, from: Data(output.utf8))
        #expect(answer.ids[0] == answer.ids[1], "module id")
        #expect(answer.ids[2] == answer.ids[3], "code id")
        #expect(answer.frames.count == addresses.count)

        let symbolicator = Symbolicator(debugDirectories: [])
        var differences: [String] = []
        var inlined = 0
        for (address, theirs) in zip(addresses, answer.frames) {
            let ours = symbolicator.symbolicate(address: address, isReturnAddress: false, modules: [module])
                .map { "\($0.function ?? "") \($0.file ?? "") \($0.line ?? 0)" }
            let read = theirs.map { $0.map(\.description).joined(separator: " ") }
            if ours.count > 1 { inlined += 1 }
            if ours != read && differences.count < 5 { differences.append("0x\(String(address, radix: 16)): ours \(ours), symbolic \(read)") }
        }
        #expect(differences.isEmpty, "\(differences)")
        #expect(inlined > 0, "the library has inlined calls")
    }

    @Test func theModuleIDIsTheBuildIDAsAGUID() {
        #expect(BreakpadSymbols.debugID(buildID: "b6ec779bdd5f646ddc655908ca171382842b86a2") == "9B77ECB65FDD6D64DC655908CA1713820")
        // Shorter build-ids are padded, as Breakpad does.
        #expect(BreakpadSymbols.debugID(buildID: "0123456789abcdef") == "67452301AB89EFCD00000000000000000")
        #expect(BreakpadSymbols.debugID(buildID: "") == nil)
        #expect(BreakpadSymbols.debugID(buildID: "zz") == nil)
    }
}
