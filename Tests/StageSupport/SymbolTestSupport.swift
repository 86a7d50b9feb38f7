// Test-only helpers: the modules of this test process and small C programs built with gcc.
// (The capture stage builds the real module list; this one exists only to feed tests.)
import HangwatchSnapshot
import HangwatchPlatform
import HangwatchRemoteCapture
import HangwatchSymbolication
import Foundation
import HangwatchTestSupport
#if canImport(Glibc)
import Glibc
#endif

/// Modules of the running process from /proc/self/maps, with the load bias computed from
/// each file's program headers, and their build-ids. The main executable comes first.
/// A loaded image is a run of consecutive mappings of one file, at increasing file offsets,
/// with an executable one among them: libelf also mmaps whole ELF files read-only (from
/// offset 0) while symbolicating, and such a mapping must not stretch a module's range, even
/// when only anonymous mappings lie between it and the image (a test binary's range once
/// reached from its image to a libelf mapping of it 40 TB above).
package func currentProcessModules() -> [ModuleSnapshot] {
    struct Mapping { var start: UInt64; var end: UInt64; var offset: UInt64; var executable: Bool }
    // Read to EOF: /proc files report size 0, so size-based reads come back truncated.
    guard let handle = FileHandle(forReadingAtPath: "/proc/self/maps") else { return [] }
    let maps = String(decoding: handle.readDataToEndOfFile(), as: UTF8.self)
    try? handle.close()
    var runs: [(path: String, mappings: [Mapping])] = []
    var previousPath: String?
    for line in maps.split(separator: "\n") {
        let fields = line.split(separator: " ", maxSplits: 5, omittingEmptySubsequences: true)
        guard fields.count >= 5 else { continue }
        let path = fields.count == 6 ? fields[5].trimmingCharacters(in: .whitespaces) : ""
        guard path.hasPrefix("/") else { continue }  // anonymous gaps/bss do not end a run
        let range = fields[0].split(separator: "-")
        guard range.count == 2, let start = UInt64(range[0], radix: 16), let end = UInt64(range[1], radix: 16),
              let offset = UInt64(fields[2], radix: 16) else { continue }
        let mapping = Mapping(start: start, end: end, offset: offset, executable: fields[1].contains("x"))
        if path == previousPath, let last = runs.last?.mappings.last, offset > last.offset {
            runs[runs.count - 1].mappings.append(mapping)
        } else {
            runs.append((path, [mapping]))
        }
        previousPath = path
    }
    let executable = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().path
    var modules = runs.compactMap { run -> ModuleSnapshot? in
        guard run.mappings.contains(where: \.executable), let first = run.mappings.first(where: { $0.offset == 0 }),
              let vaddr = firstLoadVirtualAddress(run.path) else { return nil }
        return ModuleSnapshot(path: run.path, base: first.start &- (vaddr & ~0xfff),
                              start: run.mappings.map(\.start).min()!, end: run.mappings.map(\.end).max()!,
                              buildID: ELFBuildID.read(path: run.path) ?? "")
    }
    modules.sort { ($0.path == executable ? 0 : 1) < ($1.path == executable ? 0 : 1) }
    return modules
}

/// p_vaddr of the PT_LOAD segment at file offset 0 (ELF64 little-endian only).
package func firstLoadVirtualAddress(_ path: String) -> UInt64? {
    guard let handle = FileHandle(forReadingAtPath: path) else { return nil }
    defer { try? handle.close() }
    guard let header = try? handle.read(upToCount: 64), header.count == 64,
          header.prefix(4) == Data([0x7f, 0x45, 0x4c, 0x46]), header[4] == 2 else { return nil }
    func integer(_ data: Data, _ at: Int, _ size: Int) -> UInt64 {
        (0..<size).reduce(0) { $0 | UInt64(data[data.startIndex + at + $1]) << (8 * UInt64($1)) }
    }
    let phoff = integer(header, 32, 8), entrySize = Int(integer(header, 54, 2)), count = Int(integer(header, 56, 2))
    guard entrySize >= 56, count > 0, count < 256, (try? handle.seek(toOffset: phoff)) != nil,
          let table = try? handle.read(upToCount: entrySize * count), table.count == entrySize * count else { return nil }
    for index in 0..<count {
        let entry = index * entrySize
        if integer(table, entry, 4) == 1 /* PT_LOAD */ && integer(table, entry + 8, 8) & ~0xfff == 0 {
            return integer(table, entry + 16, 8)
        }
    }
    return nil
}

/// A C program with an always-inlined function, built with gcc -O2 -g. The call to
/// `hw_sink` inside `hw_outer` is code of the inlined `hw_inlined_leaf`.
package struct InlineProgram {
    package static let source = """
    __attribute__((noinline)) int hw_sink(int x) { __asm__ volatile("" ::: "memory"); return x + 1; }
    static inline __attribute__((always_inline)) int hw_inlined_leaf(int x) {
        return hw_sink(x) * 3;
    }
    __attribute__((noinline)) int hw_outer(int x) {
        int r = hw_inlined_leaf(x);
        return r + 7;
    }
    int main(int argc, char **argv) { (void)argv; return hw_outer(argc) & 1; }

    """
    package static let leafLine = 3   // `return hw_sink(x) * 3;`
    package static let callLine = 6   // `int r = hw_inlined_leaf(x);`

    package let directory: String
    package let sourcePath: String
    package let executable: String

    package init(flags: [String] = ["-O2", "-g"]) throws {
        directory = try makeTestDirectory()
        sourcePath = directory + "/inline_test.c"
        executable = directory + "/inline_test"
        try Self.source.write(toFile: sourcePath, atomically: true, encoding: .utf8)
        try runTool("/usr/bin/gcc", flags + ["-Wl,--build-id", "-o", executable, sourcePath])
    }

    /// (link-time address, size) of a function, from `nm -S`.
    package func symbol(_ name: String) throws -> (address: UInt64, size: UInt64) {
        for line in try runTool("/usr/bin/nm", ["-S", executable]).split(separator: "\n") {
            let fields = line.split(separator: " ")
            if fields.count == 4, fields[3] == name, let address = UInt64(fields[0], radix: 16),
               let size = UInt64(fields[1], radix: 16) {
                return (address, size)
            }
        }
        throw ToolFailure(command: "nm -S \(executable) | grep \(name)", status: 1)
    }

    /// The program as a module loaded at its link-time addresses (bias 0).
    package func module(buildID: String? = nil, path: String? = nil) -> ModuleSnapshot {
        ModuleSnapshot(path: path ?? executable, base: 0, start: 0, end: 0x1000_0000,
                       buildID: buildID ?? (ELFBuildID.read(path: executable) ?? ""))
    }
}

package func makeTestDirectory() throws -> String {
    var template = Array("\(NSTemporaryDirectory())/hangwatch-symbols.XXXXXX".utf8CString)
    guard template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) != nil else {
        throw POSIXError(.init(rawValue: errno) ?? .EIO)
    }
    return String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
}

/// Returns the return addresses of its own stack and the line of the `backtrace` call (the
/// symbolication and report tests look for this function, in this file, at that line).
@inline(never)
package func symbolTestCaptureOwnStack() -> (addresses: [UInt64], line: Int) {
    let addresses = Thread.callStackReturnAddresses; let line = #line
    return (addresses.map { $0.uint64Value }, line)
}
