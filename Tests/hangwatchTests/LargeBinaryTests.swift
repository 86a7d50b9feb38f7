// hangwatch on a program at real size (issue 46): the Swift toolchain's own sourcekit-lsp, a
// binary of about 240 MB with DWARF for its Swift code (a production server's size), as a live
// process. Memory is a fixed budget whatever the binary's size, measured in a process of its own
// (runMeasured), at every sighting of the binary: never seen, seen once, warm.
import Foundation
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
}
