// Why a thread is blocked, in one line: the lock it waits for and who holds it (docs/locks.md),
// the chain of holders to where the work really stopped, and threads that wait for each other's
// locks — a deadlock, said as one (beside the task cycles of TaskReport.swift).
import HangwatchSnapshot

package enum LockReport {
    /// Each group of threads that wait for each other's locks, in wait order (A waits for what B
    /// holds, B for what A holds…), starting at its lowest tid; each group once.
    package static func cycles(_ threads: [Report.Thread]) -> [[Int32]] {
        // Most reports have no thread waiting for a lock a thread holds: no index, no sets.
        guard threads.contains(where: { $0.lockWait?.holder != nil }) else { return [] }
        var cycles: [[Int32]] = []
        var seen: Set<Int32> = []
        let index = indexByTID(threads)
        // Only a thread that waits for a lock a thread holds can start a cycle.
        for thread in threads where thread.lockWait?.holder != nil && !seen.contains(thread.tid) {
            let path = chain(from: thread.tid, in: threads, index: index)
            path.forEach { seen.insert($0.tid) }
            guard let last = path.last, let next = last.lockWait?.holder,
                  let start = path.firstIndex(where: { $0.tid == next }) else { continue }
            let cycle = path[start...].map(\.tid)
            let lowest = cycle.firstIndex(of: cycle.min()!)!
            let ordered = Array(cycle[lowest...] + cycle[..<lowest])
            if !cycles.contains(ordered) { cycles.append(ordered) }
        }
        return cycles
    }

    /// Each thread's position in `threads` by its tid (the first, should a tid repeat).
    static func indexByTID(_ threads: [Report.Thread]) -> [Int32: Int] {
        var index: [Int32: Int] = [:]
        index.reserveCapacity(threads.count)
        for (position, thread) in threads.enumerated() where index[thread.tid] == nil { index[thread.tid] = position }
        return index
    }

    /// `tid`'s thread, the holder of what it waits for, that one's holder…, each once: the last
    /// either waits for no lock a thread holds, or (a cycle) for one an earlier thread holds.
    package static func chain(from tid: Int32, in threads: [Report.Thread], index: [Int32: Int]? = nil) -> [Report.Thread] {
        let index = index ?? indexByTID(threads)
        var path: [Report.Thread] = []
        var visited: Set<Int32> = []
        var next: Int32? = tid
        while let current = next, !visited.contains(current), let position = index[current] {
            visited.insert(current)
            path.append(threads[position])
            next = threads[position].lockWait?.holder
        }
        return path
    }

    /// "waits for mutex 0x… held by thread 6978 "export-worker" (in pause() at main.swift:54)",
    /// "waits for queue "com.example.store" 0x… run by thread 6979 …".
    package static func waitLine(_ wait: LockWait, in threads: [Report.Thread]) -> String {
        var text = "waits for " + lockText(wait)
        if let holder = wait.holder {
            text += " " + holderVerb(wait.kind) + " " + describe(holder, in: threads)
        } else {
            text += ", holder unknown: " + (wait.unknown ?? "not recorded")
        }
        return text
    }

    /// `mutex 0x…`, `queue "com.example.store" 0x…`, `a lock 0x…`.
    static func lockText(_ wait: LockWait) -> String {
        let kind = wait.kind == .unknown ? "a lock" : wait.kind.rawValue
        return kind + (wait.label.map { " \"\($0)\"" } ?? "") + " " + ReportFormatting.address(wait.address)
    }

    /// How the holder has the lock: a queue is run by its thread, an rwlock held for writing.
    static func holderVerb(_ kind: LockKind) -> String {
        switch kind {
        case .rwlock: "held for writing by"
        case .queue: "run by"
        case .mutex, .piMutex, .unknown: "held by"
        }
    }

    /// `thread 6978 "export-worker" (in pause() at main.swift:54)`.
    static func describe(_ tid: Int32, in threads: [Report.Thread]) -> String {
        guard let thread = threads.first(where: { $0.tid == tid }) else { return "thread \(tid)" }
        var text = "thread \(tid) \"\(thread.name)\""
        if let place = place(of: thread) { text += " (\(place))" }
        return text
    }

    /// "in pause() at main.swift:54": the innermost function, and the innermost source line.
    static func place(of thread: Report.Thread) -> String? {
        guard let top = thread.frames.first else { return nil }
        var text = "in " + (top.function ?? ReportFormatting.address(top.address))
        if let source = thread.frames.first(where: { $0.file != nil }), let file = source.file {
            text += " at " + String(ReportRenderer.fileName(of: file)) + (source.line.map { ":\($0)" } ?? "")
        }
        return text
    }

    /// For a hang's headline: where the wait chain of the hung thread ends, when it waits for a
    /// lock: "thread 4242 "main" waits for mutex 0x… held by thread 6978 "export-worker" (in
    /// pause() at main.swift:54)", through holders that wait in turn ("…, 2 locks on"), or the
    /// deadlock it runs into. Without a hung thread (a hang seen from outside), the main thread's
    /// chain, else the first thread's that waits for a lock a thread holds.
    package static func headline(_ threads: [Report.Thread]) -> String? {
        let waiting = threads.filter { $0.lockWait?.holder != nil }
        guard let hung = threads.first(where: { $0.roles.contains(.hung) || $0.roles.contains(.mainQueue) })
            ?? waiting.first(where: { $0.roles.contains(.mainThread) }) ?? waiting.first,
            let first = hung.lockWait else { return nil }
        let path = chain(from: hung.tid, in: threads)
        guard let waiter = path.last(where: { $0.lockWait != nil }), let wait = waiter.lockWait else { return nil }
        let name = "thread \(hung.tid) \"\(hung.name)\" "
        // A cycle: the last thread of the chain waits for one already in it.
        if waiter.tid == path.last?.tid, let holder = wait.holder, let start = path.firstIndex(where: { $0.tid == holder }) {
            let deadlock = "deadlock: " + cycleText(path[start...].map(\.tid), in: threads)
            return start == 0 ? deadlock : name + waitLine(first, in: threads) + ", in a " + deadlock
        }
        let steps = path.firstIndex { $0.tid == waiter.tid } ?? 0
        guard steps > 0 else { return name + waitLine(wait, in: threads) }
        return name + "waits, \(steps) lock\(steps == 1 ? "" : "s") on, for what thread \(waiter.tid) \"\(waiter.name)\" "
            + waitLine(wait, in: threads)
    }

    /// "thread 1 "a" holds mutex 0x… and waits for mutex 0x… held by thread 2 "b", which …"
    static func cycleText(_ tids: [Int32], in threads: [Report.Thread]) -> String {
        let index = indexByTID(threads)
        let parts = tids.compactMap { tid -> String? in
            guard let position = index[tid], let wait = threads[position].lockWait else { return nil }
            let thread = threads[position]
            return "thread \(tid) \"\(thread.name)\" waits for " + lockText(wait)
                + (wait.holder.map { " \(holderVerb(wait.kind)) thread \($0)" } ?? "")
        }
        return parts.joined(separator: ", ")
    }

    /// The report's lines for its lock cycles ("DEADLOCK: …"), empty when there is none.
    package static func deadlockLines(_ report: Report) -> [String] {
        cycles(report.threads).map { "DEADLOCK: " + cycleText($0, in: report.threads) }
    }
}
