// Capture of a whole process tree (a `hangwatch run` job, `hangwatch dump --pid P --tree`):
// every live descendant of a root is captured in turn with the one-process capture, within a
// count and a time limit, and the likely culprit is named: the deepest process that is not
// merely waiting for its children (docs/report-schema.md, "processTree").
// Processes are stopped one after the other, not together: a tree keeps running while its
// other members are captured, so their stacks are a few milliseconds apart.
import HangwatchPlatform
import HangwatchSnapshot
#if canImport(Glibc)
import Glibc
#endif

package struct TreeCaptureLimits: Sendable, Equatable {
    /// Processes captured at most (the root included); the rest are listed, not captured.
    package var maxProcesses: Int
    /// Wall-clock budget for all captures; processes reached after it are listed, not captured.
    package var timeBudgetSeconds: Double
    /// A process with more threads than this is listed, not captured.
    package var maxThreadsPerProcess: Int
    /// Threads captured in all; a process that would go past it is listed, not captured.
    package var maxThreads: Int

    package init(maxProcesses: Int = 32, timeBudgetSeconds: Double = 10, maxThreadsPerProcess: Int = 2048,
                 maxThreads: Int = 8192) {
        self.maxProcesses = maxProcesses
        self.timeBudgetSeconds = timeBudgetSeconds
        self.maxThreadsPerProcess = maxThreadsPerProcess
        self.maxThreads = maxThreads
    }
}

/// What a process of the tree is doing, from its threads' states and system calls.
package enum ProcessActivity: String, Sendable, CaseIterable {
    /// Its main thread waits in wait4/waitid for a child, or it only sleeps while it has children.
    case waiting
    /// Every thread sleeps (poll, read, nanosleep, …), none on a lock.
    case asleep
    /// A thread is blocked in futex (a lock or condition): deadlocks live here.
    case blocked
    /// A thread is running or runnable: spinning, or busy.
    case running
    /// A thread is in uninterruptible sleep (D): stuck in the kernel (I/O, NFS, a driver).
    case stuck
    /// Not captured (limit reached, gone, not allowed): nothing is known.
    case unknown

    /// How likely such a process is to be the hang: higher is likelier.
    var suspicion: Int {
        switch self {
        case .unknown, .waiting: return 0
        case .asleep: return 1
        case .blocked: return 2
        case .running: return 3
        case .stuck: return 4
        }
    }
}

package struct TreeMember: Sendable {
    package var pid: Int32
    /// 0 for the root itself.
    package var parentPID: Int32
    /// 0 for the root, 1 for its children, …
    package var depth: Int
    /// The capture, or nil with `failure` saying why there is none.
    package var snapshot: ProcessSnapshot?
    package var failure: String?
    package var activity: ProcessActivity
    /// comm and command line from /proc, also for processes that were not captured.
    package var name: String
    package var arguments: [String]
}

package struct TreeCaptureResult: Sendable {
    /// The root first, then its descendants breadth-first (nearest first).
    package var members: [TreeMember]
    package var rootPID: Int32
    /// The likely culprit; nil when no member was captured. A named culprit (`namedCulprit`) is
    /// it even when its own capture failed (then `culprit` has no snapshot).
    package var culpritPID: Int32?
    /// Why that one, in a few words.
    package var culpritReason: String
    /// Live processes found in the tree, captured or not.
    package var processesFound: Int
    package var limits: TreeCaptureLimits

    package var culprit: TreeMember? { members.first { $0.pid == culpritPID } }
}

package enum TreeCapture {
    /// Captures `root` and its live descendants. `captureRoot` replaces the capture of the
    /// root (a tracer already attached to it must do it); `namedCulprit` is a process known to
    /// be hung (its own HangMonitor reported it), which is then the culprit whatever the others do,
    /// captured or not.
    /// Never throws: a member that cannot be captured is listed with the reason.
    /// `subreaper`: the child subreaper `root` runs under (`hangwatch run` itself): orphans
    /// it adopted from the tree (daemons, workers whose parent died) are members too, listed
    /// at depth 0 with parent 0 like the root. `excluded`: the subreaper's own processes that
    /// are no part of the tree (the job's watchdog).
    package static func capture(root: Int32, options: RemoteCaptureOptions, limits: TreeCaptureLimits = .init(),
                                subreaper: Int32? = nil, excluded: Set<Int32> = [], namedCulprit: Int32? = nil,
                                captureRoot: ((RemoteCaptureOptions) throws -> RemoteCaptureResult)? = nil) -> TreeCaptureResult {
        let started = RemoteCapture.monotonicSeconds()
        let walkLimit = max(limits.maxProcesses * 8, 256)
        var tree = [ProcFS.Descendant(pid: root, parent: 0, depth: 0, startTicks: ProcFS.startTicks(of: root) ?? 0)]
        if let subreaper {
            tree += ProcFS.descendants(of: subreaper, limit: walkLimit, excluding: excluded).filter { $0.pid != root }
                .map { ProcFS.Descendant(pid: $0.pid, parent: $0.parent == subreaper ? 0 : $0.parent, depth: $0.depth - 1,
                                         startTicks: $0.startTicks) }
        } else {
            tree += ProcFS.descendants(of: root, limit: walkLimit)
        }
        pauseAfterWalkForTests()
        var members: [TreeMember] = []
        var threadsCaptured = 0
        /// Which limit keeps the `index`th process from being captured; nil when none does.
        /// Its thread count is read only when the cheaper limits let it through.
        func limitReached(index: Int, pid: Int32) -> String? {
            if index >= limits.maxProcesses { return "the limit is \(limits.maxProcesses) processes per tree" }
            if RemoteCapture.monotonicSeconds() - started > limits.timeBudgetSeconds {
                return "the tree's \(Int(limits.timeBudgetSeconds)) s capture budget was spent"
            }
            let threads = ProcFS.status("/proc/\(pid)/status")["Threads"].flatMap { Int($0) } ?? 0
            if threads > limits.maxThreadsPerProcess {
                return "\(threads) threads, over the limit of \(limits.maxThreadsPerProcess) per process"
            }
            if threadsCaptured + threads > limits.maxThreads { return "the tree's limit of \(limits.maxThreads) threads in all was reached" }
            return nil
        }
        for (index, process) in tree.enumerated() {
            var member = TreeMember(pid: process.pid, parentPID: process.parent, depth: process.depth, snapshot: nil,
                                    failure: nil, activity: .unknown, name: ProcFS.comm(of: process.pid),
                                    arguments: ProcFS.commandLine(of: process.pid))
            // Each member is the process the walk found (its start time), or nothing of it is
            // kept: a member that exited and an outsider that took its pid are never reported.
            var memberOptions = options
            memberOptions.expectedStartTicks = process.startTicks == 0 ? nil : process.startTicks
            if process.startTicks != 0, ProcFS.startTicks(of: process.pid) != process.startTicks {
                member.name = ""
                member.arguments = []
                member.failure = "\(RemoteCaptureError.replaced(pid: process.pid))"
            } else if let reason = limitReached(index: index, pid: process.pid) {
                member.failure = "not captured: " + reason
            } else {
                do {
                    let result = try (process.pid == root ? captureRoot : nil)?(memberOptions)
                        ?? RemoteCapture.capture(pid: process.pid, options: memberOptions)
                    member.snapshot = result.snapshot
                    threadsCaptured += result.snapshot.threads.count
                } catch {
                    member.failure = "\(error)"
                }
            }
            members.append(member)
        }
        let parents = Set(members.map(\.parentPID))
        for index in members.indices {
            members[index].activity = activity(of: members[index], hasChildren: parents.contains(members[index].pid))
        }
        let (culprit, reason) = findCulprit(members, named: namedCulprit)
        return TreeCaptureResult(members: members, rootPID: root, culpritPID: culprit, culpritReason: reason,
                                 processesFound: tree.count, limits: limits)
    }

    /// A test seam (Tests/hangwatchTests/ProcessIdentityTests.swift): `HANGWATCH_TEST_TREE_WALK_PAUSE`
    /// seconds (at most 10) between the walk and the captures, so that a test can make a member
    /// exit and an outsider take its pid in that window — what a busy machine does by chance.
    private static func pauseAfterWalkForTests() {
        guard let text = getenv("HANGWATCH_TEST_TREE_WALK_PAUSE").map({ String(cString: $0) }), let seconds = Double(text),
              seconds > 0 else { return }
        var pause = timespec(tv_sec: Int(min(seconds, 10)), tv_nsec: Int(min(seconds, 10).truncatingRemainder(dividingBy: 1) * 1e9))
        var left = timespec()
        while nanosleep(&pause, &left) != 0 && errno == EINTR { pause = left }
    }

    static func activity(of thread: ThreadSnapshot) -> ProcessActivity {
        switch thread.state {
        case .diskSleep: return .stuck
        case .running: return .running
        default:
            let syscall = Syscalls.number(ofLine: thread.syscall)
            if syscall == Syscalls.wait4 || syscall == Syscalls.waitid { return .waiting }
            return syscall == Syscalls.futex ? .blocked : .asleep
        }
    }

    /// The thread most likely to be the hang: the most suspicious activity, the main thread
    /// among equals.
    package static func mostSuspiciousThread(of snapshot: ProcessSnapshot) -> Int32? {
        snapshot.threads.max { a, b in
            (activity(of: a).suspicion, a.tid == snapshot.process.pid ? 1 : 0) < (activity(of: b).suspicion, b.tid == snapshot.process.pid ? 1 : 0)
        }?.tid
    }

    /// The thread a hang is charged to when no monitor named one: the most suspicious thread,
    /// if it is doing something — blocked on a lock, running, stuck in the kernel. nil when
    /// every thread only sleeps or waits (`--timeout` on an idle job): no thread is called hung.
    package static func hungThread(of snapshot: ProcessSnapshot) -> Int32? {
        guard let tid = mostSuspiciousThread(of: snapshot), let thread = snapshot.threads.first(where: { $0.tid == tid }),
              activity(of: thread).suspicion >= ProcessActivity.blocked.suspicion else { return nil }
        return tid
    }

    static func activity(of member: TreeMember, hasChildren: Bool) -> ProcessActivity {
        guard let snapshot = member.snapshot else { return .unknown }
        var most = ProcessActivity.asleep
        for thread in snapshot.threads {
            let threadActivity = activity(of: thread)
            // The main thread waiting for a child decides: a shell, make, a runner.
            if thread.tid == member.pid, threadActivity == .waiting, hasChildren { return .waiting }
            if threadActivity.suspicion > most.suspicion { most = threadActivity }
        }
        // Only sleeping while its children run: most likely waiting for them (poll on their pipes).
        if hasChildren, most == .asleep { return .waiting }
        return most
    }

    /// A member its own hang monitor named is the culprit, even when it could not be captured:
    /// another process is not blamed for the hang it reported. Else the most suspicious
    /// activity wins; among equals the deepest process (the hung work is usually below the
    /// shells and runners that started it), then the oldest (lowest pid).
    static func findCulprit(_ members: [TreeMember], named: Int32?) -> (Int32?, String) {
        if let named, let member = members.first(where: { $0.pid == named }) {
            return (named, member.snapshot == nil ? "its hang monitor reported the hang; it could not be captured"
                                                  : "its hang monitor reported the hang")
        }
        let captured = members.filter { $0.snapshot != nil }
        guard let best = captured.max(by: { a, b in
            (a.activity.suspicion, a.depth, -a.pid) < (b.activity.suspicion, b.depth, -b.pid)
        }) else { return (nil, "no process of the tree could be captured") }
        let reason: String
        switch best.activity {
        case .stuck: reason = "a thread is in uninterruptible sleep (D state)"
        case .running: reason = "a thread is running while the job is hung"
        case .blocked: reason = "threads are blocked on a lock or condition (futex)"
        case .asleep: reason = "the deepest process not waiting for a child; its threads sleep"
        case .waiting, .unknown: reason = "every captured process waits for a child; the deepest one"
        }
        return (best.pid, reason)
    }
}
