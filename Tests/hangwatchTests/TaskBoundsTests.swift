// Reading tasks costs what the task graph holds and no more (docs/tasks.md, "Bounds"): a
// serial queue of 20,000 tasks, an ELF file with a thousand symbol tables. Time is the CPU time
// of the hangwatch child: never the test process's clock.
import DumpWithoutCrash
import Foundation
import HangwatchTestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

extension TaskCaptureTests {
    /// `hangwatch dump --pid P --tasks ARGS…`, niced, to its end (its CPU time in the result).
    func niceDump(_ pid: pid_t, _ extra: [String] = [], database: TemporaryDatabase, timeout: Double = 120) throws -> ProgramResult {
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
