// Hostile contents inside the database: planted symlinks, FIFOs, huge files, read-only
// storage, a restrictive umask. Nothing outside the database may be read or written.
@testable import HangwatchDatabase
@testable import HangwatchSnapshot
import Foundation
import HangwatchTestSupport
import Testing
#if canImport(Glibc)
import Glibc
import HangwatchStageTestSupport
#endif

@Suite("Database security", .ownThread)
struct DatabaseSecurityTests {
    @Test func plantedSymlinksAreNeverFollowed() throws {
        let sandbox = try DatabaseSandbox()
        let database = try sandbox.open()
        let outside = sandbox.directory + "/outside-secret"
        try writeFile(outside, "secret")
        let id = "0badcafe-0000-0000-0000-000000000000"

        // A report that is a link to an outside file is neither listed nor read...
        let reportLink = database.pendingReportsPath + "/\(id).json"
        #expect(symlink(outside, reportLink) == 0)
        #expect(try database.listReports().isEmpty)
        #expect(throws: DatabaseError.symlinkRefused(path: reportLink)) { try database.readReport(id: id) }
        // ...and writing the report replaces the link itself, not the file it points to.
        try database.writeReport(id: id, json: Data("{\"mine\":true}".utf8), text: nil)
        #expect(!isSymlink(reportLink))
        #expect(readFileText(outside) == "secret")
        #expect(try database.readReport(id: id) == Data("{\"mine\":true}".utf8))

        // A finished-looking dump that is a link is ignored by claims and left alone.
        let dumpLink = database.intermediatePath + "/com.example.app@\(UUID().uuidString).hwdump"
        #expect(symlink(outside, dumpLink) == 0)
        let lockedLink = database.intermediatePath + "/com.example.app@\(UUID().uuidString).locked"
        #expect(symlink(outside, lockedLink) == 0)
        #expect(try database.claimIntermediateDumps(bundleID: "com.example.app", now: Date() + 100 * day).isEmpty)
        #expect(isSymlink(dumpLink) && isSymlink(lockedLink))
        #expect(readFileText(outside) == "secret")
        #expect(modeOf(outside) == 0o644)
    }

    /// A database directory (or one of its subdirectories) another user owns is refused, even
    /// by root, and left untouched (no chmod, nothing created in it).
    @Test func anotherUsersDirectoryIsRefused() throws {
        let sandbox = try DatabaseSandbox()
        let nobody: uid_t = 65534
        // Only root can give a directory to another user (CI and this project's machines run as root).
        guard getuid() == 0 else { return }
        try #require(mkdir(sandbox.databasePath, 0o755) == 0 && chown(sandbox.databasePath, nobody, nobody) == 0)
        #expect(throws: DatabaseError.notOwned(path: sandbox.databasePath, owner: nobody, user: 0)) { try sandbox.open() }
        var info = stat()
        #expect(stat(sandbox.databasePath, &info) == 0 && info.st_mode & 0o777 == 0o755, "mode left as it was")
        #expect(directoryNames(sandbox.databasePath).isEmpty, "nothing created in it")
        let message = "\(DatabaseError.notOwned(path: sandbox.databasePath, owner: nobody, user: 0))"
        #expect(message.contains("owned by uid 65534") && message.contains("not by you"))

        // A subdirectory planted by another user in our own database is refused too.
        try #require(chown(sandbox.databasePath, 0, 0) == 0)
        _ = try sandbox.open()
        try #require(chown(sandbox.databasePath + "/staging", nobody, nobody) == 0)
        #expect(throws: DatabaseError.notOwned(path: sandbox.databasePath + "/staging", owner: nobody, user: 0)) { try sandbox.open() }
    }

    @Test func symlinkedDirectoriesAreRefused() throws {
        let sandbox = try DatabaseSandbox()
        _ = try sandbox.open()
        let elsewhere = sandbox.directory + "/elsewhere"
        #expect(mkdir(elsewhere, 0o755) == 0)
        let pending = sandbox.databasePath + "/reports/pending"
        #expect(rmdir(pending) == 0)
        #expect(symlink(elsewhere, pending) == 0)
        #expect(throws: DatabaseError.symlinkRefused(path: pending)) { try sandbox.open() }
        #expect(directoryNames(elsewhere).isEmpty)
        #expect(modeOf(elsewhere) == 0o755)

        let linkedRoot = sandbox.directory + "/linked-db"
        #expect(symlink(sandbox.databasePath, linkedRoot) == 0)
        #expect(throws: DatabaseError.symlinkRefused(path: linkedRoot)) { try CrashReportDatabase(path: linkedRoot) }
    }

    @Test func fileWhereADirectoryBelongsIsAClearError() throws {
        let sandbox = try DatabaseSandbox()
        _ = try sandbox.open()
        let intermediate = sandbox.databasePath + "/intermediate"
        #expect(rmdir(intermediate) == 0)
        try writeFile(intermediate, "not a directory")
        let error = #expect(throws: DatabaseError.notADirectory(path: intermediate)) { try sandbox.open() }
        #expect(error?.description == "\(intermediate) should be a directory but is not")
    }

    @Test func fifoPlantedAsAReportDoesNotBlockReading() throws {
        let sandbox = try DatabaseSandbox()
        let database = try sandbox.open()
        #expect(mkfifo(database.pendingReportsPath + "/fifo.json", 0o600) == 0)
        #expect(throws: DatabaseError.notARegularFile(path: database.pendingReportsPath + "/fifo.json")) {
            try database.readReport(id: "fifo")
        }
        #expect(try database.listReports().isEmpty)
    }

    @Test func oversizedReportsAndDumpsAreRefused() throws {
        let sandbox = try DatabaseSandbox()
        // Default bound (64 MiB): a sparse 65 MiB report costs no disk space.
        let database = try sandbox.open()
        let huge = database.pendingReportsPath + "/huge.json"
        let fd = open(huge, O_CREAT | O_WRONLY, 0o600)
        #expect(fd >= 0)
        #expect(ftruncate(fd, 65 << 20) == 0)
        close(fd)
        #expect(throws: DatabaseError.fileTooLarge(path: huge, size: 65 << 20, limit: 64 << 20)) {
            try database.readReport(id: "huge")
        }

        var options = DatabaseOptions()
        options.maxReadBytes = 1000
        let small = try sandbox.open(options)
        try small.writeReport(id: "big", json: Data(repeating: 0x20, count: 1001), text: nil)
        #expect(throws: DatabaseError.self) { try small.readReport(id: "big") }
        // A dump over the limit is never claimed: it goes to failed/ at once, saying why.
        try small.makeFinishedDump(bundleID: "com.example.app", text: String(repeating: "x", count: 1001))
        #expect(try small.claimIntermediateDumps(bundleID: "com.example.app").isEmpty)
        let failed = try small.listFailedDumps()
        #expect(failed.count == 1)
        #expect(failed.first?.reason?.contains("too large: 1001 bytes, over the 1000-byte limit") == true, "\(failed)")
    }

    @Test(arguments: ["0277", "0000"])
    func modesIgnoreTheUmask(umaskText: String) throws {
        // umask is per process: run the writer as a child so parallel tests are unaffected.
        let sandbox = try DatabaseSandbox()
        let fixture = try productPath("hangwatch-fixture-database")
        let child = try ChildProcess("/bin/sh", ["-c", "umask \(umaskText) && exec \"$0\" populate \"$1\" com.example.app",
                                                 fixture, sandbox.databasePath])
        #expect(try child.waitForExit() == 0, "\(child.stderr)")
        #expect(child.stdout.contains("done"))
        let db = sandbox.databasePath
        for directory in ["", "/intermediate", "/processing", "/failed", "/staging", "/reports", "/reports/pending", "/reports/completed"] {
            #expect(modeOf(db + directory) == 0o700, "\(directory)")
        }
        var files = ["/settings.json", "/reports/pending/populated.json", "/reports/pending/populated.txt",
                     "/reports/completed/uploaded.json", "/reports/completed/uploaded.txt", "/reports/completed/uploaded.server"]
        files += directoryNames(db + "/intermediate").map { "/intermediate/" + $0 }
        #expect(files.count == 7)
        for file in files { #expect(modeOf(db + file) == 0o600, "\(file)") }
    }

    @Test func failedWriteNamesThePathAndLeavesNothingBehind() throws {
        // RLIMIT_FSIZE makes write(2) fail with EFBIG for real, even as root.
        let sandbox = try DatabaseSandbox()
        let database = try sandbox.open()
        let child = try ChildProcess(product: "hangwatch-fixture-database",
                                     ["write-report-fsize", sandbox.databasePath, "too-big", "100000", "4096"])
        #expect(try child.waitForExit() == 0, "\(child.stderr)")
        #expect(child.stdout.contains("error could not write \(database.pendingReportsPath)/too-big.json"), "\(child.stdout)")
        #expect(child.stdout.contains("File too large"))
        // The text file was written first and fits; the json did not: neither is left.
        #expect(directoryNames(database.pendingReportsPath).allSatisfy { !$0.hasPrefix(".tmp-") })
        #expect(directoryNames(database.pendingReportsPath).isEmpty)
        #expect(try database.listReports().isEmpty)
    }

    @Test func readOnlyDatabaseGivesClearErrors() throws {
        let sandbox = try DatabaseSandbox()
        let database = try sandbox.open()
        try database.writeReport(id: "existing", json: Data("{}".utf8), text: nil)
        // Root ignores file modes, so a read-only bind mount in a private mount namespace of the
        // child is the honest way to get EROFS.
        let script = """
            mount --bind "$1" "$1" && mount -o remount,ro,bind "$1" || { echo no-mount-namespace; exit 0; }
            exec "$0" readonly "$1"
            """
        let fixture = try productPath("hangwatch-fixture-database")
        let child = try ChildProcess("/usr/bin/unshare", ["-m", "/bin/sh", "-c", script, fixture, sandbox.databasePath])
        let status = try child.waitForExit()
        let out = child.stdout
        if status != 0 || out.contains("no-mount-namespace") {
            // Without CAP_SYS_ADMIN the EFBIG test above covers failed writes.
            print("read-only test not possible here: \(out) \(child.stderr)")
            return
        }
        #expect(out.contains("opened"))
        #expect(out.contains("dump error could not create \(database.intermediatePath)/.tmp-com.example.ro@"), "\(out)")
        #expect(out.contains("report error could not create \(database.pendingReportsPath)/.tmp-ro-report.txt-"), "\(out)")
        #expect(out.contains("complete error could not "), "\(out)")
        #expect(out.contains("Read-only file system"))
        #expect(try database.listReports().map(\.id) == ["existing"])
        #expect(try database.findReport("existing").state == .pending)
    }
}
