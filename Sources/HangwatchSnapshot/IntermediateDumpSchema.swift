// What each key's value looks like. Key numbers live only in hw_dump.h; this table adds the
// value kind so the parser can reject a wrongly sized value the moment it sees its header,
// even when the value would run past the end of the file.
import CHangwatchDump

enum IntermediateDumpValueKind: Equatable {
    case u64, i64, f64, bool, string, bytes, u64Array, registers, map, array

    /// Exact byte length for fixed-size kinds.
    var fixedSize: Int? {
        switch self {
        case .u64, .i64, .f64, .bool: return 8
        case .registers: return Int(HWD_REGISTER_COUNT) * 8
        default: return nil
        }
    }

    var isContainer: Bool { self == .map || self == .array }
}

extension hwd_key {
    /// Keys travel as u16 (static-asserted in hw_dump.c).
    var wire: UInt16 { UInt16(truncatingIfNeeded: rawValue) }
}

enum IntermediateDumpSchema {
    static let currentSchemaVersion = UInt64(HWD_SCHEMA_VERSION)

    /// nil for keys this reader does not know: they are skipped, whatever their shape.
    static func kind(of key: UInt16) -> IntermediateDumpValueKind? { Int(key) < table.count ? table[Int(key)] : nil }

    /// Indexed by key number (the highest is under 1,000): no dictionary, whose first use in a
    /// process (the UInt16: Hashable conformance looked up through every conformance record) was
    /// a tenth of a first report's reading of its dump.
    private static let table: [IntermediateDumpValueKind?] = {
        let entries: [(hwd_key, IntermediateDumpValueKind)] = [
            (HWD_KEY_VERSION, .u64),
            (HWD_KEY_REASON, .map), (HWD_KEY_REASON_KIND, .u64), (HWD_KEY_REASON_TIMESTAMP, .f64),
            (HWD_KEY_HANG_TARGET, .string), (HWD_KEY_HANG_THRESHOLD, .f64), (HWD_KEY_HANG_DURATION, .f64),
            (HWD_KEY_HANG_RECOVERED, .bool), (HWD_KEY_HANG_START_TIME, .f64),
            (HWD_KEY_SIGNAL_NUMBER, .i64), (HWD_KEY_SIGNAL_CODE, .i64), (HWD_KEY_SIGNAL_ADDRESS, .u64),
            (HWD_KEY_SIGNAL_TID, .i64), (HWD_KEY_SIGNAL_MESSAGE, .string),
            (HWD_KEY_PROCESS, .map), (HWD_KEY_PROCESS_PID, .i64), (HWD_KEY_PROCESS_NAME, .string),
            (HWD_KEY_PROCESS_EXECUTABLE, .string), (HWD_KEY_PROCESS_ARGUMENTS, .array),
            (HWD_KEY_PROCESS_ARGUMENT, .string), (HWD_KEY_PROCESS_BUNDLE_ID, .string),
            (HWD_KEY_THREADS, .array), (HWD_KEY_THREAD_TID, .i64), (HWD_KEY_THREAD_NAME, .string),
            (HWD_KEY_THREAD_STATE, .string), (HWD_KEY_THREAD_SYSCALL, .string),
            (HWD_KEY_THREAD_USER_CPU, .f64), (HWD_KEY_THREAD_SYSTEM_CPU, .f64), (HWD_KEY_THREAD_ROLES, .u64),
            (HWD_KEY_THREAD_CAPTURE_STATUS, .u64), (HWD_KEY_THREAD_REGISTERS, .registers),
            (HWD_KEY_THREAD_FRAMES, .u64Array), (HWD_KEY_THREAD_QUEUE_LABEL, .string),
            (HWD_KEY_THREAD_STACK_MEMORY, .bytes),
            (HWD_KEY_THREAD_LOCK_KIND, .u64), (HWD_KEY_THREAD_LOCK_ADDRESS, .u64), (HWD_KEY_THREAD_LOCK_HOLDER, .i64),
            (HWD_KEY_THREAD_LOCK_UNKNOWN, .string), (HWD_KEY_THREAD_LOCK_LABEL, .string),
            (HWD_KEY_HANG_SAMPLES, .array), (HWD_KEY_SAMPLE_TID, .i64), (HWD_KEY_SAMPLE_COUNT, .i64),
            (HWD_KEY_SAMPLE_FRAMES, .u64Array),
            (HWD_KEY_HANG_OPERATIONS, .array), (HWD_KEY_OPERATION_NAME, .string), (HWD_KEY_OPERATION_START_TIME, .f64),
            (HWD_KEY_OPERATION_LIMIT, .f64), (HWD_KEY_OPERATION_TASK, .u64), (HWD_KEY_OPERATION_THREAD, .i64),
            (HWD_KEY_OPERATION_TRACEPARENT, .string),
            (HWD_KEY_MODULES, .array), (HWD_KEY_MODULE_PATH, .string), (HWD_KEY_MODULE_BASE, .u64),
            (HWD_KEY_MODULE_START, .u64), (HWD_KEY_MODULE_END, .u64), (HWD_KEY_MODULE_BUILD_ID, .string),
            (HWD_KEY_ANNOTATIONS, .array), (HWD_KEY_ANNOTATION_KEY, .string), (HWD_KEY_ANNOTATION_VALUE, .string),
            (HWD_KEY_CAPTURE_DURATION, .f64), (HWD_KEY_INCOMPLETE, .bool),
            (HWD_KEY_KILL_SIGNAL, .i64), (HWD_KEY_KILL_CAUSE, .string),
            (HWD_KEY_TASKS, .map), (HWD_KEY_TASKS_SCANNED_BYTES, .u64), (HWD_KEY_TASKS_DURATION, .f64),
            (HWD_KEY_TASKS_TRUNCATED, .bool), (HWD_KEY_TASKS_ERROR, .string), (HWD_KEY_TASKS_RUNTIME, .string),
            (HWD_KEY_TASKS_LIST, .array), (HWD_KEY_TASKS_UNTOUCHED_BYTES, .u64), (HWD_KEY_TASKS_UNREAD_BYTES, .u64),
            (HWD_KEY_TASKS_UNREAD, .string), (HWD_KEY_TASK_ADDRESS, .u64), (HWD_KEY_TASK_ID, .u64),
            (HWD_KEY_TASK_STATE, .u64), (HWD_KEY_TASK_THREAD, .i64), (HWD_KEY_TASK_PARENT, .u64),
            (HWD_KEY_TASK_FRAMES, .u64Array), (HWD_KEY_TASK_CHAIN_CUT, .bool), (HWD_KEY_TASK_FLAGS, .u64),
            (HWD_KEY_TASK_NAME, .string), (HWD_KEY_TASK_WAIT_KIND, .u64), (HWD_KEY_TASK_WAIT_ADDRESS, .u64),
        ]
        var table = [IntermediateDumpValueKind?](repeating: nil, count: Int(entries.map { $0.0.wire }.max() ?? 0) + 1)
        for (key, kind) in entries {
            precondition(table[Int(key.wire)] == nil, "key \(key.wire) defined twice")
            table[Int(key.wire)] = kind
        }
        return table
    }()

    /// Every key this reader knows, for tests and docs.
    static var knownKeys: [UInt16: IntermediateDumpValueKind] {
        var known: [UInt16: IntermediateDumpValueKind] = [:]
        for (key, kind) in table.enumerated() { if let kind { known[UInt16(key)] = kind } }
        return known
    }
}
