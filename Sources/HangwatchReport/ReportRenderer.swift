// Output formats of a Report: JSON (the stored/uploaded form), human text, folded stacks.
import HangwatchPlatform
import HangwatchSymbolication
import HangwatchSnapshot
import FoundationEssentials

/// A report as text (what `hangwatch show` prints) and as JSON (docs/report-schema.md).
public enum ReportRenderer {
    /// Pretty-printed JSON with sorted keys: the same report always gives the same bytes.
    public static func json(_ report: Report) -> Data {
        // JSONEncoder's bytes, written faster (PrettyJSON.swift). A NaN or an infinity never
        // comes from capture, but a torn or crafted dump may hold one in any of its numbers: it
        // is written as 0 wherever it is (listing the fields missed an operation's limit once).
        if let bytes = try? PrettyJSON.encode(report, zeroingNonFinite: true) { return bytes }
        // What PrettyJSON does not write itself (JSONEncoder's special cases; a report holds none).
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        return (try? encoder.encode(report)) ?? Data("{}".utf8)
    }

    /// Folded stacks for flame graphs (flamegraph.pl, speedscope, inferno): one
    /// "root;…;leaf count" line each. For a hang: the samples taken while it lasted; for
    /// any other report: each captured thread's stack, counted once.
    public static func folded(_ report: Report) -> String {
        var lines: [String]
        if let hang = report.hang, !hang.stacks.isEmpty {
            lines = hang.stacks.map(foldedLine)
        } else if let profile = report.profile, !profile.stacks.isEmpty {
            lines = profile.stacks.map(foldedLine)
        } else {
            lines = []
            for thread in report.threads where !thread.frames.isEmpty {
                let names = thread.frames.reversed().map(foldedName)
                lines.append("\(names.joined(separator: ";")) 1")
            }
        }
        return Text.terminalSafe(lines.map { $0 + "\n" }.joined())
    }

    /// One stack in the folded form: "root;…;leaf count" (flame graph tools, the JSON's `foldedStacks`).
    package static func foldedLine(_ stack: Report.SampledStack) -> String {
        stack.frames.joined(separator: ";") + " \(stack.count)"
    }

    static func foldedName(_ frame: Report.Frame) -> String {
        let name: String
        if let function = frame.function {
            name = function
        } else if let module = frame.module, let offset = frame.moduleOffset {
            name = "\(ReportRenderer.fileName(of: module))+\(ReportFormatting.offset(offset))"
        } else {
            name = ReportFormatting.address(frame.address)
        }
        return String(name.map { $0 == ";" ? "," : ($0.isNewline ? " " : $0) })
    }

    // MARK: - Text

    /// Human-readable report: header with the reason, the interesting thread(s) first, then
    /// the others, annotations, the hang profile and a modules summary.
    public static func text(_ report: Report) -> String { withText(report) { String(decoding: $0, as: UTF8.self) } }

    /// `body` with `text` as the UTF-8 bytes a terminal or file gets (what the CLI writes,
    /// without a String or a copy).
    package static func withText<Result>(_ report: Report, _ body: (UnsafeBufferPointer<UInt8>) throws -> Result) rethrows -> Result {
        // The threads are most of a report (65 threads of 40 frames: 2,600 lines, 700 KB): one
        // buffer, reserved once at about its final size and grown in place — no string per
        // line, no joining, no copy when it needs no escaping.
        let out = TextBuffer(capacity: estimatedTextBytes(report))
        func line(_ text: String) {
            out += text
            out.write("\n")
        }
        line("*** \(title(report.kind)): \(reason(report)) ***")
        line("")
        let process = report.process
        line("Process:    \(process.name) [\(process.pid)]")
        line("Executable: \(process.executable)")
        if !process.arguments.isEmpty { line("Arguments:  \(process.arguments.joined(separator: " "))") }
        if !process.bundleID.isEmpty { line("Bundle ID:  \(process.bundleID)") }
        line("Time:       \(ReportFormatting.timestamp(report.timestamp))")
        line("Report ID:  \(report.id)")
        if report.kind != .killed {  // nothing is captured at a kill
            line("Captured:   \(report.threads.count) thread\(report.threads.count == 1 ? "" : "s") in \(ReportFormatting.seconds(report.captureDurationSeconds))")
        }
        if report.incomplete {
            line("Incomplete: the dump was truncated or abandoned; later sections may be missing")
        }
        if let redacted = report.redacted, !redacted.isEmpty {
            line("Redacted:   \(redacted.joined(separator: ", ")) (left out of this report)")
        }
        if let superseded = report.context?.supersededHang {
            line("Superseded: \(targetDescription(superseded.target)) had been hung for "
                + "\(ReportFormatting.seconds(superseded.durationSeconds)) (threshold "
                + "\(ReportFormatting.seconds(superseded.thresholdSeconds)), since \(ReportFormatting.timestamp(superseded.startTime)))"
                + (superseded.reportID.map { ", hang report \($0)" } ?? ""))
        }
        if let termination = report.context?.termination {
            line("Terminated: \(termination.reason) (\(termination.code)) with \(termination.signal) after "
                + "\(ReportFormatting.seconds(termination.hungSeconds)) hung")
        }
        if let killed = report.killed {
            for text in KillExplanation.lines(killed) { line(text) }
        }
        if let unkillable = report.context?.unkillableProcesses, !unkillable.isEmpty {
            line("Unkillable: " + unkillable.map { "\($0.pid) (\($0.name))" }.joined(separator: ", ")
                + " could not be signalled (not permitted) and may have outlived the job")
        }

        // What the hang was doing leads: a kill that lands just after the work finished
        // captures threads that are idle by then, while the samples name the slow function.
        let hangSamples = report.hang.flatMap { $0.stacks.isEmpty ? nil : $0 }
        if let hang = hangSamples { hangProfile(hang).forEach(line) }
        for text in LockReport.deadlockLines(report) { line(text) }
        if hangSamples != nil, let termination = report.context?.termination {
            line("")
            line("Threads when \(termination.signal) was sent (the hang profile above is what the hang was doing):")
        }

        let ordered = interestingFirst(report.threads)
        let firstOther = ordered.firstIndex { !isInteresting($0) }
        for (position, thread) in ordered.enumerated() {
            out.write("\n")
            if position == firstOther { out.write("Other threads:\n\n") }
            appendThread(thread, showRegisters: isInteresting(thread), lockWaits: report.threads, to: out)
        }

        if !report.annotations.isEmpty {
            line("")
            line("Annotations:")
            for key in report.annotations.keys.sorted() { line("  \(key): \(report.annotations[key] ?? "")") }
        }
        if let hang = report.hang {
            if hangSamples == nil { hangProfile(hang).forEach(line) }
            OperationReport.lines(hang, threads: report.threads).forEach(line)
        }
        if let profile = report.profile {
            renderProfile(title: "Profile: \(profile.samples) samples every \(ReportFormatting.seconds(profile.intervalSeconds))",
                          threads: profile.sampledThreads, since: "", stacks: profile.stacks, total: profile.samples).forEach(line)
        }
        if let tasks = report.tasks {
            var overdue: String?
            if case .operation(let name) = report.hang?.target { overdue = name }
            TaskReportText.lines(tasks, overdue: overdue).forEach(line)
        }
        // A tree of one process says nothing the header does not (JSON keeps it all the same).
        if let tree = report.processTree, tree.processes.count > 1 {
            renderProcessTree(tree, reportPID: report.process.pid).forEach(line)
        }
        if let tail = report.context?.stderrTail, !tail.isEmpty {
            line("")
            line("Last stderr output:")
            tail.split(separator: "\n", omittingEmptySubsequences: false).suffix(40).forEach { line("  | \($0)") }
        }
        if report.kind != .killed {  // nothing is captured at a kill
            renderModules(report.modules, inStacks: modulesInStacks(report.threads)).forEach(line)
        }
        // The target controls names, arguments, annotations and its stderr: nothing of it may
        // reach a terminal as a control sequence (JSON keeps the exact bytes).
        return try out.withBytes { bytes in
            guard Text.holdsControl(bytes) else { return try body(bytes) }
            var escaped = Text.terminalSafe(String(decoding: bytes, as: UTF8.self))
            return try escaped.withUTF8(body)
        }
    }

    static func hangProfile(_ hang: Report.Hang) -> [String] {
        renderProfile(title: "Hang profile: \(hang.samples) samples", threads: hang.sampledThreads,
                      since: ", started \(ReportFormatting.timestamp(hang.startTime))", stacks: hang.stacks, total: hang.samples)
    }

    /// A little more than `text` writes: a frame line is its function, file and module plus
    /// at most about 80 bytes of index, address, offset and line.
    static func estimatedTextBytes(_ report: Report) -> Int {
        var bytes = 4096 + report.modules.count * 160
        for thread in report.threads {
            bytes += 400 + (thread.registers == nil ? 0 : 800)
            for frame in thread.frames {
                bytes += 80 + (frame.function?.utf8.count ?? 0) + (frame.file?.utf8.count ?? 0) + (frame.module?.utf8.count ?? 0)
            }
        }
        return bytes
    }

    /// The module paths frames point into; consecutive frames mostly share one.
    static func modulesInStacks(_ threads: [Report.Thread]) -> Set<String> {
        var paths = Set<String>()
        for thread in threads {
            var previous: String?
            for frame in thread.frames {
                guard let module = frame.module, module != previous else { continue }
                paths.insert(module)
                previous = module
            }
        }
        return paths
    }

    /// One line per process of the tree (indented by depth), then the threads of every other
    /// captured process, interesting ones first, with their top frames.
    static func renderProcessTree(_ tree: Report.ProcessTree, reportPID: Int32) -> [String] {
        var out = ["", "Process tree: \(tree.processes.count) of \(tree.processesFound) processes"
            + (tree.culpritPID.map { ", likely culprit \($0): \(tree.culpritReason)" } ?? ", no culprit: \(tree.culpritReason)")]
        out += processTreeLines(tree)
        for process in tree.processes where process.pid != reportPID {
            guard let threads = process.threads, !threads.isEmpty else { continue }
            out.append("")
            out.append("Process \(process.pid) (\(process.name)), \(process.activity), "
                + (process.depth == 0 ? "the root of the tree:" : "child of \(process.parentPID):"))
            for thread in interestingFirst(threads) {
                out.append("")
                out.append(contentsOf: render(thread, showRegisters: false, maxFrames: 12))
            }
        }
        return out
    }

    /// "pid activity command" per process, indented by depth, the culprit marked "=>".
    public static func processTreeLines(_ tree: Report.ProcessTree) -> [String] {
        tree.processes.map { process in
            let command = process.arguments.isEmpty ? process.name : process.arguments.joined(separator: " ")
            return (process.pid == tree.culpritPID ? "=> " : "   ") + String(repeating: "  ", count: min(process.depth, 16))
                + "\(process.pid) \(process.activity)  \(command.prefix(160))"
                + (process.captureError.map { "  (\($0))" } ?? "")
        }
    }

    static func title(_ kind: ReportKind) -> String {
        switch kind {
        case .dump: return "Dump"
        case .hang: return "Hang"
        case .fatalHang: return "Fatal hang"
        case .crash: return "Crash"
        case .killed: return "Killed"
        }
    }

    /// One line saying why the report exists.
    public static func reason(_ report: Report) -> String {
        switch report.kind {
        case .dump:
            return DumpHeadline.text(report)
        case .hang, .fatalHang:
            guard let hang = report.hang else { return report.kind == .hang ? "hang" : "the process ended while hung" }
            if case .operation(let operation) = hang.target {
                return TaskReportText.operationReason(operation, hang: hang, fatal: report.kind == .fatalHang, tasks: report.tasks)
            }
            var text = "\(targetDescription(hang.target)) hung for \(ReportFormatting.seconds(hang.durationSeconds))"
                + " (threshold \(ReportFormatting.seconds(hang.thresholdSeconds)))"
            let operations = OperationReport.headline(hang)
            if let serving = operations?.serving { text += " " + serving }
            if hang.recovered { text += ", then recovered" }
            if report.kind == .fatalHang { text += "; the process ended while hung" }
            if let running = operations?.running { text += "; " + running }
            if let why = LockReport.headline(report.threads) { text += "; " + why }
            return text
        case .crash:
            guard let signal = report.signal else { return "crash" }
            var text = signal.name + (signal.codeName.map { " (\($0))" } ?? "") + " at \(ReportFormatting.offset(signal.address))"
            text += " on thread \(signal.tid)"
            if let message = signal.message, !message.isEmpty { text += ": \(message)" }
            return text
        case .killed:
            guard let killed = report.killed else { return "killed from outside" }
            return KillExplanation.headline(killed)
        }
    }

    static func targetDescription(_ target: HangTarget) -> String {
        switch target {
        case .mainQueue: return "main queue"
        case .queue(let label): return "queue \(label)"
        case .operation(let operation): return "operation \(operation)"
        // As reports, `hangwatch run` and the monitor's events spell it: `event-loop:0`.
        default: return target.name
        }
    }

    /// Crashed, hung, main-queue, requester, then the main thread (first of the "other"
    /// threads: under dispatchMain it is only parked), then the rest.
    static func rank(_ thread: Report.Thread) -> Int {
        let order: [ThreadRoles] = [.crashed, .hung, .mainQueue, .requester, .mainThread]
        return order.firstIndex { thread.roles.contains($0) } ?? order.count
    }

    static func isInteresting(_ thread: Report.Thread) -> Bool { rank(thread) < 4 }

    static func interestingFirst(_ threads: [Report.Thread]) -> [Report.Thread] {
        threads.enumerated().sorted { lhs, rhs in
            let (l, r) = (rank(lhs.element), rank(rhs.element))
            return l != r ? l < r : lhs.offset < rhs.offset
        }.map(\.element)
    }

    static func render(_ thread: Report.Thread, showRegisters: Bool, maxFrames: Int = .max) -> [String] {
        let text = TextBuffer(capacity: 4096)
        appendThread(thread, showRegisters: showRegisters, maxFrames: maxFrames, to: text)
        return text.string.split(separator: "\n", omittingEmptySubsequences: false).dropLast().map(String.init)
    }

    /// The thread's lines, each ending in a newline.
    /// `lockWaits`: the report's threads, to name the holder of a lock the thread waits for.
    static func appendThread(_ thread: Report.Thread, showRegisters: Bool, maxFrames: Int = .max,
                             lockWaits threads: [Report.Thread] = [], to out: TextBuffer) {
        let header = title(of: thread)
        var facts = ["state \(thread.state)", thread.status.name]
        if let queue = thread.queueLabel { facts.append("queue \(queue)") }
        if let syscall = thread.syscall, !syscall.isEmpty { facts.append("syscall " + SyscallText.describe(syscall, name: thread.syscallName)) }
        facts.append("cpu \(ReportFormatting.seconds(thread.cpuSeconds.user)) user, "
            + "\(ReportFormatting.seconds(thread.cpuSeconds.system)) system")
        var lines = [header + " — " + facts.joined(separator: ", ")]
        if let wait = thread.lockWait { lines.append("  " + LockReport.waitLine(wait, in: threads)) }
        if thread.frames.isEmpty {
            lines.append("  no stack: \(ReportFormatting.missingStackReason(status: thread.status))")
        }
        for line in lines {
            out += line
            out.write("\n")
        }
        lines.removeAll()
        for frame in thread.frames.prefix(maxFrames) {
            out.write("  ")
            appendFrame(frame, to: out)
            out.write("\n")
        }
        if thread.frames.count > maxFrames { lines.append("  … \(thread.frames.count - maxFrames) more frames (JSON: processTree)") }
        if showRegisters, let registers = thread.registers {
            lines.append("")
            let names = Registers.names.filter { registers[$0] != nil }
            for start in stride(from: 0, to: names.count, by: 4) {
                let row = names[start..<min(start + 4, names.count)].map { name in
                    Text.padded(name, to: max(6, name.count + 1)) + (registers[name].map(ReportFormatting.address) ?? "")
                }
                lines.append("  " + row.joined(separator: "  "))
            }
        }
        for line in lines {
            out += line
            out.write("\n")
        }
    }

    /// `Thread 4242 "name" (main-thread, hung)`: how a thread is named wherever its stack is shown.
    /// A name libdispatch cut to 15 bytes gets the queue label it stands for: `Thread 4243
    /// "oot.default-qos" [libdispatch: com.apple.root.default-qos]`.
    package static func title(of thread: Report.Thread) -> String {
        "Thread \(thread.tid) \"\(thread.name)\"" + (ThreadNames.dispatchLabel(of: thread.name).map { " [libdispatch: \($0)]" } ?? "")
            + (thread.roles.isEmpty ? "" : " (\(thread.roles.names.joined(separator: ", ")))")
    }

    /// "#3 0x… in function + 12 at File.swift:42", inlined frames marked "[inlined]".
    public static func render(_ frame: Report.Frame) -> String {
        let text = TextBuffer(capacity: 256)
        appendFrame(frame, to: text)
        return text.string
    }

    static func appendFrame(_ frame: Report.Frame, to text: TextBuffer) {
        text.write("#")
        text.append(decimal: frame.index)
        text.write(" ")
        text.append(address: frame.address)
        text.write(" in ")
        if let function = frame.function {
            text += function
            if let offset = frame.offset, offset > 0 {
                text.write(" + ")
                text.append(decimal: offset)
            }
        } else if let module = frame.module, let offset = frame.moduleOffset {
            text += fileName(of: module)
            text.write(" + ")
            text += ReportFormatting.offset(offset)
        } else {
            text.write("???")
        }
        if frame.inlined { text.write(" [inlined]") }
        // -O merged functions with identical code into one body, named after one of them
        // (docs/release-builds.md): the program may have called another.
        if frame.function?.hasPrefix("merged ") == true { text.write(" [merged: one body for identical functions, named after one]") }
        if let file = frame.file {
            text.write(" at ")
            text += file
            if let line = frame.line {
                text.write(":")
                text.append(decimal: line)
            }
        } else if frame.function != nil, let module = frame.module {
            text.write(" in ")
            text += fileName(of: module)
        }
        if let why = frame.symbolsUnavailable { text += " (\(why))" }
    }

    /// "libc.so.6" of "/usr/lib/x86_64-linux-gnu/libc.so.6" (trailing slashes ignored; a path
    /// of slashes only is itself): what a frame names its module by. Found in the UTF-8 bytes:
    /// a "/" byte is always the character, and indexing by Character costs thousands of
    /// instructions a path.
    static func fileName(of path: String) -> Substring {
        let utf8 = path.utf8
        var end = utf8.endIndex
        while end > utf8.startIndex, utf8[utf8.index(before: end)] == UInt8(ascii: "/") { end = utf8.index(before: end) }
        guard end > utf8.startIndex else { return path[...] }
        let start = utf8[..<end].lastIndex(of: UInt8(ascii: "/")).map { utf8.index(after: $0) } ?? utf8.startIndex
        return path[start..<end]
    }

    static func renderProfile(title: String, threads: [Int32], since: String, stacks: [Report.SampledStack], total: Int) -> [String] {
        var lines = ["", title
            + (threads.isEmpty ? "" : " of thread \(threads.map(String.init).joined(separator: ", "))")
            + since]
        guard let top = stacks.first else {
            lines.append("  no samples were taken")
            return lines
        }
        lines.append("  most frequent stack (\(top.count) of \(total) samples, leaf first):")
        for name in top.frames.reversed() { lines.append("    \(name)") }
        if stacks.count > 1 {
            lines.append("  \(stacks.count) distinct stacks in all (folded output has each)")
        }
        return lines
    }

    /// The modules the stacks go through (a process maps dozens; the others are in the JSON).
    static func renderModules(_ modules: [Report.Module], inStacks: Set<String>) -> [String] {
        let withoutSymbols = modules.filter(\.lacksNames)
        let shown = modules.filter { inStacks.contains($0.path) || withoutSymbols.contains($0) || $0.symbolsNote != nil }
        var lines = ["", "Modules: \(modules.count) loaded"
            + (withoutSymbols.isEmpty ? "" : ", \(withoutSymbols.count) without symbols")
            + (shown.count < modules.count ? "; the \(shown.count) in the stacks above (--format json lists all):" : "")]
        for module in shown {
            var line = "  \(ReportFormatting.address(module.base)) \(module.path)"
            if !module.buildID.isEmpty { line += " build-id \(module.buildID)" }
            if let symbols = module.symbols, module.symbolKind != .verified { line += " [\(symbols)]" }
            if let file = module.symbolFile { line += " symbols from \(file)" }
            if let note = module.symbolsNote { line += " (\(note))" }
            lines.append(line)
        }
        return lines
    }
}

extension Report {
    /// Whose end this report tells, as the database keeps it beside the report (`ReportSubject`).
    package var subject: ReportSubject {
        ReportSubject(kind: kind, pid: process.pid, bundleID: process.bundleID,
                      runID: runID ?? annotations[RunIdentity.annotationKey])
    }
}
