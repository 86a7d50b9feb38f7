// The parts of a crash dump the signal handler cannot compute (process identity, modules,
// annotations), encoded ahead of time with the same C writer into byte blobs the handler
// copies verbatim. Re-encoded whenever the annotations change or a library is loaded.
import HangwatchDatabase
import HangwatchSnapshot
import CHangwatchDump

enum CrashContextEncoder {
    /// The HWD_KEY_PROCESS map.
    static func processSection(_ process: ProcessIdentity) -> [UInt8] {
        IntermediateDumpWriter.encodeInMemory { IntermediateDumpWriter.emitProcess(process, $0) }
    }

    /// The HWD_KEY_MODULES and HWD_KEY_ANNOTATIONS arrays.
    static func tailSection(modules: [ModuleSnapshot], annotations: [String: String]) -> [UInt8] {
        IntermediateDumpWriter.encodeInMemory { w in
            IntermediateDumpWriter.emitModules(modules, w)
            IntermediateDumpWriter.emitAnnotations(annotations, w)
        }
    }
}
