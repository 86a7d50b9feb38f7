// The one parser of each /proc file (CHangwatchProcFS, used by ProcFS, TaskReader, the crash
// handler, the quiet-capture helper and the ptrace unwinder): crafted lines, and this process's
// own files checked against an independent reading.
import CHangwatchProcFS
import Foundation
import HangwatchPlatform
import HangwatchTestSupport
import Testing

@Suite("/proc parsers", .ownThread)
struct ProcFSParserTests {
    private func stat(_ text: String) -> hw_proc_stat? { ProcFS.parseStat(Array(text.utf8)) }

    private func fields(_ count: Int) -> String { (4...count).map { $0 == 22 ? "9876543210" : String($0) }.joined(separator: " ") }

    @Test func statFieldsCountFromTheLastParenthesis() throws {
        let line = "42 (a) b (c)) S " + fields(52) + "\n"
        let parsed = try #require(stat(line))
        let bytes = Array(line.utf8)
        #expect(String(decoding: bytes[parsed.name_offset..<(parsed.name_offset + parsed.name_length)], as: UTF8.self) == "a) b (c)")
        #expect(parsed.state == CChar(UInt8(ascii: "S")))
        #expect(parsed.parent == 4 && parsed.process_group == 5)
        #expect(parsed.user_ticks == 14 && parsed.system_ticks == 15 && parsed.start_ticks == 9_876_543_210)
        #expect(parsed.virtual_bytes == 23 && parsed.exit_signal == 38)
    }

    /// Fields past 22 are read when there: a line that ends before them (a small read) still
    /// parses, without them, and a number cut short at the end of the bytes is not taken.
    @Test func statFieldsPast22AreOptional() throws {
        let upTo22 = try #require(stat("42 (a) S " + fields(22)))
        #expect(upTo22.start_ticks == 9_876_543_210 && upTo22.virtual_bytes == 0 && upTo22.exit_signal == -1)
        let upTo37 = try #require(stat("42 (a) S " + fields(37) + " "))
        #expect(upTo37.virtual_bytes == 23 && upTo37.exit_signal == -1)
        let cut = try #require(stat("42 (a) S " + fields(37) + " 1"))
        #expect(cut.exit_signal == -1, "field 38 may have been 17")
        let whole = try #require(stat("42 (a) S " + fields(37) + " 0 39\n"))
        #expect(whole.exit_signal == 0)
    }

    @Test func negativeFieldsAndShortOrBrokenLinesAreHandled() {
        // tpgid (field 8) is -1 without a terminal; nice (19) may be negative.
        let negative = "7 (x) R 1 7 7 0 -1 4194560 " + (10...18).map(String.init).joined(separator: " ") + " -5 1 0 123"
        #expect(stat(negative)?.start_ticks == 123)
        #expect(stat("7 (x) R 1 7") == nil, "fewer than 22 fields")
        #expect(stat("7 x R " + fields(52)) == nil, "no parentheses")
        #expect(stat("") == nil)
        #expect(stat("7 (x)") == nil)
    }

    @Test func thisProcessStatAgreesWithAnIndependentReading() throws {
        let text = try String(contentsOfFile: "/proc/self/stat", encoding: .utf8)
        let after = text[text.index(after: text.lastIndex(of: ")")!)...].split(separator: " ")
        let parsed = try #require(ProcFS.processStat(of: getpid()))
        #expect(parsed.parent == getppid())
        #expect(parsed.startTicks == UInt64(after[19]))
        // This process maps and unmaps memory while other tests run: the size is compared from a
        // parse between two readings that agree (a CI run beside a build saw it change between
        // one reading and the parse).
        var sizeCompared = false
        for _ in 0..<200 where !sizeCompared {
            let before = try Self.virtualBytes()
            let size = try #require(ProcFS.processStat(of: getpid())).virtualBytes
            if try before == Self.virtualBytes() {
                #expect(size == before && size > 0)
                sizeCompared = true
            }
        }
        #expect(sizeCompared, "the process's size never stood still over two readings")
        #expect(parsed.exitSignal == Int32(after[35]) && parsed.exitSignal == SIGCHLD)
        #expect(parsed.name == text[text.index(after: text.firstIndex(of: "(")!)..<text.lastIndex(of: ")")!])
    }

    /// Field 23 of /proc/self/stat, read independently of the parser.
    static func virtualBytes() throws -> UInt64 {
        let text = try String(contentsOfFile: "/proc/self/stat", encoding: .utf8)
        let after = text[text.index(after: text.lastIndex(of: ")")!)...].split(separator: " ")
        return try #require(UInt64(after[20]))
    }

    /// A capture's requester reads its own status without its status file: it must say what
    /// that file says (name, state, blocked signals), with a signal blocked for the occasion.
    @Test func theCallingThreadsStatusIsWhatItsStatusFileSays() throws {
        let reader = try #require(TaskReader())
        let link = try #require(ProcFS.readLink("/proc/thread-self"))  // "PID/task/TID"
        let tid = try #require(Int32(link.split(separator: "/").last ?? ""))
        var added = sigset_t(), previous = sigset_t()
        sigemptyset(&added)
        sigaddset(&added, SIGWINCH)
        pthread_sigmask(SIG_BLOCK, &added, &previous)
        defer { pthread_sigmask(SIG_SETMASK, &previous, nil) }
        let file = try #require(reader.status(tid: tid))
        let direct = reader.callingThreadStatus(tid: tid)
        #expect(direct.name == file.name && !direct.name.isEmpty)
        #expect(direct.state == .running && file.state == .running)
        #expect(direct.blocked == file.blocked)
        #expect(direct.blocked & (1 << UInt64(SIGWINCH - 1)) != 0)
        #expect(direct.userCPUSeconds + direct.systemCPUSeconds > 0)
    }

    @Test func statusFieldsAreFoundByWholeKey() {
        let text = Array("Name:\tw (1)\nSigBlkX:\tffff\nSigBlk:\t0000000000014002\nUid:\t0\t0\t0\t0\nEmpty:\n".utf8)
        text.withUnsafeBytes { bytes in
            #expect(ProcFS.statusField("Name", in: bytes).map { String(decoding: $0, as: UTF8.self) } == "w (1)")
            #expect(ProcFS.statusField("SigBlk", in: bytes).map(ProcFS.hexadecimal) == 0x14002)
            #expect(ProcFS.statusField("Uid", in: bytes).map { String(decoding: $0, as: UTF8.self) } == "0\t0\t0\t0")
            #expect(ProcFS.statusField("Empty", in: bytes)?.count == 0)
            #expect(ProcFS.statusField("Sig", in: bytes) == nil)
            #expect(ProcFS.statusField("Missing", in: bytes) == nil)
        }
        #expect(ProcFS.tracerPID(of: nil) == 0)
        #expect(ProcFS.status("/proc/self/status")["Pid"] == String(getpid()))
    }

    private func mapping(_ line: String) -> (hw_proc_mapping, String)? {
        var parsed = hw_proc_mapping()
        let bytes = Array(line.utf8)
        let ok = bytes.withUnsafeBufferPointer { buffer in
            buffer.withMemoryRebound(to: CChar.self) { hw_proc_parse_maps_line($0.baseAddress, $0.count, &parsed) == 0 }
        }
        guard ok else { return nil }
        return (parsed, String(decoding: bytes[parsed.path_offset..<(parsed.path_offset + parsed.path_length)], as: UTF8.self))
    }

    @Test func mapsLinesKeepTheirPathsWithSpaces() throws {
        let (file, path) = try #require(mapping("7f00a000-7f00b000 r-xp 0001f000 fd:01 1234567   /opt/my app/lib x.so (deleted)  "))
        #expect(file.start == 0x7f00_a000 && file.end == 0x7f00_b000 && file.offset == 0x1f000)
        #expect(file.device_major == 0xfd && file.device_minor == 1 && file.inode == 1_234_567)
        #expect(file.perms.2 == CChar(UInt8(ascii: "x")))
        #expect(path == "/opt/my app/lib x.so (deleted)")
        #expect(try #require(mapping("7ffc1000-7ffc3000 r-xp 00000000 00:00 0                          [vdso]")).1 == "[vdso]")
        #expect(try #require(mapping("7f00c000-7f00d000 rw-p 00000000 00:00 0")).1 == "")
        for broken in ["", "7f00a000 r-xp 0 fd:01 1", "7f00a000-7f00b000 r-xp zz fd:01 1 /x", "7f00a000-7f00b000 r-x"] {
            #expect(mapping(broken) == nil, "\(broken)")
        }
    }

    /// Read from a process whose maps do not change while they are read twice (this test
    /// process's own change all the time while the parallel suite loads and unloads).
    @Test func aProcessMapsHoldItsExecutable() throws {
        let sleeper = try ChildProcess("/bin/sleep", ["60"])
        defer {
            sleeper.signal(SIGKILL)
            _ = try? sleeper.waitForExit(timeout: 10)
        }
        let deadline = Date().addingTimeInterval(10)
        while ProcFS.comm(of: sleeper.pid) != "sleep" && Date() < deadline { usleep(10_000) }
        usleep(100_000)  // past the dynamic loader
        let executable = try #require(ProcFS.readLink("/proc/\(sleeper.pid)/exe"))
        let mappings = ProcFS.fileMappings(of: sleeper.pid)
        #expect(mappings.contains { $0.path == executable && $0.offset == 0 }, "\(mappings.map(\.path))")
        // Another program's reading (Foundation reads only the first page of a /proc file).
        let independent = try runProgram("/bin/grep", ["-c", " /", "/proc/\(sleeper.pid)/maps"]).stdout
        let count = try #require(Int(independent.trimmingCharacters(in: .whitespacesAndNewlines)))
        #expect(mappings.count > 3 && mappings.count == count, "\(mappings.count) vs \(count)")
    }
}
