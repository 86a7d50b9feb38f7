// Modules of another process: its file mappings from /proc/PID/maps grouped per ELF file,
// with the load bias read from the file's program headers (PT_LOAD) and its GNU build-id
// (ELFBuildID, Sources/HangwatchPlatform/ELFBuildID.swift). All reads are bounded: a mapped
// file can be hostile or truncated, and a broken one yields a module without build-id, never
// a crash.
import HangwatchPlatform
import HangwatchSnapshot
#if canImport(Glibc)
import Glibc
#endif

extension RemoteCapture {
    enum Modules {
        static func read(pid: Int32) -> [ModuleSnapshot] {
            var order: [String] = []
            var byPath: [String: [ProcFS.Mapping]] = [:]
            for mapping in ProcFS.fileMappings(of: pid) {
                if byPath[mapping.path] == nil { order.append(mapping.path) }
                byPath[mapping.path, default: []].append(mapping)
            }
            var modules: [ModuleSnapshot] = []
            for path in order {
                guard let mappings = byPath[path], let module = module(path: path, mappings: mappings, pid: pid) else { continue }
                modules.append(module)
            }
            return modules
        }

        private static func module(path: String, mappings: [ProcFS.Mapping], pid: Int32) -> ModuleSnapshot? {
            // A file replaced or deleted since it was mapped reads as "path (deleted)"; the
            // mapped copy is still reachable through /proc/PID/map_files.
            let first = mappings.min { $0.offset < $1.offset || ($0.offset == $1.offset && $0.start < $1.start) }!
            let cleanPath = path.hasSuffix(" (deleted)") ? String(path.dropLast(10)) : path
            let candidates = [cleanPath, "/proc/\(pid)/map_files/\(hex(first.start))-\(hex(first.end))"]
            for candidate in candidates {
                // The inode check catches a path that now names a different file than the mapped one.
                guard let file = ELFFile(path: candidate, inode: first.inode) else { continue }
                let start = mappings.map(\.start).min()!
                let end = mappings.map(\.end).max()!
                let bias = file.loadBias(mappedAt: first.start, fileOffset: first.offset)
                return ModuleSnapshot(path: cleanPath, base: bias, start: start, end: end, buildID: file.buildID())
            }
            return nil
        }

        private static func hex(_ value: UInt64) -> String { String(value, radix: 16) }
    }

    /// Just enough of a 64-bit little-endian ELF file: its program headers, and its build-id.
    final class ELFFile {
        private let file: RegularFile
        private let header: [UInt8]

        private static let maxProgramHeaders = 512

        /// Opens `path` if it is a regular 64-bit little-endian ELF file (with inode `inode`
        /// when given). O_NONBLOCK: a path swapped for a FIFO must not block the capture.
        init?(path: String, inode: UInt64? = nil) {
            let fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY)
            guard fd >= 0 else { return nil }
            // \x7fELF, ELFCLASS64, little-endian.
            guard let file = RegularFile(fd: fd), file.size >= 64, inode.map({ file.inode == $0 }) ?? true,
                  let header = file.bytes(at: 0, count: 64),
                  header[0] == 0x7f, header[1] == 0x45, header[2] == 0x4c, header[3] == 0x46,
                  header[4] == 2, header[5] == 1 else {
                close(fd); return nil
            }
            self.file = file
            self.header = header
        }

        deinit { close(file.fd) }

        private struct ProgramHeader { var type: UInt32; var offset: UInt64; var vaddr: UInt64; var fileSize: UInt64 }

        private var programHeaders: [ProgramHeader] {
            let offset = header.u64(32), entrySize = Int(header.u16(54)), count = Int(header.u16(56))
            guard entrySize >= 56, count > 0, count <= Self.maxProgramHeaders,
                  let table = file.bytes(at: offset, count: UInt64(entrySize * count)) else { return [] }
            return (0..<count).map { index in
                let base = index * entrySize
                return ProgramHeader(type: table.u32(base), offset: table.u64(base + 8),
                                     vaddr: table.u64(base + 16), fileSize: table.u64(base + 32))
            }
        }

        /// Runtime address minus link-time address: the mapping of file offset `fileOffset`
        /// at `mappedAt` belongs to the PT_LOAD whose page-aligned offset is that offset.
        func loadBias(mappedAt: UInt64, fileOffset: UInt64) -> UInt64 {
            let page = UInt64(max(sysconf(Int32(_SC_PAGESIZE)), 4096))
            let loads = programHeaders.filter { $0.type == 1 }  // PT_LOAD
            let segment = loads.first { $0.offset & ~(page - 1) == fileOffset } ?? loads.first
            guard let segment else { return mappedAt &- fileOffset }
            return mappedAt &- (segment.vaddr & ~(page - 1))
        }

        /// Lowercase hex GNU build-id, or "" when there is none (ELFBuildID,
        /// Sources/HangwatchPlatform/ELFBuildID.swift).
        func buildID() -> String { ELFBuildID.read(fileDescriptor: file.fd) ?? "" }
    }
}

extension Array where Element == UInt8 {
    fileprivate func u16(_ at: Int) -> UInt16 { UInt16(self[at]) | UInt16(self[at + 1]) << 8 }
    fileprivate func u32(_ at: Int) -> UInt32 {
        (0..<4).reduce(UInt32(0)) { $0 | UInt32(self[at + $1]) << (8 * UInt32($1)) }
    }
    fileprivate func u64(_ at: Int) -> UInt64 {
        (0..<8).reduce(UInt64(0)) { $0 | UInt64(self[at + $1]) << (8 * UInt64($1)) }
    }
}
