// ProcessSnapshot in, symbolicated Report out (the processing stage of the pipeline).
import HangwatchPlatform
import HangwatchSnapshot
import HangwatchSymbolication

package enum ReportBuilder {
    /// Builds the report for `snapshot`. `kind` is the caller's decision (a hang snapshot
    /// becomes `hang` or `fatal-hang` depending on whether the process survived).
    /// Threads keep capture order; renderers pick the interesting ones first.
    package static func makeReport(from snapshot: ProcessSnapshot, id: String, kind: ReportKind,
                                  symbolicator: Symbolicator) -> Report {
        symbolicator.prime(lookups(in: snapshot), modules: snapshot.modules)
        var cache = FrameCache(symbolicator: symbolicator, modules: snapshot.modules)
        let threads = snapshot.threads.map { makeThread($0, cache: &cache) }
        let modules = snapshot.modules.map { module -> Report.Module in
            let resolution = symbolicator.resolution(of: module)
            let symbolFile = resolution.symbolFile
            return Report.Module(snapshot: module, symbols: resolution.name,
                                 symbolFile: symbolFile == module.path ? nil : symbolFile, symbolsNote: symbolicator.note(of: module))
        }
        var hang: Report.Hang?
        var signal: Report.Signal?
        switch snapshot.reason {
        case .dumpRequested:
            break
        case .hang(let info):
            hang = makeHang(info, cache: &cache)
        case .crash(let info):
            signal = Report.Signal(info: info, name: SignalNames.name(info.number),
                                   codeName: ReportFormatting.signalCodeName(signal: info.number, code: info.code))
        case .killed:
            break
        }
        var report = Report(
            id: id, kind: kind, timestamp: Timestamp.millisecondResolution(snapshot.timestamp),
            incomplete: snapshot.incomplete,
            process: snapshot.process,
            threads: threads, modules: modules, annotations: snapshot.reportedAnnotations, hang: hang, signal: signal,
            captureDurationSeconds: snapshot.captureDurationSeconds)
        report.redacted = Redaction.recorded(in: snapshot.annotations).names
        let lockCycles = LockReport.cycles(report.threads)
        report.lockCycles = lockCycles.isEmpty ? nil : lockCycles
        if let tasks = snapshot.tasks {
            report.tasks = makeTasks(tasks, cache: &cache)
            markOperation(in: &report, annotations: snapshot.annotations)
        }
        if case .hang(let info) = snapshot.reason, !info.operations.isEmpty {
            let operations = OperationReport.operations(info.operations, threads: report.threads, tasks: report.tasks)
            report.hang?.operations = operations
            if var tasks = report.tasks {
                OperationReport.nameTasks(in: &tasks, after: operations)
                report.tasks = tasks
            }
        }
        if case .killed(let info) = snapshot.reason {
            // What the snapshot alone says; whoever found the kill adds the rest (DumpProcessor.store's amend).
            report.killed = Report.Killed(cause: info.cause, signal: info.signal.map(SignalNames.name),
                                          explanation: KillExplanation.sentence(cause: info.cause, signal: info.signal))
        }
        return report
    }

    /// Every lookup the report of `snapshot` makes, as FrameCache makes them: its threads' and
    /// hang samples' stacks (frame 0 the pc, the others return addresses) and its tasks' await
    /// chains (functions' entries).
    static func lookups(in snapshot: ProcessSnapshot) -> [(address: UInt64, isReturnAddress: Bool)] {
        var lookups: [(address: UInt64, isReturnAddress: Bool)] = []
        var stacks = snapshot.threads.map { $0.frames }
        if case .hang(let info) = snapshot.reason { stacks += info.samples.map { $0.frames } }
        for stack in stacks {
            for (index, address) in stack.enumerated() { lookups.append((address, index > 0)) }
        }
        for task in snapshot.tasks?.tasks ?? [] {
            for address in task.frames { lookups.append((address, false)) }
        }
        return lookups
    }

    /// Folded-stack lines ("root;…;leaf count") for stack samples, identical lines merged,
    /// most frequent first (ties by text, so the output is stable).
    package static func sampledStacks(_ samples: [StackSample], modules: [ModuleSnapshot],
                                      symbolicator: Symbolicator) -> [Report.SampledStack] {
        var cache = FrameCache(symbolicator: symbolicator, modules: modules)
        return sampledStacks(samples, cache: &cache)
    }

    /// The symbolicated frames of one stack (frames[0] the pc), inlined frames expanded: a
    /// stack sample shown the way a thread's frames are.
    package static func frames(of stack: [UInt64], modules: [ModuleSnapshot], symbolicator: Symbolicator) -> [Report.Frame] {
        var cache = FrameCache(symbolicator: symbolicator, modules: modules)
        return frames(of: stack, cache: &cache)
    }

    /// Each sample's frames as `frames(of:modules:symbolicator:)` gives them, each address
    /// symbolicated once for all of them (a profile's samples repeat their addresses).
    package static func frames(ofSamples samples: [StackSample], modules: [ModuleSnapshot],
                               symbolicator: Symbolicator) -> [[Report.Frame]] {
        var cache = FrameCache(symbolicator: symbolicator, modules: modules)
        return samples.map { frames(of: $0.frames, cache: &cache) }
    }

    private static func frames(of stack: [UInt64], cache: inout FrameCache) -> [Report.Frame] {
        var frames: [Report.Frame] = []
        for (index, address) in stack.enumerated() {
            for symbolicated in cache.frames(address: address, isReturnAddress: index > 0) {
                frames.append(makeFrame(symbolicated, index: index))
            }
        }
        return frames
    }

    private static func makeThread(_ thread: ThreadSnapshot, cache: inout FrameCache) -> Report.Thread {
        let frames = frames(of: thread.frames, cache: &cache)
        var registers: [String: UInt64]?
        if let values = thread.registers {
            registers = Dictionary(uniqueKeysWithValues: zip(Registers.names, values.values))
        }
        let call = Syscalls.number(ofLine: thread.info.syscall).flatMap(Syscalls.name(of:))
        return Report.Thread(info: thread.info, registers: registers, frames: frames, syscallName: call)
    }

    /// Each task's await chain symbolicated (its addresses are functions' entries, not return
    /// addresses), its links (parent, the task it awaits) as task ids, and the cycles of tasks
    /// awaiting each other.
    private static func makeTasks(_ capture: TaskCapture, cache: inout FrameCache) -> Report.Tasks {
        var ids: [UInt64: UInt64] = [:]
        for task in capture.tasks { ids[task.address] = task.id }
        let tasks = capture.tasks.map { task -> Report.Task in
            var frames: [Report.Frame] = []
            for (index, address) in task.frames.enumerated() {
                for symbolicated in cache.frames(address: address, isReturnAddress: false) {
                    frames.append(makeFrame(symbolicated, index: index))
                }
            }
            let awaited = task.waitingOn.flatMap { $0.kind == .task ? ids[$0.address] : nil }
            return Report.Task(info: task.info, parentID: task.parent.flatMap { ids[$0] }, waitingOn: task.waitingOn?.kind.rawValue,
                               waitingOnTaskID: awaited, frames: frames)
        }
        return Report.Tasks(tasks: tasks, cycles: TaskCycles.find(in: tasks), scannedBytes: capture.scannedBytes,
                            durationSeconds: capture.durationSeconds, truncated: capture.truncated, error: capture.error,
                            runtime: capture.runtime, untouchedBytes: capture.untouchedBytes == 0 ? nil : capture.untouchedBytes,
                            unreadBytes: capture.unreadBytes == 0 ? nil : capture.unreadBytes, unread: capture.unread)
    }

    /// An operation hang's culprit (OperationAnnotation): the task where its work is stuck, else
    /// its own task, named and listed first; its own task, when another, named and listed next.
    private static func markOperation(in report: inout Report, annotations: [String: String]) {
        guard let name = annotations[OperationAnnotation.name], var tasks = report.tasks else { return }
        let own = annotations[OperationAnnotation.task].flatMap { UInt64($0, radix: 16) }
        let culprit = annotations[OperationAnnotation.culprit].flatMap { UInt64($0, radix: 16) }
        let traceparent = annotations[OperationAnnotation.traceparent].flatMap(Traceparent.validated)
        for address in [own, culprit].compactMap({ $0 }) {
            guard let index = tasks.tasks.firstIndex(where: { $0.address == address }) else { continue }
            var task = tasks.tasks.remove(at: index)
            task.operation = name
            task.traceparent = traceparent
            tasks.tasks.insert(task, at: 0)
        }
        report.tasks = tasks
    }

    static func makeFrame(_ frame: SymbolicatedFrame, index: Int) -> Report.Frame {
        Report.Frame(
            index: index, address: frame.address, module: frame.modulePath,
            moduleOffset: frame.moduleOffset, function: frame.function,
            offset: frame.functionOffset, file: frame.file, line: frame.line, column: frame.column,
            inlined: frame.isInlined, symbolsUnavailable: frame.symbolsUnavailableReason)
    }

    private static func makeHang(_ info: HangInfo, cache: inout FrameCache) -> Report.Hang {
        var sampledThreads: [Int32] = []
        for sample in info.samples where !sampledThreads.contains(sample.tid) { sampledThreads.append(sample.tid) }
        return Report.Hang(
            target: info.target, thresholdSeconds: info.thresholdSeconds, durationSeconds: info.durationSeconds,
            recovered: info.recovered, samples: info.samples.reduce(0) { $0 + max(0, $1.count) },
            startTime: Timestamp.millisecondResolution(info.startTime), sampledThreads: sampledThreads,
            stacks: sampledStacks(info.samples, cache: &cache))
    }

    /// The distinct symbolicated stacks of `samples` with their counts, most frequent first
    /// (ties in the order of their folded text).
    static func sampledStacks(_ samples: [StackSample], cache: inout FrameCache) -> [Report.SampledStack] {
        var counts: [[String]: Int] = [:]
        for sample in samples where sample.count > 0 && !sample.frames.isEmpty {
            var names: [String] = []
            for (index, address) in sample.frames.enumerated() {
                // Innermost first, like the stack itself; reversed below to put the root first.
                for frame in cache.frames(address: address, isReturnAddress: index > 0) {
                    names.append(foldedName(frame))
                }
            }
            counts[names.reversed(), default: 0] += sample.count
        }
        let keyed: [(stack: Report.SampledStack, text: String)] = counts.map { frames, count in
            (Report.SampledStack(frames: frames, count: count), frames.joined(separator: ";"))
        }
        let sorted = keyed.sorted { lhs, rhs in
            lhs.stack.count != rhs.stack.count ? lhs.stack.count > rhs.stack.count : lhs.text < rhs.text
        }
        return sorted.map(\.stack)
    }

    /// A frame's name in a folded stack: the function, else module+offset, else the address.
    /// `;` separates frames and a line ends the record, so both are replaced.
    static func foldedName(_ frame: SymbolicatedFrame) -> String {
        let name: String
        if let function = frame.function {
            name = function
        } else if let module = frame.modulePath, let offset = frame.moduleOffset {
            name = "\(ReportRenderer.fileName(of: module))+\(ReportFormatting.offset(offset))"
        } else {
            name = ReportFormatting.offset(frame.address)
        }
        return String(name.map { $0 == ";" ? "," : ($0.isNewline ? " " : $0) })
    }
}

/// Addresses repeat across threads and samples: symbolicate each once per report.
struct FrameCache {
    let symbolicator: Symbolicator
    let modules: [ModuleSnapshot]
    // By address, return addresses apart: keyed by a type of the standard library, whose
    // Hashable conformance a first report need not look up among every conformance record.
    private var known: [UInt64: [SymbolicatedFrame]] = [:]
    private var knownReturns: [UInt64: [SymbolicatedFrame]] = [:]

    init(symbolicator: Symbolicator, modules: [ModuleSnapshot]) {
        self.symbolicator = symbolicator
        self.modules = modules
    }

    mutating func frames(address: UInt64, isReturnAddress: Bool) -> [SymbolicatedFrame] {
        if let frames = isReturnAddress ? knownReturns[address] : known[address] { return frames }
        let frames = symbolicator.symbolicate(address: address, isReturnAddress: isReturnAddress, modules: modules)
        if isReturnAddress { knownReturns[address] = frames } else { known[address] = frames }
        return frames
    }
}
