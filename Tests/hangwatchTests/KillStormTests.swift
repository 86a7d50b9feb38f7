// Nothing lost under kill -9: writers of deferred dumps and `hangwatch process` runs killed at
// random points, then one clean run. Every finished dump must be exactly one report, nothing
// may stay in intermediate/ or processing/, and no finished dump may be called unreadable.
import Foundation
import HangwatchTestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

@Suite("kill -9 storm", .ownThread)
struct KillStormTests {
    @Test func writersAndProcessorsKilledAtRandomLoseNothing() throws {
        let database = try TemporaryDatabase()
        var finished: Set<String> = []
        var lastWriterKill = Date()
        // Writers: killed mid-capture, mid-write, between finishing and saying so.
        for _ in 0..<6 {
            let writer = try ChildProcess(product: "hangwatch-fixture-database", ["write-dumps", database.path, "30"])
            // Killed at a random point once it has written two dumps: timed from its start, a
            // loaded machine (a release build beside the suite) let no writer finish one in 250 ms.
            let deadline = Date().addingTimeInterval(60)
            while writer.stdout.components(separatedBy: "finished ").count <= 2, writer.isRunning, Date() < deadline { usleep(5_000) }
            usleep(UInt32.random(in: 0...230_000))
            writer.signal(SIGKILL)
            _ = try writer.waitForExit(timeout: 30)
            lastWriterKill = Date()
            for line in writer.stdout.split(separator: "\n") where line.hasPrefix("finished ") {
                let name = line.split(separator: "/").last.map(String.init) ?? ""
                if let at = name.firstIndex(of: "@") { finished.insert(String(name[name.index(after: at)...].prefix(36)).lowercased()) }
            }
        }
        try #require(finished.count >= 10, "the writers finished some dumps before being killed")
        // Processors: ten or more killed at random points (claimed, reading, symbolicating,
        // between the report's write and the claim's removal).
        var kills = 0
        while kills < 12 {
            let processor = try hangwatch(["process"], database: database)
            usleep(UInt32.random(in: 10_000...120_000))
            processor.signal(SIGKILL)
            if try processor.waitForExit(timeout: 30) == 128 + SIGKILL { kills += 1 }
        }
        // A dead writer's .locked dump is processed once past the grace period (2 s).
        let wait = 2.5 - Date().timeIntervalSince(lastWriterKill)
        if wait > 0 { usleep(UInt32(wait * 1e6)) }
        var clean = try runHangwatch(["process"], database: database, timeout: 120)
        #expect(clean.status == 0, "\(clean.stderr)")
        // Dead writers' dumps are processed once past the grace period, which a loaded machine
        // may stretch: a second pass a little later is what a user's next run would be.
        if try FileManager.default.contentsOfDirectory(atPath: database.path + "/intermediate").contains(where: { !$0.hasPrefix(".tmp-") }) {
            usleep(3_000_000)
            clean = try runHangwatch(["process"], database: database, timeout: 120)
            #expect(clean.status == 0, "\(clean.stderr)")
        }

        let root = database.path
        // A writer killed between creating its file and naming it leaves a `.tmp-…` file: not a
        // dump (nothing was written to it yet), garbage for `hangwatch prune`.
        let left = try FileManager.default.contentsOfDirectory(atPath: root + "/intermediate")
        let diagnosis = left.filter { !$0.hasPrefix(".tmp-") }.map { name -> String in
            let path = root + "/intermediate/" + name
            var info = stat()
            _ = stat(path, &info)
            let age = Date().timeIntervalSince1970 - (Double(info.st_mtim.tv_sec) + Double(info.st_mtim.tv_nsec) / 1e9)
            let fd = open(path, O_RDONLY | O_NONBLOCK)
            defer { if fd >= 0 { close(fd) } }
            let free = fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0
            return "\(name): \(info.st_size) bytes, \(age) s old, lease \(free ? "free" : "held")"
        }
        #expect(diagnosis.isEmpty, "\(diagnosis); clean run: \(clean.stdout) \(clean.stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: root + "/processing").isEmpty)
        let failed = try FileManager.default.contentsOfDirectory(atPath: root + "/failed")
        #expect(!failed.contains { name in finished.contains { name.lowercased().contains($0) } },
                "a finished dump was called unreadable: \(failed)")
        let reports = try database.reports()
        let ids = Set(reports.map(\.id))
        #expect(ids.count == reports.count, "no report twice")
        let everything = (FileManager.default.enumerator(atPath: root)?.allObjects as? [String]) ?? []
        let missing = finished.subtracting(ids)
        #expect(missing.isEmpty, "missing: \(missing) — found as: \(everything.filter { path in missing.contains { path.lowercased().contains($0) } }); failed/: \(failed)")
        #expect(reports.allSatisfy { $0.kind == .dump && $0.process.bundleID == "com.example.storm" })
    }
}
