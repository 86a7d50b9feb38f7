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
        let (program, store) = try storedAndRedeployed(in: directory, database: database)
        var info = stat()
        #expect(stat(store, &info) == 0 && info.st_mode & 0o777 == 0o700)

        let lost = try showJSON(program.dump, database: database, environment: [:])
        #expect(lost.modules.first { $0.path == program.path }?.symbols == "mismatched")
        #expect(!lost.threads.flatMap(\.frames).contains { $0.function?.contains("deadlockTake") == true })

        let restored = try showJSON(program.dump, database: database, environment: ["HANGWATCH_SYMBOL_STORE": "relative/ignored:" + store])
        let named = try #require(restored.modules.first { $0.path == program.path })
        #expect(named.symbols == "breakpad-symbols")
        #expect(named.symbolFile?.hasPrefix(store + "/server/") == true && named.symbolFile?.hasSuffix("/server.sym") == true)
        #expect(!program.frames(program.before).isEmpty)
        #expect(program.frames(restored) == program.frames(program.before))
        #expect(restored.threads.flatMap(\.frames).contains { $0.function?.contains("deadlockTakeAThenB") == true })
        let text = try hangwatch(["show", program.dump], database: database, environment: ["HANGWATCH_SYMBOL_STORE": store])
        #expect(try text.waitForExit(timeout: 60) == 0)
        #expect(text.stdout.contains("[breakpad-symbols] symbols from \(store)/server/"), "\(text.stdout)")
    }

    /// A report stored without the names (processed after the redeploy, as a fatal hang is at
    /// the next start of a new version) gets them when shown with the store; the stored report
    /// stays as it was.
    @Test func aStoredReportProcessedAfterTheRedeployIsShownWithItsNames() throws {
        let directory = try makeTemporaryDirectory("hangwatch-store")
        defer { removeTemporaryDirectory(directory) }
        let database = try TemporaryDatabase()
        let (program, store) = try storedAndRedeployed(in: directory, database: database)
        let later = try TemporaryDatabase()
        let lost = try showJSON(program.dump, database: later, environment: [:])
        #expect(lost.modules.first { $0.path == program.path }?.symbols == "mismatched")
        try CrashReportDatabase(path: later.path).writeReport(id: lost.id, json: ReportRenderer.json(lost), text: nil,
                                                                dump: try Data(contentsOf: URL(fileURLWithPath: program.dump)))
        let stored = try showJSON(lost.id, database: later, environment: [:])
        #expect(stored == lost)
        let restored = try showJSON(lost.id, database: later, environment: ["HANGWATCH_SYMBOL_STORE": store])
        #expect(restored.modules.first { $0.path == program.path }?.symbols == "breakpad-symbols")
        #expect(!program.frames(program.before).isEmpty)
        #expect(program.frames(restored) == program.frames(program.before))
        #expect(restored.threads.map(\.tid) == lost.threads.map(\.tid) && restored.id == lost.id)
        #expect(try later.reports().first { $0.id == lost.id } == lost, "the stored report is not changed")
        let text = try hangwatch(["show", String(lost.id.prefix(8))], database: later, environment: ["HANGWATCH_SYMBOL_STORE": store])
        #expect(try text.waitForExit(timeout: 60) == 0)
        #expect(text.stdout.contains("deadlockTakeAThenB"), "\(text.stdout)")
    }

    /// A .sym file in the store is input: one whose MODULE line has another id, or a link in
    /// its place, is not used (the frames stay unnamed, nothing fails), and `show` says once why;
    /// so it does of a store that is not there.
    @Test func aStoreFileOfAnotherModuleOrALinkIsNotUsed() throws {
        let directory = try makeTemporaryDirectory("hangwatch-store")
        defer { removeTemporaryDirectory(directory) }
        let database = try TemporaryDatabase()
        let (program, store) = try storedAndRedeployed(in: directory, database: database)
        let path = try storedSymbolFile(in: store)

        // Another module's id on the MODULE line.
        let original = try String(contentsOfFile: path, encoding: .utf8)
        let lines = original.split(separator: "\n", maxSplits: 1)
        var header = lines[0].split(separator: " ").map(String.init)
        header[3] = String(repeating: "A", count: header[3].count)
        try (header.joined(separator: " ") + "\n" + lines[1]).write(toFile: path, atomically: true, encoding: .utf8)
        let other = try showJSON(program.dump, database: database, environment: ["HANGWATCH_SYMBOL_STORE": store])
        #expect(other.modules.first { $0.path == program.path }?.symbols == "mismatched")
        let told = try hangwatch(["show", program.dump], database: database, environment: ["HANGWATCH_SYMBOL_STORE": store])
        #expect(try told.waitForExit(timeout: 60) == 0)
        #expect(told.stderr.contains("symbol store file \(path) not used: its MODULE line does not name debug id"), "\(told.stderr)")

        // A link to the real file in its place.
        try original.write(toFile: directory + "/elsewhere.sym", atomically: true, encoding: .utf8)
        #expect(unlink(path) == 0 && symlink(directory + "/elsewhere.sym", path) == 0)
        let linked = try showJSON(program.dump, database: database, environment: ["HANGWATCH_SYMBOL_STORE": store])
        #expect(linked.modules.first { $0.path == program.path }?.symbols == "mismatched")
        let refused = try hangwatch(["show", program.dump], database: database, environment: ["HANGWATCH_SYMBOL_STORE": store + ":" + directory + "/none"])
        #expect(try refused.waitForExit(timeout: 60) == 0)
        let said = refused.stderr.split(separator: "\n")
        #expect(said.filter { $0.contains("symbol store file not used: refusing \(path): it is a symbolic link") }.count == 1, "\(refused.stderr)")
        #expect(said.filter { $0.contains("symbol store \(directory)/none not used: it is not a directory") }.count == 1, "\(refused.stderr)")
    }

    /// A store's names are text someone else wrote: a FUNC name carrying U+202E (right-to-left
    /// override) would make the frame line read in another order on a terminal. `show` prints
    /// it escaped (`\u{202e}`); the JSON keeps the exact name.
    @Test func aHostileNameInAStoreIsPrintedEscaped() throws {
        let directory = try makeTemporaryDirectory("hangwatch-store")
        defer { removeTemporaryDirectory(directory) }
        let database = try TemporaryDatabase()
        let (program, store) = try storedAndRedeployed(in: directory, database: database)
        let path = try storedSymbolFile(in: store)
        let original = try String(contentsOfFile: path, encoding: .utf8)
        #expect(original.contains("deadlockTakeAThenB"))
        let forged = "deadlock\u{202E}BnehTAekaT"
        try original.replacingOccurrences(of: "deadlockTakeAThenB", with: forged).write(toFile: path, atomically: true, encoding: .utf8)
        #expect(chmod(path, 0o644) == 0)

        let text = try hangwatch(["show", program.dump], database: database, environment: ["HANGWATCH_SYMBOL_STORE": store])
        #expect(try text.waitForExit(timeout: 60) == 0, "\(text.stderr)")
        #expect(text.stdout.contains("deadlock\\u{202e}BnehTAekaT"), "\(text.stdout)")
        #expect(!text.stdout.unicodeScalars.contains("\u{202E}"), "the override reached the terminal")
        let json = try showJSON(program.dump, database: database, environment: ["HANGWATCH_SYMBOL_STORE": store])
        #expect(json.threads.flatMap(\.frames).contains { $0.function?.contains(forged) == true }, "JSON keeps the exact name")
    }

    /// The one .sym file `hangwatch symbols --store` wrote under `store`.
    private func storedSymbolFile(in store: String) throws -> String {
        store + "/" + (try #require(try FileManager.default.subpathsOfDirectory(atPath: store).first { $0.hasSuffix(".sym") }))
    }

    /// A program whose symbols `hangwatch symbols --store` kept in DIRECTORY/store, then redeployed.
    /// A .sym file is never read whole: one with a 192 MiB line after its MODULE line (a crafted
    /// or damaged file) still names every frame, and `show` stays within the 64 MiB budget that
    /// holds for any binary (issue 46), measured in a process of its own. The line is looked at
    /// up to 64 KiB and skipped.
    @Test func aSymFileWithAHugeLineIsReadWithinTheMemoryBudget() throws {
        let directory = try makeTemporaryDirectory("hangwatch-store")
        defer { removeTemporaryDirectory(directory) }
        let database = try TemporaryDatabase()
        let (program, store) = try storedAndRedeployed(in: directory, database: database)
        let symFile = try #require(FileManager.default.enumerator(atPath: store)?.compactMap { $0 as? String }.first { $0.hasSuffix(".sym") })
        let path = store + "/" + symFile
        let original = try Data(contentsOf: URL(fileURLWithPath: path))
        let moduleLine = try #require(original.firstIndex(of: 0x0A))
        let output = try #require(FileHandle(forWritingAtPath: path))
        try output.truncate(atOffset: 0)
        try output.write(contentsOf: original[...moduleLine] + Data("INFO ".utf8))
        let block = Data(repeating: UInt8(ascii: "x"), count: 1 << 20)
        for _ in 0..<192 { try output.write(contentsOf: block) }
        try output.write(contentsOf: Data("\n".utf8) + original[(moduleLine + 1)...])
        try output.close()

        let shown = try runMeasured(try productPath("hangwatch"), ["show", program.dump, "--format", "json", "--database", database.path],
                                    environment: ["HANGWATCH_SYMBOL_STORE": store, "HANGWATCH_SYMBOL_CACHE": "off"])
        #expect(shown.status == 0, "\(shown.stderr)")
        let restored = try Report.decode(from: Data(shown.stdout.utf8))
        #expect(restored.modules.first { $0.path == program.path }?.symbols == "breakpad-symbols")
        #expect(!program.frames(program.before).isEmpty)
        #expect(program.frames(restored) == program.frames(program.before))
        #expect(shown.peakKiB <= 64 * 1024, "show peaked at \(shown.peakKiB / 1024) MiB")
    }

    private func storedAndRedeployed(in directory: String, database: TemporaryDatabase) throws -> (RedeployedProgram, String) {
        let store = directory + "/store"
        let program = try RedeployedProgram(in: directory, database: database) { path in
            let stored = try runHangwatch(["symbols", path, "--store", store], database: database)
            #expect(stored.status == 0, "\(stored.stderr)")
        }
        return (program, store)
    }
}

/// A program captured, then replaced by another build at its path (a redeploy): the dump kept
/// beside its report names the first build's build-id, the file now has another.
struct RedeployedProgram {
    /// The program's path (now the other build).
    var path: String
    /// The report made while the first build was there.
    var before: Report
    /// The intermediate dump kept beside it.
    var dump: String

    /// `beforeReplacing` runs with the first build still in place (to keep its symbols).
    init(in directory: String, database: TemporaryDatabase, beforeReplacing: (String) throws -> Void = { _ in }) throws {
        path = directory + "/server"
        try FileManager.default.copyItem(atPath: try productPath("hangwatch-fixture-remote"), toPath: path)
        try beforeReplacing(path)
        let target = try ChildProcess(path, ["deadlock"])
        try target.waitForOutput("READY")
        let saved = try runHangwatch(["dump", "--pid", "\(target.pid)", "--save", "--format", "json"], database: database)
        target.signal(SIGKILL)
        _ = try target.waitForExit()
        #expect(saved.status == 0, "\(saved.stderr)")
        before = try Report.decode(from: Data(saved.stdout.utf8))
        dump = database.path + "/reports/pending/\(before.id).hwdump"
        try FileManager.default.copyItem(atPath: try productPath("hangwatch-fixture-crash"), toPath: path + ".new")
        #expect(rename(path + ".new", path) == 0)
    }

    /// The frames of the program's own module: function, file, line.
    func frames(_ report: Report) -> [[String]] {
        report.threads.flatMap(\.frames).filter { $0.module == path }.map { [$0.function ?? "?", $0.file ?? "?", "\($0.line ?? 0)"] }
    }
}

/// `hangwatch show PATH --format json` with `environment`.
func showJSON(_ path: String, database: TemporaryDatabase, environment: [String: String]) throws -> Report {
    let shown = try hangwatch(["show", path, "--format", "json"], database: database, environment: environment)
    #expect(try shown.waitForExit(timeout: 60) == 0, "\(shown.stderr)")
    return try Report.decode(from: Data(shown.stdout.utf8))
}
