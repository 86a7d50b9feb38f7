// Minidumps read back by real readers: lldb-15 (threads, selected thread, frames in the right
// modules) and the PyPI `minidump` package (streams, stack bytes); plus the exact layouts
// checked against Microsoft's offsets.
import Foundation
import Testing
@testable import HangwatchCapture
@testable import HangwatchDatabase
@testable import HangwatchMinidump
@testable import HangwatchRemoteCapture
@testable import HangwatchReport
@testable import HangwatchSnapshot
@testable import HangwatchSymbolication
import HangwatchTestSupport
import HangwatchStageTestSupport

/// Little-endian reads at Microsoft's documented offsets: an independent view of the bytes.
struct MinidumpView {
    let bytes: [UInt8]
    func u32(_ offset: Int) -> UInt32 { (0..<4).reduce(0) { $0 | UInt32(bytes[offset + $1]) << (8 * $1) } }
    func u64(_ offset: Int) -> UInt64 { (0..<8).reduce(0) { $0 | UInt64(bytes[offset + $1]) << (8 * $1) } }
    /// (type → (size, rva)) of the stream directory.
    var streams: [UInt32: (size: Int, rva: Int)] {
        var result: [UInt32: (Int, Int)] = [:]
        for index in 0..<Int(u32(8)) {
            let entry = Int(u32(12)) + index * 12
            result[u32(entry)] = (Int(u32(entry + 4)), Int(u32(entry + 8)))
        }
        return result
    }
    func string(at rva: Int) -> String {
        let length = Int(u32(rva))
        let units = stride(from: 0, to: length, by: 2).map { UInt16(bytes[rva + 4 + $0]) | UInt16(bytes[rva + 5 + $0]) << 8 }
        return String(decoding: units, as: UTF16.self)
    }
}

@Suite("Minidump", .ownThread, .serialized)
struct MinidumpTests {
    /// A deadlocked child captured with ptrace (16 KiB stack windows by default).
    private func captureDeadlock() throws -> (ChildProcess, ProcessSnapshot) {
        let child = try ChildProcess(product: "hangwatch-fixture-remote", ["deadlock"])
        try child.waitForOutput("READY")
        let snapshot = try RemoteCapture.captureProcess(pid: child.pid)
        return (child, snapshot)
    }

    private func write(_ bytes: [UInt8], in directory: String, _ name: String = "dump.dmp") throws -> String {
        let path = directory + "/" + name
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        return path
    }

    private func deadlockedThreads(_ snapshot: ProcessSnapshot) -> [ThreadSnapshot] {
        snapshot.threads.filter { !$0.roles.contains(.mainThread) }
    }

    @Test func layoutMatchesMicrosoftOffsets() throws {
        let registers = Registers(values: (0..<18).map { UInt64($0) &* 0x1111 &+ 0x100 })
        let stack: [UInt8] = (0..<64).map { UInt8($0) }
        let snapshot = ProcessSnapshot(
            reason: .crash(SignalInfo(number: 11, code: 1, address: 0xdead, tid: 22)), timestamp: 1_700_000_000,
            process: ProcessIdentity(pid: 21, name: "demo", executable: "/bin/demo", arguments: ["/bin/demo", "-x"], bundleID: "b"),
            threads: [
                ThreadSnapshot(tid: 21, name: "main", state: "S", roles: [.mainThread], status: .captured, registers: registers,
                               frames: [1], stackMemory: stack),
                ThreadSnapshot(tid: 22, name: "worker", state: "R", roles: [.crashed], status: .captured, registers: registers, frames: [2]),
            ],
            modules: [ModuleSnapshot(path: "/bin/demo", base: 0x1000, start: 0x1000, end: 0x5000, buildID: "0a0b0c")],
            annotations: ["ver": "1.2"])
        let view = MinidumpView(bytes: MinidumpWriter.minidump(from: snapshot))
        #expect(view.u32(0) == 0x504d_444d)
        #expect(view.u32(4) & 0xffff == 0xa793)
        let streams = view.streams
        #expect(Set(streams.keys).isSuperset(of: [3, 4, 5, 6, 7, 24, 0x4767_0004, 0x4767_0006, 0x4767_0009, 0x4350_0001]))

        // Threads: the crashed one first, contexts at CONTEXT offsets (rip 0xf8, rsp 0x98).
        let threadList = try #require(streams[3]).rva
        #expect(view.u32(threadList) == 2)
        #expect(view.u32(threadList + 4) == 22)
        let second = threadList + 4 + 48
        #expect(view.u32(second) == 21)
        #expect(view.u64(second + 24) == registers.sp)
        #expect(view.u32(second + 32) == 64)
        let stackRVA = Int(view.u32(second + 36))
        #expect(Array(view.bytes[stackRVA..<stackRVA + 64]) == stack)
        let context = Int(view.u32(second + 44))
        #expect(view.u32(second + 40) == 1232)
        #expect(view.u64(context + 0xf8) == registers.pc)
        #expect(view.u64(context + 0x98) == registers.sp)
        #expect(view.u64(context + 0x78) == registers["rax"])
        #expect(view.u64(context + 0x90) == registers["rbx"])
        #expect(view.u32(context + 0x30) == 0x0010_0003)

        // Memory list: only the non-empty stack.
        let memory = try #require(streams[5]).rva
        #expect(view.u32(memory) == 1)
        #expect(view.u64(memory + 4) == registers.sp)

        // Module: base, size, name, BpEL CodeView record with the build-id bytes.
        let modules = try #require(streams[4]).rva
        #expect(view.u32(modules) == 1)
        #expect(view.u64(modules + 4) == 0x1000)
        #expect(view.u32(modules + 12) == 0x4000)
        #expect(view.string(at: Int(view.u32(modules + 24))) == "/bin/demo")
        let codeView = Int(view.u32(modules + 4 + 80))
        #expect(view.u32(modules + 4 + 76) == 7)
        #expect(view.u32(codeView) == 0x4270_454c)
        #expect(Array(view.bytes[codeView + 4..<codeView + 7]) == [0x0a, 0x0b, 0x0c])

        // Exception: signal, si_code, fault address, the crashed thread's context.
        let exception = try #require(streams[6]).rva
        #expect(view.u32(exception) == 22)
        #expect(view.u32(exception + 8) == 11)
        #expect(view.u32(exception + 12) == 1)
        #expect(view.u64(exception + 24) == 0xdead)

        // System info: AMD64, Linux.
        let system = try #require(streams[7]).rva
        #expect(view.u32(system) & 0xffff == 9)
        #expect(view.u32(system + 20) == 0x8201)

        // Crashpad info: version 1, the annotations as a simple string dictionary of UTF-8 strings.
        let crashpad = try #require(streams[0x4350_0001]).rva
        #expect(view.u32(crashpad) == 1)
        let dictionary = Int(view.u32(crashpad + 40))
        #expect(view.u32(dictionary) == 1)
        func utf8(_ rva: Int) -> String {
            String(decoding: view.bytes[rva + 4..<rva + 4 + Int(view.u32(rva))], as: UTF8.self)
        }
        #expect(utf8(Int(view.u32(dictionary + 4))) == "ver")
        #expect(utf8(Int(view.u32(dictionary + 8))) == "1.2")

        let cmdline = try #require(streams[0x4767_0006])
        #expect(Array(view.bytes[cmdline.rva..<cmdline.rva + cmdline.size]) == Array("/bin/demo\u{0}-x\u{0}".utf8))
        let status = try #require(streams[0x4767_0004])
        #expect(String(decoding: view.bytes[status.rva..<status.rva + status.size], as: UTF8.self).contains("Pid:\t21\n"))
    }

    @Test func lldbReadsARemoteDumpWithEveryThreadAndFramesInTheRightModules() throws {
        let (child, snapshot) = try captureDeadlock()
        defer { child.signal(SIGKILL) }
        #expect(snapshot.threads.allSatisfy { !$0.stackMemory.isEmpty }, "capture keeps a stack window by default")
        let directory = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(directory) }
        let path = try write(MinidumpWriter.minidump(from: snapshot), in: directory)

        let output = try LLDB.threadsAndBacktraces(path)
        let threads = LLDB.threadLines(output)
        #expect(threads.count == snapshot.threads.count, "\(output)")
        // A requested dump: the main thread is the exception thread, listed (and selected) first.
        #expect(threads.first?.hasPrefix("* thread #1: tid = \(child.pid),") == true, "\(output)")
        let main = LLDB.backtrace(of: child.pid, in: output)
        #expect(main.contains { $0.contains("libc.so.6`") && $0.contains("pthread") }, "\(main)")
        #expect(main.contains { $0.contains("hangwatch-fixture-remote`") && $0.contains("runDeadlock") }, "\(main)")
        for thread in deadlockedThreads(snapshot) {
            let frames = LLDB.backtrace(of: thread.tid, in: output)
            #expect(frames.contains { $0.contains("libc.so.6`") && $0.contains("lll_lock_wait") }, "\(frames)")
            #expect(frames.contains { $0.contains("hangwatch-fixture-remote`") && $0.contains("deadlockTake") }, "\(frames)")
        }
    }

    @Test func lldbShowsTheCrashedThreadWithItsSignal() throws {
        let (child, captured) = try captureDeadlock()
        defer { child.signal(SIGKILL) }
        var snapshot = captured
        let victim = try #require(deadlockedThreads(snapshot).last)
        snapshot.reason = .crash(SignalInfo(number: SIGSEGV, code: 1, address: 0x10, tid: victim.tid))
        let directory = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(directory) }
        let output = try LLDB.threadsAndBacktraces(try write(MinidumpWriter.minidump(from: snapshot), in: directory))
        let threads = LLDB.threadLines(output)
        #expect(threads.count == snapshot.threads.count, "\(output)")
        let selected = try #require(threads.first { $0.hasPrefix("* ") }, "\(output)")
        #expect(selected.contains("tid = \(victim.tid),"))
        #expect(selected.contains("stop reason = signal SIGSEGV"))
        #expect(LLDB.backtrace(of: victim.tid, in: output).contains { $0.contains("hangwatch-fixture-remote`") && $0.contains("deadlockTake") })
    }

    @Test func lldbSelectsTheHungThreadOfAHangReport() throws {
        let (child, captured) = try captureDeadlock()
        defer { child.signal(SIGKILL) }
        var snapshot = captured
        let hung = try #require(deadlockedThreads(snapshot).first)
        let index = try #require(snapshot.threads.firstIndex { $0.tid == hung.tid })
        snapshot.threads[index].roles.insert(.hung)
        snapshot.reason = .hang(HangInfo(target: .mainQueue, thresholdSeconds: 1, durationSeconds: 2.5, outcome: .ongoing, startTime: 0))
        let bytes = MinidumpWriter.minidump(from: snapshot)
        let view = MinidumpView(bytes: bytes)
        let exception = try #require(view.streams[6]).rva
        #expect(view.u32(exception + 8) == MinidumpWriter.dumpRequestedExceptionCode)
        #expect(view.u32(exception + 32) == 2)
        #expect(view.u64(exception + 40) == MinidumpWriter.hangMarker)
        #expect(view.u64(exception + 48) == 2500)

        let directory = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(directory) }
        let output = try LLDB.threadsAndBacktraces(try write(bytes, in: directory))
        #expect(LLDB.threadLines(output).count == snapshot.threads.count, "\(output)")
        #expect(LLDB.threadLines(output).first?.hasPrefix("* thread #1: tid = \(hung.tid),") == true, "\(output)")
    }

    /// A killed report has no thread: its exception says so in its parameters, and lldb opens it
    /// (a signal code naming a thread that is not listed crashed lldb 15).
    @Test(arguments: [(Int32?.some(SIGKILL), KillCause.oom), (nil, .unknown)])
    func aKilledReportsMinidumpSaysKilledAndOpensInLLDB(signal: Int32?, cause: KillCause) throws {
        let snapshot = DumpSamples.killed(signal: signal, cause: cause)
        let bytes = MinidumpWriter.minidump(from: snapshot)
        let view = MinidumpView(bytes: bytes)
        let exception = try #require(view.streams[6]).rva
        #expect(view.u32(exception + 8) == MinidumpWriter.dumpRequestedExceptionCode)
        #expect(view.u32(exception + 32) == 3)
        #expect(view.u64(exception + 40) == MinidumpWriter.killedMarker)
        #expect(view.u64(exception + 48) == (cause == .oom ? 1 : 0))
        #expect(view.u64(exception + 56) == UInt64(signal ?? 0))
        // The same from the report alone (a report without its kept dump).
        let report = ReportBuilder.makeReport(from: snapshot, id: "k", kind: .killed, symbolicator: Symbolicator())
        #expect(MinidumpWriter.minidump(from: ProcessSnapshot(report: report)) == bytes)

        let directory = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(directory) }
        let output = try LLDB.threadsAndBacktraces(try write(bytes, in: directory))
        #expect(output.contains("was loaded"), "\(output)")
        #expect(!output.contains("PLEASE submit a bug report"), "\(output)")
    }

    @Test func aStoredReportKeepsItsDumpAndAReportWithoutOneStillGivesAValidMinidump() throws {
        let (child, snapshot) = try captureDeadlock()
        defer { child.signal(SIGKILL) }
        let directory = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(directory) }
        let database = try CrashReportDatabase(path: directory + "/db")
        let report = ReportBuilder.makeReport(from: snapshot, id: UUID().uuidString.lowercased(), kind: .dump, symbolicator: Symbolicator())
        try database.writeReport(id: report.id, json: ReportRenderer.json(report), text: nil,
                                 dump: Data(IntermediateDumpWriter.encode(snapshot)))
        let stored = try #require(try database.listReports().first)
        #expect(stored.size > Int64(snapshot.threads.count * 4096), "the kept dump counts in the report's size")
        var info = stat()
        #expect(stat(database.pendingReportsPath + "/\(report.id).hwdump", &info) == 0 && info.st_mode & 0o777 == 0o600)
        let withStacks = try database.minidump(forReport: report.id)
        #expect(withStacks == MinidumpWriter.minidump(from: snapshot, metadata: MinidumpMetadata(reportID: UUID(uuidString: report.id), clientID: database.clientID)))

        // The same report without its dump: rebuilt from registers/frames/modules, no stack ranges.
        let rebuilt = MinidumpWriter.minidump(from: ProcessSnapshot(report: report))
        let view = MinidumpView(bytes: rebuilt)
        #expect(view.u32(try #require(view.streams[5]).rva) == 0)
        let output = try LLDB.threadsAndBacktraces(try write(rebuilt, in: directory, "rebuilt.dmp"))
        let threads = LLDB.threadLines(output)
        #expect(threads.count == snapshot.threads.count, "\(output)")
        for thread in deadlockedThreads(snapshot) {
            let line = try #require(threads.first { $0.contains("tid = \(thread.tid),") })
            #expect(line.contains("libc.so.6`"), "pc resolves in libc without stack bytes: \(line)")
        }

        // Completing the report moves the dump along; deleting removes it.
        try database.markCompleted(id: report.id, serverID: "srv-1")
        #expect(try database.readReportDump(id: report.id) != nil)
        try database.deleteReport(id: report.id)
        #expect(FileManager.default.fileExists(atPath: database.completedReportsPath + "/\(report.id).hwdump") == false)
    }

    @Test func pythonMinidumpPackageReadsStreamsAndStackBytes() throws {
        guard let python = PythonMinidump.interpreter else {
            print("skipped: no python3 with the PyPI `minidump` package (pip install minidump)")
            return
        }
        let (child, snapshot) = try captureDeadlock()
        defer { child.signal(SIGKILL) }
        let directory = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(directory) }
        let path = try write(MinidumpWriter.minidump(from: snapshot), in: directory)
        let result = try runReader(python, ["-c", PythonMinidump.script, path])
        let line = try #require(result.output.split(separator: "\n").last { $0.hasPrefix("{") }, "\(result.output)")
        let parsed = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        #expect(Set(parsed["threads"] as? [Int] ?? []) == Set(snapshot.threads.map { Int($0.tid) }))
        let memory = (parsed["memory"] as? [[Int]] ?? []).map { ($0[0], $0[1]) }
        #expect(memory.count == snapshot.threads.count)
        for thread in snapshot.threads {
            let sp = Int(try #require(thread.registers).sp)
            #expect(memory.contains { $0.0 == sp && $0.1 == thread.stackMemory.count })
        }
        #expect((parsed["modules"] as? [String] ?? []) == snapshot.modules.map(\.path))
        #expect(parsed["exceptionThread"] as? Int == Int(child.pid))
        #expect(parsed["exceptionCode"] as? Int == Int(MinidumpWriter.dumpRequestedExceptionCode))
    }

    @Test func liveCaptureKeepsABoundedStackWindowByDefault() throws {
        let options = CaptureOptions()
        #expect(options.stackBytes == CaptureOptions.defaultStackBytes)
        #expect(options.stackBytes <= options.stackBytesLimit)
        #expect(RemoteCaptureOptions().stackMemoryBytes == CaptureOptions.defaultStackBytes)
        let snapshot = try LiveCapture.captureProcess(reason: .dumpRequested, bundleID: "minidump-test", annotations: [:], options: options)
        let captured = snapshot.threads.filter { $0.status == .captured }
        #expect(!captured.isEmpty)
        #expect(captured.allSatisfy { !$0.stackMemory.isEmpty && $0.stackMemory.count <= options.stackBytes })
        let view = MinidumpView(bytes: MinidumpWriter.minidump(from: snapshot))
        #expect(view.u32(try #require(view.streams[5]).rva) == UInt32(captured.count))
    }

    /// Every dump and report the fixtures hold — golden files, fuzzer finds, reports written
    /// by earlier builds — gives a minidump, whatever its times say: one fuzzer find has a
    /// timestamp of ~1e300, which trapped converting it to the header's 32-bit seconds
    /// (scripts/fuzz minidump replays these too).
    @Test func everyFixtureDumpAndReportGivesAMinidump() throws {
        let reports = DumpFixtures.directory.deletingLastPathComponent().appendingPathComponent("reports")
        let reportFiles = try FileManager.default.contentsOfDirectory(at: reports, includingPropertiesForKeys: nil).filter { $0.pathExtension == "json" }
        var made = 0
        for url in try DumpFixtures.files() {
            guard let snapshot = try? IntermediateDumpReader.read(bytes: [UInt8](Data(contentsOf: url))) else { continue }
            #expect(MinidumpWriter.minidump(from: snapshot).count >= 32, "\(url.lastPathComponent)")
            made += 1
        }
        for url in reportFiles {
            let report = try Report.decode(from: Data(contentsOf: url))
            #expect(MinidumpWriter.minidump(from: ProcessSnapshot(report: report)).count >= 32, "\(url.lastPathComponent)")
            made += 1
        }
        #expect(made >= 10)
        var extreme = try IntermediateDumpReader.read(bytes: [UInt8](Data(contentsOf: DumpFixtures.directory.appendingPathComponent("golden-v1-hang.hwdump"))))
        extreme.timestamp = 1e300
        if case .hang(var info) = extreme.reason { info.durationSeconds = .infinity; extreme.reason = .hang(info) }
        let header = MinidumpWriter.minidump(from: extreme)
        #expect(header[20..<24].elementsEqual([0xFF, 0xFF, 0xFF, 0xFF]), "the time is clamped to the header's 32 bits")
    }
}
