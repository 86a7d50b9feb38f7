// The job's watchdog (SECURITY.md: nothing of the job outlives hangwatch): a small process of
// its own, `hangwatch job-watchdog`, that `hangwatch run` starts before the job. It reads, on
// its stdin, the job's processes as hangwatch finds them ("+ PID START-TICKS" lines), and
// "done" when hangwatch ends as it meant to. End-of-file without "done" means hangwatch was
// killed (kill -9, the OOM killer) or crashed. The watchdog then ends the job as hangwatch
// would have — every process it was notified of and every descendant of theirs, frozen with SIGSTOP
// first, then SIGKILL, each through a handle that cannot be reused (ProcessHandle) — and
// removes the job's memory cgroup (`--memory-max`) once it is empty.
//
// The job's orphans are reparented to hangwatch (its child subreaper); once hangwatch is gone
// they go to init, so the watchdog finds them from the processes it was notified of earlier, not
// by ancestry from hangwatch. Hangwatch notifies it of the child at once, then of every process
// its tree scans see (at most once a second), and the watchdog forgets none of them while they
// are alive (`Members`).
// A process forked, orphaned and still unseen in that second can escape; its cgroup cannot
// (`--memory-max`: every process of the cgroup is killed too).
import ArgumentParser
import HangwatchCommandLine
import HangwatchPlatform
import HangwatchSupervision
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// The watchdog's side: `hangwatch job-watchdog [--cgroup DIR]` (not listed in --help).
struct JobWatchdogCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: JobWatchdogLink.commandName,
        abstract: "Ends a `hangwatch run` job whose hangwatch died (started by hangwatch run itself).",
        shouldDisplay: false)

    @Option(help: "The job's memory cgroup, removed once empty.")
    var cgroup: String?

    @Flag(help: "End only the processes told of, not their descendants (--kill-tree no).")
    var toldOnly = false

    func run() throws {
        for signal in [SIGINT, SIGQUIT, SIGHUP, SIGTSTP, SIGTTIN, SIGTTOU, SIGPIPE] { Glibc.signal(signal, SIG_IGN) }
        var members = Members()
        var pending: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(STDIN_FILENO, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { break }  // end of file: hangwatch is gone
            pending += buffer[0..<count]
            while let newline = pending.firstIndex(of: 0x0A) {
                let line = String(decoding: pending[..<newline], as: UTF8.self)
                pending.removeSubrange(...newline)
                if line == "done" { return }
                let fields = line.split(separator: " ")
                if fields.count == 3, fields[0] == "+", let pid = Int32(fields[1]), pid > 0, let ticks = UInt64(fields[2]) {
                    members.add(pid: pid, startTicks: ticks)
                }
            }
        }
        Self.endJob(members.all, cgroup: cgroup, descendants: !toldOnly)
    }

    /// The processes it was notified of, by pid. A pid is one process at a time, so a pid reported
    /// again with other start ticks replaces the process that had it (which is gone). A live member is
    /// never forgotten — a job that forks more than the table holds must not have its first
    /// child escape a kill -9 of hangwatch. Past `threshold` members, those no longer alive go
    /// (pid gone, or another start time); when most are alive the threshold doubles, so each
    /// sweep is paid for by as many new members: the table is bounded by the job's live processes.
    struct Members {
        private(set) var byPID: [Int32: UInt64] = [:]
        private(set) var threshold = JobWatchdogLink.maxMembers

        var all: [(pid: Int32, startTicks: UInt64)] { byPID.map { ($0.key, $0.value) } }

        mutating func add(pid: Int32, startTicks: UInt64) {
            byPID[pid] = startTicks
            guard byPID.count > threshold else { return }
            byPID = byPID.filter { member in
                guard let now = ProcFS.stateAndStartTicks(of: member.key) else { return false }
                return !now.state.hasExited && now.startTicks == member.value
            }
            if byPID.count > threshold / 2 { threshold = byPID.count * 2 }
        }
    }

    /// Every process it was notified of and (`descendants`) its descendants, frozen then killed, round after round until
    /// none is left (a stopped process forks no more); then the cgroup's, then the cgroup.
    static func endJob(_ told: [(pid: Int32, startTicks: UInt64)], cgroup: String?, descendants: Bool) {
        for _ in 0..<100 {
            let alive = liveProcesses(told, cgroup: cgroup, descendants: descendants)
            if alive.isEmpty { break }
            for handle in alive { handle.send(SIGSTOP) }
            for handle in alive { handle.send(SIGKILL) }
            PlatformThread.sleep(seconds: 0.01)
        }
        guard let cgroup else { return }
        // The kernel empties a cgroup once its killed processes are reaped (by init, now).
        for _ in 0..<500 where rmdir(cgroup) != 0 && errno == EBUSY { PlatformThread.sleep(seconds: 0.01) }
    }

    /// The live processes it was notified of, every live descendant of theirs (`descendants`: one scan of /proc), and
    /// every process of the cgroup, each as a handle.
    static func liveProcesses(_ told: [(pid: Int32, startTicks: UInt64)], cgroup: String?, descendants: Bool) -> [ProcessHandle] {
        var children: [Int32: [(pid: Int32, startTicks: UInt64)]] = [:]
        for pid in descendants ? ProcFS.processIDs() : [] {
            guard let stat = ProcFS.processStat(of: pid), !stat.state.hasExited else { continue }
            children[stat.parent, default: []].append((pid, stat.startTicks))
        }
        var queue = told
        if let cgroup {
            for pid in cgroupProcesses(cgroup) { if let ticks = ProcFS.startTicks(of: pid) { queue.append((pid, ticks)) } }
        }
        var handles: [ProcessHandle] = [], seen = Set<Int32>()
        var next = 0
        while next < queue.count {
            let member = queue[next]
            next += 1
            // A zombie is dead already (it takes signals all the same): its reaper's business.
            guard seen.insert(member.pid).inserted, let stat = ProcFS.processStat(of: member.pid), !stat.state.hasExited,
                  let handle = ProcessHandle(pid: member.pid, startTicks: member.startTicks), handle.send(0) == 0 else { continue }
            handles.append(handle)
            queue += children[member.pid] ?? []
        }
        return handles
    }

    /// The pids `cgroup.procs` lists.
    static func cgroupProcesses(_ path: String) -> [Int32] {
        (ProcFS.readText(path + "/cgroup.procs", limit: 1 << 20) ?? "").split(separator: "\n").compactMap { Int32($0) }
    }
}
