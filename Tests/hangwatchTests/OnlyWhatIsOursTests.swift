// Issue 21's findings on files, each as a user (or a hostile local user) reproduced it: the
// real `hangwatch` against directories and files it did not make. Nothing outside what
// hangwatch created may be chmodded, pruned, used or deleted (SECURITY.md, "Only what is ours").
import DumpWithoutCrash
import HangwatchDatabase
import Foundation
import HangwatchTestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

private let nobody: uid_t = 65534
private let twoHoursAgo = Date() - 7200

/// Files with contents, last modified two hours ago (older than any prune's grace).
private func plantFiles(_ names: [String], in directory: String) throws {
    for name in names {
        try Data("not hangwatch's: \(name)\n".utf8).write(to: URL(fileURLWithPath: directory + "/" + name))
        var times = [timespec(tv_sec: Int(twoHoursAgo.timeIntervalSince1970), tv_nsec: 0),
                     timespec(tv_sec: Int(twoHoursAgo.timeIntervalSince1970), tv_nsec: 0)]
        #expect(utimensat(AT_FDCWD, directory + "/" + name, &times, 0) == 0)
    }
}

private func mode(_ path: String) -> mode_t {
    var info = stat()
    return lstat(path, &info) == 0 ? info.st_mode & 0o7777 : 0
}

private func names(in directory: String) -> Set<String> {
    Set((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? [])
}

@Suite("Only what is ours", .ownThread)
struct OnlyWhatIsOursTests {
    /// `HANGWATCH_SYMBOL_CACHE=$PWD/victim hangwatch dump --pid P` made victim/ 0700 and deleted
    /// config.yaml, id_rsa and notes.txt: a directory with someone's files is never a cache.
    @Test func aDirectoryNamedAsTheCacheIsNotTakenOver() throws {
        let database = try TemporaryDatabase()
        let victim = (database.path as NSString).deletingLastPathComponent + "/victim"
        #expect(mkdir(victim, 0o755) == 0)
        chmod(victim, 0o755)
        let planted = ["config.yaml", "id_rsa", "notes.txt"]
        try plantFiles(planted, in: victim)
        let target = try parkedSwiftTarget()
        defer { target.signal(SIGKILL); _ = try? target.waitForExit() }
        let dump = try hangwatch(["dump", "--pid", "\(target.pid)"], database: database, environment: ["HANGWATCH_SYMBOL_CACHE": victim])
        #expect(try dump.waitForExit() == 0, "\(dump.stderr)")
        #expect(dump.stdout.contains("parkedRecursion"), "symbolication works without the cache")
        #expect(names(in: victim) == Set(planted))
        #expect(mode(victim) == 0o755)
    }

    /// `nobody` owns the directory used as XDG_CACHE_HOME and plants `hangwatch -> <a directory
    /// root owns>`: root's dump chmodded the target 0700 and deleted 123 of its 125 files.
    @Test(.enabled(if: geteuid() == 0, "only root can hand a directory to another user"))
    func aLinkPlantedByAnotherUserIsNotFollowed() throws {
        let database = try TemporaryDatabase()
        let top = (database.path as NSString).deletingLastPathComponent
        let rootsDirectory = top + "/roots-directory"
        #expect(mkdir(rootsDirectory, 0o755) == 0)
        chmod(rootsDirectory, 0o755)
        let planted = (0..<125).map { "file-\($0)" }
        try plantFiles(planted, in: rootsDirectory)
        let nobodysCache = top + "/nobodys-cache"
        #expect(mkdir(nobodysCache, 0o755) == 0 && chown(nobodysCache, nobody, nobody) == 0)
        #expect(symlink(rootsDirectory, nobodysCache + "/hangwatch") == 0 && lchown(nobodysCache + "/hangwatch", nobody, nobody) == 0)
        let target = try parkedSwiftTarget()
        defer { target.signal(SIGKILL); _ = try? target.waitForExit() }
        let dump = try hangwatch(["dump", "--pid", "\(target.pid)"], database: database,
                                 environment: ["XDG_CACHE_HOME": nobodysCache, "HANGWATCH_SYMBOL_CACHE": ""])
        #expect(try dump.waitForExit() == 0, "\(dump.stderr)")
        #expect(names(in: rootsDirectory) == Set(planted))
        #expect(mode(rootsDirectory) == 0o755)
        #expect(!FileManager.default.fileExists(atPath: rootsDirectory + "/symbols"))
    }

    /// The same rules for the database: a directory of someone else's files is refused as it is
    /// (no chmod, nothing created in it), a path through a directory another user owns too.
    @Test func aDatabaseIsOnlyADirectoryHangwatchMadeOrAnEmptyOne() throws {
        let database = try TemporaryDatabase()
        let top = (database.path as NSString).deletingLastPathComponent
        let someones = top + "/someones"
        #expect(mkdir(someones, 0o755) == 0)
        chmod(someones, 0o755)
        try plantFiles(["a.txt", "b.txt"], in: someones)
        let refused = try runHangwatch(["list", "--database", someones], database: database)
        #expect(refused.status != 0)
        #expect(refused.stderr.contains("refusing \(someones): it is not empty and is not a hangwatch database"), "\(refused.stderr)")
        #expect(names(in: someones) == ["a.txt", "b.txt"])
        #expect(mode(someones) == 0o755)

        let empty = top + "/empty"
        #expect(mkdir(empty, 0o755) == 0)
        #expect(try runHangwatch(["list", "--database", empty], database: database).status == 0)
        #expect(names(in: empty).contains("settings.json"))
        #expect(mode(empty) == 0o700)
        // Made by us: used again.
        #expect(try runHangwatch(["list", "--database", empty], database: database).status == 0)

        guard geteuid() == 0 else { return }
        let nobodys = top + "/nobodys"
        #expect(mkdir(nobodys, 0o755) == 0 && chown(nobodys, nobody, nobody) == 0)
        // (`process`: `list` makes no database where there is none, so it never gets to refuse one.)
        let through = try runHangwatch(["process", "--database", nobodys + "/db"], database: database)
        #expect(through.status != 0)
        #expect(through.stderr.contains("refusing \(nobodys): it is owned by user 65534"), "\(through.stderr)")
        #expect(names(in: nobodys).isEmpty)
    }

    /// `hangwatch prune` sized files by st_size: one 100 GiB sparse file in reports/pending/
    /// made it delete all 5 real reports "to free 107374319330 bytes".
    @Test func aSparseFileDoesNotMakeThePruneDeleteRealReports() throws {
        let database = try TemporaryDatabase()
        let opened = try CrashReportDatabase(path: database.path)
        var ids: [String] = []
        for _ in 0..<5 {
            let id = UUID().uuidString.lowercased()
            try opened.writeReport(id: id, json: Data("{\"kind\":\"dump\"}".utf8), text: "*** Dump ***\n")
            ids.append(id)
        }
        for (name, header) in [("1a2b3c4d-0000-4000-8000-000000000001.json", ""), ("1a2b3c4d-0000-4000-8000-000000000002.json", "{")] {
            let path = opened.pendingReportsPath + "/" + name
            let fd = open(path, O_CREAT | O_WRONLY, 0o600)
            #expect(fd >= 0)
            _ = header.withCString { write(fd, $0, strlen($0)) }
            #expect(ftruncate(fd, 100 << 30) == 0)
            close(fd)
        }
        let pruned = try runHangwatch(["prune"], database: database)
        #expect(pruned.status == 0, "\(pruned.stderr)")
        let left = Set(try opened.listReports().map(\.id))
        #expect(Set(ids).isSubset(of: left), "pruned real reports: \(pruned.stdout)")
    }

    /// A 100 GiB sparse intermediate dump older than a valid one made `hangwatch process` exit 1
    /// before reaching the valid dump, three runs in a row, then moved it to failed/ as
    /// "interrupted 3 times: the processor died".
    @Test func aDumpTooLargeToReadGoesToFailedAtOnceAndBlocksNothing() throws {
        let database = try TemporaryDatabase()
        let opened = try CrashReportDatabase(path: database.path)
        let huge = opened.intermediatePath + "/com.example.app@\(UUID().uuidString).hwdump"
        let fd = open(huge, O_CREAT | O_WRONLY, 0o600)
        #expect(fd >= 0 && ftruncate(fd, 100 << 30) == 0)
        close(fd)
        var times = [timespec(tv_sec: Int(twoHoursAgo.timeIntervalSince1970), tv_nsec: 0),
                     timespec(tv_sec: Int(twoHoursAgo.timeIntervalSince1970), tv_nsec: 0)]
        #expect(utimensat(AT_FDCWD, huge, &times, 0) == 0)
        let client = try DumpClient(databasePath: database.path, bundleID: "com.example.app")
        try client.dumpWithoutCrashAndDeferProcessing()

        let processed = try runHangwatch(["process"], database: database)
        #expect(processed.status == 0, "\(processed.stderr)")
        #expect(processed.stdout.contains("processed 1 dump(s)"), "\(processed.stdout)")
        #expect(processed.stdout.contains("too large: 107374182400 bytes, over the"), "\(processed.stdout)")
        #expect(try database.reports().count == 1)
        #expect(try opened.listFailedDumps().count == 1)
    }

    /// Newlines from the target (its argv here) printed whole forged lines on hangwatch's stderr.
    @Test func aTargetsNewlinesCannotForgeALineOfHangwatchs() throws {
        let database = try TemporaryDatabase()
        let forged = "x\nhangwatch: report FAKE saved to /tmp/fake.json\ty"
        let run = try hangwatch(["run", "--silence", "1", "--kill-after", "1", "--", "/bin/sh", "-c", "sleep 30; true", forged],
                                database: database)
        #expect(try run.waitForExit(timeout: 60) == 124)
        let lines = run.stderr.split(separator: "\n")
        #expect(!lines.contains { $0.hasPrefix("hangwatch: report FAKE") }, "\(run.stderr)")
        #expect(run.stderr.contains("x\\nhangwatch: report FAKE saved to /tmp/fake.json\\ty"), "\(run.stderr)")
        // The report's text keeps it on its line too (the JSON keeps the exact bytes).
        let report = try #require(try database.reports().first)
        #expect(report.processTree?.processes.contains { $0.arguments.contains(forged) } == true)
        let show = try runHangwatch(["show", report.id], database: database)
        #expect(!show.stdout.split(separator: "\n").contains { $0.hasPrefix("hangwatch: report FAKE") })
    }
}
