// The watched operations (`HangMonitor.watch`: requests, jobs) running when a target's hang was
// detected (HangInfo.operations): which of them the hung thread was serving, their tasks, and
// the headline's "while serving GET /users/:id (started 0.4 s before the hang)".
// An operation's thread is the one it began on: it was serving it when the task running it
// was not suspended elsewhere at the capture (an operation that blocks a thread never
// suspends). Where the task awaits work run elsewhere (Vapor's middleware awaiting the
// route's future on an event loop), only the list says it was running.
import HangwatchPlatform
import HangwatchSnapshot

enum OperationReport {
    /// The operations of `running` as a report lists them, with their tasks' ids when the tasks
    /// were read.
    static func operations(_ running: [RunningOperation], threads: [Report.Thread], tasks: Report.Tasks?) -> [Report.Hang.Operation] {
        let hung = Set(threads.filter { $0.roles.contains(.hung) }.map(\.tid))
        return running.map { operation in
            let task = operation.task == 0 ? nil : tasks?.tasks.first { $0.address == operation.task }
            return Report.Hang.Operation(
                name: operation.name, startTime: Timestamp.millisecondResolution(operation.startTime),
                limitSeconds: operation.limitSeconds, taskID: task?.id, thread: operation.thread,
                onHungThread: hung.contains(operation.thread) && task?.state != .suspended, traceparent: operation.traceparent)
        }
    }

    /// Each task running an operation is named after it (the culprit of an operation hang is
    /// named already).
    static func nameTasks(in tasks: inout Report.Tasks, after operations: [Report.Hang.Operation]) {
        for operation in operations {
            guard let id = operation.taskID, let index = tasks.tasks.firstIndex(where: { $0.id == id }),
                  tasks.tasks[index].operation == nil else { continue }
            tasks.tasks[index].operation = operation.name
            tasks.tasks[index].traceparent = operation.traceparent
        }
    }

    /// For the headline: "while serving …" (the operations the hung thread was serving), else
    /// "watched operations running: …".
    static func headline(_ hang: Report.Hang) -> (serving: String?, running: String?)? {
        let served = hang.operations.filter(\.onHungThread)
        if !served.isEmpty { return ("while serving " + list(served, of: hang), nil) }
        guard !hang.operations.isEmpty else { return nil }
        return (nil, "watched operation\(hang.operations.count == 1 ? "" : "s") running: " + list(hang.operations, of: hang))
    }

    /// The text report's section.
    static func lines(_ hang: Report.Hang, threads: [Report.Thread]) -> [String] {
        guard !hang.operations.isEmpty else { return [] }
        var lines = ["", "Watched operations running when the hang was detected (\(hang.operations.count)):"]
        for operation in hang.operations {
            var line = "  \(Text.singleLine(operation.name)): \(started(operation, hang: hang)), limit "
                + ReportFormatting.seconds(operation.limitSeconds)
            if let task = operation.taskID { line += ", task \(task)" }
            let name = threads.first { $0.tid == operation.thread }.map { " \"\(Text.singleLine($0.name))\"" } ?? " (gone)"
            line += ", began on thread \(operation.thread)\(name)"
            if operation.onHungThread { line += "; the hung thread was serving it" }
            if let traceparent = operation.traceparent { line += "; trace \(Traceparent.traceID(of: traceparent)) span \(Traceparent.spanID(of: traceparent))" }
            lines.append(line)
        }
        return lines
    }

    /// "GET /a (started 0.4 s before the hang; trace 4bf9…)", the first two, then how many more.
    private static func list(_ operations: [Report.Hang.Operation], of hang: Report.Hang) -> String {
        var text = operations.prefix(2).map { operation in
            let trace = operation.traceparent.map { "; trace \(Traceparent.traceID(of: $0))" } ?? ""
            return "\(Text.singleLine(operation.name)) (\(started(operation, hang: hang))\(trace))"
        }.joined(separator: ", ")
        if operations.count > 2 { text += " and \(operations.count - 2) more" }
        return text
    }

    private static func started(_ operation: Report.Hang.Operation, hang: Report.Hang) -> String {
        let before = hang.startTime - operation.startTime
        return before >= 0 ? "started \(ReportFormatting.seconds(before)) before the hang"
            : "started \(ReportFormatting.seconds(-before)) into the hang"
    }
}
