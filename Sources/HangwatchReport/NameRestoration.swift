// Names back for a stored report whose program was replaced before it was processed (a
// redeploy: its modules say `mismatched` or `missing`). The report's frames keep their captured
// addresses, so when the symbolicator now finds the module's names — a Breakpad symbol store,
// a debuginfod server, a debug file, all checked against the recorded build-id
// (docs/symbol-cache.md) — those frames are symbolicated again, and the hang's sampled stacks
// from the dump kept beside the report. Everything else in the report stays as stored.
import HangwatchSnapshot
import HangwatchSymbolication

extension Report.Module {
    /// `symbols` read as its type; nil for none or a name this build does not know.
    package var symbolKind: ModuleResolution.Kind? { symbols.flatMap(ModuleResolution.Kind.init(rawValue:)) }

    /// Its frames have no names: the file at its path has another build-id or is gone, and
    /// nothing else had them when the report was made (`symbols` mismatched or missing).
    package var lacksNames: Bool { symbolKind?.lacksNames == true }
}

extension ReportBuilder {
    /// `report` with the frames of its unnamed modules named, where `symbolicator` now finds
    /// their names under the build-id they were captured with; `snapshot` (the dump kept beside
    /// the report) gives the hang's samples. The report itself when no module gains names.
    package static func restoringNames(of report: Report, snapshot: ProcessSnapshot?, symbolicator: Symbolicator) -> Report {
        var restored = report
        var paths: Set<String> = []
        for index in report.modules.indices where report.modules[index].lacksNames {
            let resolution = symbolicator.resolution(of: report.modules[index].snapshot)
            switch resolution {
            case .verified, .debugFile, .breakpadSymbols, .debuginfod:
                restored.modules[index].symbols = resolution.name
                restored.modules[index].symbolFile = resolution.symbolFile == report.modules[index].path ? nil : resolution.symbolFile
                paths.insert(report.modules[index].path)
            case .unverified, .mismatched, .missing:
                continue  // an unverified file is not known to be the one captured
            }
        }
        guard !paths.isEmpty else { return report }
        var cache = FrameCache(symbolicator: symbolicator, modules: report.modules.map(\.snapshot))
        for index in restored.threads.indices {
            restored.threads[index].frames = renamed(restored.threads[index].frames, in: paths, returnAddresses: true, cache: &cache)
        }
        if var tasks = restored.tasks {
            for index in tasks.tasks.indices {
                tasks.tasks[index].frames = renamed(tasks.tasks[index].frames, in: paths, returnAddresses: false, cache: &cache)
            }
            restored.tasks = tasks
        }
        if case .hang(let info)? = snapshot?.reason, snapshot?.process.pid == report.process.pid {
            restored.hang?.stacks = sampledStacks(info.samples, cache: &cache)
        }
        return restored
    }

    /// `frames` with each captured address of a module in `paths` (the frames of one index:
    /// the address and the calls inlined into it) symbolicated again.
    private static func renamed(_ frames: [Report.Frame], in paths: Set<String>, returnAddresses: Bool,
                                cache: inout FrameCache) -> [Report.Frame] {
        var out: [Report.Frame] = []
        var start = frames.startIndex
        while start < frames.endIndex {
            let index = frames[start].index
            let end = frames[start...].firstIndex { $0.index != index } ?? frames.endIndex
            if let module = frames[start].module, paths.contains(module) {
                let address = frames[start].address
                out += cache.frames(address: address, isReturnAddress: returnAddresses && index > 0).map { makeFrame($0, index: index) }
            } else {
                out += frames[start..<end]
            }
            start = end
        }
        return out
    }
}
