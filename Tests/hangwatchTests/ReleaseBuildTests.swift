// Stacks of a release build (docs/release-builds.md): a program built by `swiftc -O`, whose
// identical functions the optimizer merged into one body, blocks in the twin of the function
// the body is named after. The report marks the merged frames, and the first frame below with
// a source line is the call the program made.
import Foundation
import HangwatchTestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

@Suite("release builds", .ownThread)
struct ReleaseBuildTests {
    static let program = """
        import Glibc
        @inline(never) func waitForReplyA() { usleep(60_000_000); print("a") }
        @inline(never) func waitForReplyB() { usleep(60_000_000); print("a") }
        @inline(never) func handleA() { waitForReplyA(); print("handled") }
        @inline(never) func handleB() { waitForReplyB(); print("handled") }
        print("READY")
        fflush(stdout)
        if CommandLine.arguments.count > 5 { handleA() } else { handleB() }

        """

    @Test func mergedFunctionsAreMarked() throws {
        let directory = try makeTemporaryDirectory("hangwatch-release")
        defer { removeTemporaryDirectory(directory) }
        try Self.program.write(toFile: directory + "/m.swift", atomically: true, encoding: .utf8)
        _ = try runTool("/usr/bin/env", ["swiftc", "-O", "-g", directory + "/m.swift", "-o", directory + "/m",
                                         "-module-cache-path", directory + "/cache"])
        let symbols = try runTool("/usr/bin/nm", [directory + "/m"])
        try #require(symbols.contains("13waitForReplyAyyFTm"), "swiftc -O merged no function: \(symbols)")
        let database = try TemporaryDatabase()
        let child = try ChildProcess(directory + "/m")
        defer { child.signal(SIGKILL); _ = try? child.waitForExit() }
        _ = try child.waitForOutput("READY")
        usleep(300_000)
        let dump = try runHangwatch(["dump", "--pid", "\(child.pid)"], database: database)
        #expect(dump.status == 0, "\(dump.stderr)")
        let frames = dump.stdout.split(separator: "\n").filter { $0.hasPrefix("  #") }
        let merged = try #require(frames.first { $0.contains("in merged m.waitForReplyA() -> ()") }, "\(dump.stdout)")
        #expect(merged.hasSuffix(" [merged: one body for identical functions, named after one] in m"), "\(merged)")
        // The call the program made is the first frame below with a source line: handleB()'s, line 8.
        let below = frames.drop { !$0.contains("in merged m.waitForReplyA()") }.first { $0.contains(" at ") }
        #expect(below?.hasSuffix("/m.swift:8") == true, "\(below ?? "none")")
    }
}
