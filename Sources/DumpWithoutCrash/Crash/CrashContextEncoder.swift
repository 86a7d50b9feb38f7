// The parts of a crash dump the signal handler cannot compute (process identity, modules,
// annotations), encoded ahead of time with the same C writer into byte blobs the handler
// copies verbatim. Re-encoded whenever annotations or the staged hang change.
import CHangwatchDump

enum CrashContextEncoder {
    /// Annotation keys that carry a staged hang into the crash dump; removed again at processing.
    static let hangTargetKey = "hangwatch.superseded-hang.target"
    static let hangThresholdKey = "hangwatch.superseded-hang.threshold"
    static let hangStartKey = "hangwatch.superseded-hang.start-time"
    static let hangFileKey = "hangwatch.superseded-hang.file"

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

    static func hangAnnotations(_ hang: HangInfo, stagedFileName: String) -> [String: String] {
        [hangTargetKey: hang.target, hangThresholdKey: String(hang.thresholdSeconds),
         hangStartKey: String(hang.startTime), hangFileKey: stagedFileName]
    }

    /// Takes the staged-hang annotations out of a crash snapshot and turns them into the
    /// report context that says which hang the crash superseded.
    static func extractSupersededHang(from snapshot: inout ProcessSnapshot) -> Report.Context? {
        guard let target = snapshot.annotations.removeValue(forKey: hangTargetKey) else { return nil }
        let threshold = snapshot.annotations.removeValue(forKey: hangThresholdKey).flatMap(Double.init) ?? 0
        let start = snapshot.annotations.removeValue(forKey: hangStartKey).flatMap(Double.init) ?? snapshot.timestamp
        let file = snapshot.annotations.removeValue(forKey: hangFileKey)
        guard case .crash = snapshot.reason else { return nil }
        let hang = Report.SupersededHang(target: target, thresholdSeconds: threshold,
                                         durationSeconds: max(0, snapshot.timestamp - start),
                                         startTime: ReportFormatting.timestamp(start), reportID: file)
        return Report.Context(supersededHang: hang)
    }
}
