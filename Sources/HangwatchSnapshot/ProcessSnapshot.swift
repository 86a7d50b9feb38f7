// The narrow type between pipeline stages: capture produces a `ProcessSnapshot`, the
// intermediate-dump writer serialises one, the reader gives one back (possibly marked
// incomplete), and processing turns one into a `Report`. Addresses stay raw here;
// symbolication happens only at processing time.

import CHangwatchDump

/// Why a snapshot was taken.
package enum CaptureReason: Sendable, Equatable {
    /// `dumpWithoutCrash` and friends: the program asked for it.
    case dumpRequested
    /// A watchdog saw a target stop answering.
    case hang(HangInfo)
    /// A fatal signal.
    case crash(SignalInfo)
    /// Something outside ended the process (the OOM killer, an outside SIGKILL…): nothing was
    /// captured at the kill; the snapshot holds who it was (docs/killed.md).
    case killed(KillInfo)
}

/// Why something outside ended a process, as far as it is known (docs/killed.md).
package struct KillInfo: Sendable, Equatable {
    /// The signal it died of, when known (`hangwatch run` sees it; a run record does not).
    package var signal: Int32?
    /// What ended it.
    package var cause: KillCause

    /// A kill; each parameter is the property of the same name.
    package init(signal: Int32?, cause: KillCause) {
        self.signal = signal
        self.cause = cause
    }
}

/// What ended a process from outside.
public enum KillCause: String, Sendable, Equatable, Codable, CaseIterable {
    /// An OOM killer: its memory cgroup counted an OOM kill since it was last seen alive, or the
    /// kernel log names it.
    case oom
    /// A signal it did not catch, from another process (`kill -9`, a supervisor's stop timeout)
    /// with no OOM kill counted: what `hangwatch run` knows when its child dies of a signal
    /// hangwatch did not send.
    case signal
    /// It ended without a clean close, a crash or a fatal hang, and nothing shows why.
    case unknown
}

/// A hang as the monitor saw it: what hung, for how long, how it ended, and its samples.
public struct HangInfo: Sendable, Equatable {
    /// What stopped answering.
    public var target: HangTarget
    /// How late a ping had to be to count as a hang.
    public var thresholdSeconds: Double
    /// How long the hang had lasted when this snapshot was last updated.
    public var durationSeconds: Double
    /// How it ended, as far as its capturer knows (`ongoing` while it lasts).
    public var outcome: HangOutcome
    /// Wall-clock time the hang started, seconds since 1970.
    public var startTime: Double
    /// Stacks of the hung thread sampled while the hang lasted, aggregated by identical stack.
    public var samples: [StackSample]
    /// The watched operations (`HangMonitor.watch`) running when the hang was detected.
    public var operations: [RunningOperation]

    /// Whether the target answered again (`outcome` is `recovered`).
    public var recovered: Bool { outcome.recovered }

    /// A hang; each parameter is the property of the same name.
    public init(target: HangTarget, thresholdSeconds: Double, durationSeconds: Double, outcome: HangOutcome,
                startTime: Double, samples: [StackSample] = [], operations: [RunningOperation] = []) {
        self.target = target
        self.thresholdSeconds = thresholdSeconds
        self.durationSeconds = durationSeconds
        self.outcome = outcome
        self.startTime = startTime
        self.samples = samples
        self.operations = operations
    }
}

/// A watched operation (`HangMonitor.watch`: a request, a job) that was running when a hang was
/// detected.
public struct RunningOperation: Sendable, Equatable {
    /// Its name (`GET /users/:id`), at most `maximumNameBytes`.
    public var name: String
    /// Wall-clock time it began, seconds since 1970.
    public var startTime: Double
    /// The limit it was watched with, seconds.
    public var limitSeconds: Double
    /// The address of the Swift task that runs it (0: none).
    public var task: UInt64
    /// The thread it began on. Its task may have moved since, at an `await`.
    public var thread: Int32
    /// The W3C traceparent of the request's trace (`00-<trace id>-<span id>-<flags>`), when
    /// the monitor has a trace link (docs/traces.md); nil otherwise.
    public var traceparent: String?

    /// The longest name kept (longer ones are cut at a character boundary).
    public static let maximumNameBytes = 256
    /// The most operations a hang keeps (the longest-running ones).
    public static let maximumCount = 64

    /// An operation; each parameter is the property of the same name (`name` cut to
    /// `maximumNameBytes`; a `traceparent` not of the W3C form is dropped).
    public init(name: String, startTime: Double, limitSeconds: Double, task: UInt64, thread: Int32, traceparent: String? = nil) {
        self.name = name.utf8.count <= Self.maximumNameBytes ? name : Self.cut(name)
        self.startTime = startTime
        self.limitSeconds = limitSeconds
        self.task = task
        self.thread = thread
        self.traceparent = traceparent.flatMap(Traceparent.validated)
    }

    private static func cut(_ name: String) -> String {
        var kept = ""
        for character in name {
            guard kept.utf8.count + String(character).utf8.count <= maximumNameBytes else { break }
            kept.append(character)
        }
        return kept
    }
}

/// One stack of a hung thread and how many samples had exactly it.
public struct StackSample: Sendable, Equatable {
    /// The sampled thread.
    public var tid: Int32
    /// frames[0] is the program counter; the rest are return addresses.
    public var frames: [UInt64]
    /// How many samples had exactly this stack.
    public var count: Int

    /// A sample; each parameter is the property of the same name.
    public init(tid: Int32, frames: [UInt64], count: Int) {
        self.tid = tid
        self.frames = frames
        self.count = count
    }
}

/// A fatal signal as the crash handler caught it (a report adds its names: `Report.Signal`).
public struct SignalInfo: Sendable, Equatable {
    /// The signal number.
    public var number: Int32
    /// `si_code`.
    public var code: Int32
    /// The faulting address.
    public var address: UInt64
    /// The thread that received the fatal signal.
    public var tid: Int32
    /// `fatalError`-style message when the runtime exposed one.
    public var message: String?

    /// A signal; each parameter is the property of the same name.
    public init(number: Int32, code: Int32, address: UInt64, tid: Int32, message: String? = nil) {
        self.number = number
        self.code = code
        self.address = address
        self.tid = tid
        self.message = message
    }
}

/// Who the captured process was (`process` in a report's JSON, docs/report-schema.md).
public struct ProcessIdentity: Codable, Sendable, Equatable {
    /// Its process id (in the capturing process's pid namespace).
    public var pid: Int32
    /// Its `comm`.
    public var name: String
    /// The path of its executable (resolved `/proc/PID/exe`).
    public var executable: String
    /// Its command line after the program (bounded; redacted when asked).
    public var arguments: [String]
    /// The bundle id the dump was made under (for a process captured from outside, the one asked
    /// for, else its `comm`).
    public var bundleID: String

    /// A process; each parameter is the property of the same name.
    public init(pid: Int32, name: String, executable: String, arguments: [String], bundleID: String) {
        self.pid = pid
        self.name = name
        self.executable = executable
        self.arguments = arguments
        self.bundleID = bundleID
    }
}

/// What a thread was doing for the capture: the roles a report names it by.
public struct ThreadRoles: OptionSet, Sendable, Hashable {
    /// The roles as bits (the dump format's encoding).
    public let rawValue: UInt32
    /// The roles `rawValue` holds.
    public init(rawValue: UInt32) { self.rawValue = rawValue }

    /// tid == pid.
    public static let mainThread = ThreadRoles(rawValue: 1 << 0)
    /// Was draining the main Dispatch queue when captured (a pool thread under
    /// `dispatchMain()` and `async main`, the main thread under `RunLoop.main.run()`).
    public static let mainQueue = ThreadRoles(rawValue: 1 << 1)
    /// The thread a watchdog found not answering.
    public static let hung = ThreadRoles(rawValue: 1 << 2)
    /// Received the fatal signal.
    public static let crashed = ThreadRoles(rawValue: 1 << 3)
    /// Asked for the capture (its stack shows the capture call itself).
    public static let requester = ThreadRoles(rawValue: 1 << 4)

    /// Names as they appear in reports (`roles` in the JSON), in a fixed order: spelled here only.
    public static let names: [(ThreadRoles, String)] = [
        (.mainThread, "main-thread"), (.mainQueue, "main-queue"), (.hung, "hung"),
        (.crashed, "crashed"), (.requester, "requester"),
    ]
    /// The names of the roles in this set, in `names`' order.
    public var names: [String] { Self.names.filter { contains($0.0) }.map(\.1) }

    /// The roles `names` spell; names this build does not know are left out.
    public init(names: [String]) {
        self = []
        for (role, name) in Self.names where names.contains(name) { insert(role) }
    }
}

/// How (or whether) a thread's stack was obtained.
public enum ThreadCaptureStatus: UInt32, Sendable, Equatable, CaseIterable {
    /// Unwound from its own signal context (or, for the requester, from its own stack).
    case captured = 0
    /// Blocks every signal capture could use; only its /proc data is known.
    case unreachable = 1
    /// Was signalled but did not answer within the capture timeout.
    case timedOut = 2
    /// Exited between enumeration and signalling.
    case exited = 3
    /// Stopped from outside with ptrace and unwound remotely.
    case ptrace = 4

    /// As reports spell it (`status` in the JSON): spelled here only.
    public var name: String {
        switch self {
        case .captured: return "captured"
        case .unreachable: return "unreachable"
        case .timedOut: return "timed-out"
        case .exited: return "exited"
        case .ptrace: return "ptrace"
        }
    }

    /// The status `name` spells; nil for a name this build does not know.
    public init?(name: String) {
        guard let status = Self.allCases.first(where: { $0.name == name }) else { return nil }
        self = status
    }
}

/// General-purpose registers in the order the capture slots and the dump format store them:
/// one layout per architecture, owned by Sources/CHangwatchDump/include/hw_registers.h.
package struct Registers: Sendable, Equatable {
    /// The layout's names, in order, as hw_registers.h spells them (HW_REGISTER_NAMES).
    package static let names: [String] = (0..<Int(HW_REGISTER_COUNT)).map { String(cString: hwd_register_name(Int32($0))) }
    /// Same count and order as `names`.
    package var values: [UInt64]

    package init(values: [UInt64]) {
        precondition(values.count == Self.names.count, "the register set has \(Self.names.count) values")
        self.values = values
    }

    package subscript(name: String) -> UInt64? {
        Self.names.firstIndex(of: name).map { values[$0] }
    }
    package var pc: UInt64 { values[Int(HW_REGISTER_PC)] }
    package var sp: UInt64 { values[Int(HW_REGISTER_SP)] }
}

/// CPU time a thread had used at capture, seconds.
public struct CPUTime: Codable, Sendable, Equatable {
    /// In user mode.
    public var user: Double
    /// In the kernel.
    public var system: Double
    /// CPU times; each parameter is the property of the same name.
    public init(user: Double, system: Double) {
        self.user = user
        self.system = system
    }
}

/// What capture knows of a thread besides its stack: who it is, its state, what it was doing.
/// A snapshot's thread (`ThreadSnapshot`) and a report's (`Report.Thread`) are each one of these
/// plus their own form of the stack.
public struct ThreadInfo: Sendable, Equatable {
    /// Its kernel thread id.
    public var tid: Int32
    /// Its name (`comm` of the thread, `/proc/PID/task/TID/comm`).
    public var name: String
    /// Its scheduling state (`/proc/PID/task/TID/stat`): R, S, D, T, t, Z, …
    public var state: ThreadState
    /// First line of `/proc/PID/task/TID/syscall` ("running", "-1 …", or "NR args… sp pc").
    public var syscall: String?
    /// CPU time it had used.
    public var cpuSeconds: CPUTime
    /// What it was doing for the capture.
    public var roles: ThreadRoles
    /// How its stack was obtained.
    public var status: ThreadCaptureStatus
    /// The Dispatch queue it was draining, when it was one.
    public var queueLabel: String?
    /// The lock it was blocked on and who held it, when it was blocked on one (docs/locks.md).
    public var lockWait: LockWait?

    /// A thread; each parameter is the property of the same name.
    public init(tid: Int32, name: String, state: ThreadState, syscall: String? = nil, cpuSeconds: CPUTime,
                roles: ThreadRoles, status: ThreadCaptureStatus, queueLabel: String? = nil, lockWait: LockWait? = nil) {
        self.lockWait = lockWait
        self.tid = tid
        self.name = name
        self.state = state
        self.syscall = syscall
        self.cpuSeconds = cpuSeconds
        self.roles = roles
        self.status = status
        self.queueLabel = queueLabel
    }
}

/// A captured thread: its `ThreadInfo` (read through this type, `thread.tid`) and its raw stack.
@dynamicMemberLookup
package struct ThreadSnapshot: Sendable, Equatable {
    /// 16 KiB from each thread's stack pointer up: enough for the innermost frames a minidump
    /// reader re-unwinds, while 512 threads stay at 8 MiB of dump. Both capture paths default to it.
    package static let defaultStackMemoryBytes = 16 * 1024

    /// Who the thread is and what it was doing.
    package var info: ThreadInfo
    /// nil when the stack could not be obtained.
    package var registers: Registers?
    /// frames[0] is the program counter; the rest are return addresses.
    package var frames: [UInt64]
    /// Bytes of the stack from the stack pointer up (bounded window), for minidumps.
    package var stackMemory: [UInt8]

    package init(info: ThreadInfo, registers: Registers? = nil, frames: [UInt64] = [], stackMemory: [UInt8] = []) {
        self.info = info
        self.registers = registers
        self.frames = frames
        self.stackMemory = stackMemory
    }

    package init(tid: Int32, name: String, state: ThreadState, syscall: String? = nil,
                userCPUSeconds: Double = 0, systemCPUSeconds: Double = 0, roles: ThreadRoles = [],
                status: ThreadCaptureStatus, registers: Registers? = nil, frames: [UInt64] = [],
                queueLabel: String? = nil, stackMemory: [UInt8] = []) {
        self.init(info: ThreadInfo(tid: tid, name: name, state: state, syscall: syscall,
                                   cpuSeconds: CPUTime(user: userCPUSeconds, system: systemCPUSeconds),
                                   roles: roles, status: status, queueLabel: queueLabel),
                  registers: registers, frames: frames, stackMemory: stackMemory)
    }

    package subscript<Value>(dynamicMember keyPath: WritableKeyPath<ThreadInfo, Value>) -> Value {
        get { info[keyPath: keyPath] }
        set { info[keyPath: keyPath] = newValue }
    }
}

/// A loaded ELF object (executable or shared library) as capture found it.
public struct ModuleSnapshot: Sendable, Equatable {
    /// Its path as the process mapped it.
    public var path: String
    /// Load bias: runtime address minus link-time address (what `dl_iterate_phdr` calls dlpi_addr).
    public var base: UInt64
    /// Lowest mapped address of its loadable segments.
    public var start: UInt64
    /// End of its highest loadable segment.
    public var end: UInt64
    /// GNU build-id, lowercase hex; empty when the object has none.
    public var buildID: String

    /// A module; each parameter is the property of the same name.
    public init(path: String, base: UInt64, start: UInt64, end: UInt64, buildID: String) {
        self.path = path
        self.base = base
        self.start = start
        self.end = end
        self.buildID = buildID
    }
}

package struct ProcessSnapshot: Sendable, Equatable {
    package var reason: CaptureReason
    /// Wall-clock capture time, seconds since 1970.
    package var timestamp: Double
    package var process: ProcessIdentity
    package var threads: [ThreadSnapshot]
    package var modules: [ModuleSnapshot]
    package var annotations: [String: String]
    /// How long capture took, seconds (from first signal to last answer).
    package var captureDurationSeconds: Double
    /// True when this came from a truncated or abandoned dump: what is here is real, but
    /// later sections may be missing.
    package var incomplete: Bool
    /// The process's Swift tasks, when they were asked for (docs/tasks.md); nil: not captured.
    package var tasks: TaskCapture?

    package init(reason: CaptureReason, timestamp: Double, process: ProcessIdentity,
                threads: [ThreadSnapshot], modules: [ModuleSnapshot], annotations: [String: String] = [:],
                captureDurationSeconds: Double = 0, incomplete: Bool = false) {
        self.reason = reason
        self.timestamp = timestamp
        self.process = process
        self.threads = threads
        self.modules = modules
        self.annotations = annotations
        self.captureDurationSeconds = captureDurationSeconds
        self.incomplete = incomplete
        self.tasks = nil
    }

    /// Says how the hang it captured ended (nothing when it is no hang's snapshot).
    package mutating func endHang(_ outcome: HangOutcome) {
        guard case .hang(var hang) = reason else { return }
        hang.outcome = outcome
        reason = .hang(hang)
    }

    /// Gives the threads `tids` the `hung` role: the one place a hang's threads are marked, for
    /// HangMonitor (HangWatcher.swift), `hangwatch run` (RunReporter.swift) and `dump --tree`.
    package mutating func markHung<Threads: Sequence<Int32>>(_ tids: Threads) {
        let hung = Array(tids)
        for index in threads.indices where hung.contains(threads[index].tid) { threads[index].roles.insert(.hung) }
    }

    /// The annotations as reports, minidumps and dumps carry them: the program's and hangwatch's
    /// own, and a hang's outcome (`HangOutcome.annotationKey`), which is stored in `reason` here.
    package var reportedAnnotations: [String: String] {
        guard case .hang(let hang) = reason, let outcome = hang.outcome.annotation else { return annotations }
        var all = annotations
        all[HangOutcome.annotationKey] = outcome
        return all
    }
}

/// Where a Swift task was when it was read. The order of the cases is the dump's value
/// (TASK_STATE): never reorder them.
public enum TaskState: String, Sendable, Equatable, Codable, CaseIterable {
    /// On a thread now (`TaskSnapshot.thread` names it when the runtime keeps it).
    case running
    /// Ready, waiting in an executor's queue for a thread.
    case enqueued
    /// Waiting: on a continuation, another task, a group, an actor… Its await chain shows where.
    case suspended
}

/// What a reading knows of a Swift task besides its links and await chain. A snapshot's task
/// (`TaskSnapshot`) and a report's (`Report.Task`) are each one of these plus their own form of
/// the rest.
public struct TaskInfo: Sendable, Equatable {
    /// The runtime's task id (32 bits in the runtimes read so far).
    public var id: UInt64
    /// The AsyncTask object's address.
    public var address: UInt64
    /// Running, enqueued or suspended.
    public var state: TaskState
    /// Its name (`Task(name:)`), when it has one.
    public var name: String?
    /// What the runtime reports about the task besides its state: child, cancelled…
    public var flags: TaskFlags
    /// The await chain stopped early: it was longer than kept, or a context failed validation
    /// (or memory changed under the reading).
    public var chainCut: Bool

    /// A task; each parameter is the property of the same name.
    public init(id: UInt64, address: UInt64, state: TaskState, name: String? = nil, flags: TaskFlags = [],
                chainCut: Bool = false) {
        self.id = id
        self.address = address
        self.state = state
        self.name = name
        self.flags = flags
        self.chainCut = chainCut
    }
}

/// One live Swift task, read out of the process's memory (docs/tasks.md): its `TaskInfo` (read
/// through this type, `task.id`) and its links and await chain as addresses.
@dynamicMemberLookup
package struct TaskSnapshot: Sendable, Equatable {
    /// Who the task is and its state.
    package var info: TaskInfo
    /// The thread running it, when it is running and the runtime reports which thread.
    package var thread: Int32?
    /// The parent task of a child task (`async let`, a task group's child).
    package var parent: UInt64?
    /// The await chain: the functions it resumes in, innermost first (partial functions).
    package var frames: [UInt64]
    /// What it waits on, when the runtime records it.
    package var waitingOn: TaskWait?

    /// A task; each parameter is the property of the same name (or of `info`).
    package init(address: UInt64, id: UInt64, state: TaskState, thread: Int32? = nil, parent: UInt64? = nil,
                frames: [UInt64], chainCut: Bool = false, flags: TaskFlags = [], name: String? = nil,
                waitingOn: TaskWait? = nil) {
        self.info = TaskInfo(id: id, address: address, state: state, name: name, flags: flags, chainCut: chainCut)
        self.thread = thread
        self.parent = parent
        self.frames = frames
        self.waitingOn = waitingOn
    }

    package subscript<Value>(dynamicMember keyPath: WritableKeyPath<TaskInfo, Value>) -> Value {
        get { info[keyPath: keyPath] }
        set { info[keyPath: keyPath] = newValue }
    }
}

/// What a suspended task waits on, as the runtime records it.
package struct TaskWait: Sendable, Equatable {
    /// The kinds of wait the runtime records. The order is the dump's value: never reorder.
    package enum Kind: String, Sendable, Equatable, CaseIterable {
        /// Another task's value (`await task.value`, an `async let`): `address` is that task.
        case task
        /// A continuation (`withCheckedContinuation`…): `address` is its context.
        case continuation
        /// A task group's next child: `address` is the group.
        case group
        /// A turn on an executor (an actor): `address` is the executor.
        case executor
    }
    /// The kind of wait.
    package var kind: Kind
    /// What it waits on.
    package var address: UInt64

    /// A wait; each parameter is the property of the same name.
    package init(kind: Kind, address: UInt64) {
        self.kind = kind
        self.address = address
    }
}

/// What the runtime reports about a task besides its state.
public struct TaskFlags: OptionSet, Sendable, Hashable {
    /// The bits, as the dump keeps them (TASK_FLAGS).
    public let rawValue: UInt32
    /// A flag set; `rawValue` as the dump keeps it.
    public init(rawValue: UInt32) { self.rawValue = rawValue }
    /// A child task (`async let`, a task group's): `parent` is set.
    public static let child = TaskFlags(rawValue: 1 << 0)
    /// Cancelled.
    public static let cancelled = TaskFlags(rawValue: 1 << 1)
    /// A task group's child.
    public static let groupChild = TaskFlags(rawValue: 1 << 2)
    /// An `async let` child.
    public static let asyncLet = TaskFlags(rawValue: 1 << 3)

    /// Names as reports spell them, in this order.
    public static let named: [(TaskFlags, String)] = [(.child, "child"), (.cancelled, "cancelled"),
                                                       (.groupChild, "group-child"), (.asyncLet, "async-let")]
    /// The names of the flags set.
    public var names: [String] { Self.named.filter { contains($0.0) }.map(\.1) }
    /// The flags of `names`; unknown names are left out.
    public init(names: [String]) {
        self = TaskFlags(Self.named.filter { names.contains($0.1) }.map(\.0))
    }
}

/// A reading of every task of a process (docs/tasks.md): what was found, and what the reading cost.
package struct TaskCapture: Sendable, Equatable {
    /// The tasks found, in memory order.
    package var tasks: [TaskSnapshot]
    /// Bytes of writable anonymous memory scanned: the pages the process uses.
    package var scannedBytes: UInt64
    /// Bytes of writable anonymous memory the process never touched (no page present or
    /// swapped): not read, so reading does not make the process bigger.
    package var untouchedBytes: UInt64 = 0
    /// Bytes of writable anonymous memory that may hold tasks but were not read: pages in use
    /// past the bound of bytes read, and memory not looked at when the deadline came (counted
    /// whole: an upper bound). `unread` gives the reason.
    package var unreadBytes: UInt64 = 0
    /// Why memory was left unread (the bound, the deadline), in words; nil when all was read.
    package var unread: String?
    /// How long the reading took, seconds.
    package var durationSeconds: Double
    /// More tasks than the limit: those past it are not listed.
    package var truncated: Bool
    /// Why no task could be read (not a Swift program, a runtime whose task layout is not known,
    /// reading not allowed); nil when the reading worked.
    package var error: String?
    /// The runtime that was read, e.g. `Swift concurrency layout 1, task size 208`.
    package var runtime: String?

    /// A reading; each parameter is the property of the same name.
    package init(tasks: [TaskSnapshot], scannedBytes: UInt64 = 0, durationSeconds: Double = 0, truncated: Bool = false,
                error: String? = nil, runtime: String? = nil) {
        self.tasks = tasks
        self.scannedBytes = scannedBytes
        self.durationSeconds = durationSeconds
        self.truncated = truncated
        self.error = error
        self.runtime = runtime
    }
}
