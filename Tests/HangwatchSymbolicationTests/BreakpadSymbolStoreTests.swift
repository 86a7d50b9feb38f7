// The Breakpad symbol store (BreakpadSymbolStore.swift): names for a module whose file is gone
// or replaced, read from the .sym file `hangwatch symbols` wrote of it, must be the names the
// module itself gave; and a .sym file is untrusted input.
import HangwatchSymbolication
import HangwatchSnapshot
import Foundation
import HangwatchTestSupport
import Testing
import HangwatchStageTestSupport

@Suite(.ownThread) struct BreakpadSymbolStoreTests {
    /// Every byte address of an optimized C library (inlined calls included), as a program
    /// counter and as a return address: the store answers, for the library gone from its path,
    /// what libdw answered with the library there. (Where libdw finds a line but no function —
    /// code of no DWARF function nor ELF symbol — Breakpad has no record to hold the line: the
    /// store leaves such an address unnamed, and the test counts them.)
    @Test func theStoreAnswersAsTheModuleDidForEveryAddress() throws {
        let directory = try makeTestDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let (library, module) = try buildOptimizedCLibrary(in: directory)
        let store = directory + "/store"
        let path = try #require(BreakpadSymbolStore.path(in: store, modulePath: "/gone/libhwsample.so", buildID: module.buildID))
        try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try BreakpadSymbols.text(module: library, debugDirectories: []).write(toFile: path, atomically: true, encoding: .utf8)

        var gone = module
        gone.path = "/gone/libhwsample.so"
        let direct = Symbolicator(debugDirectories: [])
        let stored = Symbolicator(debugDirectories: [], symbolStores: [store])
        #expect(stored.resolution(of: gone) == .breakpadSymbols(path: path))
        #expect(Symbolicator(debugDirectories: []).resolution(of: gone) == .missing(path: gone.path))
        let addresses = try functions(of: library).flatMap { $0.start..<($0.start + $0.size) }
        // As a report asks: all its lookups named first, then answered from one reading of the file.
        stored.prime(addresses.flatMap { [($0, false), ($0, true)] }, modules: [gone])
        var differences: [String] = []
        var inlined = 0
        var withoutFunction = 0
        for address in addresses {
            for isReturnAddress in [false, true] {
                let ours = direct.symbolicate(address: address, isReturnAddress: isReturnAddress, modules: [module]).map(Self.describe)
                let theirs = stored.symbolicate(address: address, isReturnAddress: isReturnAddress, modules: [gone]).map(Self.describe)
                if ours.count > 1 { inlined += 1 }
                let unnamed = direct.symbolicate(address: address, isReturnAddress: isReturnAddress, modules: [module]).last?.function == nil
                if unnamed {
                    withoutFunction += 1
                    if theirs != ["- -:0 +-"] && differences.count < 5 { differences.append("0x\(String(address, radix: 16)): named \(theirs)") }
                    continue
                }
                if ours != theirs && differences.count < 5 { differences.append("0x\(String(address, radix: 16)): \(ours) vs \(theirs)") }
            }
        }
        #expect(differences.isEmpty, "\(differences)")
        #expect(inlined > 0, "the library has inlined calls")
        #expect(withoutFunction < addresses.count / 10, "\(withoutFunction) of \(addresses.count) addresses without a function")
    }

    static func describe(_ frame: SymbolicatedFrame) -> String {
        "\(frame.function ?? "-") \(frame.file ?? "-"):\(frame.line ?? 0) +\(frame.functionOffset.map { String($0) } ?? "-")\(frame.isInlined ? " inlined" : "")"
    }

    /// Records that are cut, out of range, of unknown kinds, or in another order are skipped;
    /// what is well formed is still read, and nothing traps.
    @Test func malformedRecordsAreSkipped() throws {
        let directory = try makeTestDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let text = """
            MODULE Linux x86_64 ABCDEF0 app
            INFO CODE_ID ABCDEF
            FILE 0 /src/a.c
            FILE -1 /src/negative.c
            FILE 99999999999999999999 /src/huge.c
            INLINE_ORIGIN 0 inner
            1000 10 7 0
            FUNC 1000 100 0 outer
            1000 10 5 0
            1010 ffffffffffffffff 6 0
            1020 10 8 0
            zz 10 6 0
            INLINE 0 9 0 0 1000 8
            INLINE 99 9 0 0 1000 8
            INLINE 0 9 0 0 1000
            FUNC ffffffffffffffff 2 0 wraps
            FUNC 2000 0 0 empty
            FUNC
            PUBLIC 3000 0 public_symbol
            PUBLIC m 4000 0 multiple_symbol
            PUBLIC zz 0 bad
            STACK CFI INIT 1000 100 .cfa: $rsp 8 +
            \u{0}\u{1}garbage
            """
        let path = directory + "/app.sym"
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        #expect(BreakpadSymbolFile(path: path, debugID: "OTHER") == nil, "another module's id")
        let file = try #require(BreakpadSymbolFile(path: path, debugID: "ABCDEF0"))
        let inner = file.frames(at: 0x1004)
        #expect(inner.map(\.function) == ["inner", "outer"])
        #expect(inner.first?.line == 5 && inner.last?.line == 9, "the inlined call's line is the caller's")
        #expect(file.frames(at: 0x1050).map(\.function) == ["outer"])
        #expect(file.frames(at: 0x1024).first?.line == 8, "records after a damaged one are read")
        #expect(file.frames(at: 0x3008).first?.function == "public_symbol")
        #expect(file.frames(at: 0x4000).first?.function == "multiple_symbol")
        #expect(file.frames(at: 0x10).isEmpty)
        #expect(file.frames(at: .max).first?.function == "multiple_symbol", "no FUNC wraps around the address space")
        #expect(file.frames(at: 0x1100).isEmpty, "a PUBLIC does not run past the next FUNC… nor a FUNC past its end")

        // Not a regular file: never read.
        #expect(symlink(path, directory + "/link.sym") == 0)
        #expect(BreakpadSymbolFile(path: directory + "/link.sym", debugID: "ABCDEF0") == nil)
        #expect(mkfifo(directory + "/fifo.sym", 0o600) == 0)
        #expect(BreakpadSymbolFile(path: directory + "/fifo.sym", debugID: "ABCDEF0") == nil)
        // Nor a path built from a build-id or a name that is not one.
        #expect(BreakpadSymbolStore.path(in: directory, modulePath: "/x/app", buildID: "../../etc") == nil)
        #expect(BreakpadSymbolStore.path(in: directory, modulePath: "/x/..", buildID: "abcdef01") == nil)
    }
}
