// The ELF objects loaded in this process, from dl_iterate_phdr, with their GNU build-ids
// read from the PT_NOTE segments already mapped in memory.
import HangwatchPlatform
import HangwatchDatabase
import HangwatchSnapshot
import CHangwatchCapture
#if canImport(Glibc)
import Glibc
#endif

enum LoadedModules {
    private final class Collector {
        var modules: [ModuleSnapshot] = []
        let executablePath: String
        init(executablePath: String) { self.executablePath = executablePath }
    }

    static func list() -> [ModuleSnapshot] {
        let collector = Collector(executablePath: ProcFS.readLink("/proc/self/exe") ?? "")
        withExtendedLifetime(collector) {
            hwc_for_each_module({ module, context in
                guard let module, let context else { return }
                let collector = Unmanaged<Collector>.fromOpaque(context).takeUnretainedValue()
                collector.modules.append(LoadedModules.snapshot(of: module.pointee, executablePath: collector.executablePath))
            }, Unmanaged.passUnretained(collector).toOpaque())
        }
        return collector.modules
    }

    private static func snapshot(of module: hwc_module, executablePath: String) -> ModuleSnapshot {
        var name = module.name.map { String(cString: $0) } ?? ""
        // The main executable is reported with an empty name.
        if name.isEmpty { name = executablePath }
        var buildID = ""
        let notes = Int(min(module.note_count, UInt32(HWC_MODULE_MAX_NOTES)))
        withUnsafeBytes(of: module.note_address) { addresses in
            withUnsafeBytes(of: module.note_size) { sizes in
                withUnsafeBytes(of: module.note_alignment) { alignments in
                    for index in 0..<notes where buildID.isEmpty {
                        let address = addresses.load(fromByteOffset: index * 8, as: UInt64.self)
                        let size = sizes.load(fromByteOffset: index * 8, as: UInt64.self)
                        let alignment = alignments.load(fromByteOffset: index * 4, as: UInt32.self)
                        buildID = gnuBuildID(notesAt: address, size: Int(min(size, 1 << 20)), alignment: Int(alignment))
                    }
                }
            }
        }
        return ModuleSnapshot(path: name, base: module.bias, start: module.start, end: module.end, buildID: buildID)
    }

    /// Walks the notes of one PT_NOTE segment (bounded by its size) for NT_GNU_BUILD_ID.
    static func gnuBuildID(notesAt address: UInt64, size: Int, alignment: Int) -> String {
        guard let base = UnsafeRawPointer(bitPattern: UInt(address)), size >= 12 else { return "" }
        let align = alignment == 8 ? 8 : 4
        func rounded(_ value: Int) -> Int { (value + align - 1) & ~(align - 1) }
        var offset = 0
        while offset + 12 <= size {
            let nameSize = Int(base.loadUnaligned(fromByteOffset: offset, as: UInt32.self))
            let descSize = Int(base.loadUnaligned(fromByteOffset: offset + 4, as: UInt32.self))
            let type = base.loadUnaligned(fromByteOffset: offset + 8, as: UInt32.self)
            let nameAt = offset + 12
            let descAt = nameAt + rounded(nameSize)
            guard nameSize <= size, descSize <= size, descAt + descSize <= size else { break }
            if type == 3 /* NT_GNU_BUILD_ID */, nameSize == 4,
               base.load(fromByteOffset: nameAt, as: UInt8.self) == UInt8(ascii: "G"),
               base.load(fromByteOffset: nameAt + 1, as: UInt8.self) == UInt8(ascii: "N"),
               base.load(fromByteOffset: nameAt + 2, as: UInt8.self) == UInt8(ascii: "U") {
                return BuildID.hex((0..<descSize).map { base.load(fromByteOffset: descAt + $0, as: UInt8.self) })
            }
            offset = descAt + rounded(descSize)
        }
        return ""
    }
}
