// What each fuzz target does with one input. Each must turn any bytes into a result or a
// thrown error, never a crash, a hang or unbounded memory; what it accepts must survive the
// round trip the pipeline makes with it.
import FoundationEssentials
import Glibc
import HangwatchMinidump
import HangwatchReport
import HangwatchProcessing
import HangwatchSnapshot
import HangwatchSymbolication
import HangwatchDatabase
import HangwatchPlatform
import CHangwatchProcFS
import CHangwatchSymbols

enum Harness: String, CaseIterable {
    /// The intermediate dump reader (crash-safe dumps written by a dying or killed process):
    /// what reads must re-encode into a dump that reads back and re-encodes identically, and
    /// become a report that renders.
    case intermediateDump = "intermediate-dump"
    /// The report JSON reader (`hangwatch show FILE`, reports in the database): what decodes
    /// must render as text and re-encode into JSON that decodes to the same report.
    case reportJSON = "report-json"
    /// The minidump writer's inputs: a dump that reads, and a report that decodes, must each
    /// give a minidump (upload, `show --format minidump`).
    case minidump
    /// The symbol cache's index files (~/.cache/hangwatch/symbols, docs/symbol-cache.md): what
    /// loads must answer any address with at most 32 frames, never reading outside the file.
    case symbolIndex = "symbol-index"
    /// The one /proc parser (stat, status, maps lines; CHangwatchProcFS), which a signal handler
    /// and the quiet-capture helper also call: any bytes parse or are refused, and every offset
    /// it gives back lies inside them (AddressSanitizer catches a read outside).
    case procfs
    /// A run record read back from runs/ (docs/killed.md): what is not set aside
    /// (`RunRecord.problem`) must become a killed report that renders (text, JSON that decodes
    /// to the same report, a minidump). A record of ±1e300 trapped every processor once.
    case runRecord = "run-record"
    /// A staged hang's sidecar and samples read back from staging/ (the input: the sidecar's
    /// JSON, a NUL byte, the samples' JSON): what is not set aside must become a fatal-hang
    /// report that renders.
    case staging
    /// The DWARF unit-range reader (Sources/CHangwatchSymbols/hw_unit_ranges.c), which reads
    /// the unit DIEs of every module a report symbolicates: the input is its sections packed
    /// (`hws_unit_ranges_packed`); any bytes give ranges, within the bound, or a refusal.
    case unitRanges = "unit-ranges"
    /// The DWARF unit reader (Sources/CHangwatchSymbols/hw_unit_reader.c), which reads a cold
    /// report's lines, functions and inline scopes: the input is its sections packed
    /// (`hws_unit_reader_packed`); any bytes give frames or a refusal, every string whole.
    case unitReader = "unit-reader"
    /// A Breakpad .sym file from a symbol store (`HANGWATCH_SYMBOL_STORE`, written by whoever
    /// runs the store): what parses must answer any address with a bounded chain of frames.
    case breakpadSym = "breakpad-sym"
    /// What a debuginfod server answers (Debuginfod.swift): the input is a redirect's Location,
    /// a NUL byte, then the body. The Location is followed only to the asking server's scheme,
    /// host and port; the body, written to a file, is an ELF file with a build-id or refused.
    case debuginfodAnswer = "debuginfod-answer"

    func run(_ bytes: [UInt8]) {
        switch self {
        case .unitRanges:
            let count = bytes.withUnsafeBufferPointer { hws_unit_ranges_packed($0.baseAddress, $0.count) }
            if count > Int(HWS_MAX_UNIT_RANGES) { fatalError("more unit ranges than the reader's bound") }
        case .unitReader:
            let frames = bytes.withUnsafeBufferPointer { hws_unit_reader_packed($0.baseAddress, $0.count) }
            if frames > 256 * 3 * 64 { fatalError("more frames than three lookups of 256 units can give") }
        case .breakpadSym:
            // The MODULE line's own id, so the fuzzer reaches the records behind it.
            let firstLine = bytes.prefix { $0 != 0x0A }.split(separator: 0x20)
            let debugID = firstLine.count >= 4 ? String(decoding: firstLine[3], as: UTF8.self) : ""
            guard let file = BreakpadSymbolFile(bytes: bytes, path: "/fuzz.sym", debugID: debugID) else { return }
            var addresses: [UInt64] = [0, 1, UInt64.max]
            for word in bytes.split(separator: 0x20).prefix(512) {
                if let value = UInt64(String(decoding: word.prefix(16), as: UTF8.self), radix: 16) { addresses += [value &- 1, value, value &+ 1] }
            }
            file.prepare(for: addresses)
            for address in addresses where file.frames(at: address).count > BreakpadSymbolFile.maximumFrames {
                fatalError("more frames than the reader keeps for one address")
            }
        case .debuginfodAnswer:
            let parts = bytes.split(separator: 0, maxSplits: 1, omittingEmptySubsequences: false)
            let asked = "http://127.0.0.1:8002/buildid/abcd/debuginfo"
            let location = String(decoding: parts[0], as: UTF8.self)
            if Debuginfod.sameServer(asked, location), !location.hasPrefix("http://127.0.0.1:8002/") {
                fatalError("a redirect to another server was taken for the same one")
            }
            let body = parts.count > 1 ? Array(parts[1]) : []
            let file = Self.answerFile
            guard ftruncate(file, 0) == 0, body.withUnsafeBytes({ pwrite(file, $0.baseAddress, $0.count, 0) }) == body.count else {
                fatalError("cannot write the answer's file")
            }
            if let id = ELFBuildID.read(fileDescriptor: file), id.count > 2 * 64 || !BuildID.isPlainHex(id) {
                fatalError("a build-id that is not bounded plain hex")
            }
        case .runRecord:
            guard let record = try? JSONDecoder().decode(RunRecord.self, from: Data(bytes)), record.problem == nil else { return }
            let killed = KilledProcess(record: record, judged: Report.Killed(cause: .unknown, explanation: "fuzz", startTime: record.startTime))
            var report = Self.report(killed.snapshot, kind: .killed)
            killed.amend(&report)
            Self.render(report)
        case .staging:
            let parts = bytes.split(separator: 0, maxSplits: 1, omittingEmptySubsequences: false)
            guard let sidecar = try? JSONDecoder().decode(HangSidecar.self, from: Data(parts[0])), sidecar.problem == nil else { return }
            let samples = parts.count > 1 ? StagingArea.decodeSamples(Data(parts[1])) ?? [] : []
            var snapshot = ProcessSnapshot(reason: .dumpRequested, timestamp: sidecar.lastSeenTime,
                                           process: ProcessIdentity(pid: sidecar.pid, name: "fuzz", executable: "/fuzz", arguments: [],
                                                                    bundleID: sidecar.bundleID),
                                           threads: [], modules: [])
            var context: Report.Context?
            HangStitch.stitch(StagedHangContents(id: "", sidecar: sidecar, samples: samples), .promoted, into: &snapshot, context: &context)
            Self.render(Self.report(snapshot, kind: .fatalHang))
        case .intermediateDump:
            guard let snapshot = try? IntermediateDumpReader.read(bytes: bytes) else { return }
            let encoded = IntermediateDumpWriter.encode(snapshot)
            guard let again = try? IntermediateDumpReader.read(bytes: encoded) else {
                fatalError("a decoded snapshot re-encoded into an unreadable dump")
            }
            if IntermediateDumpWriter.encode(again) != encoded { fatalError("re-encoding is not stable") }
            // A staged or crashed process's dump becomes a report: whatever its numbers (a
            // timestamp of 1e300 trapped the processor once), it renders.
            Self.render(Self.report(snapshot, kind: ReportKind(implying: snapshot.reason)))
        case .reportJSON:
            guard let report = try? Report.decode(from: Data(bytes)) else { return }
            _ = ReportRenderer.text(report)
            let json = ReportRenderer.json(report)
            guard let again = try? Report.decode(from: json) else { fatalError("a decoded report re-encoded into JSON it cannot read") }
            if ReportRenderer.json(again) != json { fatalError("re-encoding the report is not stable") }
        case .symbolIndex:
            // The header checksum would turn away most mutations of the counts: set it right,
            // so the checks behind it (sizes, offsets, chains) are what the fuzzer meets.
            var bytes = bytes
            if bytes.count >= SymbolIndex.headerSize {
                let identityBytes = Int(bytes.withUnsafeBytes { UInt32(littleEndian: $0.loadUnaligned(fromByteOffset: 36, as: UInt32.self)) })
                if identityBytes <= bytes.count - SymbolIndex.headerSize {
                    let checksum = bytes.withUnsafeBytes { SymbolIndex.headerChecksum($0, identityBytes: identityBytes) }
                    withUnsafeBytes(of: checksum.littleEndian) { for (offset, byte) in $0.enumerated() { bytes[40 + offset] = byte } }
                }
            }
            guard let index = try? SymbolIndex(anyIdentity: bytes) else { return }
            // Every 8-byte word of the input is an address worth asking about: the tables' piece
            // starts are among them, so are their neighbours.
            var addresses: [UInt64] = [0, 1, UInt64.max]
            var offset = 0
            while offset + 8 <= min(bytes.count, 8192) {
                let word = bytes.withUnsafeBytes { UInt64(littleEndian: $0.loadUnaligned(fromByteOffset: offset, as: UInt64.self)) }
                addresses += [word &- 1, word, word &+ 1]
                offset += 8
            }
            for address in addresses where (index.answer(at: address)?.count ?? 0) > SymbolIndex.maximumChain {
                fatalError("more frames than an inline chain may have")
            }
        case .procfs:
            bytes.withUnsafeBufferPointer { buffer in
                buffer.withMemoryRebound(to: CChar.self) { text in
                    var stat = hw_proc_stat()
                    if hw_proc_parse_stat(text.baseAddress, text.count, &stat) == 0,
                       stat.name_offset + stat.name_length > text.count { fatalError("stat name outside the text") }
                    var offset = 0, length = 0
                    for key in ["Name", "State", "SigBlk", "TracerPid", "Uid"]
                    where hw_proc_status_field(text.baseAddress, text.count, key, &offset, &length) == 1 {
                        if offset + length > text.count { fatalError("status value outside the text") }
                        _ = hw_proc_hex(text.baseAddress.map { $0 + offset }, length)
                        _ = hw_proc_decimal(text.baseAddress.map { $0 + offset }, length)
                    }
                    var start = 0
                    while start <= text.count {
                        let end = text[start...].firstIndex(of: 0x0A) ?? text.count
                        var mapping = hw_proc_mapping()
                        if hw_proc_parse_maps_line(text.baseAddress.map { $0 + start }, end - start, &mapping) == 0,
                           mapping.path_offset + mapping.path_length > end - start { fatalError("maps path outside the line") }
                        start = end + 1
                    }
                }
            }
        case .minidump:
            if let snapshot = try? IntermediateDumpReader.read(bytes: bytes) {
                guard !MinidumpWriter.minidump(from: snapshot).isEmpty else { fatalError("an empty minidump") }
            }
            if let report = try? Report.decode(from: Data(bytes)) {
                guard !MinidumpWriter.minidump(from: ProcessSnapshot(report: report)).isEmpty else { fatalError("an empty minidump") }
            }
        }
    }

    /// One unlinked temporary file the `debuginfod-answer` bodies are written to, as a download is.
    private static let answerFile: Int32 = {
        var template = Array("/tmp/hangwatch-fuzz-answer-XXXXXX".utf8CString)
        let file = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
        guard file >= 0 else { fatalError("mkstemp failed") }
        template.withUnsafeBufferPointer { _ = unlink($0.baseAddress!) }
        return file
    }()

    private static func report(_ snapshot: ProcessSnapshot, kind: ReportKind) -> Report {
        ReportBuilder.makeReport(from: snapshot, id: "00000000-0000-0000-0000-000000000000", kind: kind,
                                 symbolicator: Symbolicator(cache: nil))
    }

    /// Every way a report leaves the processor: text, JSON that decodes to the same JSON, a minidump.
    private static func render(_ report: Report) {
        _ = ReportRenderer.text(report)
        let json = ReportRenderer.json(report)
        guard let again = try? Report.decode(from: json) else { fatalError("a report made from a record re-encoded into JSON it cannot read") }
        if ReportRenderer.json(again) != json { fatalError("re-encoding the report made from a record is not stable") }
        guard !MinidumpWriter.minidump(from: ProcessSnapshot(report: report)).isEmpty else { fatalError("an empty minidump") }
        guard !Pprof.encode(report).isEmpty else { fatalError("an empty pprof profile") }
    }

    /// Where the seeds are: the inputs the suite's fixtures hold.
    var seedDirectories: [String] {
        switch self {
        case .intermediateDump: return ["Tests/Fixtures/data/dumps"]
        case .reportJSON: return ["Tests/Fixtures/data/reports"]
        case .minidump: return ["Tests/Fixtures/data/dumps", "Tests/Fixtures/data/reports"]
        case .symbolIndex: return ["Tests/Fixtures/data/symbol-indexes"]
        case .procfs: return ["Tests/Fixtures/data/procfs"]
        case .runRecord: return ["Tests/Fixtures/data/run-records"]
        case .staging: return ["Tests/Fixtures/data/staging"]
        case .unitRanges, .unitReader: return []  // none kept: scripts/fuzz builds them from gcc and clang each run
        case .breakpadSym: return ["Tests/Fixtures/data/breakpad"]
        case .debuginfodAnswer: return []  // made by scripts/fuzz: Locations and the ELF files of this build
        }
    }
}
