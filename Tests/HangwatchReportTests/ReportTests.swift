// Report building from snapshots holding real addresses of this process, JSON round trips,
// text and folded rendering, and decoding errors.
import HangwatchReport
import HangwatchSnapshot
import HangwatchRemoteCapture
import HangwatchSymbolication
import HangwatchPlatform
import Foundation
import Testing
import HangwatchStageTestSupport

@Suite struct ReportTests {
    let symbolicator = Symbolicator()

    /// A snapshot of this process: thread 101 holds a real stack captured here.
    func makeSnapshot(reason: CaptureReason, stack: [UInt64], roles: ThreadRoles) -> ProcessSnapshot {
        let registers = Registers(values: (0..<UInt64(Registers.names.count)).map { $0 * 0x10 })
        let interesting = ThreadSnapshot(
            tid: 101, name: "pool-7", state: "R", syscall: "running", userCPUSeconds: 5.5, systemCPUSeconds: 0.25,
            roles: roles, status: .captured, registers: registers, frames: stack, queueLabel: "com.apple.main-thread")
        let main = ThreadSnapshot(tid: 100, name: "server", state: "S", syscall: "130 0x0 0x0 0x8 0x0 0x0 0x0 0x7ffc 0x7f01",
                                  roles: .mainThread, status: .captured, frames: Array(stack.suffix(3)))
        let blocked = ThreadSnapshot(tid: 102, name: "blocker", state: "D", syscall: "0 0x3 0x7f00 0x1000",
                                     status: .unreachable)
        return ProcessSnapshot(
            reason: reason, timestamp: 1_714_564_800.25,
            process: ProcessIdentity(pid: 100, name: "server", executable: "/usr/local/bin/server",
                                     arguments: ["/usr/local/bin/server", "--port", "8080"], bundleID: "com.example.server"),
            threads: [main, interesting, blocked], modules: currentProcessModules(),
            annotations: ["version": "1.2.3", "build": "42"], captureDurationSeconds: 0.0013)
    }

    /// Names, arguments, annotations and stderr lines are the target's: in text output their
    /// control characters are visible escapes, never terminal sequences; JSON keeps them exact.
    /// A report names its lookups first (`Symbolicator.prime`: one pass over each module's
    /// symbol table, a names-only table for a system library): every frame comes out as a
    /// symbolicator without priming makes it — function, offset, file, line, inlined frames —
    /// for stacks and hang samples spread over this test binary (DWARF; its functions and the
    /// rest of its range) and libc's functions (names only); and no lookup needed more than the
    /// priming made.
    @Test func aPrimedReportHasTheFramesOfAnUnprimedOne() throws {
        let modules = currentProcessModules()
        // This binary, and the libc it runs on (another test may have mapped a copy of a libc).
        let chosen = [try #require(modules.first), try #require(modules.first { $0.path.hasSuffix("/libc.so.6") })]
        var generator = SystemRandomNumberGenerator()
        // `count` addresses inside `module`'s functions (its ELF symbol table's), return
        // addresses too: a module's range may also cover a mapping of its file that libelf made
        // for another test, where there is no code.
        func inFunctions(of module: ModuleSnapshot, count: Int) throws -> [UInt64] {
            let names = try #require(ELFSymbolTable(path: module.path), "\(module.path)")
            var found: [UInt64] = []
            for _ in 0..<1_000_000 where found.count < count {
                let address = UInt64.random(in: module.start..<module.end, using: &generator)
                if names.lookup(address - module.base - 1) != nil, names.lookup(address - module.base) != nil { found.append(address) }
            }
            try #require(found.count == count, "\(module.path) 0x\(String(module.start, radix: 16))-0x\(String(module.end, radix: 16)) base 0x\(String(module.base, radix: 16)): \(found.count) of \(count) addresses in functions")
            return found
        }
        // This binary: most in functions, some anywhere in its range (between symbols, data);
        // libc: in its functions (between them libdw would be asked), as many as a names-only
        // table is made for.
        var addresses = try inFunctions(of: chosen[0], count: 500)
        for _ in 0..<100 { addresses.append(UInt64.random(in: chosen[0].start..<chosen[0].end, using: &generator)) }
        addresses += try inFunctions(of: chosen[1], count: ELFSymbolTable.primeLimit - 4)
        addresses.shuffle(using: &generator)
        let stacks = stride(from: 0, to: addresses.count, by: 30).map { Array(addresses[$0..<min($0 + 30, addresses.count)]) }
        var snapshot = DumpSamples.hang(threadCount: 1)
        snapshot.modules = modules
        snapshot.threads = stacks.enumerated().map { index, stack in
            var thread = snapshot.threads[0]
            thread.tid = Int32(5000 + index)
            thread.frames = stack
            return thread
        }
        if case .hang(var info) = snapshot.reason {
            info.samples = [StackSample(tid: 5000, frames: Array(addresses.suffix(40).reversed()), count: 3)]
            snapshot.reason = .hang(info)
        }
        let primed = Symbolicator()
        let report = ReportBuilder.makeReport(from: snapshot, id: "primed", kind: .hang, symbolicator: primed)
        // Every lookup was primed: no sorted table answered, no system library's names read whole.
        #expect(primed.unprimedWork == (0, 0))
        let unprimed = Symbolicator()
        func describe(_ frame: SymbolicatedFrame) -> String {
            "\(frame.function ?? "-")+\(frame.functionOffset.map(String.init) ?? "-") \(frame.file ?? "-"):\(frame.line ?? 0):\(frame.column ?? 0) \(frame.isInlined)"
        }
        var differing: [String] = []
        var named = 0
        for (thread, stack) in zip(report.threads, stacks) {
            let expected = stack.enumerated().flatMap { index, address in
                unprimed.symbolicate(address: address, isReturnAddress: index > 0, modules: modules)
            }
            let actual = thread.frames.map { frame in
                describe(SymbolicatedFrame(address: frame.address, function: frame.function, functionOffset: frame.offset,
                                           file: frame.file, line: frame.line, column: frame.column, isInlined: frame.inlined))
            }
            named += thread.frames.filter { $0.function != nil }.count
            if expected.map(describe) != actual { differing.append("thread \(thread.info.tid)") }
        }
        #expect(differing.isEmpty, "\(differing.count) of \(stacks.count) stacks differ: \(differing.prefix(3))")
        #expect(named > addresses.count / 4, "only \(named) frames named")
        let samples = ReportBuilder.sampledStacks([StackSample(tid: 5000, frames: Array(addresses.suffix(40).reversed()), count: 3)],
                                                  modules: modules, symbolicator: unprimed)
        #expect(report.hang?.stacks == samples)
    }

    @Test func targetControlledTextIsTerminalSafe() throws {
        var snapshot = DumpSamples.hang(threadCount: 2)
        snapshot.threads[0].name = "evil\u{1b}]0;pwned\u{07}"
        snapshot.process.arguments = ["tool", "--flag\r\u{1b}[2Jcleared"]
        snapshot.annotations["note"] = "a\u{9b}31mb"
        var report = ReportBuilder.makeReport(from: snapshot, id: "escape", kind: .hang, symbolicator: Symbolicator())
        report.context = Report.Context(stderrTail: "line one\n\u{1b}[31mred\u{1b}[0m\r overwritten\n")
        let text = ReportRenderer.text(report)
        #expect(!text.unicodeScalars.contains { ($0.value < 0x20 && $0 != "\n" && $0 != "\t") || (0x7F...0x9F).contains($0.value) })
        #expect(text.contains("evil\\e]0;pwned\\x07"))
        #expect(text.contains("--flag\\r\\e[2Jcleared"))
        #expect(text.contains("a\\u{9b}31mb"))
        #expect(text.contains("\\e[31mred\\e[0m\\r overwritten"))
        #expect(!ReportRenderer.folded(report).contains("\u{1b}"))
        let decoded = try Report.decode(from: ReportRenderer.json(report))
        #expect(decoded.threads[0].name == "evil\u{1b}]0;pwned\u{07}", "JSON keeps the exact bytes")
    }

    /// The text scan reads sixteen bytes at a time: a control byte is found wherever it falls
    /// in a word or in the tail, and text without one (a no-break space included) is kept.
    @Test func terminalSafetyFindsAControlByteAtEveryPosition() {
        let plain = Array("frame #12 0x7f in main at main.swift:3".utf8)
        func isControl(_ scalar: Unicode.Scalar) -> Bool {
            (scalar.value < 0x20 && scalar != "\n" && scalar != "\t") || (0x7F...0x9F).contains(scalar.value)
        }
        #expect(Text.terminalSafe(String(decoding: plain, as: UTF8.self)) == String(decoding: plain, as: UTF8.self))
        #expect(Text.terminalSafe("tab\there,\nno-break\u{A0}space, 20\u{B0}C") == "tab\there,\nno-break\u{A0}space, 20\u{B0}C")
        let controls = (0..<0x20).filter { $0 != 0x0A && $0 != 0x09 }.map { [UInt8($0)] } + [[0x7F], [0xC2, 0x80], [0xC2, 0x9B]]
        for control in controls {
            for position in 0...(plain.count - control.count) {
                var bytes = plain
                bytes.replaceSubrange(position..<(position + control.count), with: control)
                let text = String(decoding: bytes, as: UTF8.self)
                let safe = Text.terminalSafe(text)
                #expect(safe != text && !safe.unicodeScalars.contains(where: isControl), "\(control) at \(position)")
            }
        }
    }

    /// Issue 45: bidi controls (U+202E makes a frame line read right to left), the other
    /// invisible format characters and the line/paragraph separators are escaped as `\u{…}`,
    /// each range at both edges and wherever it falls in the sixteen-byte scan; their
    /// neighbours outside the ranges are kept as they are.
    @Test func terminalSafetyEscapesBidiAndInvisibleFormatCharacters() {
        let escaped: [UInt32] = [0x00AD, 0x061C, 0x200B, 0x200D, 0x200E, 0x200F, 0x2028, 0x2029, 0x202A, 0x202E,
                                 0x2060, 0x2064, 0x2066, 0x2069, 0xFEFF, 0xFFF9, 0xFFFB, 0xE0001, 0xE0020, 0xE007F]
        let kept: [UInt32] = [0x00AC, 0x00AE, 0x061B, 0x200A, 0x2010, 0x2027, 0x202F, 0x205F, 0x2070, 0xFEFE, 0xFF00,
                              0xFFF8, 0xFFFC, 0xE0000, 0xE0080, 0x00E9, 0x4E2D, 0x1F600]
        let plain = Array("frame #12 0x7f in main at main.swift:3".utf8)
        for value in escaped {
            let scalar = Unicode.Scalar(value)!
            let character = Array(String(scalar).utf8)
            for position in 0...plain.count {
                var bytes = plain
                bytes.insert(contentsOf: character, at: position)
                let text = String(decoding: bytes, as: UTF8.self)
                let expected = String(decoding: plain[..<position], as: UTF8.self) + "\\u{\(String(value, radix: 16))}"
                    + String(decoding: plain[position...], as: UTF8.self)
                #expect(Text.terminalSafe(text) == expected, "U+\(String(value, radix: 16)) at \(position)")
                #expect(Text.singleLine(text) == expected, "U+\(String(value, radix: 16)) at \(position)")
            }
        }
        for value in kept {
            let text = String(decoding: plain.prefix(20), as: UTF8.self) + String(Unicode.Scalar(value)!) + "tail"
            #expect(Text.terminalSafe(text) == text, "U+\(String(value, radix: 16)) is printable")
        }
        // After sixteen ASCII bytes (the second vector chunk), and in a text with an em dash
        // and a degree sign before it (chunks looked at character by character).
        #expect(Text.terminalSafe("0123456789abcdefgh\u{202E}evil") == "0123456789abcdefgh\\u{202e}evil")
        #expect(Text.terminalSafe("thread 1 — 20\u{B0}C, then\u{2066}x\u{2069}") == "thread 1 — 20\u{B0}C, then\\u{2066}x\\u{2069}")
    }

    /// The rendered text escapes a bidi control in a thread name and a symbol name; the JSON
    /// keeps the exact text.
    @Test func reportTextEscapesBidiControlsAndJSONKeepsThem() throws {
        var snapshot = DumpSamples.hang(threadCount: 1)
        snapshot.threads[0].name = "worker\u{202E}gnp.exe"
        let report = ReportBuilder.makeReport(from: snapshot, id: "bidi", kind: .hang, symbolicator: Symbolicator())
        let text = ReportRenderer.text(report)
        #expect(text.contains("worker\\u{202e}gnp.exe"), "\(text.prefix(600))")
        #expect(!text.unicodeScalars.contains { $0.properties.generalCategory == .format })
        let decoded = try Report.decode(from: ReportRenderer.json(report))
        #expect(decoded.threads[0].name == "worker\u{202E}gnp.exe", "JSON keeps the exact text")
    }

    /// A report's numbers are whatever its file says: a crafted 1e308 s hang (found by
    /// scripts/fuzz report-json) renders instead of trapping, and round-trips.
    @Test func absurdDurationsRenderAndRoundTrip() throws {
        var report = ReportBuilder.makeReport(from: DumpSamples.hang(threadCount: 1), id: "huge", kind: .hang, symbolicator: Symbolicator())
        report.hang?.durationSeconds = 4.6e305
        report.hang?.thresholdSeconds = -3
        report.captureDurationSeconds = 1e300
        let text = ReportRenderer.text(report)
        #expect(text.contains("hung for 4.6e+305 s"), "\(text.prefix(300))")
        let decoded = try Report.decode(from: ReportRenderer.json(report))
        #expect(ReportRenderer.json(decoded) == ReportRenderer.json(report))
    }

    @Test func dumpReportRoundTripsThroughJSON() throws {
        let stack = symbolTestCaptureOwnStack().addresses
        let snapshot = makeSnapshot(reason: .dumpRequested, stack: stack, roles: .requester)
        let report = ReportBuilder.makeReport(from: snapshot, id: "8C1F-AB", kind: .dump, symbolicator: symbolicator)

        #expect(report.schemaVersion == 3)
        #expect(report.kind == .dump)
        #expect(report.timestamp == 1_714_564_800.25)
        #expect(report.threads.map(\.tid) == [100, 101, 102])  // capture order kept
        #expect(report.threads[1].roles == [.requester])
        #expect(report.threads[0].roles == [.mainThread])
        #expect(report.threads[2].status == .unreachable)
        #expect(report.threads[2].frames.isEmpty)
        #expect(report.threads[1].registers?["rip"] == 0x100)
        #expect(report.threads[1].frames.first?.address == stack[0])
        // Every captured address appears, in order, inline expansions sharing its index.
        #expect(Set(report.threads[1].frames.map(\.index)) == Set(stack.indices))
        #expect(report.threads[1].frames.map(\.index) == report.threads[1].frames.map(\.index).sorted())
        let own = try #require(report.threads[1].frames.first { $0.function?.contains("symbolTestCaptureOwnStack") == true })
        #expect(own.file?.hasSuffix("SymbolTestSupport.swift") == true)
        #expect(own.module == currentProcessModules().first?.path)
        #expect(report.modules.first?.symbols == "ok")
        #expect(report.hang == nil && report.signal == nil)

        let json = ReportRenderer.json(report)
        let decoded = try Report.decode(from: json)
        #expect(decoded == report)
        #expect(ReportRenderer.json(decoded) == json)  // stable bytes

        let object = try #require(try JSONSerialization.jsonObject(with: json) as? [String: Any])
        #expect(object["timestamp"] as? String == "2024-05-01T12:00:00.250Z")
        for key in ["schemaVersion", "id", "kind", "timestamp", "incomplete", "process", "threads", "modules",
                    "annotations", "captureDurationSeconds"] {
            #expect(object[key] != nil, "missing key \(key)")
        }
        let threads = try #require(object["threads"] as? [[String: Any]])
        let frame = try #require((threads[1]["frames"] as? [[String: Any]])?.first)
        #expect((frame["address"] as? String)?.count == 18)
        #expect((threads[1]["registers"] as? [String: String])?["rip"] == "0x0000000000000100")
        #expect(threads[1]["cpuSeconds"] as? [String: Double] == ["user": 5.5, "system": 0.25])
        #expect(String(decoding: json, as: UTF8.self).contains("\"kind\" : \"dump\""))
    }

    @Test func hangReportFoldsSamplesAndRendersTheHungThreadFirst() throws {
        let stack = symbolTestCaptureOwnStack().addresses
        let shorter = Array(stack.dropFirst())
        let hang = HangInfo(target: .mainQueue, thresholdSeconds: 2, durationSeconds: 6.2, outcome: .ongoing,
                            startTime: 1_714_564_794, samples: [
                                StackSample(tid: 101, frames: shorter, count: 1),
                                StackSample(tid: 101, frames: stack, count: 3),
                            ])
        let snapshot = makeSnapshot(reason: .hang(hang), stack: stack, roles: [.mainQueue, .hung])
        let report = ReportBuilder.makeReport(from: snapshot, id: "h1", kind: .fatalHang, symbolicator: symbolicator)
        let info = try #require(report.hang)
        #expect(info.samples == 4)
        #expect(info.sampledThreads == [101])
        #expect(info.startTime == 1_714_564_794)
        #expect(info.stacks.count == 2)
        let top = try #require(info.stacks.first)
        #expect(top.count == 3)
        #expect(info.stacks[1].count == 1)
        // Root first: the leaf is the innermost function at the program counter.
        let leaf = try #require(symbolicator.symbolicate(address: stack[0], isReturnAddress: false,
                                                         modules: snapshot.modules).first?.function)
        #expect(top.frames.last == leaf)
        #expect(top.frames.contains { $0.contains("symbolTestCaptureOwnStack") })

        let text = ReportRenderer.text(report)
        #expect(text.contains("Fatal hang: main queue hung for 6.2 s (threshold 2 s); the process ended while hung"))
        #expect(text.contains("Process:    server [100]"))
        let hung = try #require(text.range(of: "Thread 101 \"pool-7\" (main-queue, hung)"))
        let others = try #require(text.range(of: "Other threads:"))
        let main = try #require(text.range(of: "Thread 100 \"server\" (main-thread)"))
        #expect(hung.lowerBound < others.lowerBound && others.lowerBound < main.lowerBound)
        #expect(text.contains("Thread 102 \"blocker\" — state D, unreachable, syscall 0 0x3 0x7f00 0x1000"))
        #expect(text.contains("no stack: unreachable"))
        #expect(text.contains("SymbolTestSupport.swift:"))
        #expect(text.contains("rip   0x0000000000000100"))
        #expect(text.contains("Annotations:\n  build: 42\n  version: 1.2.3"))
        #expect(text.contains("most frequent stack (3 of 4 samples, leaf first):\n    \(leaf)"))
        #expect(text.contains("Modules: \(snapshot.modules.count) loaded"))

        let folded = ReportRenderer.folded(report)
        #expect(folded == info.stacks.map { $0.frames.joined(separator: ";") + " \($0.count)\n" }.joined())
    }

    @Test func crashReportNamesTheSignalAndKeepsContext() throws {
        let stack = symbolTestCaptureOwnStack().addresses
        let signal = SignalInfo(number: 11, code: 1, address: 0, tid: 101, message: nil)
        let snapshot = makeSnapshot(reason: .crash(signal), stack: stack, roles: .crashed)
        var report = ReportBuilder.makeReport(from: snapshot, id: "c1", kind: .crash, symbolicator: symbolicator)
        report.context = Report.Context(supersededHang: Report.SupersededHang(
            target: HangTarget.mainQueue, thresholdSeconds: 2, durationSeconds: 4.5, startTime: 1_714_564_795,
            reportID: "h0"))
        #expect(report.signal == Report.Signal(info: SignalInfo(number: 11, code: 1, address: 0, tid: 101),
                                               name: "SIGSEGV", codeName: "SEGV_MAPERR"))
        let text = ReportRenderer.text(report)
        #expect(text.hasPrefix("*** Crash: SIGSEGV (SEGV_MAPERR) at 0x0 on thread 101 ***"))
        #expect(text.contains("Superseded: main queue had been hung for 4.5 s (threshold 2 s"))
        #expect(try Report.decode(from: ReportRenderer.json(report)) == report)

        // Without a hang, folded output has one line per thread with a stack, root first.
        let lines = ReportRenderer.folded(report).split(separator: "\n")
        #expect(lines.count == 2)
        for line in lines {
            let parts = line.split(separator: " ")
            #expect(parts.last == "1")
            #expect(!line.contains(";;"))
        }
    }

    @Test func decodingRejectsCorruptAndForeignDocuments() throws {
        #expect(throws: ReportDecodingError.self) { try Report.decode(from: Data("{\"schemaVersion\": 1, \"id\": ".utf8)) }
        do {
            _ = try Report.decode(from: Data("{\"schemaVersion\": 1, \"id\": ".utf8))
        } catch let error as ReportDecodingError {
            guard case .notJSON = error else { Issue.record("wrong error \(error)"); return }
        }
        #expect(throws: ReportDecodingError.notAReport) { try Report.decode(from: Data("[1, 2]".utf8)) }
        #expect(throws: ReportDecodingError.notAReport) { try Report.decode(from: Data("{\"kind\": \"dump\"}".utf8)) }
        #expect(throws: ReportDecodingError.unsupportedSchemaVersion(4)) {
            try Report.decode(from: Data("{\"schemaVersion\": 4}".utf8))
        }
        #expect(throws: ReportDecodingError.unsupportedSchemaVersion(0)) {
            try Report.decode(from: Data("{\"schemaVersion\": 0}".utf8))
        }
        do {
            _ = try Report.decode(from: Data("{\"schemaVersion\": 1, \"id\": \"x\"}".utf8))
            Issue.record("a report missing keys decoded")
        } catch let error as ReportDecodingError {
            guard case .malformed(let detail) = error else { Issue.record("wrong error \(error)"); return }
            #expect(detail.contains("missing key"))
            #expect(error.description.hasPrefix("malformed report"))
        }
    }

    @Test func unknownKeysFromLaterAdditiveVersionsAreIgnored() throws {
        let report = ReportBuilder.makeReport(
            from: makeSnapshot(reason: .dumpRequested, stack: [], roles: .requester), id: "u", kind: .dump,
            symbolicator: symbolicator)
        var object = try #require(try JSONSerialization.jsonObject(with: ReportRenderer.json(report)) as? [String: Any])
        object["someFutureKey"] = ["nested": true]
        let data = try JSONSerialization.data(withJSONObject: object)
        #expect(try Report.decode(from: data) == report)
    }

    /// Times are kept at the millisecond the JSON spells, so a report read back from its JSON
    /// equals the one it was rendered from, whatever the capture clock said.
    @Test func timesKeepTheMillisecondsOfTheirJSONSpelling() throws {
        let hang = HangInfo(target: .mainQueue, thresholdSeconds: 2, durationSeconds: 6.2, outcome: .recovered,
                            startTime: 1_714_564_794.123_456)
        var snapshot = makeSnapshot(reason: .hang(hang), stack: [], roles: [.mainQueue, .hung])
        snapshot.timestamp = 1_714_564_800.999_7
        let report = ReportBuilder.makeReport(from: snapshot, id: "t", kind: .hang, symbolicator: symbolicator)
        #expect(report.timestamp == 1_714_564_801)
        #expect(report.hang?.startTime == 1_714_564_794.123)
        #expect(try Report.decode(from: ReportRenderer.json(report)) == report)

        var state: UInt64 = 0x5eed
        var disagreements: [Double] = []
        for _ in 0..<20_000 {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            let time = Double(state >> 22) / 1_000_000   // 1970 to ~2111, microseconds
            let kept = Timestamp.millisecondResolution(time)
            if Timestamp.iso8601(kept) != Timestamp.iso8601(time) || Timestamp.parseISO8601(Timestamp.iso8601(time)) != kept {
                disagreements.append(time)
            }
        }
        #expect(disagreements.isEmpty, "\(disagreements.prefix(5))")
        #expect(Timestamp.millisecondResolution(.nan) == 0 && Timestamp.iso8601(.nan) == Timestamp.iso8601(0))
    }

    @Test func formattingIsDeterministic() {
        #expect(ReportFormatting.timestamp(0) == "1970-01-01T00:00:00.000Z")
        #expect(ReportFormatting.timestamp(1_714_564_800.1234) == "2024-05-01T12:00:00.123Z")
        #expect(ReportFormatting.timestamp(1_714_564_800.9999) == "2024-05-01T12:00:01.000Z")
        #expect(ReportFormatting.seconds(6.2) == "6.2 s")
        #expect(ReportFormatting.seconds(2) == "2 s")
        #expect(ReportFormatting.seconds(0.25) == "0.25 s")
        #expect(ReportFormatting.seconds(0.0013) == "1.3 ms")
        #expect(ReportFormatting.address(0x1234) == "0x0000000000001234")
        #expect(ReportFormatting.parseHex("0x00ff") == 255)
        #expect(SignalNames.name(4) == "SIGILL")
        #expect(SignalNames.name(40) == "SIGRTMIN+6")
        #expect(ReportFormatting.signalCodeName(signal: 4, code: 2) == "ILL_ILLOPN")
        #expect(ReportFormatting.signalCodeName(signal: 11, code: 99) == nil)
    }

    @Test func frameLinesShowInliningAndMissingSymbols() {
        let inlined = Report.Frame(index: 2, address: 0x401000, module: "/bin/x", moduleOffset: 0x1000,
                                   function: "leaf", file: "/src/a.c", line: 3, inlined: true)
        #expect(ReportRenderer.render(inlined) == "#2 0x0000000000401000 in leaf [inlined] at /src/a.c:3")
        let bare = Report.Frame(index: 0, address: 0x401000, module: "/lib/libfoo.so", moduleOffset: 0x1000,
                                symbolsUnavailable: "module mismatched")
        #expect(ReportRenderer.render(bare) == "#0 0x0000000000401000 in libfoo.so + 0x1000 (module mismatched)")
        let named = Report.Frame(index: 1, address: 0x401000, module: "/lib/libc.so.6", function: "getpid", offset: 5)
        #expect(ReportRenderer.render(named) == "#1 0x0000000000401000 in getpid + 5 in libc.so.6")
    }
}
