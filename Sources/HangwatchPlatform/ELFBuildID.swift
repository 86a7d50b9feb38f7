// The GNU build-id of an ELF object (an NT_GNU_BUILD_ID note owned by "GNU"), read in one
// place: from this process's memory (LoadedModules, Sources/HangwatchCapture: the PT_NOTE
// segments the loader mapped) and from files (the modules of another process,
// Sources/HangwatchRemoteCapture/RemoteModules.swift; the symbolicator's checks of the files it
// is given or finds; `hangwatch symbols`). Files are read with pread, not libelf: a module's
// identity is checked before libdw is loaded (Sources/CHangwatchSymbols/hw_libdw.h), so that a
// missing libdw is reported as such, not as a missing module. Sections first, then program headers,
// as elfutils' dwelf_elf_gnu_build_id does (a separate debug file keeps the note's section; its
// program headers may point elsewhere). Native byte order only: no other is loaded here. Every
// size is bounded by what holds it: a file can be hostile or truncated, and a broken one has no
// build-id, never a trap or a read past its end.
// Not generic, for the reason BuildID.hex gives (Sources/HangwatchSnapshot/BuildID.swift).
import HangwatchSnapshot
#if canImport(Glibc)
import Glibc
#endif

package enum ELFBuildID {
    /// The most bytes of one note section or segment looked at.
    static let maxNoteBytes = 64 * 1024
    /// The most bytes of a section or program header table read.
    static let maxTableBytes = 4096 * 64

    /// The GNU build-id of the ELF file at `path` as lowercase hex: "" when the file has none,
    /// nil when it is missing, unreadable, or not a regular ELF file of this machine's byte
    /// order. Opened with O_NONBLOCK: a path swapped for a FIFO does not block.
    package static func read(path: String) -> String? {
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        return read(fileDescriptor: fd)
    }

    /// `read(path:)` of a file already open: its section headers' SHT_NOTE sections first (a
    /// separate debug file keeps those), then its program headers' PT_NOTE segments.
    package static func read(fileDescriptor fd: Int32) -> String? {
        guard let file = RegularFile(fd: fd), file.size >= 52,
              let header = file.bytes(at: 0, count: min(file.size, 64)),
              header[0] == 0x7f, header[1] == 0x45, header[2] == 0x4c, header[3] == 0x46,  // \x7fELF
              header[4] == 1 || header[4] == 2,                                            // ELFCLASS32, 64
              header[5] == (UInt16(1).littleEndian == 1 ? 1 : 2) else { return nil }       // native data
        let wide = header[4] == 2
        guard !wide || header.count == 64 else { return nil }
        let id = buildID(in: file, header: header, wide: wide, sections: true)
            ?? buildID(in: file, header: header, wide: wide, sections: false)
        return id.map { BuildID.hex($0) } ?? ""
    }

    /// The description of the first NT_GNU_BUILD_ID note among `notes` (one note section or
    /// segment whose alignment is `alignment`: 8 for 8-byte notes, 4 otherwise), or nil. Each
    /// note's name and description are padded to the alignment from the start of `notes`.
    package static func inNotes(_ notes: UnsafeRawBufferPointer, alignment: UInt64) -> [UInt8]? {
        let align = alignment == 8 ? 8 : 4
        func up(_ value: Int) -> Int { (value + align - 1) & ~(align - 1) }
        var at = 0
        while notes.count - at >= 12 {
            // Sizes are 32-bit: no sum below overflows an Int.
            let nameSize = Int(notes.loadUnaligned(fromByteOffset: at, as: UInt32.self))
            let descSize = Int(notes.loadUnaligned(fromByteOffset: at + 4, as: UInt32.self))
            let type = notes.loadUnaligned(fromByteOffset: at + 8, as: UInt32.self)
            let desc = at + up(12 + nameSize)
            guard desc + descSize <= notes.count else { return nil }
            if type == 3, nameSize == 4, descSize > 0, notes[at + 12] == 0x47, notes[at + 13] == 0x4e,
               notes[at + 14] == 0x55, notes[at + 15] == 0 {
                return Array(notes[desc..<desc + descSize])
            }
            at = up(desc + descSize)
        }
        return nil
    }

    /// The id in the first SHT_NOTE section (`sections`) or PT_NOTE segment of `file` holding one.
    private static func buildID(in file: RegularFile, header: [UInt8], wide: Bool, sections: Bool) -> [UInt8]? {
        // e_shoff/e_phoff, e_shentsize/e_phentsize, e_shnum/e_phnum, for ELF64 and ELF32.
        let table = field(header, sections ? (wide ? 40 : 32) : (wide ? 32 : 28), wide: wide)
        let entrySize = UInt64(field(header, sections ? (wide ? 58 : 46) : (wide ? 54 : 42), bytes: 2))
        let count = UInt64(field(header, sections ? (wide ? 60 : 48) : (wide ? 56 : 44), bytes: 2))
        let least: UInt64 = sections ? (wide ? 64 : 40) : (wide ? 56 : 32)
        guard table > 0, count > 0, entrySize >= least, entrySize * count <= UInt64(maxTableBytes),
              let entries = file.bytes(at: table, count: entrySize * count) else { return nil }
        for index in 0..<Int(count) {
            let entry = index * Int(entrySize)
            // sh_type at 4 (SHT_NOTE 7), p_type at 0 (PT_NOTE 4).
            guard field(entries, entry + (sections ? 4 : 0), bytes: 4) == (sections ? 7 : 4) else { continue }
            // sh_offset, sh_size, sh_addralign; p_offset, p_filesz, p_align.
            let offset = field(entries, entry + (sections ? (wide ? 24 : 16) : (wide ? 8 : 4)), wide: wide)
            let noteSize = field(entries, entry + (sections ? (wide ? 32 : 20) : (wide ? 32 : 16)), wide: wide)
            let alignment = field(entries, entry + (sections ? (wide ? 48 : 32) : (wide ? 48 : 28)), wide: wide)
            guard noteSize >= 12, let notes = file.bytes(at: offset, count: min(noteSize, UInt64(maxNoteBytes))) else { continue }
            if let id = notes.withUnsafeBytes({ inNotes($0, alignment: alignment) }) { return id }
        }
        return nil
    }

    /// An address-sized field (8 bytes in ELF64, 4 in ELF32) at `offset` of `bytes`.
    private static func field(_ bytes: [UInt8], _ offset: Int, wide: Bool) -> UInt64 { field(bytes, offset, bytes: wide ? 8 : 4) }

    /// A native-endian field of `count` bytes at `offset` of `bytes`.
    private static func field(_ bytes: [UInt8], _ offset: Int, bytes count: Int) -> UInt64 {
        bytes.withUnsafeBytes { raw in
            switch count {
            case 2: UInt64(raw.loadUnaligned(fromByteOffset: offset, as: UInt16.self))
            case 4: UInt64(raw.loadUnaligned(fromByteOffset: offset, as: UInt32.self))
            default: raw.loadUnaligned(fromByteOffset: offset, as: UInt64.self)
            }
        }
    }
}
