// The symbolicated report: what `show` prints, what is uploaded, what tools parse.
// docs/report-schema.md documents every key. Schema rule: within a schemaVersion only
// additive changes (new optional keys); anything else bumps the version.
// In memory the model is typed: addresses, offsets and register values are UInt64, times are
// seconds since 1970 (Double, the unit of ProcessSnapshot and Timestamp). The JSON spelling
// ("0x…" hex, ISO-8601 strings) lives only in the Codable conformances (ReportCoding.swift).
import HangwatchSymbolication
import HangwatchSnapshot
import FoundationEssentials

/// A symbolicated report: what every thread of a process was doing, and why it was captured
/// (docs/report-schema.md describes its JSON key by key).
public struct Report: Sendable, Equatable {
    /// What this build writes. Version 3 added the `killed` kind and `killed`; version 2 `runID`,
    /// `processTree` and `redacted`. Reports of versions 1 and 2 (which cannot have them) are still read.
    public static let currentSchemaVersion = 3
    /// Every version `decode(from:)` opens.
    public static let readableSchemaVersions = 1...3

    /// The schema version the report was written with (`readableSchemaVersions` are read).
    public var schemaVersion: Int
    /// A lowercase UUID, also the report's file name in the database.
    public var id: String
    /// Why the report exists.
    public var kind: ReportKind
    /// Capture time, seconds since 1970 UTC. The JSON keeps milliseconds ("2024-05-01T12:00:00.123Z"),
    /// and so does `ReportBuilder`, so a decoded report equals the one it was rendered from.
    public var timestamp: Double
    /// The dump was truncated or abandoned: what is here is real, later sections may be missing.
    public var incomplete: Bool
    /// The captured process.
    public var process: Process
    /// In capture order.
    public var threads: [Thread]
    /// The modules loaded at capture time.
    public var modules: [Module]
    /// Key/value pairs the program attached (`DumpClient.annotations`) and hangwatch's own
    /// (`capture.method`, `hang.outcome`, …).
    public var annotations: [String: String]
    /// The hang, for `hang` and `fatal-hang` reports.
    public var hang: Hang?
    /// The fatal signal, for `crash` reports.
    public var signal: Signal?
    /// How long capturing every thread took, seconds.
    public var captureDurationSeconds: Double
    /// What surrounded the capture (a superseded hang, a termination, the stderr tail).
    public var context: Context?
    /// Stacks sampled over time for a dump that asked for samples (`hangwatch dump --samples`).
    public var profile: Profile?
    /// The `hangwatch run` that made or watched this report (HANGWATCH_RUN_ID); schemaVersion 2.
    public var runID: String?
    /// The other processes of the tree this process was captured with, when a whole tree was
    /// captured (`hangwatch run`, `hangwatch dump --tree`); this report's process is its
    /// likely culprit. schemaVersion 2.
    public var processTree: ProcessTree?
    /// What this report leaves out (`arguments`, `key-values`, `stderr`, `stack-memory`, `kernel-log`;
    /// docs/report-schema.md); nil when nothing was. schemaVersion 2.
    public var redacted: [String]?
    /// Why and how the process was ended from outside, for `killed` reports. schemaVersion 3.
    public var killed: Killed?
    /// The process's Swift tasks, when they were read (docs/tasks.md). schemaVersion 3.
    public var tasks: Tasks?
    /// Groups of threads that wait for each other's locks (tids, in wait order), each a
    /// deadlock (docs/locks.md); nil when there is none. schemaVersion 3.
    public var lockCycles: [[Int32]]?

    /// A report; each parameter is the property of the same name.
    public init(schemaVersion: Int = Report.currentSchemaVersion, id: String, kind: ReportKind,
                timestamp: Double, incomplete: Bool = false, process: Process, threads: [Thread],
                modules: [Module], annotations: [String: String] = [:], hang: Hang? = nil,
                signal: Signal? = nil, captureDurationSeconds: Double = 0, context: Context? = nil) {
        self.schemaVersion = schemaVersion
        self.id = id
        self.kind = kind
        self.timestamp = timestamp
        self.incomplete = incomplete
        self.process = process
        self.threads = threads
        self.modules = modules
        self.annotations = annotations
        self.hang = hang
        self.signal = signal
        self.captureDurationSeconds = captureDurationSeconds
        self.context = context
        self.profile = nil
        self.runID = nil
        self.processTree = nil
        self.redacted = nil
        self.killed = nil
        self.tasks = nil
        self.lockCycles = nil
    }

    /// Every live Swift task of the process, read out of its memory (docs/tasks.md).
    public struct Tasks: Codable, Sendable, Equatable {
        /// The tasks found, suspended ones with the longest-unchanged first when samples said so.
        public var tasks: [Task]
        /// Groups of tasks that await each other in a circle (task ids), each a deadlock.
        public var cycles: [[UInt64]]
        /// Bytes of memory scanned (the pages the process uses), and how long the reading took.
        public var scannedBytes: UInt64
        /// See `scannedBytes`.
        public var durationSeconds: Double
        /// More tasks than the limit (20,000): the rest are not listed.
        public var truncated: Bool
        /// Why no task could be read, when none could.
        public var error: String?
        /// The runtime that was read.
        public var runtime: String?
        /// Bytes of writable anonymous memory the process never touched, not read (absent: none,
        /// or a report from before hangwatch told them apart).
        public var untouchedBytes: UInt64?
        /// Bytes that may hold tasks but were not read (the bound of bytes read, the deadline);
        /// absent when every page in use was read.
        public var unreadBytes: UInt64?
        /// Why memory was left unread, in words; absent when all was read.
        public var unread: String?

        /// A reading; each parameter is the property of the same name.
        public init(tasks: [Task], cycles: [[UInt64]] = [], scannedBytes: UInt64, durationSeconds: Double, truncated: Bool,
                    error: String? = nil, runtime: String? = nil, untouchedBytes: UInt64? = nil, unreadBytes: UInt64? = nil,
                    unread: String? = nil) {
            self.untouchedBytes = untouchedBytes
            self.unreadBytes = unreadBytes
            self.unread = unread
            self.tasks = tasks
            self.cycles = cycles
            self.scannedBytes = scannedBytes
            self.durationSeconds = durationSeconds
            self.truncated = truncated
            self.error = error
            self.runtime = runtime
        }
    }

    /// One Swift task and where it waits: the reading's `TaskInfo` (read through this type:
    /// `task.id`, `task.state`, …), its links as task ids and its await chain, symbolicated.
    @dynamicMemberLookup
    public struct Task: Sendable, Equatable {
        /// Who the task is and its state, as read.
        public var info: TaskInfo
        /// The id of its parent task (a child task's).
        public var parentID: UInt64?
        /// What it waits on: `task`, `continuation`, `group` or `executor`.
        public var waitingOn: String?
        /// The id of the task it awaits, when it awaits a task that was read too.
        public var waitingOnTaskID: UInt64?
        /// Its await chain, innermost first: the functions it resumes in when it resumes.
        public var frames: [Frame]
        /// Seconds its await chain stayed the same across `hangwatch dump --samples` (at least).
        public var unchangedSeconds: Double?
        /// The operation (`HangMonitor.watch`) this task ran, in the report of that operation's hang.
        public var operation: String?
        /// That operation's W3C traceparent, when the monitor had a trace link (docs/traces.md).
        public var traceparent: String?

        /// A task; each parameter is the property of the same name (a `traceparent` not of the
        /// W3C form is dropped).
        public init(info: TaskInfo, parentID: UInt64? = nil, waitingOn: String? = nil, waitingOnTaskID: UInt64? = nil,
                    frames: [Frame], unchangedSeconds: Double? = nil, operation: String? = nil, traceparent: String? = nil) {
            self.info = info
            self.parentID = parentID
            self.waitingOn = waitingOn
            self.waitingOnTaskID = waitingOnTaskID
            self.frames = frames
            self.unchangedSeconds = unchangedSeconds
            self.operation = operation
            self.traceparent = traceparent.flatMap(Traceparent.validated)
        }

        /// The `info` field of that name.
        public subscript<Value>(dynamicMember keyPath: WritableKeyPath<TaskInfo, Value>) -> Value {
            get { info[keyPath: keyPath] }
            set { info[keyPath: keyPath] = newValue }
        }
    }

    /// A process ended from outside: what ended it as far as it is known, and the last state it
    /// was seen in (docs/killed.md says how sure each cause is).
    public struct Killed: Sendable, Equatable {
        /// What ended it.
        public var cause: KillCause
        /// The signal it died of (`SIGKILL`), when known.
        public var signal: String?
        /// One sentence: what is known of the kill, and how sure.
        public var explanation: String
        /// The facts the cause rests on, one per line (the memory cgroup's counter, the kernel's
        /// log line, the exit status).
        public var evidence: [String]
        /// When the process (or its run record) started, seconds since 1970.
        public var startTime: Double?
        /// The last time it was known alive (its last heartbeat or sample), seconds since 1970:
        /// it was killed after this.
        public var lastSeenAlive: Double?
        /// Its memory cgroup, when it had one to read.
        public var memoryCgroup: MemoryCgroupState?
        /// Its last states, oldest first (a bounded ring written at a low rate).
        public var samples: [StateSample]
        /// The last liveness message `hangwatch run` had from it.
        public var lastLiveness: String?

        /// A kill; each parameter is the property of the same name.
        public init(cause: KillCause, signal: String? = nil, explanation: String, evidence: [String] = [],
                    startTime: Double? = nil, lastSeenAlive: Double? = nil, memoryCgroup: MemoryCgroupState? = nil,
                    samples: [StateSample] = [], lastLiveness: String? = nil) {
            self.cause = cause
            self.signal = signal
            self.explanation = explanation
            self.evidence = evidence
            self.startTime = startTime
            self.lastSeenAlive = lastSeenAlive
            self.memoryCgroup = memoryCgroup
            self.samples = samples
            self.lastLiveness = lastLiveness
        }
    }

    /// A memory cgroup as a killed process left it.
    public struct MemoryCgroupState: Codable, Sendable, Equatable {
        /// Its directory, e.g. `/sys/fs/cgroup/memory/job`.
        public var path: String
        /// Its limit, bytes; nil when unlimited.
        public var limitBytes: UInt64?
        /// The most it used, bytes, when the kernel says.
        public var peakBytes: UInt64?
        /// Its OOM-kill counter when the process was last seen alive, and after it died.
        public var oomKillsBefore: UInt64?
        /// See `oomKillsBefore`.
        public var oomKillsAfter: UInt64?

        /// A cgroup's state; each parameter is the property of the same name.
        public init(path: String, limitBytes: UInt64? = nil, peakBytes: UInt64? = nil, oomKillsBefore: UInt64? = nil,
                    oomKillsAfter: UInt64? = nil) {
            self.path = path
            self.limitBytes = limitBytes
            self.peakBytes = peakBytes
            self.oomKillsBefore = oomKillsBefore
            self.oomKillsAfter = oomKillsAfter
        }
    }

    /// One state of a process, sampled while it ran.
    public struct StateSample: Sendable, Equatable {
        /// Seconds since 1970.
        public var time: Double
        /// Resident memory, bytes.
        public var residentBytes: UInt64
        /// Its thread count.
        public var threads: Int
        /// The hangs in progress (targets), when a HangMonitor wrote the sample.
        public var hangs: [String]?

        /// A sample; each parameter is the property of the same name.
        public init(time: Double, residentBytes: UInt64, threads: Int, hangs: [String]? = nil) {
            self.time = time
            self.residentBytes = residentBytes
            self.threads = threads
            self.hangs = hangs
        }
    }

    /// A process tree captured together: who is in it, who is the likely culprit, and what the
    /// capture's limits left out.
    public struct ProcessTree: Codable, Sendable, Equatable {
        /// The process the tree was captured from (the `hangwatch run` child, the `--pid`).
        public var rootPID: Int32
        /// The likely culprit: the report's own process. nil when none could be captured.
        public var culpritPID: Int32?
        /// Why that process, in a few words.
        public var culpritReason: String
        /// Live processes found in the tree; more than `processes` holds when the walk was cut.
        public var processesFound: Int
        /// The limits the capture ran with.
        public var maxProcesses: Int
        /// The time the tree's walk and captures were allowed, seconds.
        public var timeBudgetSeconds: Double
        /// A process with more threads is listed, not captured; nil in reports before the limit.
        public var maxThreadsPerProcess: Int?
        /// Threads captured in all at most.
        public var maxThreads: Int?
        /// The root first, then its descendants nearest first.
        public var processes: [TreeProcess]

        /// A process tree; each parameter is the property of the same name.
        public init(rootPID: Int32, culpritPID: Int32?, culpritReason: String, processesFound: Int, maxProcesses: Int,
                    timeBudgetSeconds: Double, maxThreadsPerProcess: Int? = nil, maxThreads: Int? = nil,
                    processes: [TreeProcess]) {
            self.rootPID = rootPID
            self.culpritPID = culpritPID
            self.culpritReason = culpritReason
            self.processesFound = processesFound
            self.maxProcesses = maxProcesses
            self.timeBudgetSeconds = timeBudgetSeconds
            self.maxThreadsPerProcess = maxThreadsPerProcess
            self.maxThreads = maxThreads
            self.processes = processes
        }
    }

    /// One process of a captured tree.
    public struct TreeProcess: Codable, Sendable, Equatable {
        /// Its process id.
        public var pid: Int32
        /// 0 for the root.
        public var parentPID: Int32
        /// 0 for the root, 1 for its children, …
        public var depth: Int
        /// Its `comm` (the kernel's 15-byte name).
        public var name: String
        /// Its executable's path, when it could be read.
        public var executable: String?
        /// Its command line after the program (bounded; redacted when asked).
        public var arguments: [String]
        /// waiting, asleep, blocked, running, stuck or unknown (see docs/report-schema.md).
        public var activity: String
        /// Why the process has no threads here (a limit, gone, not allowed to trace).
        public var captureError: String?
        /// nil for the report's own process (its threads are the report's `threads`) and for
        /// processes that were not captured.
        public var threads: [Thread]?
        /// Its modules, for captured processes other than the report's own.
        public var modules: [Module]?

        /// A process of the tree; each parameter is the property of the same name.
        public init(pid: Int32, parentPID: Int32, depth: Int, name: String, executable: String? = nil,
                    arguments: [String], activity: String, captureError: String? = nil, threads: [Thread]? = nil,
                    modules: [Module]? = nil) {
            self.pid = pid
            self.parentPID = parentPID
            self.depth = depth
            self.name = name
            self.executable = executable
            self.arguments = arguments
            self.activity = activity
            self.captureError = captureError
            self.threads = threads
            self.modules = modules
        }
    }

    /// Who the captured process was: the snapshot's identity, as captured.
    public typealias Process = ProcessIdentity

    /// One thread of the captured process: what capture knew of it (`info`, read through this
    /// type: `thread.tid`, `thread.state`, …) and its stack, symbolicated.
    @dynamicMemberLookup
    public struct Thread: Sendable, Equatable {
        /// Who the thread is and what it was doing, as captured.
        public var info: ThreadInfo
        /// Register name (`Registers.names` of the capturing machine) → value; nil when the stack
        /// could not be obtained. The JSON spells every value "0x%016x" (a JSON number could not
        /// hold all 64 bits).
        public var registers: [String: UInt64]?
        /// Its stack, innermost first; empty when it could not be obtained (`status` says why).
        public var frames: [Frame]
        /// The name of the system call `syscall` numbers ("futex"), on the architecture that made
        /// the report; nil when it was in none, or in reports from before the name was kept.
        public var syscallName: String?

        /// A thread; each parameter is the property of the same name.
        public init(info: ThreadInfo, registers: [String: UInt64]? = nil, frames: [Frame], syscallName: String? = nil) {
            self.info = info
            self.registers = registers
            self.frames = frames
            self.syscallName = syscallName
        }

        /// The `info` field of that name.
        public subscript<Value>(dynamicMember keyPath: WritableKeyPath<ThreadInfo, Value>) -> Value {
            get { info[keyPath: keyPath] }
            set { info[keyPath: keyPath] = newValue }
        }
    }

    /// One symbolicated stack frame (an address can give several, when functions were inlined).
    public struct Frame: Sendable, Equatable {
        /// Position of the captured address in the stack (0 = pc). Inlined frames share the
        /// index of the address they were expanded from, innermost first.
        public var index: Int
        /// The captured address (JSON: "0x%016x").
        public var address: UInt64
        /// Module path; nil when no loaded module contains the address.
        public var module: String?
        /// Address minus the module's load bias, what `addr2line -e module` takes (JSON: "0x" + minimal hex).
        public var moduleOffset: UInt64?
        /// Demangled function name; nil when unknown.
        public var function: String?
        /// Bytes from the start of the function's symbol; nil for inlined frames and unknown functions.
        public var offset: UInt64?
        /// Source file of the frame, when the module has line information.
        public var file: String?
        /// Line in `file`.
        public var line: Int?
        /// Column in `line`, when recorded.
        public var column: Int?
        /// This function was inlined into the next frame.
        public var inlined: Bool
        /// Why the function is unknown although the module is (build-id mismatch, missing file).
        public var symbolsUnavailable: String?

        /// A frame; each parameter is the property of the same name.
        public init(index: Int, address: UInt64, module: String? = nil, moduleOffset: UInt64? = nil,
                    function: String? = nil, offset: UInt64? = nil, file: String? = nil, line: Int? = nil,
                    column: Int? = nil, inlined: Bool = false, symbolsUnavailable: String? = nil) {
            self.index = index
            self.address = address
            self.module = module
            self.moduleOffset = moduleOffset
            self.function = function
            self.offset = offset
            self.file = file
            self.line = line
            self.column = column
            self.inlined = inlined
            self.symbolsUnavailable = symbolsUnavailable
        }
    }

    /// A module loaded at capture time: the snapshot's module (`snapshot`, read through this
    /// type: `module.path`, `module.base`, …) and how symbolication found its symbols.
    @dynamicMemberLookup
    public struct Module: Sendable, Equatable {
        /// The module as capture found it.
        public var snapshot: ModuleSnapshot
        /// ok, unverified, debug-file, mismatched, missing (see `ModuleResolution.name`).
        public var symbols: String?
        /// The file symbols were read from when it is not `path` (a separate debug file).
        public var symbolFile: String?
        /// What symbolication of this module left out, and why, when it reached one of its
        /// bounds (a compilation unit too large to index: its frames have no inline frames).
        public var symbolsNote: String?

        /// A module; each parameter is the property of the same name.
        public init(snapshot: ModuleSnapshot, symbols: String? = nil, symbolFile: String? = nil, symbolsNote: String? = nil) {
            self.snapshot = snapshot
            self.symbols = symbols
            self.symbolFile = symbolFile
            self.symbolsNote = symbolsNote
        }

        /// The `snapshot` field of that name.
        public subscript<Value>(dynamicMember keyPath: WritableKeyPath<ModuleSnapshot, Value>) -> Value {
            get { snapshot[keyPath: keyPath] }
            set { snapshot[keyPath: keyPath] = newValue }
        }
    }

    /// A hang: what stopped answering, for how long, and the samples of its hung threads.
    public struct Hang: Sendable, Equatable {
        /// What stopped answering (JSON: its name, "main-queue", "queue:<label>", "cooperative-pool", …).
        public var target: HangTarget
        /// How late a ping had to be to count as a hang, seconds.
        public var thresholdSeconds: Double
        /// How long the hang lasted, seconds (at least this long for a fatal hang).
        public var durationSeconds: Double
        /// Whether the target answered again before the report was made.
        public var recovered: Bool
        /// Total number of stack samples taken while the hang lasted.
        public var samples: Int
        /// Seconds since 1970 UTC, millisecond resolution like `Report.timestamp` (JSON: ISO-8601).
        public var startTime: Double
        /// Threads the samples were taken from.
        public var sampledThreads: [Int32]
        /// The distinct sampled stacks, most frequent first (ties by their folded text); JSON:
        /// `foldedStacks`, one "root;…;leaf count" line each.
        public var stacks: [SampledStack]
        /// The watched operations (`HangMonitor.watch`) running when the hang was detected, the
        /// longest-running first (JSON: absent when none). schemaVersion 3, additive.
        public var operations: [Operation]

        /// A hang; each parameter is the property of the same name.
        public init(target: HangTarget, thresholdSeconds: Double, durationSeconds: Double, recovered: Bool,
                    samples: Int, startTime: Double, sampledThreads: [Int32] = [], stacks: [SampledStack],
                    operations: [Operation] = []) {
            self.target = target
            self.thresholdSeconds = thresholdSeconds
            self.durationSeconds = durationSeconds
            self.recovered = recovered
            self.samples = samples
            self.startTime = startTime
            self.sampledThreads = sampledThreads
            self.stacks = stacks
            self.operations = operations
        }

        /// A watched operation (a request, a job) running when the hang was detected.
        public struct Operation: Sendable, Equatable {
            /// Its name (`GET /users/:id`), at most 256 bytes.
            public var name: String
            /// When it began, seconds since 1970 UTC (millisecond resolution).
            public var startTime: Double
            /// The limit it was watched with, seconds.
            public var limitSeconds: Double
            /// The id of the task running it, when the tasks were read and it was among them.
            public var taskID: UInt64?
            /// The thread it began on.
            public var thread: Int32
            /// The hung thread was serving it: it began on a hung thread, and its task was not
            /// suspended elsewhere when the hang was captured.
            public var onHungThread: Bool
            /// Its request's W3C traceparent, when the monitor had a trace link (docs/traces.md).
            public var traceparent: String?

            /// An operation; each parameter is the property of the same name (a `traceparent`
            /// not of the W3C form is dropped).
            public init(name: String, startTime: Double, limitSeconds: Double, taskID: UInt64? = nil, thread: Int32,
                        onHungThread: Bool, traceparent: String? = nil) {
                self.name = name
                self.startTime = startTime
                self.limitSeconds = limitSeconds
                self.taskID = taskID
                self.thread = thread
                self.onHungThread = onHungThread
                self.traceparent = traceparent.flatMap(Traceparent.validated)
            }
        }
    }

    /// One distinct stack among a hang's or a profile's samples, and how many samples had it.
    public struct SampledStack: Sendable, Equatable {
        /// Frame names, the root first and the leaf last: the function, else module+offset, else
        /// the address (never holding `;` or a line break, which the folded form reserves).
        public var frames: [String]
        /// How many samples had exactly this stack.
        public var count: Int

        /// A stack; each parameter is the property of the same name.
        public init(frames: [String], count: Int) {
            self.frames = frames
            self.count = count
        }
    }

    /// A fatal signal: the crash handler's `SignalInfo` (read through this type: `signal.number`,
    /// `signal.tid`, …) and its names.
    @dynamicMemberLookup
    public struct Signal: Sendable, Equatable {
        /// The signal as caught.
        public var info: SignalInfo
        /// SIGSEGV, SIGILL, … ("SIG<number>" when unknown).
        public var name: String
        /// SEGV_MAPERR, SI_USER, … when known.
        public var codeName: String?

        /// A signal; each parameter is the property of the same name.
        public init(info: SignalInfo, name: String, codeName: String? = nil) {
            self.info = info
            self.name = name
            self.codeName = codeName
        }

        /// The `info` field of that name.
        public subscript<Value>(dynamicMember keyPath: WritableKeyPath<SignalInfo, Value>) -> Value {
            get { info[keyPath: keyPath] }
            set { info[keyPath: keyPath] = newValue }
        }
    }

    /// Facts about what surrounded the capture, attached by whoever processes the dump.
    public struct Context: Codable, Sendable, Equatable {
        /// A hang that was in progress when this (crash) report superseded it.
        public var supersededHang: SupersededHang?
        /// Why the process ended when something outside ended it, e.g. a watchdog kill.
        public var termination: Termination?
        /// The last bytes the process wrote to stderr before the report (application-specific
        /// information), decoded as UTF-8 with invalid bytes replaced.
        public var stderrTail: String?
        /// Processes of the job `hangwatch run` was not allowed to signal (EPERM: a setuid
        /// program): they may have outlived it. schemaVersion 2.
        public var unkillableProcesses: [UnkillableProcess]?

        /// Context; each parameter is the property of the same name.
        public init(supersededHang: SupersededHang? = nil, termination: Termination? = nil, stderrTail: String? = nil,
                    unkillableProcesses: [UnkillableProcess]? = nil) {
            self.supersededHang = supersededHang
            self.termination = termination
            self.stderrTail = stderrTail
            self.unkillableProcesses = unkillableProcesses
        }
    }

    /// A process `hangwatch run` could not signal.
    public struct UnkillableProcess: Codable, Sendable, Equatable {
        /// Its process id.
        public var pid: Int32
        /// Its `comm`.
        public var name: String
        /// A process; each parameter is the property of the same name.
        public init(pid: Int32, name: String) {
            self.pid = pid
            self.name = name
        }
    }

    /// How something outside ended the process.
    public struct Termination: Codable, Sendable, Equatable {
        /// "watchdog-kill" (killed for hanging) or "timeout" (a deadline expired).
        public var reason: String
        /// "0x8badf00d" for watchdog kills, as Apple's crash reports spell a watchdog termination.
        public var code: String
        /// The signal that was sent, e.g. "SIGKILL".
        public var signal: String
        /// How long the process had been hung when it was killed.
        public var hungSeconds: Double

        /// A termination; each parameter is the property of the same name.
        public init(reason: String, code: String, signal: String, hungSeconds: Double) {
            self.reason = reason
            self.code = code
            self.signal = signal
            self.hungSeconds = hungSeconds
        }

        /// Why `hangwatch run` killed a process: the `reason` it writes, spelled here only.
        package enum Kind: String {
            /// Killed for hanging (`--kill-after`).
            case watchdogKill = "watchdog-kill"
            /// A deadline expired (`--timeout`).
            case timeout
        }

        /// The code `hangwatch run` writes with every kill: Apple's spelling of a watchdog termination.
        package static let watchdogCode = "0x8badf00d"

        /// `hangwatch run`'s kill of a process, `signal` sent after it hung `hungSeconds`.
        package init(_ kind: Kind, signal: String, hungSeconds: Double) {
            self.init(reason: kind.rawValue, code: Self.watchdogCode, signal: signal, hungSeconds: hungSeconds)
        }
    }

    /// Stacks sampled over time (`hangwatch dump --samples N --interval MS`).
    public struct Profile: Sendable, Equatable {
        /// How many samples were taken.
        public var samples: Int
        /// Time between two samples, seconds.
        public var intervalSeconds: Double
        /// The threads sampled.
        public var sampledThreads: [Int32]
        /// The distinct sampled stacks, most frequent first; JSON: `foldedStacks`, as for a hang.
        public var stacks: [SampledStack]

        /// A profile; each parameter is the property of the same name.
        public init(samples: Int, intervalSeconds: Double, sampledThreads: [Int32], stacks: [SampledStack]) {
            self.samples = samples
            self.intervalSeconds = intervalSeconds
            self.sampledThreads = sampledThreads
            self.stacks = stacks
        }
    }

    /// A hang staged when the process crashed, which the crash report took over.
    public struct SupersededHang: Sendable, Equatable {
        /// What had stopped answering.
        public var target: HangTarget
        /// Its threshold, seconds.
        public var thresholdSeconds: Double
        /// How long the hang had lasted when the crash happened.
        public var durationSeconds: Double
        /// Seconds since 1970 UTC, millisecond resolution like `Report.timestamp` (JSON: ISO-8601).
        public var startTime: Double
        /// The staged hang dump's id, when it had one.
        public var reportID: String?

        /// A superseded hang; each parameter is the property of the same name.
        public init(target: HangTarget, thresholdSeconds: Double, durationSeconds: Double, startTime: Double,
                    reportID: String? = nil) {
            self.target = target
            self.thresholdSeconds = thresholdSeconds
            self.durationSeconds = durationSeconds
            self.startTime = startTime
            self.reportID = reportID
        }
    }
}
