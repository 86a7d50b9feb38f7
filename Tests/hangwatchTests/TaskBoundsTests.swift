// Reading tasks costs what the task graph holds and no more, and leaves the program as it was
// (docs/tasks.md, "Bounds"): a serial queue of 20,000 tasks, 64 GiB reserved and never touched,
// bounds of bytes and time that say what they left, an ELF file with a thousand symbol tables.
// Time is the CPU time of the hangwatch child, memory the target's own /proc status: never the
// test process's clock.
import HangwatchReport
import Foundation
import HangwatchTestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

extension TaskCaptureTests {
    /// `hangwatch dump --pid P --tasks ARGS…`, niced, to its end (its CPU time in the result).
    /// The tests bound its CPU time; the wall-clock `timeout` only ends a run gone wrong. Niced
    /// beside a release build, the debug build's 8.8 s of CPU for 20,000 tasks took more than
    /// the 120 s it once had (a fresh-clone run, session 21).
    func niceDump(_ pid: pid_t, _ extra: [String] = [], database: TemporaryDatabase, timeout: Double = 600) throws -> ProgramResult {
        try runProgram("/usr/bin/nice", ["-n", "10", try productPath("hangwatch"), "dump", "--pid", "\(pid)", "--tasks"] + extra,
                       environment: database.environment, timeout: timeout)
    }

    /// 20,000 requests of a serial queue, each awaiting the one before: one line, no circle. The
    /// cycle search walked a path per task with a linear search per step (2,000 tasks: 49 s of
    /// CPU; 20,000: hours); every step over the graph is linear now.
    @Test func aSerialQueueOf20000TasksIsOneLineAndNoDeadlock() throws {
        let database = try TemporaryDatabase()
        let child = try start("serial", 20_000)
        defer { child.signal(SIGKILL) }
        let result = try niceDump(child.pid, ["--format", "json"], database: database)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.cpuSeconds < 30, "hangwatch used \(result.cpuSeconds) s of CPU")
        let report = try Report.decode(from: Data(result.stdout.utf8))
        let tasks = try #require(report.tasks)
        #expect(tasks.tasks.count == 20_000 && !tasks.truncated)
        #expect(tasks.cycles.isEmpty, "a line is no deadlock: \(tasks.cycles.prefix(3))")
        let awaiting = tasks.tasks.filter { $0.waitingOnTaskID != nil }
        #expect(awaiting.count == 19_999)
        #expect(Set(awaiting.compactMap(\.waitingOnTaskID)).count == 19_999, "each awaits another")
        let text = ReportRenderer.text(report)
        #expect(text.contains("IN LINE: 20000 tasks, each awaiting the one ahead of it"), "\(text.prefix(3000))")
        #expect(text.contains("19999 tasks (") && text.contains("each awaiting another task:"), "\(text.prefix(3000))")
        #expect(!text.contains("DEADLOCK"))
    }

    /// 64 GiB reserved and never touched beside three stuck tasks: the tasks are found, the
    /// reserve is not read, and the target's page tables and resident memory stay as they were
    /// (reading it whole took 90 s and grew the target's page tables from 132 kB to 128 MiB).
    @Test func memoryNeverTouchedIsNotReadAndTheTargetDoesNotGrow() throws {
        let database = try TemporaryDatabase()
        let child = try start("reserve", 3)
        defer { child.signal(SIGKILL) }
        let before = try memory(of: child.pid)
        let result = try niceDump(child.pid, ["--format", "json"], database: database)
        let after = try memory(of: child.pid)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.cpuSeconds < 10, "hangwatch used \(result.cpuSeconds) s of CPU")
        let tasks = try #require(try Report.decode(from: Data(result.stdout.utf8)).tasks)
        #expect(tasks.tasks.count == 3, "\(tasks.error ?? "")")
        #expect((tasks.untouchedBytes ?? 0) >= 64 << 30)
        #expect(tasks.scannedBytes < 1 << 30)
        #expect(tasks.unread == nil && tasks.unreadBytes == nil)
        #expect(after.pageTables - before.pageTables <= 256, "VmPTE \(before.pageTables) → \(after.pageTables) kB")
        #expect(after.resident - before.resident <= 8 << 10, "VmRSS \(before.resident) → \(after.resident) kB")
    }

    /// Each way to the pages in use — PAGEMAP_SCAN, the pagemap's entries (kernels before 6.7),
    /// smaps (no pagemap) — skips the untouched reserve and finds the tasks; the process reads
    /// itself and measures its own page tables around it.
    @Test(arguments: ["scan", "entries", "smaps"])
    func everyWayToThePagesInUseLeavesUntouchedMemoryAlone(_ pages: String) throws {
        let reading = try selfRead(pages, maxBytes: 0, seconds: 0)
        #expect(reading["count"] as? Int == 3, "\(reading)")
        #expect((reading["untouchedBytes"] as? Int ?? 0) >= 64 << 30, "\(reading)")
        #expect((reading["scannedBytes"] as? Int ?? 0) >= 256 << 20, "the 256 MiB written are read: \(reading)")
        #expect((reading["pteAfter"] as? Int ?? .max) - (reading["pteBefore"] as? Int ?? 0) <= 256, "\(reading)")
        #expect(reading["unread"] as? String == "")
    }

    /// A bound of bytes stops the reading there and says how much in use was left; a deadline
    /// stops it at once and says how much was not looked at.
    @Test func boundsOfBytesAndTimeSayWhatWasLeftUnread() throws {
        let bounded = try selfRead("scan", maxBytes: 64 << 20, seconds: 0)
        #expect(bounded["scannedBytes"] as? Int == 64 << 20, "\(bounded)")
        #expect((bounded["unreadBytes"] as? Int ?? 0) >= 190 << 20, "most of the 256 MiB written: \(bounded)")
        #expect((bounded["unread"] as? String ?? "").contains("in use past the 64 MiB bound of bytes read"), "\(bounded)")
        let late = try selfRead("scan", maxBytes: 0, seconds: 0.000_001)
        #expect(late["scannedBytes"] as? Int == 0, "\(late)")
        #expect((late["unreadBytes"] as? Int ?? 0) >= 256 << 20, "\(late)")
        #expect((late["unread"] as? String ?? "").contains("deadline"), "\(late)")
    }

    /// A program whose executable holds 1,024 symbol tables of 32 MiB each (its own bytes
    /// rewritten: the section headers say SYMTAB, the tables are zeros): the runtime is looked
    /// for in the first .dynsym and the first .symtab only, and the report says what was left
    /// (every table read and searched: 100 s of CPU).
    @Test func anExecutableWithAThousandSymbolTablesIsLookedUpInBoundedTime() throws {
        let database = try TemporaryDatabase()
        let directory = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(directory) }
        let crafted = directory + "/sleep-1024-symtabs"
        try CraftedELF.withSymbolTables(1_024, tableBytes: 32 << 20, from: "/bin/sleep", to: crafted)
        let sleeper = try ChildProcess(crafted, ["60"])
        defer { sleeper.signal(SIGKILL) }
        Thread.sleep(forTimeInterval: 0.2)
        let result = try niceDump(sleeper.pid, ["--format", "json"], database: database, timeout: 60)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.cpuSeconds < 10, "hangwatch used \(result.cpuSeconds) s of CPU")
        let tasks = try #require(try Report.decode(from: Data(result.stdout.utf8)).tasks)
        let error = tasks.error ?? ""
        #expect(error.contains("no Swift concurrency runtime"), "\(error)")
        #expect(error.contains("1023 of its 1025 symbol tables not read"), "\(error)")
    }

    /// selfread: the fixture reads its own tasks (3, beside 64 GiB untouched and 256 MiB written).
    func selfRead(_ pages: String, maxBytes: Int, seconds: Double) throws -> [String: Any] {
        let child = try ChildProcess(product: "hangwatch-fixture-tasks", ["selfread", "3", pages, "\(maxBytes)", "\(seconds)"])
        // A liveness deadline, not a bound (what is bounded is the child's page tables): beside the
        // whole suite one of these children took over 60 s to write its 256 MiB and read itself.
        #expect(try child.waitForExit(timeout: 180) == 0, "\(child.stderr)")
        let line = try #require(child.stdout.split(separator: "\n").first { $0.contains("\"tasks\"") }, "\(child.stdout)")
        return try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
    }

    /// VmPTE and VmRSS of process `pid`, kB.
    func memory(of pid: pid_t) throws -> (pageTables: Int, resident: Int) {
        let status = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
        func field(_ name: String) throws -> Int {
            let line = try #require(status.split(separator: "\n").first { $0.hasPrefix(name + ":") })
            return try #require(Int(line.split(separator: " ").dropFirst().first ?? ""))
        }
        return (try field("VmPTE"), try field("VmRSS"))
    }
}

/// An ELF file rewritten with more symbol tables than any linker writes.
enum CraftedELF {
    /// `source` with `count` SHT_SYMTAB sections appended, each `tableBytes` of zeros (one shared
    /// region) linked to a string table over the same zeros; the program headers are untouched,
    /// so it still runs.
    static func withSymbolTables(_ count: Int, tableBytes: Int, from source: String, to path: String) throws {
        var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: source)))
        let sectionsAt = Int(load(bytes, 0x28, UInt64.self)), entrySize = Int(load(bytes, 0x3A, UInt16.self))
        let sectionCount = Int(load(bytes, 0x3C, UInt16.self))
        try #require(bytes.count >= 64 && entrySize == 64 && sectionsAt + sectionCount * 64 <= bytes.count)
        let sections = Array(bytes[sectionsAt..<(sectionsAt + sectionCount * 64)])
        bytes += [UInt8](repeating: 0, count: (4096 - bytes.count % 4096) % 4096)
        let region = bytes.count
        bytes += [UInt8](repeating: 0, count: tableBytes)
        let newSectionsAt = bytes.count
        bytes += sections
        let strings = sectionCount
        bytes += header(type: 3, offset: region, size: tableBytes, link: 0, entrySize: 0)  // SHT_STRTAB
        for _ in 0..<count {
            bytes += header(type: 2, offset: region, size: tableBytes - tableBytes % 24, link: strings, entrySize: 24)  // SHT_SYMTAB
        }
        store(&bytes, 0x28, UInt64(newSectionsAt))
        store(&bytes, 0x3C, UInt16(sectionCount + 1 + count))
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        chmod(path, 0o755)
    }

    /// One Elf64_Shdr.
    static func header(type: UInt32, offset: Int, size: Int, link: Int, entrySize: Int) -> [UInt8] {
        var entry = [UInt8](repeating: 0, count: 64)
        store(&entry, 4, type)
        store(&entry, 24, UInt64(offset))
        store(&entry, 32, UInt64(size))
        store(&entry, 40, UInt32(link))
        store(&entry, 48, UInt64(8))
        store(&entry, 56, UInt64(entrySize))
        return entry
    }

    static func load<T: FixedWidthInteger>(_ bytes: [UInt8], _ offset: Int, _: T.Type) -> T {
        guard offset + MemoryLayout<T>.size <= bytes.count else { return 0 }
        return bytes.withUnsafeBytes { T(littleEndian: $0.loadUnaligned(fromByteOffset: offset, as: T.self)) }
    }

    static func store<T: FixedWidthInteger>(_ bytes: inout [UInt8], _ offset: Int, _ value: T) {
        withUnsafeBytes(of: value.littleEndian) { bytes.replaceSubrange(offset..<(offset + MemoryLayout<T>.size), with: $0) }
    }
}
