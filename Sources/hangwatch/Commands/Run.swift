import HangwatchPlatform
import HangwatchSnapshot
import HangwatchDatabase
import HangwatchReport
import HangwatchMinidump
import HangwatchRemoteCapture
import HangwatchSupervisorProtocol
import HangMonitorConfiguration
import ArgumentParser
import CHangwatchSupervision
import HangwatchCommandLine
import HangwatchSupervision
import FoundationEssentials
import HangMonitor
#if canImport(Glibc)
import Glibc
#endif

struct Run: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run",
        abstract: "Launch a program, watch it, and capture its threads when it hangs.",
        discussion: """
            The child gets hangwatch's stdin; its stdout and stderr pass through (a reader that \
            stops reading never stalls hangwatch: past 4 MiB queued, output is dropped and \
            counted). hangwatch exits with the child's status (128+N if it died of signal N), 124 \
            if it killed the child for hanging, 127 if the command does not exist and 126 if it \
            cannot be executed.

            The job is the whole process tree: hangwatch is its child subreaper, so processes \
            that daemonize, leave the process group or lose their parent stay in it. A hang kill \
            (--timeout, --kill-after) ends every process of the job: --kill-signal to all, then \
            SIGKILL to what is left after --kill-grace seconds (at once for KILL, the default). \
            When the child exits, what it left running gets SIGTERM, then SIGKILL after the grace \
            period (hangs are watched for while the child runs, not after); nothing of the job \
            outlives hangwatch (unless --kill-tree no), not even a hangwatch killed with SIGKILL: \
            its watchdog (hangwatch job-watchdog, a process of \
            its own, that forgets no live process of the job however many it is told of) then \
            ends the job and removes its --memory-max cgroup. SIGINT, \
            SIGTERM, SIGHUP and SIGQUIT go to the whole job (then SIGKILL after the grace \
            period); SIGUSR1 and SIGUSR2 to the child only. A process that cannot be signalled \
            (a setuid-root program) is named on stderr and in the report. The child leads a \
            process group of its own, except when hangwatch is the terminal's foreground job with the terminal as stdin: then the child \
            stays in hangwatch's group so it can read the terminal, and Ctrl-C, Ctrl-\\ and \
            Ctrl-Z reach it from the terminal directly.

            Liveness, in any combination:
              - a child linking HangMonitor finds hangwatch through HANGWATCH_MONITOR_SOCKET and \
            reports heartbeats and hangs;
              - systemd's watchdog protocol: NOTIFY_SOCKET, WATCHDOG_USEC and WATCHDOG_PID are set \
            for the child; once it has sent WATCHDOG=1, no WATCHDOG=1 for --threshold seconds is a \
            hang, and WATCHDOG=trigger is a hang at once;
              - --silence: no output for that long is a hang;
              - --timeout: an absolute deadline, like timeout(1), but with stacks; its report's \
            hang lasts from the job's start to the kill (how long the job ran).
            --no-liveness-environment tells the child nothing (HANGWATCH_MONITOR_SOCKET, \
            NOTIFY_SOCKET and WATCHDOG_* are removed from its environment), for a job whose own \
            processes run monitors and hangwatch, such as a test suite; --silence and --timeout \
            still apply.

            On a hang, every process of the job is captured with ptrace, one after the other (at \
            most 32 processes, 2048 threads each and 8192 in all, within 10 s; the rest are listed \
            without stacks), and the report \
            is about the likely culprit: the child when its HangMonitor reported the hang, else \
            the deepest process that is not only waiting for a child (a thread in D state, \
            running, or blocked on a lock ranks first). The summary on stderr lists the job's \
            processes with the culprit marked "=>"; all of them, with their threads, are in the \
            report's processTree (docs/report-schema.md).

            --catch-crashes keeps hangwatch attached to the child with ptrace for its whole life. \
            When a thread gets SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT or SIGTRAP, every thread is \
            captured at the faulting instruction before the signal is delivered; then the signal \
            goes on unchanged, so the program's own handlers (Swift's backtracer, a crash reporter) \
            still run and the exit status is the same. If the child dies of a signal, the capture \
            is kept as a `crash` report with the stderr tail (unless the child wrote its own crash \
            report into the database). Only the first fatal signal is captured; other signals, \
            SIGSTOP and SIGCONT behave as without a tracer. Limits: no debugger can attach to the \
            child meanwhile (nor `hangwatch dump --pid` from another hangwatch), and it fails with \
            a clear error where ptrace is not allowed (Yama ptrace_scope 3, seccomp, a child that \
            is already traced).

            Killed from outside: when the child dies of a signal hangwatch did not send (not a \
            crash signal, and with no crash report of its own) — the OOM killer, another \
            process's kill -9 — a `killed` report says so, with the cause as far as the system \
            tells it (oom: its memory cgroup counted an OOM kill, or the kernel log names it; \
            signal: one hangwatch did not send — another process, the system or the program \
            itself, a parent is not told which), its resident memory and threads sampled once a second \
            (the last 32), its last liveness message and the stderr tail; the summary line says \
            why it died. --memory-max puts the job in a memory cgroup of its own with that limit, \
            so an OOM kill of the job is its own to count (docs/killed.md).

            Examples:
              hangwatch run --kill-after 30 -- ./my-server --port 8080
              hangwatch run --memory-max 512M -- ./batch-import data.csv
              hangwatch run --silence 120 -- swift test
              hangwatch run --timeout 600 --kill-signal TERM -- ./nightly-job
              hangwatch run --catch-crashes -- ./legacy-tool --input data.bin
            """
    )

    @Option(parsing: .unconditional, help: "Seconds without WATCHDOG=1 that count as a hang (default: the configuration's threshold, 2 s).")
    var threshold: Double?

    @Option(parsing: .unconditional, help: "Seconds without any output on stdout or stderr that count as a hang.")
    var silence: Double?

    @Option(parsing: .unconditional, help: "Seconds after which the child is captured and killed whatever it is doing.")
    var timeout: Double?

    @Option(name: .customLong("kill-after"), parsing: .unconditional, help: "Kill the child once a hang has lasted this many seconds (default: never).")
    var killAfter: Double?

    @Option(name: .customLong("kill-signal"), parsing: .unconditional, help: "Signal used to kill a hung child: a name (KILL, SIGTERM) or a number.")
    var killSignal: String = "KILL"

    @Option(name: .customLong("kill-grace"), parsing: .unconditional, help: "Seconds between asking the job to end (SIGTERM, a --kill-signal other than KILL) and SIGKILL.")
    var killGrace: Double = 5

    @Option(name: .customLong("kill-tree"), help: "yes: end every process of the job with the child (default); no: only ever signal the child.")
    var killTree: YesNo = .yes

    @Option(name: .customLong("stderr-tail"), parsing: .unconditional, help: "Bytes of the child's last stderr output kept with each report.")
    var stderrTail: Int = 64 * 1024

    @Flag(name: .customLong("keep-recovered"), help: "Keep a hang the child recovered from as a `hang` report instead of discarding it.")
    var keepRecovered = false

    @Flag(name: .customLong("no-liveness-environment"),
          help: "Do not tell the child how to report liveness (no HANGWATCH_MONITOR_SOCKET, NOTIFY_SOCKET, WATCHDOG_*).")
    var noLivenessEnvironment = false

    @Option(name: .customLong("memory-max"), parsing: .unconditional, help: ArgumentHelp(
        "Run the job in a memory cgroup of its own limited to SIZE (bytes, or with K, M, G: powers of 1024), as systemd's MemoryMax.",
        discussion: "An OOM kill of the job is then counted in that cgroup and reported as such (a killed report, reason oom). Needs a writable memory cgroup (root, or a delegated one); made under hangwatch's own and removed at the end. An empty one that a killed run of this user left is removed by the next run; another user's never."))
    var memoryMax: MemorySize?

    @Flag(help: "Each hang capture also reads the culprit's Swift tasks with their await chains (docs/tasks.md): for async code that hangs with no thread blocked.")
    var tasks = false

    @Flag(name: .customLong("catch-crashes"), help: "Stay attached with ptrace and capture every thread when a fatal signal reaches the child, before it is delivered.")
    var catchCrashes = false

    @Option(help: "How the summary of a fatal hang is printed to stderr: text (a short summary) or json (the whole report).")
    var format: ReportFormat = .text

    @OptionGroup var global: GlobalOptions
    @OptionGroup var redact: RedactionOption

    @Argument(parsing: .postTerminator, help: "The command to run, after --.")
    var command: [String] = []

    func validate() throws {
        guard !command.isEmpty else { throw ValidationError("missing command: hangwatch run [options] -- COMMAND [ARGS...]") }
        guard [.text, .json, .folded].contains(format) else { throw ValidationError("--format of run's stderr summary must be text, json or folded, not \(format.rawValue)") }
        for (name, value) in [("--threshold", threshold), ("--silence", silence), ("--timeout", timeout), ("--kill-after", killAfter),
                              ("--kill-grace", killGrace)] {
            if let value, !(value > 0 && value <= Self.maximumSeconds) {
                throw ValidationError("\(name) must be more than 0 and at most \(Int(Self.maximumSeconds)) seconds (a year), not \(value)")
            }
        }
        guard SignalNames.number(killSignal) != nil else { throw ValidationError("--kill-signal: unknown signal '\(killSignal)'") }
        guard (0...(64 << 20)).contains(stderrTail) else { throw ValidationError("--stderr-tail must be 0...\(64 << 20) bytes, not \(stderrTail)") }
    }

    /// The longest duration any option takes: a year (and far from what a Double or the
    /// microsecond WATCHDOG_USEC can no longer hold).
    static let maximumSeconds: Double = 365 * 24 * 3600

    /// A size as `--memory-max` takes it: bytes, or a number with K, M, G or T (powers of 1024),
    /// an optional `B` or `iB` after the letter.
    struct MemorySize: ExpressibleByArgument {
        var bytes: UInt64

        init?(argument: String) {
            var text = argument.uppercased()
            for suffix in ["IB", "B"] where text.hasSuffix(suffix) && text.count > suffix.count {
                text.removeLast(suffix.count)
                break
            }
            let units: [Character: UInt64] = ["K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40]
            var multiplier: UInt64 = 1
            if let last = text.last, let unit = units[last] {
                multiplier = unit
                text.removeLast()
            }
            // At least 1 MiB: below that the job cannot even start, and the number is a typo.
            guard let value = UInt64(text), value > 0, value <= (UInt64(1) << 62) / multiplier,
                  value * multiplier >= 1 << 20 else { return nil }
            bytes = value * multiplier
        }
    }

    func run() throws {
        let executable: String
        let database = try openDatabase(global)   // a bad database is an error before the child starts
        let redaction = try redact.redaction(global)   // and so is a bad redaction
        let threshold = try self.threshold ?? global.configuration()?.threshold.seconds ?? 2
        do {
            executable = try ChildLauncher.resolve(command[0])
        } catch let error as LaunchError {
            warn("\(error)")
            throw ExitCode(error.exitCode)
        }
        var options = SupervisorOptions()
        options.killTree = killTree == .yes
        options.killGrace = killGrace
        let sockets = try makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: sockets) }
        let notify = try DatagramListener(directory: sockets, name: "notify")
        let monitor = try DatagramListener(directory: sockets, name: "monitor")

        // The job's orphans come to hangwatch, not init: the whole tree stays findable.
        if options.killTree, hwr_become_child_subreaper() != 0 {
            warn("cannot become the job's child subreaper (\(String(cString: strerror(errno)))): orphaned processes of the job may outlive it")
        }
        // A reader that went away must not kill hangwatch (nor, through it, the report).
        signal(SIGPIPE, SIG_IGN)
        let runID = UUID().uuidString.lowercased()
        var environment = ProcessInfo.processInfo.environment
        environment[RunIdentity.environmentVariable] = runID
        if noLivenessEnvironment {
            for name in ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", SupervisorMessage.environmentVariable] {
                environment[name] = nil
            }
        } else {
            environment["NOTIFY_SOCKET"] = notify.path
            environment["WATCHDOG_USEC"] = String(Int(threshold * 1_000_000))
            environment[SupervisorMessage.environmentVariable] = monitor.path
        }

        // The job's own memory cgroup, made before the child so that a refusal starts nothing.
        var jobCgroup: MemoryCgroup?
        if let memoryMax {
            do {
                guard let own = MemoryCgroup.of(nil) else { throw CgroupError(path: "/proc/self/cgroup", what: "no memory controller is mounted") }
                Self.removeCgroupsOfEndedRuns(in: own)
                jobCgroup = try own.createChild(named: Self.cgroupName(runID: runID), limitBytes: memoryMax.bytes)
            } catch {
                warn("--memory-max: cannot make a memory cgroup for the job: \(error)")
                throw ExitCode(1)
            }
        }
        defer { jobCgroup?.remove() }
        // Before the job: whatever happens to hangwatch from now on, the job ends with it.
        let watchdog: JobWatchdogLink?
        do {
            watchdog = try JobWatchdogLink(cgroup: jobCgroup, wholeTree: options.killTree)
        } catch {
            warn("\(error): the job would outlive a hangwatch that is killed")
            watchdog = nil
        }
        let child: LaunchedChild
        do {
            child = try ChildLauncher.spawn(executable: executable, arguments: command, environment: environment,
                                            setWatchdogPID: !noLivenessEnvironment || catchCrashes,
                                            holdAtStart: catchCrashes || jobCgroup != nil,
                                            ownProcessGroup: !Self.isTerminalForegroundJob())
        } catch let error as LaunchError {
            watchdog?.done()
            warn("\(error)")
            throw ExitCode(error.exitCode)
        }
        watchdog?.tell([(child.pid, ProcFS.startTicks(of: child.pid) ?? 0)])
        if let jobCgroup {
            // Still at the start gate (a shell before exec): nothing of the command has run yet.
            do {
                try jobCgroup.add(child.pid)
            } catch {
                try Self.abandon(child, "--memory-max: cannot put the job in its memory cgroup: \(error)")
            }
        }
        var tracer: ChildTracer?
        if catchCrashes {
            // The child waits at the start gate (a shell before exec) until it is traced.
            do {
                tracer = try ChildTracer(attachingTo: child.pid)
            } catch {
                try Self.abandon(child, "--catch-crashes: cannot trace the child: \(error)")
            }
        }
        child.openStartGate()
        options.threshold = threshold
        options.silence = silence
        options.timeout = timeout
        options.killAfter = killAfter
        options.killSignal = SignalNames.number(killSignal)!
        options.stderrTailBytes = stderrTail
        let reporter = RunReporter(commandLine: command, database: database, settings: .init(
            threshold: threshold, keepRecovered: keepRecovered, killSignal: options.killSignal,
            renderSummary: format == .text ? nil : { [format] in format.render($0) },
            runID: runID, redaction: redaction, captureTasks: tasks,
            childDatabasePath: environment["HANGWATCH_DATABASE_PATH"].flatMap { $0.hasPrefix("/") ? $0 : nil }),
            symbolCache: .commandLine)
        reporter.tracer = tracer
        reporter.ownProcesses = Set([watchdog?.pid].compactMap { $0 })
        reporter.noteMemoryCgroup(jobCgroup ?? MemoryCgroup.of(child.pid))
        let supervisor = Supervisor(child: child, options: options, notify: notify, monitor: monitor, reporting: reporter,
                                    tracer: tracer, watchdog: watchdog)
        let exit = try supervisor.run()
        watchdog?.done()
        throw ExitCode(supervisor.killedForHang ? 124 : exit.shellStatus)
    }
}

extension Run {
    /// `hangwatch-<run id>.<pid>.<start ticks>`: the job's memory cgroup, named for the run and
    /// for the hangwatch that owns it, so that a later run can tell it is gone.
    static func cgroupName(runID: String) -> String {
        "hangwatch-\(runID).\(getpid()).\(ProcFS.startTicks(of: getpid()) ?? 0)"
    }

    /// Job cgroups (`cgroupName`) under `parent` whose hangwatch is gone, that are empty and that
    /// this user's hangwatch made (`MemoryCgroup.removeOwnChild`: another user's of the same name
    /// stays): what a hangwatch killed before its watchdog could remove them left behind.
    static func removeCgroupsOfEndedRuns(in parent: MemoryCgroup) {
        for name in (try? FileManager.default.contentsOfDirectory(atPath: parent.path)) ?? [] where name.hasPrefix("hangwatch-") {
            let parts = name.dropFirst("hangwatch-".count).split(separator: ".")
            guard parts.count == 3, UUID(uuidString: String(parts[0])) != nil, let pid = Int32(parts[1]), let ticks = UInt64(parts[2]),
                  ProcFS.startTicks(of: pid) != ticks else { continue }
            parent.removeOwnChild(named: name)  // never another user's; refused (EBUSY) while processes are left in it
        }
    }

    /// A child still at its start gate that cannot be set up as asked: it is killed and reaped
    /// (it is ours and not reaped yet, so the pid is still its own), the reason is reported, and
    /// the exit status is 1.
    static func abandon(_ child: LaunchedChild, _ reason: String) throws -> Never {
        kill(child.pid, SIGKILL)
        var status: Int32 = 0
        _ = waitpid(child.pid, &status, 0)
        warn(reason)
        throw ExitCode(1)
    }

    /// hangwatch runs as the terminal's foreground job and the terminal is its stdin: an
    /// interactive command. Its child then stays in hangwatch's process group (see --help).
    static func isTerminalForegroundJob() -> Bool {
        isatty(STDIN_FILENO) == 1 && tcgetpgrp(STDIN_FILENO) == getpgrp()
    }
}

enum YesNo: String, ExpressibleByArgument, CaseIterable {
    case yes, no
}

func makeTemporaryDirectory() throws -> String {
    var base = ProcessInfo.processInfo.environment["TMPDIR"].flatMap { $0.hasPrefix("/") ? $0 : nil } ?? "/tmp"
    while base.count > 1 && base.hasSuffix("/") { base.removeLast() }
    var template = Array("\(base)/hangwatch.XXXXXX".utf8CString)
    guard template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) != nil else {
        throw SupervisorError.socket(base, String(cString: strerror(errno)))
    }
    return String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
}
