// Reads an intermediate dump back into a `ProcessSnapshot`. A cut file gives an incomplete
// snapshot holding everything written before the cut; unknown keys are skipped; anything
// malformed is an `IntermediateDumpError`, never a trap.
import CHangwatchDump
#if canImport(Glibc)
import Glibc
#endif

package enum IntermediateDumpReader {
    /// The most frames a thread or a sample may have: what the writers can produce (remote
    /// capture's `maxFrames` limit; live capture stops at 1024).
    package static let maxFrames = 65_536

    package static func read(path: String, limits: IntermediateDumpLimits = .standard) throws(IntermediateDumpError) -> ProcessSnapshot {
        try read(bytes: readFile(path: path, limits: limits), limits: limits)
    }

    package static func read(bytes: [UInt8], limits: IntermediateDumpLimits = .standard) throws(IntermediateDumpError) -> ProcessSnapshot {
        try decode(parse(bytes: bytes, limits: limits))
    }

    /// The generic tree, for tools that want to show keys this reader does not interpret.
    package static func parse(bytes: [UInt8], limits: IntermediateDumpLimits = .standard) throws(IntermediateDumpError) -> IntermediateDumpTree {
        try IntermediateDumpParser.parse(bytes, limits: limits)
    }

    package static func decode(_ tree: IntermediateDumpTree) throws(IntermediateDumpError) -> ProcessSnapshot {
        try IntermediateDumpDecoder.decode(tree)
    }

    /// Reads a whole regular file without following a final symlink and without ever
    /// holding more than `limits.maxFileSize` (+ one chunk) bytes, even if it is growing.
    package static func readFile(path: String, limits: IntermediateDumpLimits = .standard) throws(IntermediateDumpError) -> [UInt8] {
        // O_NONBLOCK: opening a FIFO planted at the path must not block us.
        let fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)
        guard fd >= 0 else { throw IntermediateDumpError(offset: 0, reason: .io(errno: errno)) }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw IntermediateDumpError(offset: 0, reason: .io(errno: errno)) }
        guard info.st_mode & S_IFMT == S_IFREG else { throw IntermediateDumpError(offset: 0, reason: .notARegularFile) }
        guard info.st_size <= limits.maxFileSize else {
            throw IntermediateDumpError(offset: 0, reason: .fileTooLarge(limit: limits.maxFileSize))
        }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(Int(info.st_size))
        let chunkSize = 1 << 16
        var chunk = [UInt8](repeating: 0, count: chunkSize)
        while true {
            let count = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, chunkSize) }
            if count < 0 {
                if errno == EINTR { continue }
                throw IntermediateDumpError(offset: bytes.count, reason: .io(errno: errno))
            }
            if count == 0 { break }
            guard bytes.count + count <= limits.maxFileSize else {
                throw IntermediateDumpError(offset: bytes.count, reason: .fileTooLarge(limit: limits.maxFileSize))
            }
            bytes.append(contentsOf: chunk[0..<count])
        }
        return bytes
    }
}

/// Tree → snapshot. Missing values take empty defaults; see docs/intermediate-dump-format.md
/// for which half-written items survive a cut.
enum IntermediateDumpDecoder {
    typealias Node = IntermediateDumpNode

    static func decode(_ tree: IntermediateDumpTree) throws(IntermediateDumpError) -> ProcessSnapshot {
        var snapshot = ProcessSnapshot(
            reason: .dumpRequested, timestamp: 0,
            process: ProcessIdentity(pid: 0, name: "", executable: "", arguments: [], bundleID: ""),
            threads: [], modules: [], incomplete: !tree.complete)
        var samples: [StackSample] = []
        var operations: [RunningOperation] = []
        for node in tree.root {
            switch node.key {
            case HWD_KEY_VERSION.wire:
                let version = try u64(node)
                guard version >= 1 else {
                    throw IntermediateDumpError(offset: node.offset, reason: .unsupportedSchemaVersion(version))
                }
            case HWD_KEY_REASON.wire:
                (snapshot.reason, snapshot.timestamp) = try reason(node)
            case HWD_KEY_PROCESS.wire:
                snapshot.process = try process(node)
            case HWD_KEY_THREADS.wire:
                snapshot.threads = []
                for item in items(node) { if let thread = try thread(item) { snapshot.threads.append(thread) } }
            case HWD_KEY_HANG_SAMPLES.wire:
                samples = try items(node).filter(\.complete).map { item throws(IntermediateDumpError) in try sample(item) }
            case HWD_KEY_HANG_OPERATIONS.wire:
                operations = try items(node).filter(\.complete).prefix(RunningOperation.maximumCount)
                    .map { item throws(IntermediateDumpError) in try operation(item) }
            case HWD_KEY_MODULES.wire:
                snapshot.modules = try items(node).filter(\.complete).map { item throws(IntermediateDumpError) in try module(item) }
            case HWD_KEY_ANNOTATIONS.wire:
                for item in items(node) where item.complete {
                    var key: String?, value = ""
                    for field in item.children {
                        switch field.key {
                        case HWD_KEY_ANNOTATION_KEY.wire: key = string(field)
                        case HWD_KEY_ANNOTATION_VALUE.wire: value = string(field)
                        default: break
                        }
                    }
                    if let key { snapshot.annotations[key] = value }
                }
            case HWD_KEY_TASKS.wire:
                snapshot.tasks = try tasks(node)
            case HWD_KEY_CAPTURE_DURATION.wire:
                snapshot.captureDurationSeconds = try f64(node)
            case HWD_KEY_INCOMPLETE.wire:
                if try bool(node) { snapshot.incomplete = true }
            default:
                break  // a key from a newer writer
            }
        }
        // Samples have a home only in a hang reason; the writer emits them only for hangs.
        if case .hang(var hang) = snapshot.reason {
            hang.samples = samples
            hang.operations = operations
            hang.outcome = outcome(of: hang, taking: &snapshot.annotations)
            snapshot.reason = .hang(hang)
        }
        return snapshot
    }

    /// A hang's outcome as the dump spells it: the `hang.outcome` annotation (taken out of the
    /// annotations, because the outcome is stored in the reason), when it agrees with `HANG_RECOVERED`;
    /// otherwise what that key alone indicates (recovered, or still going when captured).
    private static func outcome(of hang: HangInfo, taking annotations: inout [String: String]) -> HangOutcome {
        guard let spelled = annotations[HangOutcome.annotationKey].flatMap(HangOutcome.init(rawValue:)),
              spelled != .ongoing, spelled.recovered == hang.recovered else { return hang.outcome }
        annotations[HangOutcome.annotationKey] = nil
        return spelled
    }

    private static func reason(_ map: Node) throws(IntermediateDumpError) -> (CaptureReason, Double) {
        var kind = UInt64(HWD_REASON_DUMP_REQUESTED.rawValue), kindOffset = map.offset, timestamp = 0.0
        var hang = HangInfo(target: .named(""), thresholdSeconds: 0, durationSeconds: 0, outcome: .ongoing, startTime: 0)
        var signal = SignalInfo(number: 0, code: 0, address: 0, tid: 0)
        var kill = KillInfo(signal: nil, cause: .unknown)
        for field in map.children {
            switch field.key {
            case HWD_KEY_REASON_KIND.wire: kind = try u64(field); kindOffset = field.offset
            case HWD_KEY_REASON_TIMESTAMP.wire: timestamp = try f64(field)
            case HWD_KEY_HANG_TARGET.wire: hang.target = HangTarget(name: string(field))
            case HWD_KEY_HANG_THRESHOLD.wire: hang.thresholdSeconds = try f64(field)
            case HWD_KEY_HANG_DURATION.wire: hang.durationSeconds = try f64(field)
            case HWD_KEY_HANG_RECOVERED.wire: hang.outcome = try bool(field) ? .recovered : .ongoing
            case HWD_KEY_HANG_START_TIME.wire: hang.startTime = try f64(field)
            case HWD_KEY_SIGNAL_NUMBER.wire: signal.number = try i32(field)
            case HWD_KEY_SIGNAL_CODE.wire: signal.code = try i32(field)
            case HWD_KEY_SIGNAL_ADDRESS.wire: signal.address = try u64(field)
            case HWD_KEY_SIGNAL_TID.wire: signal.tid = try i32(field)
            case HWD_KEY_SIGNAL_MESSAGE.wire: signal.message = string(field)
            case HWD_KEY_KILL_SIGNAL.wire: kill.signal = try i32(field)
            // A cause this reader does not know reads as unknown, as a newer writer's may.
            case HWD_KEY_KILL_CAUSE.wire: kill.cause = KillCause(rawValue: string(field)) ?? .unknown
            default: break
            }
        }
        switch kind {
        case UInt64(HWD_REASON_DUMP_REQUESTED.rawValue): return (.dumpRequested, timestamp)
        case UInt64(HWD_REASON_HANG.rawValue): return (.hang(hang), timestamp)
        case UInt64(HWD_REASON_CRASH.rawValue): return (.crash(signal), timestamp)
        case UInt64(HWD_REASON_KILLED.rawValue): return (.killed(kill), timestamp)
        default:
            throw IntermediateDumpError(offset: kindOffset, reason: .valueOutOfRange(key: HWD_KEY_REASON_KIND.wire, value: kind))
        }
    }

    private static func process(_ map: Node) throws(IntermediateDumpError) -> ProcessIdentity {
        var process = ProcessIdentity(pid: 0, name: "", executable: "", arguments: [], bundleID: "")
        for field in map.children {
            switch field.key {
            case HWD_KEY_PROCESS_PID.wire: process.pid = try i32(field)
            case HWD_KEY_PROCESS_NAME.wire: process.name = string(field)
            case HWD_KEY_PROCESS_EXECUTABLE.wire: process.executable = string(field)
            case HWD_KEY_PROCESS_BUNDLE_ID.wire: process.bundleID = string(field)
            case HWD_KEY_PROCESS_ARGUMENTS.wire:
                process.arguments = items(field).filter(\.complete).map { item in
                    item.children.last { $0.key == HWD_KEY_PROCESS_ARGUMENT.wire }.map(string) ?? ""
                }
            default: break
            }
        }
        return process
    }

    /// A half-written thread (its map never closed) is kept when it has a tid: which thread
    /// it was and whatever was captured before the cut is still worth reporting.
    private static func thread(_ map: Node) throws(IntermediateDumpError) -> ThreadSnapshot? {
        var tid: Int32?
        var thread = ThreadSnapshot(tid: 0, name: "", state: "", status: .unreachable)
        for field in map.children {
            switch field.key {
            case HWD_KEY_THREAD_TID.wire: tid = try i32(field)
            case HWD_KEY_THREAD_NAME.wire: thread.name = string(field)
            case HWD_KEY_THREAD_STATE.wire: thread.state = ThreadState(letter: string(field))
            case HWD_KEY_THREAD_SYSCALL.wire: thread.syscall = string(field)
            case HWD_KEY_THREAD_USER_CPU.wire: thread.cpuSeconds.user = try f64(field)
            case HWD_KEY_THREAD_SYSTEM_CPU.wire: thread.cpuSeconds.system = try f64(field)
            case HWD_KEY_THREAD_ROLES.wire:
                let bits = try u64(field)
                guard let raw = UInt32(exactly: bits) else { throw outOfRange(field, bits) }
                thread.roles = ThreadRoles(rawValue: raw)
            case HWD_KEY_THREAD_CAPTURE_STATUS.wire:
                let raw = try u64(field)
                guard let status = UInt32(exactly: raw).flatMap(ThreadCaptureStatus.init(rawValue:)) else {
                    throw outOfRange(field, raw)
                }
                thread.status = status
            case HWD_KEY_THREAD_REGISTERS.wire:
                let values = try u64s(field)
                // Registers.init traps on a wrong count; the parser already checked the size.
                guard values.count == Registers.names.count else {
                    throw IntermediateDumpError(offset: field.offset, reason: .wrongValueSize(key: field.key, length: UInt64(field.value.count)))
                }
                thread.registers = Registers(values: values)
            case HWD_KEY_THREAD_FRAMES.wire: thread.frames = try u64s(field)
            case HWD_KEY_THREAD_QUEUE_LABEL.wire: thread.queueLabel = string(field)
            case HWD_KEY_THREAD_STACK_MEMORY.wire: thread.stackMemory = Array(field.value)
            case HWD_KEY_THREAD_LOCK_KIND.wire: thread.lockWait = LockWait(kind: LockKind(wire: try u64(field)), address: 0)
            case HWD_KEY_THREAD_LOCK_ADDRESS.wire: thread.lockWait?.address = try u64(field)
            case HWD_KEY_THREAD_LOCK_HOLDER.wire: thread.lockWait?.holder = try i32(field)
            case HWD_KEY_THREAD_LOCK_UNKNOWN.wire: thread.lockWait?.unknown = string(field)
            case HWD_KEY_THREAD_LOCK_LABEL.wire: thread.lockWait?.label = string(field)
            default: break
            }
        }
        guard let tid else {
            if map.complete { throw IntermediateDumpError(offset: map.offset, reason: .missingValue(key: HWD_KEY_THREAD_TID.wire)) }
            return nil
        }
        thread.tid = tid
        return thread
    }

    private static func sample(_ map: Node) throws(IntermediateDumpError) -> StackSample {
        var sample = StackSample(tid: 0, frames: [], count: 0)
        for field in map.children {
            switch field.key {
            case HWD_KEY_SAMPLE_TID.wire: sample.tid = try i32(field)
            case HWD_KEY_SAMPLE_COUNT.wire:
                let raw = try u64(field)
                guard let count = Int(exactly: Int64(bitPattern: raw)) else { throw outOfRange(field, raw) }
                sample.count = count
            case HWD_KEY_SAMPLE_FRAMES.wire: sample.frames = try u64s(field)
            default: break
            }
        }
        return sample
    }

    private static func operation(_ map: Node) throws(IntermediateDumpError) -> RunningOperation {
        var name = "", startTime = 0.0, limit = 0.0, task: UInt64 = 0, thread: Int32 = 0, traceparent: String?
        for field in map.children {
            switch field.key {
            case HWD_KEY_OPERATION_NAME.wire: name = string(field)
            case HWD_KEY_OPERATION_START_TIME.wire: startTime = try f64(field)
            case HWD_KEY_OPERATION_LIMIT.wire: limit = try f64(field)
            case HWD_KEY_OPERATION_TASK.wire: task = try u64(field)
            case HWD_KEY_OPERATION_THREAD.wire: thread = try i32(field)
            case HWD_KEY_OPERATION_TRACEPARENT.wire: traceparent = string(field)
            default: break
            }
        }
        // A traceparent of another form is dropped by RunningOperation.init.
        return RunningOperation(name: name, startTime: startTime, limitSeconds: limit, task: task, thread: thread, traceparent: traceparent)
    }

    /// Half-written tasks are dropped; a cut list keeps the tasks before the cut.
    private static func tasks(_ map: Node) throws(IntermediateDumpError) -> TaskCapture {
        var capture = TaskCapture(tasks: [])
        for field in map.children {
            switch field.key {
            case HWD_KEY_TASKS_SCANNED_BYTES.wire: capture.scannedBytes = try u64(field)
            case HWD_KEY_TASKS_DURATION.wire: capture.durationSeconds = try f64(field)
            case HWD_KEY_TASKS_TRUNCATED.wire: capture.truncated = try bool(field)
            case HWD_KEY_TASKS_ERROR.wire: capture.error = string(field)
            case HWD_KEY_TASKS_RUNTIME.wire: capture.runtime = string(field)
            case HWD_KEY_TASKS_UNTOUCHED_BYTES.wire: capture.untouchedBytes = try u64(field)
            case HWD_KEY_TASKS_UNREAD_BYTES.wire: capture.unreadBytes = try u64(field)
            case HWD_KEY_TASKS_UNREAD.wire: capture.unread = string(field)
            case HWD_KEY_TASKS_LIST.wire:
                capture.tasks = try items(field).filter(\.complete).map { item throws(IntermediateDumpError) in try task(item) }
            default: break
            }
        }
        if !map.complete { capture.truncated = true }
        return capture
    }

    private static func task(_ map: Node) throws(IntermediateDumpError) -> TaskSnapshot {
        var task = TaskSnapshot(address: 0, id: 0, state: .suspended, frames: [])
        var waitKind: TaskWait.Kind?, waitAddress: UInt64 = 0
        for field in map.children {
            switch field.key {
            case HWD_KEY_TASK_ADDRESS.wire: task.address = try u64(field)
            case HWD_KEY_TASK_ID.wire: task.id = try u64(field)
            case HWD_KEY_TASK_STATE.wire:
                let raw = try u64(field)
                guard raw < TaskState.allCases.count else { throw outOfRange(field, raw) }
                task.state = TaskState.allCases[Int(raw)]
            case HWD_KEY_TASK_THREAD.wire: task.thread = try i32(field)
            case HWD_KEY_TASK_PARENT.wire: task.parent = try u64(field)
            case HWD_KEY_TASK_FRAMES.wire: task.frames = try u64s(field)
            case HWD_KEY_TASK_CHAIN_CUT.wire: task.chainCut = try bool(field)
            case HWD_KEY_TASK_FLAGS.wire:
                let bits = try u64(field)
                guard let raw = UInt32(exactly: bits) else { throw outOfRange(field, bits) }
                task.flags = TaskFlags(rawValue: raw)
            case HWD_KEY_TASK_NAME.wire: task.name = string(field)
            case HWD_KEY_TASK_WAIT_KIND.wire:
                let raw = try u64(field)
                guard raw < TaskWait.Kind.allCases.count else { throw outOfRange(field, raw) }
                waitKind = TaskWait.Kind.allCases[Int(raw)]
            case HWD_KEY_TASK_WAIT_ADDRESS.wire: waitAddress = try u64(field)
            default: break
            }
        }
        if let waitKind { task.waitingOn = TaskWait(kind: waitKind, address: waitAddress) }
        return task
    }

    private static func module(_ map: Node) throws(IntermediateDumpError) -> ModuleSnapshot {
        var module = ModuleSnapshot(path: "", base: 0, start: 0, end: 0, buildID: "")
        for field in map.children {
            switch field.key {
            case HWD_KEY_MODULE_PATH.wire: module.path = string(field)
            case HWD_KEY_MODULE_BASE.wire: module.base = try u64(field)
            case HWD_KEY_MODULE_START.wire: module.start = try u64(field)
            case HWD_KEY_MODULE_END.wire: module.end = try u64(field)
            case HWD_KEY_MODULE_BUILD_ID.wire: module.buildID = string(field)
            default: break
            }
        }
        return module
    }

    // MARK: values

    /// The maps of an array node; a known array key that holds something else is malformed
    /// (the parser rejects that already, this keeps the decoder total).
    private static func items(_ node: Node) -> [Node] {
        node.kind == .array ? node.children : []
    }

    private static func u64(_ node: Node) throws(IntermediateDumpError) -> UInt64 {
        guard node.kind == .property, node.value.count == 8 else {
            throw IntermediateDumpError(offset: node.offset, reason: .wrongValueSize(key: node.key, length: UInt64(node.value.count)))
        }
        let start = node.value.startIndex
        return (0..<8).reduce(UInt64(0)) { $0 | UInt64(node.value[start + $1]) << (8 * UInt64($1)) }
    }

    private static func i32(_ node: Node) throws(IntermediateDumpError) -> Int32 {
        let raw = try u64(node)
        guard let value = Int32(exactly: Int64(bitPattern: raw)) else { throw outOfRange(node, raw) }
        return value
    }

    private static func f64(_ node: Node) throws(IntermediateDumpError) -> Double {
        Double(bitPattern: try u64(node))
    }

    /// Any non-zero value is true: lenient, a bool has no other sensible reading.
    private static func bool(_ node: Node) throws(IntermediateDumpError) -> Bool {
        try u64(node) != 0
    }

    /// Invalid UTF-8 is repaired (U+FFFD), not rejected: the rest of the dump is still good.
    private static func string(_ node: Node) -> String {
        String(decoding: node.value, as: UTF8.self)
    }

    private static func u64s(_ node: Node) throws(IntermediateDumpError) -> [UInt64] {
        guard node.kind == .property, node.value.count % 8 == 0 else {
            throw IntermediateDumpError(offset: node.offset, reason: .wrongValueSize(key: node.key, length: UInt64(node.value.count)))
        }
        guard node.value.count <= IntermediateDumpReader.maxFrames * 8 else {
            throw IntermediateDumpError(offset: node.offset,
                                        reason: .propertyTooLarge(key: node.key, length: UInt64(node.value.count), limit: IntermediateDumpReader.maxFrames * 8))
        }
        var values = [UInt64](repeating: 0, count: node.value.count / 8)
        values.withUnsafeMutableBytes { destination in
            node.value.withUnsafeBytes { source in destination.copyMemory(from: source) }
        }
        return values.map { UInt64(littleEndian: $0) }
    }

    private static func outOfRange(_ node: Node, _ value: UInt64) -> IntermediateDumpError {
        IntermediateDumpError(offset: node.offset, reason: .valueOutOfRange(key: node.key, value: value))
    }
}
