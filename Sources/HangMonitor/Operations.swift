// Operations that must finish (docs/tasks.md, "Operations that never finish"): work a program
// runs through `HangMonitor.watch(_:limit:)` — a request, a job — is registered here with its
// limit and its task; the monitor thread looks at the table every tick, and an operation still
// running past its limit is a hang of its own kind (target `operation:<name>`), captured with
// every thread and every task, its task marked as the culprit. No thread needs to be blocked.
// A hang of a target (the main queue, an event loop, a pool) lists the operations running when
// it was detected (`running`), with the thread each began on.
// With a trace link (TraceLink.swift), each operation also keeps the trace it belongs to; its
// traceparent is read only when a hang lists the operation.
// Cost per operation: one lock taken twice, a slot of the table taken and given back (no hashing),
// the thread's id (read once per thread).
import FoundationEssentials
import Synchronization
import HangwatchSnapshot

@usableFromInline
final class Operations: Sendable {
    /// The id of the operation a task works for (0: none), bound by `HangMonitor.watch` while its
    /// body runs: a task the body starts with `Task {}` gets a copy, a child task reads it.
    @TaskLocal static var current: UInt64 = 0
    /// `current`'s TaskLocal, for `watch`, which is inlined into its callers.
    @usableFromInline static var currentBinding: TaskLocal<UInt64> { $current }
    /// The key tasks' task-local lists carry it under (the `TaskLocal` object's address).
    static var currentKey: UInt64 { UInt64(UInt(bitPattern: Unmanaged.passUnretained($current).toOpaque())) }

    struct Running: Sendable {
        var name: String
        /// Monotonic nanoseconds.
        var start: UInt64
        var limit: UInt64
        /// The AsyncTask running it (0: not run from a task).
        var task: UInt
        /// The thread it began on.
        var thread: Int32
        /// The trace it belongs to (`HangTraceLink.currentTrace`), nil without a link.
        var trace: (any Sendable)?

        /// Wall clock when it started, seconds since 1970: now's, less the monotonic time since
        /// (asked only when a hang lists it, so no operation reads the wall clock as it begins).
        var startWall: Double {
            let now = ClockReading.monotonicNow()
            return Date().timeIntervalSince1970 - Double(now > start ? now - start : 0) / 1e9
        }
    }

    /// A running operation as a hang lists it, with the trace it belongs to.
    struct Listed {
        var operation: RunningOperation
        var trace: (any Sendable)?
    }

    /// Asked for each operation's trace as it begins (nil: none kept).
    let traceLink: (any HangTraceLink)?

    /// The running operations in slots: an operation's id is its slot (low 32 bits) and the
    /// slot's use count (high 32 bits), so an id is never given twice and an ended operation's
    /// id never finds the slot's next operation. A slot freed is reused first; the table grows
    /// to the most operations ever running at once.
    private struct Table {
        /// Slot → its operation (nil: free), and how many operations it has held.
        var slots: [Running?] = []
        var uses: [UInt32] = []
        var free: [Int] = []
        /// Operations the monitor reported hung that have ended since: id → monotonic end.
        var ended: [UInt64: UInt64] = [:]
        var reported: Set<UInt64> = []
        /// The last limit `begin` was given, in nanoseconds: a server watches every request with
        /// the same one, and Duration's components cost more than the rest of `begin`.
        var lastLimit: (duration: Duration, nanoseconds: UInt64) = (.zero, 0)

        /// Puts `running` in a slot; its id.
        mutating func insert(_ running: consuming Running) -> UInt64 {
            let slot: Int
            if let reused = free.popLast() {
                slot = reused
                uses[slot] &+= 1
                slots[slot] = running
            } else {
                slot = slots.count
                uses.append(1)
                slots.append(running)
            }
            return id(of: slot)
        }

        private func id(of slot: Int) -> UInt64 { UInt64(uses[slot]) << 32 | UInt64(slot) }

        /// Takes the operation `id` out of its slot; nil when it is not running.
        mutating func remove(_ id: UInt64) -> Running? {
            let slot = Int(truncatingIfNeeded: id & 0xffff_ffff)
            guard slot < slots.count, uses[slot] == UInt32(truncatingIfNeeded: id >> 32), let running = slots[slot].take() else { return nil }
            free.append(slot)
            return running
        }

        /// Each running operation with its id, without building a list: the monitor thread walks
        /// the table every tick, under the lock that `watch` takes on request threads.
        func forEach(_ body: (UInt64, Running) -> Void) {
            for slot in slots.indices { if let running = slots[slot] { body(id(of: slot), running) } }
        }
    }

    private let table = Mutex(Table())

    init(traceLink: (any HangTraceLink)? = nil) { self.traceLink = traceLink }

    /// The operation's id (for `end`).
    func begin(name: String, limit: Duration, now: UInt64, trace: (any Sendable)? = nil) -> UInt64 {
        let task = withUnsafeCurrentTask { task in task.map { unsafeBitCast($0, to: UInt.self) } } ?? 0
        let thread = currentThreadID()
        return table.withLock { table in
            if limit != table.lastLimit.duration { table.lastLimit = (limit, limit.nanoseconds) }
            return table.insert(Running(name: name, start: now, limit: table.lastLimit.nanoseconds, task: task, thread: thread,
                                        trace: trace))
        }
    }

    /// The operation ended: the entry of one the monitor reported hung, nil for the others.
    @discardableResult
    func end(_ id: UInt64, now: UInt64) -> Running? {
        table.withLock { table in
            let running = table.remove(id)
            // Most of the time nothing is reported: no hash of the id for that.
            guard !table.reported.isEmpty, table.reported.remove(id) != nil else { return nil }
            table.ended[id] = now
            return running
        }
    }

    /// An operation reported hung ended on its own task (`watch` returned): its request's span
    /// is still open, so its trace is told now, on that task (TraceLink.swift), and not by the
    /// monitor thread, which notes the end at its next tick.
    func tellTraceOfEnd(_ running: Running, now: UInt64) {
        guard let traceLink, let trace = running.trace else { return }
        traceLink.record(HangTraceEvent(kind: .recovered, target: HangTarget.operation(name: running.name).name,
                                        durationSeconds: Double(now &- running.start) / 1e9), in: trace)
    }

    /// The running operations past their limit that are not reported yet; marked reported.
    func overdue(now: UInt64) -> [(id: UInt64, operation: Running)] {
        table.withLock { table in
            var found: [(UInt64, Running)] = []
            // An operation begun after `now` was read (on another thread) is not overdue.
            table.forEach { id, operation in
                guard !table.reported.contains(id), now >= operation.start, now - operation.start >= operation.limit else { return }
                found.append((id, operation))
            }
            for (id, _) in found { table.reported.insert(id) }
            return found.sorted { ($0.1.start, $0.0) < ($1.1.start, $1.0) }  // in the order they began
        }
    }

    /// Reported operations that have ended since the last call, with when.
    func takeEnded() -> [UInt64: UInt64] {
        table.withLock { table in
            defer { table.ended = [:] }
            return table.ended
        }
    }

    /// The operations running now, the longest-running first, at most
    /// `RunningOperation.maximumCount` (what a hang of a target reports), each with its
    /// traceparent. On the monitor thread.
    func running() -> [Listed] {
        var running: [Running] = []
        table.withLock { $0.forEach { running.append($1) } }
        return running.sorted { $0.start < $1.start }.prefix(RunningOperation.maximumCount).map { Listed(listing: $0, link: traceLink) }
    }

    /// The earliest limit still to be reached (monotonic nanoseconds), nil when none.
    func nextDeadline() -> UInt64? {
        table.withLock { table in
            var earliest: UInt64?
            table.forEach { id, operation in
                guard !table.reported.contains(id) else { return }
                earliest = min(earliest ?? .max, operation.start &+ operation.limit)
            }
            return earliest
        }
    }
}

extension Operations.Listed {
    /// `running` as a hang lists it; its traceparent asked of `link` (on the monitor thread).
    init(listing running: Operations.Running, link: (any HangTraceLink)?) {
        operation = RunningOperation(name: running.name, startTime: running.startWall, limitSeconds: Double(running.limit) / 1e9,
                                     task: UInt64(running.task), thread: running.thread,
                                     traceparent: running.trace.flatMap { trace in link?.traceparent(of: trace) })
        trace = running.trace
    }
}
