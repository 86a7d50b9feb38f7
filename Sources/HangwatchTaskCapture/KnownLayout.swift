// The task layouts hangwatch reads: private ABI of the Swift concurrency runtime, verified
// against live tasks (docs/tasks.md explains how: a probe's tasks in every state, word by word,
// and the runtime's own machine code for the offsets it reads). A runtime not in `table` is
// refused: reading a layout that moved would give garbage chains, not errors.
import CHangwatchTasks
import HangwatchSnapshot

struct KnownLayout {
    var name: String
    /// `_swift_concurrency_debug_internal_layout_version` (nil: a runtime without the symbol).
    var version: UInt64?
    var layout: hwt_layout
    /// Where a task's task-local values begin (the head of its list, in the task's private
    /// storage); nil where not verified. An item of the list: the next item (its low 3 bits are
    /// flags), the key (the `TaskLocal` object), the value's type, then the value inline
    /// (`TaskLocalItem`). A task started by `Task {}` gets copies of the items its creator saw;
    /// a child task has none of its own and reads its parent's.
    var taskLocalHead: UInt64?

    static func find(version: UInt64?, taskSize: UInt64) -> KnownLayout? {
        table.first { $0.version == version && UInt64($0.layout.task_size) == taskSize }
    }

    /// Swift 6.1–6.3 on 64-bit Linux (layout version 1, 208-byte tasks, no priority escalation:
    /// `_swift_concurrency_debug_supportsPriorityEscalation` is 0, so no thread is kept in the
    /// status). Verified on 6.3.1 x86_64.
    static let table: [KnownLayout] = [
        KnownLayout(name: "Swift 6.1–6.3 (64-bit Linux)", version: 1, layout: hwt_layout(
            metadata: 0, task_size: 208, off_job_flags: 32, off_job_id: 36, off_id_high: 144,
            off_resume_function: 56, off_resume_context: 64, off_status_flags: 96, off_status_record: 104,
            off_dependency_record: 160, status_running_mask: 0x800, status_enqueued_mask: 0x1000,
            status_cancelled_mask: 0x100, status_complete_mask: 0x2000, status_dependency_mask: 0x4000,
            job_child_mask: 1 << 24, job_group_child_mask: 1 << 26, job_async_let_mask: 1 << 28,
            record_kind_name: 6, off_dependency_on: 16, off_dependency_kind: 32),
            taskLocalHead: 136),
    ]

    /// An item of a task's task-local list (`taskLocalHead`), word offsets; verified on 6.3.1 with
    /// a probe binding known values in a task, a nested binding, a `Task {}` and child tasks.
    enum TaskLocalItem {
        static let next: UInt64 = 0, key: UInt64 = 8, value: UInt64 = 24
        /// Items followed at most in one list.
        static let maximumItems = 32
    }

    /// A task as the snapshot keeps it.
    func snapshot(of task: hwt_task) -> TaskSnapshot {
        let state: TaskState = task.status_flags & layout.status_running_mask != 0 ? .running
            : task.status_flags & layout.status_enqueued_mask != 0 ? .enqueued : .suspended
        var flags: TaskFlags = []
        if task.parent != 0 { flags.insert(.child) }
        if task.status_flags & layout.status_cancelled_mask != 0 { flags.insert(.cancelled) }
        if task.job_flags & layout.job_group_child_mask != 0 { flags.insert(.groupChild) }
        if task.job_flags & layout.job_async_let_mask != 0 { flags.insert(.asyncLet) }
        let frames = withUnsafeBytes(of: task.frames) { Array($0.bindMemory(to: UInt64.self).prefix(Int(task.frame_count))) }
        let name = withUnsafeBytes(of: task.name) { bytes in
            String(decoding: bytes.prefix { $0 != 0 }, as: UTF8.self)
        }
        var waiting: TaskWait?
        if let kind = TaskWait.Kind(wire: task.waiting_kind) { waiting = TaskWait(kind: kind, address: task.waiting_on) }
        return TaskSnapshot(address: task.address, id: task.id, state: state, parent: task.parent == 0 ? nil : task.parent,
                            frames: frames, chainCut: task.chain_cut != 0, flags: flags, name: name.isEmpty ? nil : name,
                            waitingOn: waiting)
    }
}

extension TaskWait.Kind {
    init?(wire: UInt32) {
        switch Int(wire) {
        case HWT_WAITING_TASK: self = .task
        case HWT_WAITING_CONTINUATION: self = .continuation
        case HWT_WAITING_GROUP: self = .group
        case HWT_WAITING_EXECUTOR: self = .executor
        default: return nil
        }
    }
}
