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
                        guard let start = UnsafeRawPointer(bitPattern: UInt(address)) else { continue }
                        let segment = UnsafeRawBufferPointer(start: start, count: Int(min(size, 1 << 20)))
                        buildID = ELFBuildID.inNotes(segment, alignment: UInt64(alignment)).map { BuildID.hex($0) } ?? ""
                    }
                }
            }
        }
        return ModuleSnapshot(path: name, base: module.bias, start: module.start, end: module.end, buildID: buildID)
    }
}
