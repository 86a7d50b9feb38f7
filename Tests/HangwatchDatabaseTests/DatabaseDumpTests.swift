// Intermediate dumps: writing, claiming, abandoned locked files, retries and failures.
import HangwatchReport
@testable import HangwatchDatabase
@testable import HangwatchSnapshot
import Foundation
import HangwatchTestSupport
import Testing
#if canImport(Glibc)
import Glibc
import HangwatchStageTestSupport
#endif

@Suite("Database dumps", .ownThread)
struct DatabaseDumpTests {
    @Test func createsTheLayoutPrivately() throws {
        let sandbox = try DatabaseSandbox()
        let database = try sandbox.open()
        for sub in ["", "/intermediate", "/processing", "/failed", "/staging", "/reports", "/reports/pending", "/reports/completed"] {
            #expect(modeOf(sandbox.databasePath + sub) == 0o700, "\(sub)")
        }
        #expect(modeOf(sandbox.databasePath + "/settings.json") == 0o600)
        let again = try sandbox.open()
        #expect(again.clientID == database.clientID)
        let settings = try #require(readFileText(sandbox.databasePath + "/settings.json"))
        #expect(settings.contains(database.clientID.uuidString))
        // The file as written is read without JSONDecoder (CrashReportDatabase.Settings(written:)).
        let written = try #require(CrashReportDatabase.Settings(written: Data(settings.utf8)))
        #expect(written.guid == database.clientID && written.createdAt == database.createdAt)
    }

    /// settings.json read without JSONDecoder gives what JSONDecoder gives, and any other text
    /// is left to JSONDecoder.
    @Test func settingsReadAsJSONDecoderReadsThem() throws {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        // 2000-01-01, 2000-02-29, 2001-03-01, 2100-03-01 (2100 is no leap year), 9999-12-31T23:59:59, then random ones.
        let fixed: [Int] = [946_684_800, 951_782_400, 983_404_800, 4_107_542_400, 253_402_300_799]
        for seconds in fixed + (0..<500).map({ _ in Int.random(in: 946_684_800...253_402_300_799) }) {
            let settings = CrashReportDatabase.Settings(guid: UUID(), createdAt: Date(timeIntervalSince1970: Double(seconds)))
            let data = try encoder.encode(settings) + Data("\n".utf8)
            #expect(try decoder.decode(CrashReportDatabase.Settings.self, from: data) == settings)
            #expect(CrashReportDatabase.Settings(written: data) == settings, "\(String(decoding: data, as: UTF8.self))")
        }

        let guid = "DC891ABE-3253-459E-9577-F7C0C1D79704"
        func text(_ date: String, _ uuid: String = guid) -> String {
            "{\n  \"createdAt\" : \"\(date)\",\n  \"guid\" : \"\(uuid)\"\n}\n"
        }
        let canonical = text("2026-11-23T06:22:19Z")
        let lowercase = text("2026-11-23T06:22:19Z", guid.lowercased())
        #expect(CrashReportDatabase.Settings(written: Data(canonical.utf8))?.createdAt == Date(timeIntervalSince1970: 1_795_414_939))
        #expect(CrashReportDatabase.Settings(written: Data(lowercase.utf8)) == (try? decoder.decode(CrashReportDatabase.Settings.self, from: Data(lowercase.utf8))))
        let others = [
            text("1999-12-31T23:59:59Z"), text("2023-02-29T00:00:00Z"), text("2024-04-31T00:00:00Z"), text("2024-00-10T00:00:00Z"),
            text("2024-13-10T00:00:00Z"), text("2024-01-00T00:00:00Z"), text("2024-01-10T24:00:00Z"), text("2024-01-10T23:60:00Z"),
            text("2024-01-10T23:59:60Z"), text("2024-01-10T23:59:5.Z"), text("2024-01-10 23:59:59Z"), text("2024-01-10T23:59:59+"),
            text("2024-1-010T23:59:59Z"), text("+024-01-10T23:59:59Z"), text("2024-01-10T23:59:59Z", "not-a-uuid-at-all-but-36-bytes-long!"),
            String(canonical.dropLast()), canonical + "\n", canonical.replacingOccurrences(of: " : ", with: ":"),
            #"{"createdAt":"2026-11-23T06:22:19Z","guid":"\#(guid)"}"#, "", "{}",
            canonical.replacingOccurrences(of: "createdAt", with: "createdAT"), canonical.replacingOccurrences(of: "\"guid\"", with: "\"GUID\""),
        ]
        for other in others {
            #expect(CrashReportDatabase.Settings(written: Data(other.utf8)) == nil, "\(other)")
        }
    }

    @Test func writesAndFinishesADump() throws {
        let sandbox = try DatabaseSandbox()
        let database = try sandbox.open()
        let file = try database.createIntermediateDump(bundleID: "com.example.app")
        #expect(file.path == "\(database.intermediatePath)/com.example.app@\(file.uuid.uuidString).locked")
        #expect(modeOf(file.path) == 0o600)
        #expect(fcntl(file.fd, F_GETFD) & FD_CLOEXEC != 0)
        _ = "hello".withCString { write(file.fd, $0, 5) }
        let finished = try database.finish(file)
        #expect(finished == "\(database.intermediatePath)/com.example.app@\(file.uuid.uuidString).hwdump")
        #expect(readFileText(finished) == "hello")
        #expect(access(file.path, F_OK) != 0)

        let discarded = try database.createIntermediateDump(bundleID: "com.example.app")
        try database.discard(discarded)
        #expect(access(discarded.path, F_OK) != 0)
    }

    @Test(arguments: [
        ("", "empty"), ("a/b", "'/'"), ("..", "directory reference"), (".hidden", "starts with '.'"),
        ("a\0b", "NUL"), ("a@b", "'@'"), ("a\nb", "control character"), ("a\u{7f}", "control character"),
        ("a..b", "'..'"), (String(repeating: "x", count: 129), "bytes long"),
    ])
    func refusesHostileBundleIDs(id: String, reason: String) throws {
        let sandbox = try DatabaseSandbox()
        let database = try sandbox.open()
        let error = #expect(throws: DatabaseError.self) { try database.createIntermediateDump(bundleID: id) }
        #expect(error?.description.contains(reason) == true, "\(String(describing: error))")
        #expect(throws: DatabaseError.self) { try database.claimIntermediateDumps(bundleID: id) }
        #expect(directoryNames(database.intermediatePath).isEmpty)
    }

    @Test func claimsFinishedDumpsOfAnyBundleOnce() throws {
        let sandbox = try DatabaseSandbox()
        let database = try sandbox.open()
        let mine = try database.makeFinishedDump(bundleID: "com.example.app")
        let helper = try database.makeFinishedDump(bundleID: "com.example.helper")
        let claims = try database.claimIntermediateDumps(bundleID: "com.example.app")
        #expect(Set(claims.map(\.uuid)) == [mine.uuid, helper.uuid])
        #expect(claims.allSatisfy { !$0.abandoned && $0.attempt == 1 && $0.path.hasPrefix(database.processingPath + "/") })
        #expect(try database.claimIntermediateDumps(bundleID: "com.example.app").isEmpty)
        for claim in claims {
            #expect(String(decoding: try database.readClaimedDump(claim), as: UTF8.self) == "dump \(claim.uuid.uuidString)")
            try database.completeClaim(claim)
        }
        #expect(directoryNames(database.processingPath).isEmpty)
        #expect(directoryNames(database.intermediatePath).isEmpty)
        #expect(throws: DatabaseError.claimLost(path: claims[0].path)) { try database.completeClaim(claims[0]) }
    }

    /// A `.locked` file nobody holds the lease of was left by a dead writer: any claimer takes it
    /// (marked abandoned) once it is older than the grace period, whatever its bundle id or age.
    @Test func deadWritersLockedFilesAreClaimedAtOnce() throws {
        let sandbox = try DatabaseSandbox()
        let database = try sandbox.open()
        let now = Date()
        let justWritten = try database.makeAbandonedLockedDump(bundleID: "com.example.app", writtenAt: now - 1)
        let seconds = try database.makeAbandonedLockedDump(bundleID: "com.example.app", writtenAt: now - 3)
        let ancient = try database.makeAbandonedLockedDump(bundleID: "com.example.other", writtenAt: now - 61 * day)

        let claims = try database.claimIntermediateDumps(bundleID: "com.example.third", now: now)
        #expect(claims.map(\.uuid) == [ancient.uuid, seconds.uuid], "oldest first")
        #expect(claims.allSatisfy { $0.abandoned })
        #expect(claims.first?.bundleID == "com.example.other")
        #expect(try database.readClaimedDump(claims[0]) == Data("partial".utf8))
        #expect(access(justWritten.path, F_OK) == 0, "within the grace period")
        for claim in claims { try database.completeClaim(claim) }

        let later = try database.claimIntermediateDumps(bundleID: "com.example.app", now: now + 5)
        #expect(later.map(\.uuid) == [justWritten.uuid])
    }

    @Test func emptyAbandonedLockedFileIsRemovedNotClaimed() throws {
        let sandbox = try DatabaseSandbox()
        let database = try sandbox.open()
        let empty = try database.makeAbandonedLockedDump(bundleID: "com.example.app", writtenAt: Date() - 2 * day, text: "")
        #expect(try database.claimIntermediateDumps(bundleID: "com.example.app").isEmpty)
        #expect(access(empty.path, F_OK) != 0)
        #expect(directoryNames(database.processingPath).isEmpty)
    }

    @Test func liveWriterKeepsItsOldLockedFile() throws {
        let sandbox = try DatabaseSandbox()
        let database = try sandbox.open()
        let holder = try ChildProcess(product: "hangwatch-fixture-database", ["hold-locked", sandbox.databasePath, "com.example.app"])
        let output = try holder.waitForOutput("locked ")
        let path = String(try #require(output.split(separator: "\n").first { $0.hasPrefix("locked ") }).dropFirst(7))
        try setModificationDate(path, Date() - 90 * day)
        // Older than both limits, but its writer is alive and holds the lease.
        #expect(try database.claimIntermediateDumps(bundleID: "com.example.app").isEmpty)
        #expect(access(path, F_OK) == 0)

        holder.signal(SIGKILL)
        #expect(try holder.waitForExit() == 128 + SIGKILL)
        let claims = try database.claimIntermediateDumps(bundleID: "com.example.app")
        #expect(claims.count == 1)
        #expect(claims.first?.abandoned == true)
        #expect(try claims.first.map { try database.readClaimedDump($0) } == Data("partial".utf8))
    }

    @Test func claimOfADeadProcessorIsRecovered() throws {
        let sandbox = try DatabaseSandbox()
        let database = try sandbox.open()
        let dump = try database.makeFinishedDump(bundleID: "com.example.app")
        let dying = try ChildProcess(product: "hangwatch-fixture-database", ["claim-and-die", sandbox.databasePath, "com.example.app"])
        #expect(try dying.waitForExit() == 0)
        #expect(dying.stdout.contains("claimed \(dump.uuid.uuidString)"))
        #expect(directoryNames(database.processingPath).count == 1)

        let claims = try database.claimIntermediateDumps(bundleID: "com.example.app")
        #expect(claims.map(\.uuid) == [dump.uuid])
        #expect(claims.first?.attempt == 2)
        try database.completeClaim(claims[0])
        #expect(directoryNames(database.processingPath).isEmpty)
    }

    @Test func claimOfAnUnreapedDeadProcessorIsRecovered() throws {
        let sandbox = try DatabaseSandbox()
        let database = try sandbox.open()
        let dump = try database.makeFinishedDump(bundleID: "com.example.app")
        // The claimer's parent becomes `sleep`, which never reaps it: it stays a zombie,
        // a pid that kill(pid, 0) still finds.
        let script = "\"$0\" claim-and-die \"$1\" com.example.app & exec sleep 60"
        let parent = try ChildProcess("/bin/sh", ["-c", script, try productPath("hangwatch-fixture-database"), sandbox.databasePath])
        defer { parent.signal(SIGKILL) }
        var names: [String] = []
        for _ in 0..<6000 where names.isEmpty {
            names = directoryNames(database.processingPath)
            usleep(5000)
        }
        let claimName = try #require(names.first)
        let pid = try #require(Int32(claimName.split(separator: "~")[5]))
        var state = ""
        for _ in 0..<6000 where !state.hasPrefix("Z") {
            let stat = readFileText("/proc/\(pid)/stat") ?? ""
            state = stat.lastIndex(of: ")").map { String(stat[stat.index($0, offsetBy: 2)...].prefix(1)) } ?? ""
            usleep(5000)
        }
        #expect(state == "Z")
        #expect(kill(pid, 0) == 0)
        let claims = try database.claimIntermediateDumps(bundleID: "com.example.app")
        #expect(claims.map(\.uuid) == [dump.uuid])
        #expect(claims.first?.attempt == 2)
    }

    @Test func liveClaimIsTakenOverOnlyWhenStale() throws {
        let sandbox = try DatabaseSandbox()
        var options = DatabaseOptions()
        options.staleClaimAge = 10 * 60
        let database = try sandbox.open(options)
        let dump = try database.makeFinishedDump(bundleID: "com.example.app")
        let now = Date()
        let first = try database.claimIntermediateDumps(bundleID: "com.example.app", now: now)
        #expect(first.map(\.uuid) == [dump.uuid])
        // Our own claim: this process is alive, so it is not taken over...
        #expect(try database.claimIntermediateDumps(bundleID: "com.example.app", now: now + 9 * 60).isEmpty)
        // ...until it is older than staleClaimAge.
        let second = try database.claimIntermediateDumps(bundleID: "com.example.app", now: now + 11 * 60)
        #expect(second.map(\.uuid) == [dump.uuid])
        #expect(second.first?.attempt == 2)
        #expect(throws: DatabaseError.claimLost(path: first[0].path)) { try database.completeClaim(first[0]) }
        try database.completeClaim(second[0])
    }

    @Test func dumpThatKeepsFailingEndsInFailedDirectory() throws {
        let sandbox = try DatabaseSandbox()
        var options = DatabaseOptions()
        options.maxProcessingAttempts = 3
        let database = try sandbox.open(options)
        let dump = try database.makeFinishedDump(bundleID: "com.example.app", text: "garbage")
        for attempt in 1...3 {
            let claims = try database.claimIntermediateDumps(bundleID: "com.example.app")
            #expect(claims.map(\.uuid) == [dump.uuid])
            #expect(claims.first?.attempt == attempt)
            try database.releaseClaim(claims[0])
        }
        #expect(try database.claimIntermediateDumps(bundleID: "com.example.app").isEmpty)
        let failed = try database.listFailedDumps()
        #expect(failed.count == 1)
        #expect(failed.first?.path.contains(dump.uuid.uuidString) == true)
        #expect(failed.first?.reason?.contains("interrupted 3 times") == true, "\(failed)")
        #expect(readFileText(failed[0].path) == "garbage")
        #expect(directoryNames(database.intermediatePath).isEmpty)
        #expect(directoryNames(database.processingPath).isEmpty)

        let other = try database.makeFinishedDump(bundleID: "com.example.app")
        let claim = try #require(try database.claimIntermediateDumps(bundleID: "com.example.app").first)
        let moved = try database.failClaim(claim, reason: "unreadable: test")
        #expect(moved.contains(other.uuid.uuidString))
        #expect(try database.listFailedDumps().count == 2)
    }

    @Test func longestBundleIDFitsEveryFileName() throws {
        let sandbox = try DatabaseSandbox()
        let database = try sandbox.open()
        let bundleID = String(repeating: "b", count: 128)
        let dump = try database.makeFinishedDump(bundleID: bundleID)
        let claim = try #require(try database.claimIntermediateDumps(bundleID: bundleID).first)
        #expect(claim.uuid == dump.uuid && claim.bundleID == bundleID)
        try database.releaseClaim(claim)
        let again = try #require(try database.claimIntermediateDumps(bundleID: bundleID).first)
        #expect(again.attempt == 2)
        try database.failClaim(again, reason: "unreadable: test")
        #expect(try database.listFailedDumps().count == 1)
    }
}
