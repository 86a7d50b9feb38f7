// elfutils' libdw and libelf are loaded on first use (Sources/CHangwatchSymbols/hw_libdw.h),
// not linked: a command that symbolicates nothing starts without them, and a machine without
// a loadable libdw still captures, names what it can and says why the rest has no names. Each
// checked on the real `hangwatch`, with the dynamic loader's own trace (LD_DEBUG=libs) as the
// witness of what was loaded.
import Foundation
import HangwatchTestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

@Suite("libdw on first use", .ownThread)
struct LibdwOnFirstUseTests {
    /// Whether the loader's trace shows `library` being loaded.
    private func loaded(_ library: String, trace: String) -> Bool {
        trace.split(separator: "\n").contains { $0.contains("find library=\(library)") }
    }

    @Test func hangwatchNeedsNoLibdwAndListLoadsNone() throws {
        let linked = try runTool("/usr/bin/ldd", [try productPath("hangwatch")])
        #expect(!linked.contains("libdw") && !linked.contains("libelf"), "\(linked)")
        let database = try TemporaryDatabase()
        let list = try hangwatch(["list"], database: database, environment: ["LD_DEBUG": "libs"])
        #expect(try list.waitForExit() == 0, "\(list.stderr)")
        #expect(loaded("libc.so.6", trace: list.stderr), "the loader traced the start: \(list.stderr.prefix(2000))")
        #expect(!loaded("libdw.so.1", trace: list.stderr) && !loaded("libelf.so.1", trace: list.stderr), "\(list.stderr)")
    }

    /// A binary's first dump reads it through libdw and stores the answers of its stacks in the
    /// symbol cache (docs/symbol-cache.md); the next ones, of the same parked stacks, are
    /// answered from the cache and load no libdw at all.
    @Test func aDumpLoadsItToSymbolicateUnlessTheCacheKnowsTheBinary() throws {
        let target = try parkedSwiftTarget()
        defer { target.signal(SIGKILL); _ = try? target.waitForExit() }
        let database = try TemporaryDatabase()
        let cache = (database.path as NSString).deletingLastPathComponent + "/symbols"
        for round in 0..<3 {
            let dump = try hangwatch(["dump", "--pid", "\(target.pid)"], database: database,
                                     environment: ["LD_DEBUG": "libs", "HANGWATCH_SYMBOL_CACHE": cache])
            #expect(try dump.waitForExit() == 0, "\(dump.stderr.suffix(3000))")
            #expect(dump.stdout.contains("parkedRecursion"), "\(dump.stdout.prefix(3000))")
            #expect(loaded("libdw.so.1", trace: dump.stderr) == (round == 0), "round \(round): \(dump.stderr.suffix(3000))")
        }
    }

    /// An unloadable libdw.so.1 first on the library path (an empty file: "file too short"):
    /// the dump is whole, the C library's frames still have names (read without libdw), and the
    /// program's frames say what is missing instead of only showing addresses.
    @Test func withoutALoadableLibdwADumpStillCapturesAndSaysWhy() throws {
        let directory = try makeTemporaryDirectory("no-libdw")
        defer { removeTemporaryDirectory(directory) }
        #expect(FileManager.default.createFile(atPath: directory + "/libdw.so.1", contents: Data()))
        let target = try parkedSwiftTarget()
        defer { target.signal(SIGKILL); _ = try? target.waitForExit() }
        let database = try TemporaryDatabase()
        let dump = try hangwatch(["dump", "--pid", "\(target.pid)"], database: database,
                                 environment: ["LD_LIBRARY_PATH": directory, "HANGWATCH_SYMBOL_CACHE": "off"])
        #expect(try dump.waitForExit() == 0, "\(dump.stderr.suffix(3000))")
        let text = dump.stdout
        #expect(!text.contains("parkedRecursion"), "no DWARF or symbols of the program without libdw")
        #expect(text.contains("symbolication needs elfutils' libdw.so.1 (Debian and Ubuntu: apt install libdw1"), "\(text.prefix(3000))")
        #expect(text.contains("libdw.so.1: file too short"), "the loader's own reason: \(text.prefix(3000))")
        #expect(text.contains("pthread_cond_wait") || text.contains("__futex_abstimed_wait"), "libc's names: \(text.prefix(3000))")
        #expect(text.contains("Thread"), "the threads were captured: \(text.prefix(1000))")
    }
}
