// A module's build-id is read without libelf (ELFBuildID, Sources/HangwatchPlatform/
// ELFBuildID.swift), so that it can be checked before libdw is loaded. Compared with binutils'
// `readelf -n` over real files, and fed crafted ones: every bad size is an answer, never a trap
// or a read past the file.
import Foundation
import HangwatchPlatform
import HangwatchTestSupport
import HangwatchStageTestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

@Suite struct ELFBuildIDTests {
    /// What `readelf -n` says the file's GNU build-id is ("" for none).
    private func readelfBuildID(_ path: String) throws -> String {
        let notes = try runTool("/usr/bin/readelf", ["-n", path])
        let line = notes.split(separator: "\n").first { $0.contains("Build ID:") }
        return line.map { String($0.split(separator: ":").last!.trimmingCharacters(in: .whitespaces)) } ?? ""
    }

    @Test func realFilesHaveTheIdReadelfReads() throws {
        let program = try InlineProgram()
        defer { try? FileManager.default.removeItem(atPath: program.directory) }
        let debugFile = program.directory + "/only-debug.debug"
        try runTool("/usr/bin/objcopy", ["--only-keep-debug", program.executable, debugFile])
        let stripped = program.directory + "/stripped"
        try runTool("/usr/bin/strip", ["-o", stripped, program.executable])
        let files = [program.executable, debugFile, stripped, ProcessInfo.processInfo.arguments[0]]
            + currentProcessModules().map(\.path).filter { $0.hasPrefix("/usr/lib") || $0.hasPrefix("/lib") }.prefix(6)
        for file in files {
            let expected = try readelfBuildID(file)
            #expect(!expected.isEmpty, "\(file) has a build-id")
            #expect(ELFBuildID.read(path: file) == expected, "\(file)")
        }
    }

    @Test func aFileWithoutABuildIDHasTheEmptyOne() throws {
        let directory = try makeTemporaryDirectory("build-id")
        defer { removeTemporaryDirectory(directory) }
        try "int main(void) { return 0; }\n".write(toFile: directory + "/main.c", atomically: true, encoding: .utf8)
        try runTool("/usr/bin/gcc", ["-Wl,--build-id=none", "-o", directory + "/none", directory + "/main.c"])
        #expect(try readelfBuildID(directory + "/none") == "")
        #expect(ELFBuildID.read(path: directory + "/none") == "")
    }

    @Test func whatIsNotARegularELFFileHasNone() throws {
        let directory = try makeTemporaryDirectory("build-id")
        defer { removeTemporaryDirectory(directory) }
        #expect(mkfifo(directory + "/fifo", 0o600) == 0)
        try Data("#!/bin/sh\necho not an ELF file\n".utf8).write(to: URL(fileURLWithPath: directory + "/script"))
        try Data().write(to: URL(fileURLWithPath: directory + "/empty"))
        for path in [directory + "/fifo", directory, directory + "/script", directory + "/empty", directory + "/absent"] {
            #expect(ELFBuildID.read(path: path) == nil, "\(path)")  // a FIFO is not opened for reading's sake: no block
        }
    }

    /// A real ELF header and program header table with every size made hostile in turn: tables
    /// and notes past the end of the file, a note whose name or description size overruns its
    /// segment, huge entry counts. Each gives "no build-id" or the id, never a crash.
    @Test func craftedSizesAreAnswersNotTraps() throws {
        let program = try InlineProgram()
        defer { try? FileManager.default.removeItem(atPath: program.directory) }
        let original = [UInt8](try Data(contentsOf: URL(fileURLWithPath: program.executable)))
        let expected = try readelfBuildID(program.executable)
        func patched(_ name: String, _ edits: [(offset: Int, bytes: [UInt8])], truncate: Int? = nil) throws -> String {
            var bytes = original
            for edit in edits { bytes.replaceSubrange(edit.offset..<edit.offset + edit.bytes.count, with: edit.bytes) }
            if let truncate { bytes = Array(bytes.prefix(truncate)) }
            let path = program.directory + "/" + name
            try Data(bytes).write(to: URL(fileURLWithPath: path))
            return path
        }
        func le(_ value: UInt64, _ count: Int) -> [UInt8] { (0..<count).map { UInt8(truncatingIfNeeded: value >> (8 * UInt64($0))) } }
        let phoff = Int(original[32..<40].enumerated().reduce(UInt64(0)) { $0 | UInt64($1.element) << (8 * UInt64($1.offset)) })
        let phnum = Int(original[56]) | Int(original[57]) << 8
        // The PT_NOTE entries' offsets into the file.
        let notes = (0..<phnum).map { phoff + 56 * $0 }.filter { original[$0] == 4 && original[$0 + 1...$0 + 3] == [0, 0, 0] }
        #expect(!notes.isEmpty)
        let noSectionHeaders: [(offset: Int, bytes: [UInt8])] = [(40, le(0, 8)), (60, le(0, 2))]
        let cases: [(String, [(offset: Int, bytes: [UInt8])], Int?)] = [
            ("sections-past-end", [(40, le(UInt64.max - 10, 8))], nil),
            ("many-sections", [(60, le(0xffff, 2))], nil),
            ("tiny-entries", [(58, le(8, 2))], nil),
            ("phdrs-past-end", noSectionHeaders + [(32, le(UInt64(original.count) - 8, 8))], nil),
            ("note-past-end", noSectionHeaders + notes.flatMap { [(offset: $0 + 8, bytes: le(UInt64.max - 100, 8))] }, nil),
            ("note-huge", noSectionHeaders + notes.flatMap { [(offset: $0 + 32, bytes: le(UInt64.max, 8))] }, nil),
            ("truncated-header", [], 40),
            ("truncated-tables", [], 4096),
        ]
        for (name, edits, truncate) in cases {
            let path = try patched(name, edits, truncate: truncate)
            let found = ELFBuildID.read(path: path)
            #expect(found == nil || found == "" || found == expected, "\(name): \(String(describing: found))")
        }
        // A note whose name size runs past its segment: each PT_NOTE's first note, namesz huge.
        var overrun = try patched("overrun", noSectionHeaders)
        var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: overrun)))
        for entry in notes {
            let offset = Int(bytes[entry + 8..<entry + 16].enumerated().reduce(UInt64(0)) { $0 | UInt64($1.element) << (8 * UInt64($1.offset)) })
            bytes.replaceSubrange(offset..<offset + 4, with: le(0xffff_fff0, 4))
        }
        try Data(bytes).write(to: URL(fileURLWithPath: overrun))
        #expect(ELFBuildID.read(path: overrun) == "")
        // Without section headers (e_shoff and e_shnum 0) the program headers alone give the id.
        overrun = try patched("program-headers-only", noSectionHeaders)
        #expect(ELFBuildID.read(path: overrun) == expected)
    }

    /// One note as a section holds it: header, name and description, each padded to `align`
    /// from the note's start (8-byte notes are .note.gnu.property's).
    private func note(_ name: [UInt8], type: UInt32, _ desc: [UInt8], align: Int) -> [UInt8] {
        func le32(_ value: Int) -> [UInt8] { (0..<4).map { UInt8(truncatingIfNeeded: value >> (8 * $0)) } }
        func padded(_ bytes: [UInt8]) -> [UInt8] { bytes + Array(repeating: 0, count: (align - bytes.count % align) % align) }
        return padded(padded(le32(name.count) + le32(desc.count) + le32(Int(type)) + name) + desc)
    }

    /// The one note walk (files and this process's memory alike): the id after a note whose
    /// name is not a multiple of 4 long, after an 8-byte property note, and every prefix of
    /// those notes cut anywhere is the id or nothing, never a read past the end.
    @Test func notesAreWalkedAtTheirAlignmentAndWithinTheirBounds() {
        let id: [UInt8] = [0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0x10]
        let gnu: [UInt8] = [0x47, 0x4e, 0x55, 0]
        let go = note([0x47, 0x6f, 0], type: 4, [1, 2, 3, 4, 5], align: 4)      // "Go\0", 5 bytes
        let property = note(gnu, type: 5, Array(repeating: 0xc0, count: 12), align: 8)  // NT_GNU_PROPERTY_TYPE_0
        let cases: [(String, [UInt8], UInt64)] = [
            ("4-byte notes", go + note(gnu, type: 3, id, align: 4), 4),
            ("8-byte notes", property + note(gnu, type: 3, id, align: 8), 8),
        ]
        for (name, notes, alignment) in cases {
            #expect(notes.withUnsafeBytes { ELFBuildID.inNotes($0, alignment: alignment) } == id, "\(name)")
            for cut in 0..<notes.count {
                let found = Array(notes.prefix(cut)).withUnsafeBytes { ELFBuildID.inNotes($0, alignment: alignment) }
                #expect(found == nil || found == id, "\(name) cut at \(cut)")
            }
        }
        // Another owner's type 3 is not a build-id.
        let other = note([0x58, 0x59, 0x5a, 0], type: 3, id, align: 4)
        #expect(other.withUnsafeBytes { ELFBuildID.inNotes($0, alignment: 4) } == nil)
    }

    /// A 32-bit ELF file (as `gcc -m32` would make, which this machine cannot): its PT_NOTE read.
    @Test func a32BitFileHasItsBuildID() throws {
        let directory = try makeTemporaryDirectory("build-id")
        defer { removeTemporaryDirectory(directory) }
        func le(_ value: Int, _ count: Int) -> [UInt8] { (0..<count).map { UInt8(truncatingIfNeeded: value >> (8 * $0)) } }
        let notes = note([0x47, 0x4e, 0x55, 0], type: 3, [0xfe, 0xed, 0xfa, 0xce], align: 4)
        // e_ident (ELFCLASS32, ELFDATA2LSB), e_type … e_flags, e_ehsize, e_phentsize 32, e_phnum 1.
        var header: [UInt8] = [0x7f, 0x45, 0x4c, 0x46, 1, 1, 1] + Array(repeating: 0, count: 9)
        header += le(2, 2) + le(3, 2) + le(1, 4) + le(0, 4) + le(52, 4) + le(0, 4) + le(0, 4) + le(52, 2) + le(32, 2) + le(1, 2)
        header += le(0, 2) + le(0, 2) + le(0, 2)
        // PT_NOTE: p_type, p_offset 84, p_vaddr, p_paddr, p_filesz, p_memsz, p_flags, p_align 4.
        let programHeader = le(4, 4) + le(84, 4) + le(0, 4) + le(0, 4) + le(notes.count, 4) + le(notes.count, 4) + le(4, 4) + le(4, 4)
        #expect(header.count == 52 && programHeader.count == 32)
        try Data(header + programHeader + notes).write(to: URL(fileURLWithPath: directory + "/elf32"))
        #expect(ELFBuildID.read(path: directory + "/elf32") == "feedface")
    }
}
