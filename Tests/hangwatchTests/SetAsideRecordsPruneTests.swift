// Issue 45: anything that can write runs/ could fill the disk through failed/. 800 forged run
// records (~250 KiB each) set aside by processing — 1,600 files, 205 MB with their .reason
// files — were neither counted nor removed by `hangwatch prune`, at any age or size; nor were
// the `.tmp-` files a writer killed mid-write leaves in runs/ and staging/. Here the real
// `hangwatch process` sets forged records aside and the real `hangwatch prune` removes them,
// and nothing that is not ours (another name, or our name with another header) goes.
import HangwatchDatabase
import Foundation
import HangwatchTestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

@Suite("hangwatch prune: set-aside records", .ownThread)
struct SetAsideRecordsPruneTests {
    static let bundle = "com.example.forged"

    /// `count` run records in runs/, written as a monitor writes them (its JSON encoder, its
    /// names, 0600) but each with an executable path of `bytes` bytes, more than a monitor
    /// keeps (RunRecord.problem): processing sets each aside.
    func forgeRunRecords(_ count: Int, bytes: Int, in database: TemporaryDatabase) throws -> [String] {
        let opened = try CrashReportDatabase(path: database.path)
        _ = opened  // runs/ exists, 0700
        var record = RunRecord.current(bundleID: Self.bundle, heartbeatIntervalSeconds: 5)
        record.pid = 4_194_305  // above the kernel's pid limit: no process's
        record.executable = "/" + String(repeating: "x", count: bytes)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let json = try encoder.encode(record)
        return (0..<count).map { _ in
            let name = "\(Self.bundle)@\(UUID().uuidString.lowercased()).run.json"
            #expect(FileManager.default.createFile(atPath: database.path + "/runs/" + name, contents: json,
                                                   attributes: [.posixPermissions: 0o600]))
            return name
        }
    }

    func names(_ directory: String) -> Set<String> {
        Set((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? [])
    }

    func age(_ path: String, seconds: Double) {
        let then = Date().timeIntervalSince1970 - seconds
        var times = [timespec(tv_sec: Int(then), tv_nsec: 0), timespec(tv_sec: Int(then), tv_nsec: 0)]
        #expect(utimensat(AT_FDCWD, path, &times, AT_SYMLINK_NOFOLLOW) == 0, "\(path)")
    }

    func write(_ path: String, _ bytes: [UInt8]) {
        #expect(FileManager.default.createFile(atPath: path, contents: Data(bytes), attributes: [.posixPermissions: 0o600]))
    }

    @Test func oldSetAsideRecordsArePrunedAndNothingElse() throws {
        let database = try TemporaryDatabase()
        let forged = try forgeRunRecords(1_000, bytes: 100_000, in: database)
        let processed = try runHangwatch(["process"], database: database, timeout: 300)
        #expect(processed.status == 0, "\(processed.stderr.suffix(1500))")
        let failed = database.path + "/failed"
        let setAside = Set(forged + forged.map { $0 + ".reason" })
        #expect(names(failed) == setAside, "processing set every forged record aside, with its reason")

        // Not ours, in failed/: another name; our names with another header (or a .reason
        // larger than any we write); and a staged hang's files set aside, ours, to go too.
        let foreign: [(String, [UInt8])] = [
            ("notes.txt", Array("keep me\n".utf8)),
            ("\(Self.bundle)@\(UUID().uuidString.lowercased()).run.json", Array("not json at all".utf8)),
            ("\(Self.bundle)@\(UUID().uuidString.lowercased()).hang.dump", Array("\u{7f}ELF".utf8) + [UInt8](repeating: 1, count: 64)),
            ("\(Self.bundle)@\(UUID().uuidString.lowercased()).hang.samples.json", Array("{\"a\":1}".utf8)),
            ("\(Self.bundle)@\(UUID().uuidString.lowercased()).run.json.reason", [UInt8](repeating: 0x41, count: 10_000)),
        ]
        let hang = "\(Self.bundle)@\(UUID().uuidString.lowercased())"
        let ours: [(String, [UInt8])] = [
            (hang + ".hang.json", Array("{\"version\":1}".utf8)),
            (hang + ".hang.dump", Array("HWIDUMP".utf8) + [0] + [UInt8](repeating: 2, count: 64)),
            (hang + ".hang.samples.json", Array("[]".utf8)),
            (hang + ".hang.json.reason", Array("staged hang not promoted\n".utf8)),
        ]
        for (name, bytes) in foreign + ours { write(failed + "/" + name, bytes) }
        for name in names(failed) { age(failed + "/" + name, seconds: 400 * 86_400) }

        // A live record (runs/) and staged hang (staging/) are never pruned, however old; the
        // `.tmp-` files a killed writer left there are, an hour on, when they start as ours.
        let live = "\(Self.bundle)@\(UUID().uuidString.lowercased())"
        let kept = [("runs", live + ".run.json", Array("{}".utf8)), ("staging", live + ".hang.json", Array("{}".utf8)),
                    ("staging", live + ".hang.dump", Array("HWIDUMP".utf8) + [0]),
                    ("runs", ".tmp-\(live).run.json-12-34", Array("#!/bin/sh".utf8))]
        let stale = [("runs", ".tmp-\(live).run.json-12-35", Array("{\"pid\":".utf8)),
                     ("staging", ".tmp-\(live).hang.dump-12-36", Array("HWIDUMP".utf8) + [0, 9]),
                     ("staging", ".tmp-\(live).hang.samples.json-12-37", Array("[{\"tid\"".utf8))]
        for (directory, name, bytes) in kept + stale {
            write(database.path + "/" + directory + "/" + name, bytes)
            age(database.path + "/" + directory + "/" + name, seconds: 400 * 86_400)
        }

        let pruned = try runHangwatch(["prune", "--max-age-days", "1", "--max-megabytes", "1"], database: database)
        #expect(pruned.status == 0, "\(pruned.stderr)")
        #expect(names(failed) == Set(foreign.map(\.0)), "left in failed/: \(names(failed).count) files")
        #expect(pruned.stdout.contains("1003 set-aside record(s), 1001 .reason file(s), 3 temporary file(s)"), "\(pruned.stdout)")
        for (directory, name, _) in kept {
            #expect(names(database.path + "/" + directory).contains(name), "\(directory)/\(name) was removed")
        }
        for (directory, name, _) in stale {
            #expect(!names(database.path + "/" + directory).contains(name), "\(directory)/\(name) is left")
        }
    }

    /// Young set-aside records count in the total size: over --max-megabytes they go, oldest first.
    @Test func setAsideRecordsCountInTheTotalSize() throws {
        let database = try TemporaryDatabase()
        let forged = try forgeRunRecords(40, bytes: 100_000, in: database)
        #expect(try runHangwatch(["process"], database: database, timeout: 120).status == 0)
        let failed = database.path + "/failed"
        for (index, name) in forged.enumerated() {
            age(failed + "/" + name, seconds: Double(forged.count - index) * 60)
            age(failed + "/" + name + ".reason", seconds: Double(forged.count - index) * 60)
        }
        let pruned = try runHangwatch(["prune", "--max-megabytes", "1"], database: database)
        #expect(pruned.status == 0, "\(pruned.stderr)")
        let left = forged.filter { names(failed).contains($0) }
        #expect(!left.isEmpty && left.count < 12, "\(left.count) of 40 left: \(pruned.stdout)")
        #expect(left == Array(forged.suffix(left.count)), "the newest are kept")
        let remaining = try #require(pruned.stdout.split(separator: ",").last?.split(separator: " ").first.flatMap { Int($0) })
        #expect(remaining <= 1 << 20, "\(pruned.stdout)")
    }
}
