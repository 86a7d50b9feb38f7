// Names after a redeploy: a dump processed once its program's binary was replaced gets its
// names back from a Breakpad symbol store (`hangwatch symbols --store`, HANGWATCH_SYMBOL_STORE).
import HangwatchDatabase
import HangwatchReport
import Foundation
import HangwatchTestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

@Suite("hangwatch symbol store", .ownThread)
struct SymbolStoreTests {
    /// The deployed build's symbols go into the store; the program is captured, then replaced by
    /// another build at the same path. Without the store its frames are "module mismatched";
    /// with it they have the names, files and lines the report had before the redeploy, and the
    /// module says where they came from.
    @Test func aReplacedBinarysFramesAreNamedFromTheStore() throws {
        let directory = try makeTemporaryDirectory("hangwatch-store")
        defer { removeTemporaryDirectory(directory) }
        let database = try TemporaryDatabase()
        let program = directory + "/server"
        try FileManager.default.copyItem(atPath: try productPath("hangwatch-fixture-remote"), toPath: program)
        let store = directory + "/store"
        let stored = try runHangwatch(["symbols", program, "--store", store], database: database)
        #expect(stored.status == 0, "\(stored.stderr)")
        var info = stat()
        #expect(stat(store, &info) == 0 && info.st_mode & 0o777 == 0o700)

        let target = try ChildProcess(program, ["deadlock"])
        try target.waitForOutput("READY")
        let saved = try runHangwatch(["dump", "--pid", "\(target.pid)", "--save", "--format", "json"], database: database)
        target.signal(SIGKILL)
        _ = try target.waitForExit()
        #expect(saved.status == 0, "\(saved.stderr)")
        let before = try Report.decode(from: Data(saved.stdout.utf8))
        let dump = database.path + "/reports/pending/\(before.id).hwdump"

        // The redeploy: another build renamed over the program.
        try FileManager.default.copyItem(atPath: try productPath("hangwatch-fixture-crash"), toPath: program + ".new")
        #expect(rename(program + ".new", program) == 0)

        let lost = try showJSON(dump, database: database, environment: [:])
        let module = try #require(lost.modules.first { $0.path == program })
        #expect(module.symbols == "mismatched")
        #expect(!lost.threads.flatMap(\.frames).contains { $0.function?.contains("deadlockTake") == true })

        let restored = try showJSON(dump, database: database, environment: ["HANGWATCH_SYMBOL_STORE": "relative/ignored:" + store])
        let named = try #require(restored.modules.first { $0.path == program })
        #expect(named.symbols == "breakpad-symbols")
        #expect(named.symbolFile?.hasPrefix(store + "/server/") == true && named.symbolFile?.hasSuffix("/server.sym") == true)
        let programFrames = { (report: Report) in
            report.threads.flatMap(\.frames).filter { $0.module == program }.map { [$0.function ?? "?", $0.file ?? "?", "\($0.line ?? 0)"] }
        }
        #expect(!programFrames(before).isEmpty)
        #expect(programFrames(restored) == programFrames(before))
        #expect(restored.threads.flatMap(\.frames).contains { $0.function?.contains("deadlockTakeAThenB") == true })
        let text = try hangwatch(["show", dump], database: database, environment: ["HANGWATCH_SYMBOL_STORE": store])
        #expect(try text.waitForExit(timeout: 60) == 0)
        #expect(text.stdout.contains("[breakpad-symbols] symbols from \(store)/server/"), "\(text.stdout)")
    }

    /// A .sym file in the store is input: one whose MODULE line has another id, or a link in
    /// its place, is not used (the frames stay unnamed, nothing fails).
    @Test func aStoreFileOfAnotherModuleOrALinkIsNotUsed() throws {
        let directory = try makeTemporaryDirectory("hangwatch-store")
        defer { removeTemporaryDirectory(directory) }
        let database = try TemporaryDatabase()
        let program = directory + "/server"
        try FileManager.default.copyItem(atPath: try productPath("hangwatch-fixture-remote"), toPath: program)
        let store = directory + "/store"
        #expect(try runHangwatch(["symbols", program, "--store", store], database: database).status == 0)
        let symbolFile = try #require(try FileManager.default.subpathsOfDirectory(atPath: store).first { $0.hasSuffix(".sym") })
        let path = store + "/" + symbolFile
        let target = try ChildProcess(program, ["deadlock"])
        try target.waitForOutput("READY")
        let saved = try runHangwatch(["dump", "--pid", "\(target.pid)", "--save", "--format", "json"], database: database)
        target.signal(SIGKILL)
        _ = try target.waitForExit()
        let id = try Report.decode(from: Data(saved.stdout.utf8)).id
        let dump = database.path + "/reports/pending/\(id).hwdump"
        try FileManager.default.copyItem(atPath: try productPath("hangwatch-fixture-crash"), toPath: program + ".new")
        #expect(rename(program + ".new", program) == 0)

        // Another module's id on the MODULE line.
        let original = try String(contentsOfFile: path, encoding: .utf8)
        let lines = original.split(separator: "\n", maxSplits: 1)
        var header = lines[0].split(separator: " ").map(String.init)
        header[3] = String(repeating: "A", count: header[3].count)
        try (header.joined(separator: " ") + "\n" + lines[1]).write(toFile: path, atomically: true, encoding: .utf8)
        let other = try showJSON(dump, database: database, environment: ["HANGWATCH_SYMBOL_STORE": store])
        #expect(other.modules.first { $0.path == program }?.symbols == "mismatched")

        // A link to the real file in its place.
        try original.write(toFile: directory + "/elsewhere.sym", atomically: true, encoding: .utf8)
        #expect(unlink(path) == 0 && symlink(directory + "/elsewhere.sym", path) == 0)
        let linked = try showJSON(dump, database: database, environment: ["HANGWATCH_SYMBOL_STORE": store])
        #expect(linked.modules.first { $0.path == program }?.symbols == "mismatched")
    }

    private func showJSON(_ path: String, database: TemporaryDatabase, environment: [String: String]) throws -> Report {
        let shown = try hangwatch(["show", path, "--format", "json"], database: database, environment: environment)
        #expect(try shown.waitForExit(timeout: 60) == 0, "\(shown.stderr)")
        return try Report.decode(from: Data(shown.stdout.utf8))
    }
}
