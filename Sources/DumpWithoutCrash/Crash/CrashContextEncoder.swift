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
        encode { w in
            hwd_start_map(w, HWD_KEY_PROCESS)
            hwd_write_i64(w, HWD_KEY_PROCESS_PID, Int64(process.pid))
            string(w, HWD_KEY_PROCESS_NAME, process.name)
            string(w, HWD_KEY_PROCESS_EXECUTABLE, process.executable)
            string(w, HWD_KEY_PROCESS_BUNDLE_ID, process.bundleID)
            hwd_start_array(w, HWD_KEY_PROCESS_ARGUMENTS)
            for argument in process.arguments {
                hwd_start_map(w, HWD_KEY_ARRAY_ITEM)
                string(w, HWD_KEY_PROCESS_ARGUMENT, argument)
                hwd_end_map(w)
            }
            hwd_end_array(w)
            hwd_end_map(w)
        }
    }

    /// The HWD_KEY_MODULES and HWD_KEY_ANNOTATIONS arrays.
    static func tailSection(modules: [ModuleSnapshot], annotations: [String: String]) -> [UInt8] {
        encode { w in
            hwd_start_array(w, HWD_KEY_MODULES)
            for module in modules {
                hwd_start_map(w, HWD_KEY_ARRAY_ITEM)
                string(w, HWD_KEY_MODULE_PATH, module.path)
                hwd_write_u64(w, HWD_KEY_MODULE_BASE, module.base)
                hwd_write_u64(w, HWD_KEY_MODULE_START, module.start)
                hwd_write_u64(w, HWD_KEY_MODULE_END, module.end)
                string(w, HWD_KEY_MODULE_BUILD_ID, module.buildID)
                hwd_end_map(w)
            }
            hwd_end_array(w)
            hwd_start_array(w, HWD_KEY_ANNOTATIONS)
            for key in annotations.keys.sorted() {
                hwd_start_map(w, HWD_KEY_ARRAY_ITEM)
                string(w, HWD_KEY_ANNOTATION_KEY, key)
                string(w, HWD_KEY_ANNOTATION_VALUE, annotations[key] ?? "")
                hwd_end_map(w)
            }
            hwd_end_array(w)
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

    private static func encode(_ body: (UnsafeMutablePointer<hwd_writer>) -> Void) -> [UInt8] {
        let writer = UnsafeMutablePointer<hwd_writer>.allocate(capacity: 1)
        defer { writer.deallocate() }
        hwd_writer_init_memory(writer, nil, 0)
        body(writer)
        let size = Int(writer.pointee.bytes_total)
        return [UInt8](unsafeUninitializedCapacity: size) { buffer, initialized in
            hwd_writer_init_memory(writer, buffer.baseAddress, UInt64(size))
            body(writer)
            hwd_flush(writer)
            precondition(writer.pointee.error == 0 && Int(writer.pointee.bytes_total) == size, "encoding is deterministic")
            initialized = size
        }
    }

    /// Cut at the format's property limit on a scalar boundary, like IntermediateDumpWriter.
    private static func string(_ w: UnsafeMutablePointer<hwd_writer>, _ key: hwd_key, _ value: String) {
        var value = value
        value.withUTF8 { utf8 in
            var count = utf8.count
            if count > Int(HWD_MAX_PROPERTY_SIZE) {
                count = Int(HWD_MAX_PROPERTY_SIZE)
                while count > 0 && utf8[count] & 0xC0 == 0x80 { count -= 1 }
            }
            _ = hwd_write_property(w, key, utf8.baseAddress, UInt64(count))
        }
    }
}
