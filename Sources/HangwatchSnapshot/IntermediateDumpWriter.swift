// Serialises a `ProcessSnapshot` as an intermediate dump. Every byte goes through the C
// writer (CHangwatchDump), the same primitives a crash handler uses, so the wire format
// has exactly one encoder.
import CHangwatchDump
#if canImport(Glibc)
import Glibc
#endif

/// A failed write: `code` is an errno value, or one of the writer's own `HWD_ERROR_*` codes.
package struct IntermediateDumpWriteError: Error, Equatable, Sendable, CustomStringConvertible {
    package let code: Int32

    package init(code: Int32) { self.code = code }

    package var description: String {
        switch code {
        case Int32(HWD_ERROR_VALUE_TOO_LARGE): return "intermediate dump write failed: value too large"
        case Int32(HWD_ERROR_TOO_DEEP): return "intermediate dump write failed: nesting too deep"
        case Int32(HWD_ERROR_BAD_NESTING): return "intermediate dump write failed: bad nesting"
        case Int32(HWD_ERROR_NO_SPACE): return "intermediate dump write failed: no space in memory sink"
        case Int32(HWD_ERROR_SHORT_WRITE): return "intermediate dump write failed: write(2) wrote nothing"
        case Int32(HWD_ERROR_ENDED): return "intermediate dump write failed: element after end of document"
        case Int32(HWD_ERROR_INVALID_ARGUMENT): return "intermediate dump write failed: invalid argument"
        default: return "intermediate dump write failed: \(String(cString: strerror(code))) (errno \(code))"
        }
    }
}

package enum IntermediateDumpWriter {
    /// Streams the dump to `fd` (the caller keeps ownership of it). Throws on the first failed write.
    package static func write(_ snapshot: ProcessSnapshot, to fd: Int32) throws(IntermediateDumpWriteError) {
        let writer = UnsafeMutablePointer<hwd_writer>.allocate(capacity: 1)
        defer { writer.deallocate() }
        hwd_writer_init(writer, fd)
        let error = emit(snapshot, into: writer)
        if error != 0 { throw IntermediateDumpWriteError(code: error) }
    }

    /// The dump's bytes.
    package static func encode(_ snapshot: ProcessSnapshot) -> [UInt8] {
        encodeInMemory { _ = emit(snapshot, into: $0) }
    }

    /// Bytes of whatever `body` writes (also parts of a dump, for the crash handler's
    /// prepared sections). A first pass only counts bytes, the second fills an exact buffer.
    package static func encodeInMemory(_ body: (UnsafeMutablePointer<hwd_writer>) -> Void) -> [UInt8] {
        let writer = UnsafeMutablePointer<hwd_writer>.allocate(capacity: 1)
        defer { writer.deallocate() }
        hwd_writer_init_memory(writer, nil, 0)
        body(writer)
        precondition(writer.pointee.error == 0, "in-memory encoding cannot fail: \(IntermediateDumpWriteError(code: writer.pointee.error))")
        let size = Int(writer.pointee.bytes_total)
        return [UInt8](unsafeUninitializedCapacity: size) { buffer, initialized in
            hwd_writer_init_memory(writer, buffer.baseAddress, UInt64(size))
            body(writer)
            hwd_flush(writer)
            precondition(writer.pointee.error == 0 && Int(writer.pointee.bytes_total) == size, "encoding is deterministic")
            initialized = size
        }
    }

    /// Sections in the order the format fixes (most valuable first, so a cut file keeps them).
    /// Errors are sticky in the C writer, so only the final result needs checking.
    static func emit(_ snapshot: ProcessSnapshot, into w: UnsafeMutablePointer<hwd_writer>) -> Int32 {
        hwd_begin_document(w)
        emitReason(snapshot, w)
        emitProcess(snapshot.process, w)

        hwd_start_array(w, HWD_KEY_THREADS)
        for thread in snapshot.threads { emitThread(thread, w) }
        hwd_end_array(w)

        if case .hang(let hang) = snapshot.reason, !hang.samples.isEmpty {
            hwd_start_array(w, HWD_KEY_HANG_SAMPLES)
            for sample in hang.samples {
                hwd_start_map(w, HWD_KEY_ARRAY_ITEM)
                hwd_write_i64(w, HWD_KEY_SAMPLE_TID, Int64(sample.tid))
                hwd_write_i64(w, HWD_KEY_SAMPLE_COUNT, Int64(sample.count))
                writeU64s(w, HWD_KEY_SAMPLE_FRAMES, sample.frames)
                hwd_end_map(w)
            }
            hwd_end_array(w)
        }
        if case .hang(let hang) = snapshot.reason, !hang.operations.isEmpty {
            hwd_start_array(w, HWD_KEY_HANG_OPERATIONS)
            for operation in hang.operations.prefix(RunningOperation.maximumCount) {
                hwd_start_map(w, HWD_KEY_ARRAY_ITEM)
                writeString(w, HWD_KEY_OPERATION_NAME, operation.name)
                hwd_write_f64(w, HWD_KEY_OPERATION_START_TIME, operation.startTime)
                hwd_write_f64(w, HWD_KEY_OPERATION_LIMIT, operation.limitSeconds)
                if operation.task != 0 { hwd_write_u64(w, HWD_KEY_OPERATION_TASK, operation.task) }
                hwd_write_i64(w, HWD_KEY_OPERATION_THREAD, Int64(operation.thread))
                if let traceparent = operation.traceparent { writeString(w, HWD_KEY_OPERATION_TRACEPARENT, traceparent) }
                hwd_end_map(w)
            }
            hwd_end_array(w)
        }

        emitModules(snapshot.modules, w)
        if let tasks = snapshot.tasks { emitTasks(tasks, w) }
        emitAnnotations(snapshot.reportedAnnotations, w)

        hwd_write_f64(w, HWD_KEY_CAPTURE_DURATION, snapshot.captureDurationSeconds)
        if snapshot.incomplete { hwd_write_bool(w, HWD_KEY_INCOMPLETE, 1) }
        return hwd_end_document(w)
    }

    private static func emitReason(_ snapshot: ProcessSnapshot, _ w: UnsafeMutablePointer<hwd_writer>) {
        hwd_start_map(w, HWD_KEY_REASON)
        // The kind comes first: a reader that gets only this much still knows what happened.
        switch snapshot.reason {
        case .dumpRequested:
            hwd_write_u64(w, HWD_KEY_REASON_KIND, UInt64(HWD_REASON_DUMP_REQUESTED.rawValue))
            hwd_write_f64(w, HWD_KEY_REASON_TIMESTAMP, snapshot.timestamp)
        case .hang(let hang):
            hwd_write_u64(w, HWD_KEY_REASON_KIND, UInt64(HWD_REASON_HANG.rawValue))
            hwd_write_f64(w, HWD_KEY_REASON_TIMESTAMP, snapshot.timestamp)
            writeString(w, HWD_KEY_HANG_TARGET, hang.target.name)
            hwd_write_f64(w, HWD_KEY_HANG_THRESHOLD, hang.thresholdSeconds)
            hwd_write_f64(w, HWD_KEY_HANG_DURATION, hang.durationSeconds)
            hwd_write_bool(w, HWD_KEY_HANG_RECOVERED, hang.recovered ? 1 : 0)
            hwd_write_f64(w, HWD_KEY_HANG_START_TIME, hang.startTime)
        case .crash(let signal):
            hwd_write_u64(w, HWD_KEY_REASON_KIND, UInt64(HWD_REASON_CRASH.rawValue))
            hwd_write_f64(w, HWD_KEY_REASON_TIMESTAMP, snapshot.timestamp)
            hwd_write_i64(w, HWD_KEY_SIGNAL_NUMBER, Int64(signal.number))
            hwd_write_i64(w, HWD_KEY_SIGNAL_CODE, Int64(signal.code))
            hwd_write_u64(w, HWD_KEY_SIGNAL_ADDRESS, signal.address)
            hwd_write_i64(w, HWD_KEY_SIGNAL_TID, Int64(signal.tid))
            if let message = signal.message { writeString(w, HWD_KEY_SIGNAL_MESSAGE, message) }
        case .killed(let kill):
            hwd_write_u64(w, HWD_KEY_REASON_KIND, UInt64(HWD_REASON_KILLED.rawValue))
            hwd_write_f64(w, HWD_KEY_REASON_TIMESTAMP, snapshot.timestamp)
            if let signal = kill.signal { hwd_write_i64(w, HWD_KEY_KILL_SIGNAL, Int64(signal)) }
            writeString(w, HWD_KEY_KILL_CAUSE, kill.cause.rawValue)
        }
        hwd_end_map(w)
    }

    package static func emitModules(_ modules: [ModuleSnapshot], _ w: UnsafeMutablePointer<hwd_writer>) {
        hwd_start_array(w, HWD_KEY_MODULES)
        for module in modules {
            hwd_start_map(w, HWD_KEY_ARRAY_ITEM)
            writeString(w, HWD_KEY_MODULE_PATH, module.path)
            hwd_write_u64(w, HWD_KEY_MODULE_BASE, module.base)
            hwd_write_u64(w, HWD_KEY_MODULE_START, module.start)
            hwd_write_u64(w, HWD_KEY_MODULE_END, module.end)
            writeString(w, HWD_KEY_MODULE_BUILD_ID, module.buildID)
            hwd_end_map(w)
        }
        hwd_end_array(w)
    }

    /// After the modules: the tasks' chains are addresses in them.
    static func emitTasks(_ capture: TaskCapture, _ w: UnsafeMutablePointer<hwd_writer>) {
        hwd_start_map(w, HWD_KEY_TASKS)
        hwd_write_u64(w, HWD_KEY_TASKS_SCANNED_BYTES, capture.scannedBytes)
        hwd_write_f64(w, HWD_KEY_TASKS_DURATION, capture.durationSeconds)
        hwd_write_bool(w, HWD_KEY_TASKS_TRUNCATED, capture.truncated ? 1 : 0)
        if let error = capture.error { writeString(w, HWD_KEY_TASKS_ERROR, error) }
        if let runtime = capture.runtime { writeString(w, HWD_KEY_TASKS_RUNTIME, runtime) }
        if capture.untouchedBytes > 0 { hwd_write_u64(w, HWD_KEY_TASKS_UNTOUCHED_BYTES, capture.untouchedBytes) }
        if capture.unreadBytes > 0 { hwd_write_u64(w, HWD_KEY_TASKS_UNREAD_BYTES, capture.unreadBytes) }
        if let unread = capture.unread { writeString(w, HWD_KEY_TASKS_UNREAD, unread) }
        hwd_start_array(w, HWD_KEY_TASKS_LIST)
        for task in capture.tasks {
            hwd_start_map(w, HWD_KEY_ARRAY_ITEM)
            hwd_write_u64(w, HWD_KEY_TASK_ADDRESS, task.address)
            hwd_write_u64(w, HWD_KEY_TASK_ID, task.id)
            hwd_write_u64(w, HWD_KEY_TASK_STATE, UInt64(TaskState.allCases.firstIndex(of: task.state) ?? 2))
            if let thread = task.thread { hwd_write_i64(w, HWD_KEY_TASK_THREAD, Int64(thread)) }
            if let parent = task.parent { hwd_write_u64(w, HWD_KEY_TASK_PARENT, parent) }
            writeU64s(w, HWD_KEY_TASK_FRAMES, task.frames)
            if task.chainCut { hwd_write_bool(w, HWD_KEY_TASK_CHAIN_CUT, 1) }
            hwd_write_u64(w, HWD_KEY_TASK_FLAGS, UInt64(task.flags.rawValue))
            if let name = task.name { writeString(w, HWD_KEY_TASK_NAME, name) }
            if let wait = task.waitingOn {
                hwd_write_u64(w, HWD_KEY_TASK_WAIT_KIND, UInt64(TaskWait.Kind.allCases.firstIndex(of: wait.kind) ?? 0))
                hwd_write_u64(w, HWD_KEY_TASK_WAIT_ADDRESS, wait.address)
            }
            hwd_end_map(w)
        }
        hwd_end_array(w)
        hwd_end_map(w)
    }

    package static func emitAnnotations(_ annotations: [String: String], _ w: UnsafeMutablePointer<hwd_writer>) {
        hwd_start_array(w, HWD_KEY_ANNOTATIONS)
        // Sorted so the bytes are deterministic (encodeInMemory runs its body twice and must agree).
        for key in annotations.keys.sorted() {
            hwd_start_map(w, HWD_KEY_ARRAY_ITEM)
            writeString(w, HWD_KEY_ANNOTATION_KEY, key)
            writeString(w, HWD_KEY_ANNOTATION_VALUE, annotations[key] ?? "")
            hwd_end_map(w)
        }
        hwd_end_array(w)
    }

    package static func emitProcess(_ process: ProcessIdentity, _ w: UnsafeMutablePointer<hwd_writer>) {
        hwd_start_map(w, HWD_KEY_PROCESS)
        hwd_write_i64(w, HWD_KEY_PROCESS_PID, Int64(process.pid))
        writeString(w, HWD_KEY_PROCESS_NAME, process.name)
        writeString(w, HWD_KEY_PROCESS_EXECUTABLE, process.executable)
        writeString(w, HWD_KEY_PROCESS_BUNDLE_ID, process.bundleID)
        hwd_start_array(w, HWD_KEY_PROCESS_ARGUMENTS)
        for argument in process.arguments {
            hwd_start_map(w, HWD_KEY_ARRAY_ITEM)
            writeString(w, HWD_KEY_PROCESS_ARGUMENT, argument)
            hwd_end_map(w)
        }
        hwd_end_array(w)
        hwd_end_map(w)
    }

    private static func emitThread(_ thread: ThreadSnapshot, _ w: UnsafeMutablePointer<hwd_writer>) {
        hwd_start_map(w, HWD_KEY_ARRAY_ITEM)
        // tid and status first: a reader keeps a half-written thread that has its tid.
        hwd_write_i64(w, HWD_KEY_THREAD_TID, Int64(thread.tid))
        hwd_write_u64(w, HWD_KEY_THREAD_CAPTURE_STATUS, UInt64(thread.status.rawValue))
        hwd_write_u64(w, HWD_KEY_THREAD_ROLES, UInt64(thread.roles.rawValue))
        writeString(w, HWD_KEY_THREAD_NAME, thread.name)
        writeString(w, HWD_KEY_THREAD_STATE, thread.state.letter)
        if let syscall = thread.syscall { writeString(w, HWD_KEY_THREAD_SYSCALL, syscall) }
        hwd_write_f64(w, HWD_KEY_THREAD_USER_CPU, thread.cpuSeconds.user)
        hwd_write_f64(w, HWD_KEY_THREAD_SYSTEM_CPU, thread.cpuSeconds.system)
        // `values` is a package var; a set of the wrong size cannot be read back, so it is left out.
        if let registers = thread.registers, registers.values.count == Int(HWD_REGISTER_COUNT) {
            writeU64s(w, HWD_KEY_THREAD_REGISTERS, registers.values)
        }
        writeU64s(w, HWD_KEY_THREAD_FRAMES, thread.frames)
        if let label = thread.queueLabel { writeString(w, HWD_KEY_THREAD_QUEUE_LABEL, label) }
        if let lock = thread.lockWait {
            hwd_write_u64(w, HWD_KEY_THREAD_LOCK_KIND, lock.kind.wire)
            hwd_write_u64(w, HWD_KEY_THREAD_LOCK_ADDRESS, lock.address)
            if let holder = lock.holder { hwd_write_i64(w, HWD_KEY_THREAD_LOCK_HOLDER, Int64(holder)) }
            if let unknown = lock.unknown { writeString(w, HWD_KEY_THREAD_LOCK_UNKNOWN, unknown) }
            if let label = lock.label { writeString(w, HWD_KEY_THREAD_LOCK_LABEL, label) }
        }
        let stackCount = min(thread.stackMemory.count, Int(HWD_MAX_PROPERTY_SIZE))
        thread.stackMemory.withUnsafeBytes { bytes in
            _ = hwd_write_property(w, HWD_KEY_THREAD_STACK_MEMORY, bytes.baseAddress, UInt64(stackCount))
        }
        hwd_end_map(w)
    }

    /// Values longer than the format's property limit are cut (strings at a scalar boundary),
    /// so every snapshot encodes and every encoded dump reads back.
    private static func writeString(_ w: UnsafeMutablePointer<hwd_writer>, _ key: hwd_key, _ value: String) {
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

    private static func writeU64s(_ w: UnsafeMutablePointer<hwd_writer>, _ key: hwd_key, _ values: [UInt64]) {
        let count = min(values.count, Int(HWD_MAX_PROPERTY_SIZE) / 8)
        values.withUnsafeBufferPointer { buffer in
            _ = hwd_write_u64_array(w, key, buffer.baseAddress, UInt64(count))
        }
    }
}
