// What a report says of a process's Swift tasks (docs/tasks.md): the cycles of tasks awaiting
// each other, and the text: each distinct await chain once, with how many tasks wait in it,
// the longest-unchanged and deadlocked first.
import HangwatchPlatform
import HangwatchSnapshot

package enum TaskCycles {
    /// Every circle of `waitingOnTaskID` links (each task awaits the next, the last the first),
    /// as task ids starting from the lowest, each circle once, ordered by that lowest id.
    ///
    /// A task awaits one task at most, so the links form a functional graph: each task is
    /// walked once, coloured on the walk it was first met on, and a walk that meets its own
    /// colour has closed a circle. Linear in the tasks (a serial queue of 20,000 is one walk).
    package static func find(in tasks: [Report.Task]) -> [[UInt64]] {
        var next: [UInt64: UInt64] = [:]
        for task in tasks { if let awaited = task.waitingOnTaskID { next[task.id] = awaited } }
        var walkOf: [UInt64: Int] = [:]  // the walk that first met the task
        var cycles: [[UInt64]] = []
        for (walk, start) in next.keys.sorted().enumerated() where walkOf[start] == nil {
            var current = start
            walkOf[current] = walk
            while let following = next[current] {
                if let seen = walkOf[following] {
                    if seen == walk { cycles.append(circle(from: following, next: next)) }
                    break  // met an earlier walk (its circle, if any, is known) or closed this one
                }
                walkOf[following] = walk
                current = following
            }
        }
        return cycles.sorted { $0[0] < $1[0] }
    }

    /// The circle through `start`, from its lowest id.
    private static func circle(from start: UInt64, next: [UInt64: UInt64]) -> [UInt64] {
        var members = [start]
        var current = start
        while let following = next[current], following != start {
            members.append(following)
            current = following
        }
        let lowest = members.indices.min { members[$0] < members[$1] } ?? 0
        return Array(members[lowest...] + members[..<lowest])
    }
}

/// Lines of tasks awaiting one another, one behind the other (a serial queue: each awaits the
/// one ahead of it), measured like cycles: each task walked once.
package enum TaskLines {
    /// The longest line of `waitingOnTaskID` links ending in a task that awaits no task read (a
    /// continuation, a group, an executor): how many tasks it holds and the id of the one at its
    /// head. nil when there is no line of 3 tasks or more. Tasks in or behind a circle are in no
    /// line (TaskCycles names the circle).
    package static func longest(in tasks: [Report.Task]) -> (count: Int, head: UInt64)? {
        var next: [UInt64: UInt64] = [:]
        for task in tasks { if let awaited = task.waitingOnTaskID { next[task.id] = awaited } }
        // Per task: the tasks from it to its line's head, itself included, and that head;
        // count 0 while it is being walked, -1 in or behind a circle.
        var measured: [UInt64: (count: Int, head: UInt64)] = [:]
        var best: (count: Int, head: UInt64)?
        for task in tasks where measured[task.id] == nil {
            var path: [UInt64] = []
            var current: UInt64? = task.id
            var end: (count: Int, head: UInt64) = (0, task.id)  // what lies past the path's last task
            while let id = current {
                if let known = measured[id] {
                    end = known.count == 0 ? (-1, id) : known
                    break
                }
                measured[id] = (0, id)
                path.append(id)
                current = next[id]
                if current == nil { end = (0, id) }
            }
            for id in path.reversed() {
                if end.count >= 0 { end.count += 1 }
                measured[id] = end
            }
            if let first = path.first, let line = measured[first], line.count >= 3, line.count > best?.count ?? 0 { best = line }
        }
        return best
    }
}

package enum TaskReportText {
    /// Distinct chains shown at most; the JSON has every task.
    static let maxGroups = 40
    /// Frames of a chain shown at most.
    static let maxFrames = 16

    /// `overdue`: the operation whose hang the report is (its task is past its limit); the
    /// tasks of other operations are only named after them.
    package static func lines(_ tasks: Report.Tasks, overdue: String? = nil) -> [String] {
        var lines = ["", "Tasks: " + summary(tasks)]
        if let error = tasks.error {
            lines.append("  not read: \(error)")
            return lines
        }
        if let unread = tasks.unread { lines.append("  not all read: \(unread)") }
        for cycle in tasks.cycles {
            lines.append("  DEADLOCK: tasks " + cycle.map { "\($0)" }.joined(separator: " → ") + " → \(cycle[0]) await each other")
        }
        if let line = TaskLines.longest(in: tasks.tasks) { lines.append("  " + lineText(line, tasks: tasks.tasks)) }
        let groups = grouped(tasks.tasks)
        for group in groups.prefix(maxGroups) {
            lines.append("")
            lines.append("  " + heading(group, overdue: overdue))
            let shown = group.first.frames.filter { !isThunk($0) }
            for frame in shown.prefix(maxFrames) { lines.append("    \(ReportRenderer.render(readable(frame)))") }
            let hidden = group.first.frames.count - shown.count
            if shown.count > maxFrames || hidden > 0 || group.first.chainCut {
                var notes: [String] = []
                if shown.count > maxFrames { notes.append("\(shown.count - maxFrames) more frames") }
                if hidden > 0 { notes.append("\(hidden) thunks left out") }
                if group.first.chainCut { notes.append("the chain goes on (cut)") }
                lines.append("    … " + notes.joined(separator: ", "))
            }
        }
        if groups.count > maxGroups { lines.append("  … \(groups.count - maxGroups) more distinct chains (--format json lists every task)") }
        return lines
    }

    /// "13 (3 suspended, 1 running, …), 41 ms to read 26 MiB (64 GiB never touched, not read)".
    static func summary(_ tasks: Report.Tasks) -> String {
        var counts: [String] = []
        for state in TaskState.allCases {
            let count = tasks.tasks.filter { $0.state == state }.count
            if count > 0 { counts.append("\(count) \(state.rawValue)") }
        }
        return "\(tasks.tasks.count)" + (counts.isEmpty ? "" : " (" + counts.joined(separator: ", ") + ")")
            + (tasks.truncated ? ", more not listed" : "")
            + ", \(ReportFormatting.seconds(tasks.durationSeconds)) to read \(ReportFormatting.bytes(tasks.scannedBytes))"
            + (tasks.untouchedBytes.map { " (\(ReportFormatting.bytes($0)) never touched, not read)" } ?? "")
    }

    /// "IN LINE: 20000 tasks, each awaiting the one ahead of it; at the head, task 1 awaits a continuation".
    static func lineText(_ line: (count: Int, head: UInt64), tasks: [Report.Task]) -> String {
        var text = "IN LINE: \(line.count) tasks, each awaiting the one ahead of it (a serial queue); at the head, task \(line.head)"
        switch tasks.first(where: { $0.id == line.head })?.waitingOn {
        case "continuation": text += " awaits a continuation"
        case "group": text += " awaits a task group's next child"
        case "executor": text += " waits for its executor"
        case "task": text += " awaits a task that was not read"
        default: text += " is \(tasks.first { $0.id == line.head }?.state.rawValue ?? "not read")"
        }
        return text
    }

    struct Group {
        var first: Report.Task
        var ids: [UInt64]
        /// Every task of the group awaits the task the first awaits (a serial queue's tasks each await another).
        var awaitSameTask = true
    }

    /// Tasks with the same state, wait and chain (by function and line) together; deadlocked and
    /// longest-unchanged first, then the biggest groups.
    static func grouped(_ tasks: [Report.Task]) -> [Group] {
        var order: [String] = [], groups: [String: Group] = [:]
        for task in tasks {
            let key = "\(task.state.rawValue)|\(task.waitingOn ?? "")|\(task.name ?? "")|\(task.operation ?? "")|"
                + task.frames.map { "\($0.function ?? ReportFormatting.address($0.address)):\($0.line ?? 0)" }.joined(separator: ";")
            if groups[key] == nil { order.append(key); groups[key] = Group(first: task, ids: []) }
            groups[key]?.ids.append(task.id)
            if task.waitingOnTaskID != groups[key]?.first.waitingOnTaskID { groups[key]?.awaitSameTask = false }
        }
        return order.compactMap { groups[$0] }.enumerated().sorted { lhs, rhs in
            let (l, r) = (lhs.element.first.unchangedSeconds ?? -1, rhs.element.first.unchangedSeconds ?? -1)
            if l != r { return l > r }
            if lhs.element.ids.count != rhs.element.ids.count { return lhs.element.ids.count > rhs.element.ids.count }
            return lhs.offset < rhs.offset
        }.map(\.element)
    }

    static func heading(_ group: Group, overdue: String?) -> String {
        let task = group.first
        var text = group.ids.count == 1 ? "Task \(task.id)" : "\(group.ids.count) tasks (\(idList(group.ids)))"
        if let name = task.name { text += " \"\(name)\"" }
        if let operation = task.operation {
            let trace = task.traceparent.map { ", trace \(Traceparent.traceID(of: $0))" } ?? ""
            text += " — operation \(Text.singleLine(operation))\(trace)" + (operation == overdue ? ", past its limit —" : " —")
        }
        text += " " + task.state.rawValue
        switch task.waitingOn {
        case "task" where !group.awaitSameTask: text += ", each awaiting another task"
        case "task": text += ", awaiting " + (task.waitingOnTaskID.map { "task \($0)" } ?? "another task")
        case "continuation": text += ", awaiting a continuation (nothing says who will resume it)"
        case "group": text += ", awaiting a task group's next child"
        case "executor": text += ", waiting for its executor (an actor or the main actor)"
        default: break
        }
        if let unchanged = task.unchangedSeconds { text += ", unchanged for \(ReportFormatting.seconds(unchanged))" }
        if let parent = task.parentID { text += ", child of task \(parent)" }
        if task.flags.contains(.cancelled) { text += ", cancelled" }
        return text + ":"
    }

    static func idList(_ ids: [UInt64]) -> String {
        ids.prefix(5).map { "\($0)" }.joined(separator: ", ") + (ids.count > 5 ? ", …" : "")
    }

    /// "(2) await resume partial function for f()" reads "await in f()": where the task resumes.
    static func readable(_ frame: Report.Frame) -> Report.Frame {
        guard let function = frame.function, function.hasPrefix("("),
              let range = function.firstRange(of: " resume partial function for ") else { return frame }
        var shown = frame
        let verb = function.contains(") suspend resume") ? "suspended in " : "await in "
        shown.function = verb + function[range.upperBound...]
        return shown
    }

    /// "operation GET /users/:id still running after 6.2 s (limit 5 s): waiting in
    /// withCheckedContinuation in Pool.lease() at Pool.swift:88".
    package static func operationReason(_ operation: String, hang: Report.Hang, fatal: Bool, tasks: Report.Tasks?) -> String {
        var text = "operation \(operation) "
        text += hang.recovered
            ? "took \(ReportFormatting.seconds(hang.durationSeconds)) (limit \(ReportFormatting.seconds(hang.thresholdSeconds))), then finished"
            : "still running after \(ReportFormatting.seconds(hang.durationSeconds)) (limit \(ReportFormatting.seconds(hang.thresholdSeconds)))"
        let marked = tasks?.tasks.prefix { $0.operation != nil } ?? []
        if let culprit = marked.first {
            text += ": " + waitDescription(culprit)
            // Its work is stuck in a task it started: say so, and where its own task waits.
            if marked.count > 1 {
                let own = marked[marked.startIndex + 1]
                text += " (task \(culprit.id), started within it; its own task \(own.id) is \(waitDescription(own)))"
            }
        } else if tasks != nil {
            text += ": its task was not among the tasks read"
        }
        if fatal { text += "; the process ended with it running" }
        if let traceparent = marked.first?.traceparent { text += "; trace \(Traceparent.traceID(of: traceparent))" }
        return text
    }

    /// Where a task waits, in words: the runtime call it waits in (withCheckedContinuation,
    /// Task.value…), then the first function of the program with its file and line.
    static func waitDescription(_ task: Report.Task) -> String {
        let frames = task.frames.filter { !isThunk($0) }
        let own = frames.first { $0.file != nil && !isRuntime($0) }
        let runtime = frames.first.flatMap { isRuntime($0) ? shortName($0) : nil }
        var text = task.state == .suspended ? "waiting" : task.state.rawValue
        if let runtime { text += " in \(runtime)" }
        if let own {
            text += " in " + (shortName(own) ?? "?")
            if let file = own.file { text += " at \(ReportRenderer.fileName(of: file))" + (own.line.map { ":\($0)" } ?? "") }
        }
        if task.waitingOn == "task", let awaited = task.waitingOnTaskID { text += " (awaiting task \(awaited))" }
        return text
    }

    static func isRuntime(_ frame: Report.Frame) -> Bool {
        frame.module.map { ReportRenderer.fileName(of: $0).hasPrefix("libswift_Concurrency") } ?? false
    }

    /// `Pool.lease()` of "(2) await resume partial function for App.Pool.lease() async -> ()".
    static func shortName(_ frame: Report.Frame) -> String? {
        guard var name = readable(frame).function else { return nil }
        for prefix in ["await in ", "suspended in "] where name.hasPrefix(prefix) { name.removeFirst(prefix.count) }
        if let open = name.firstIndex(of: "(") {
            let head = name[..<open]
            // The module qualifier goes: App.Pool.lease → Pool.lease (Swift.withCheckedContinuation → withCheckedContinuation).
            let parts = head.split(separator: ".")
            let kept = parts.count > 1 ? parts.dropFirst().joined(separator: ".") : String(head)
            let close = name[open...].firstIndex(of: ")").map { name[open...$0] } ?? "()"
            return kept + (close.count > 2 ? "(…)" : "()")
        }
        return name
    }

    /// Reabstraction thunks and partial-apply forwarders say nothing of where a task waits.
    static func isThunk(_ frame: Report.Frame) -> Bool {
        guard let function = frame.function else { return false }
        return function.contains("thunk") || function.hasPrefix("partial apply") || frame.file?.hasSuffix("<compiler-generated>") == true
    }
}

extension Report.Tasks {
    /// Marks the tasks whose await chain is the same in `before` and `after` (same task object,
    /// same id, same chain of addresses): they did not move for `seconds` at least, and go first.
    package mutating func markUnchanged(since before: TaskCapture, after: TaskCapture, seconds: Double) {
        var earlier: [UInt64: TaskSnapshot] = [:]
        for task in before.tasks { earlier[task.address] = task }
        var unchanged: Set<UInt64> = []
        for task in after.tasks where task.state == .suspended {
            if let old = earlier[task.address], old.id == task.id, old.frames == task.frames, old.state == .suspended {
                unchanged.insert(task.address)
            }
        }
        for index in tasks.indices where unchanged.contains(tasks[index].address) {
            tasks[index].unchangedSeconds = (seconds * 1000).rounded() / 1000
        }
        let order = tasks.enumerated().sorted { lhs, rhs in
            let (l, r) = (lhs.element.unchangedSeconds != nil, rhs.element.unchangedSeconds != nil)
            return l != r ? l : lhs.offset < rhs.offset
        }
        tasks = order.map(\.element)
    }
}
