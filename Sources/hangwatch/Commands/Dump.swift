import HangwatchPlatform
import HangwatchSnapshot
import HangwatchSymbolication
import HangwatchDatabase
import HangwatchReport
import HangwatchProcessing
import HangwatchMinidump
import HangwatchRemoteCapture
import HangwatchTaskCapture
import HangwatchSupervisorProtocol
import HangMonitorConfiguration
import ArgumentParser
import HangwatchCommandLine
import HangwatchSupervision
import FoundationEssentials

struct Dump: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dump",
        abstract: "Capture every thread of a running process from outside, without killing it.",
        discussion: """
            Stops all threads of PID for a few milliseconds with ptrace (no signal the program can \
            see), reads their registers and stacks, lets them go, and prints a symbolicated report: \
            demangled Swift names and file:line where the binaries have debug info. A thread blocked \
            on a lock (a glibc mutex, NSLock, an rwlock's writer, a Swift Mutex) says which thread \
            holds it, and threads that wait for each other's locks are named as one deadlock \
            (docs/locks.md).

            You need permission to trace PID: your own process (Yama ptrace_scope 0), a child, or \
            root/CAP_SYS_PTRACE.

            Examples:
              hangwatch dump --pid 4242
              hangwatch dump --pid 4242 --format json --output stacks.json
              hangwatch dump --pid 4242 --samples 50 --interval 20 --format folded > hang.folded
              hangwatch dump --pid 4242 --samples 50 --format pprof --output now.pb.gz
              hangwatch dump --pid 4242 --tree

            --tree captures PID and every live process below it, one after the other (each is \
            stopped only for its own capture), at most 32 processes, 2048 threads each and 8192 \
            in all, within 10 s; the rest are listed without stacks. The report is about the \
            likely culprit: the deepest process that is not only waiting for a child (a thread in D state, running, or blocked on \
            a lock ranks first); every process and its threads are in the report's processTree. \
            A minidump, flame graph or upload of such a report covers the culprit only.

            --tasks also reads every live Swift task of PID out of its memory (after the threads \
            are let go: the process is not stopped for it) — its id, name, state, what it waits \
            on (a continuation, another task, a group, its executor) and its await chain as \
            function and file:line — and names the tasks that await each other in a circle \
            (a deadlock no thread shows). With --samples, the tasks are read before and after \
            the samples, and a task whose chain did not move is marked "unchanged for N s": how \
            to find a stuck request in a server that was never instrumented. At most 20,000 \
            tasks; only runtimes whose task layout is verified are read (docs/tasks.md), any \
            other is named in the report and skipped.

              hangwatch dump --pid 4242 --tasks
              hangwatch dump --pid 4242 --tasks --samples 20 --interval 100
            """
    )

    @OptionGroup var global: GlobalOptions
    @OptionGroup var redact: RedactionOption

    @Option(parsing: .unconditional, help: "The process to capture.")
    var pid: Int32

    @Option(help: "Output format: text, json, folded (flame-graph input), svg, html, minidump or pprof (gzipped profile.proto; both need --output).")
    var format: ReportFormat = .text

    @Option(parsing: .unconditional, help: "Take this many captures and aggregate them into a profile (1 = a single capture).")
    var samples: Int = 1

    @Option(parsing: .unconditional, help: "Milliseconds between samples.")
    var interval: Int = 20

    @Option(help: "Write the report to this file instead of stdout.")
    var output: String?

    @Flag(help: "Also store the report in the database (see `hangwatch list`).")
    var save = false

    @Flag(help: "Capture PID and all its descendants; the report is about the likely culprit (see above).")
    var tree = false

    @Flag(help: "Also read every live Swift task of PID with its await chain (see above).")
    var tasks = false

    /// The same command as plain values (QuickStart builds one directly).
    var request: DumpRequest {
        var common = global.values
        common.redact = redact.redact
        return DumpRequest(common: common, pid: pid, format: format, samples: samples, interval: interval, output: output,
                           save: save, tree: tree, tasks: tasks)
    }

    func validate() throws { try request.validate() }

    func run() throws { try request.run() }
}

/// What `hangwatch dump` was asked, and doing it.
struct DumpRequest: Equatable, RunnableCommand {
    var common: CommonOptions
    var pid: Int32
    var format: ReportFormat
    var samples: Int
    var interval: Int
    var output: String?
    var save: Bool
    var tree: Bool
    var tasks = false

    func validate() throws {
        guard pid > 0 else { throw ValidationError("--pid must be a positive process id, not \(pid)") }
        try format.validate(output: output)
        guard (1...10_000).contains(samples) else { throw ValidationError("--samples must be between 1 and 10000, not \(samples)") }
        guard (1...60_000).contains(interval) else { throw ValidationError("--interval must be between 1 and 60000 ms, not \(interval)") }
        guard !(tree && samples > 1) else { throw ValidationError("--tree takes one capture of each process: it cannot be combined with --samples") }
        guard !(tree && tasks) else { throw ValidationError("--tasks reads one process: it cannot be combined with --tree") }
        try RedactionOption.validate(common.redact)
    }

    func run() throws {
        let redaction = try common.redaction()   // a bad --redact is an error before anything is captured
        if tree { return try runTree(redaction: redaction) }
        var snapshot: ProcessSnapshot
        var samplesTaken: [StackSample] = []
        var sampleCount = 0
        // Read first when sampling: what has not moved by the end of the samples is stuck.
        let tasksBefore = tasks && samples > 1 ? SwiftTaskCapture.capture(pid: pid) : nil
        let sampledAt = monotonicNow()
        do {
            if samples > 1 {
                let result = try RemoteCapture.captureSamples(pid: pid, count: samples, interval: Double(interval) / 1000)
                snapshot = result.snapshot
                samplesTaken = result.samples
                sampleCount = result.sampleCount
                if let why = result.endedEarly { warn("sampling ended early: \(why)") }
            } else {
                snapshot = try RemoteCapture.captureProcess(pid: pid)
            }
        } catch let error as RemoteCaptureError {
            throw CLIError(error.description)
        }
        if tasks { snapshot.tasks = SwiftTaskCapture.capture(pid: pid) }
        let symbolicator = Symbolicator.commandLine()
        var report = ReportBuilder.makeReport(from: snapshot, id: UUID().uuidString.lowercased(), kind: .dump, symbolicator: symbolicator)
        if let tasksBefore, let after = snapshot.tasks {
            report.tasks?.markUnchanged(since: tasksBefore, after: after, seconds: monotonicNow() - sampledAt)
        }
        if sampleCount > 0 {
            report.profile = Report.Profile(
                samples: sampleCount, intervalSeconds: Double(interval) / 1000,
                sampledThreads: Array(Set(samplesTaken.map(\.tid))).sorted(),
                stacks: ReportBuilder.sampledStacks(samplesTaken, modules: snapshot.modules, symbolicator: symbolicator))
        }
        let pprof = format == .pprof && !samplesTaken.isEmpty
            ? PprofSource(samples: samplesTaken, modules: snapshot.modules, tasks: snapshot.tasks?.tasks ?? [], symbolicator: symbolicator) : nil
        symbolicator.sayNotices()
        try finish(report, snapshot: snapshot, samples: pprof, redaction: redaction)
    }

    private func runTree(redaction: Redaction) throws {
        guard ProcFS.processExists(pid) else { throw CLIError(RemoteCaptureError.noSuchProcess(pid: pid).description) }
        let captured = TreeCapture.capture(root: pid, options: RemoteCaptureOptions())
        guard let snapshot = captured.culpritSnapshot(markingHungThread: true) else {
            throw CLIError("could not capture any process of the tree of \(pid): \(captured.members.first?.failure ?? captured.culpritReason)")
        }
        let symbolicator = Symbolicator.commandLine()
        var report = ReportBuilder.makeReport(from: snapshot, id: UUID().uuidString.lowercased(), kind: .dump, symbolicator: symbolicator)
        report.processTree = captured.reportTree {
            ReportBuilder.makeReport(from: $0, id: "", kind: .dump, symbolicator: symbolicator)
        }
        symbolicator.sayNotices()
        try finish(report, snapshot: snapshot, redaction: redaction)
    }

    /// Redacted after the fact: the report was built from the whole capture, and only the
    /// parts a redaction names change (argv, annotations, the stderr tail, the tree's argv;
    /// stack bytes in the dump kept beside a saved report).
    private func finish(_ unredacted: Report, snapshot captured: ProcessSnapshot, samples: PprofSource? = nil, redaction: Redaction) throws {
        let snapshot = captured.redacted(redaction)
        var report = unredacted
        report.redact(redaction)
        if save {
            let database = try openDatabase(common)
            try database.store(report, dump: snapshot)
            warn("saved report \(report.id)")
        }
        try format.emit(report, snapshot: snapshot, samples: samples, to: output)
    }
}
