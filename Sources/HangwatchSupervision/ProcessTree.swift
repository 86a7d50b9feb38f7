// The processes of a `hangwatch run` job: the child and everything descended from it. hangwatch
// is the job's child subreaper, so an orphan (a daemonizing grandchild, a worker whose parent
// died) is reparented to hangwatch instead of init, and a walk of /proc's parent links from
// hangwatch finds every live process of the job — also those that left the child's process
// group or session, which a process-group kill (GNU timeout) would miss.
// Every signal goes through a ProcessHandle taken while the process is known to be in the job
// (found below hangwatch, its start time unchanged): a pid recycled in the meantime — the
// job's processes exit while they are signalled — is never signalled. The child's process
// group is signalled as a group only while the child, its leader, is not reaped: until then
// no other process can have that group id.
import HangwatchPlatform
#if canImport(Glibc)
import Glibc
#endif

package struct ProcessTree {
    /// A process that could not be signalled (EPERM: e.g. a setuid descendant).
    package struct Unsignalled: Equatable {
        package var pid: Int32
        package var name: String

        /// `pid` with its name as /proc has it now.
        package init(pid: Int32) {
            self.pid = pid
            name = ProcFS.processStat(of: pid)?.name ?? "?"
        }
    }

    /// hangwatch itself: every process of the job descends from it.
    package let root: Int32
    /// The child, the head of the job (hangwatch reaps it itself).
    package let child: Int32
    /// The child's own process group, when it has one.
    package let childGroup: Int32?
    /// Set once hangwatch has reaped the child: its pid and group id may name others from then on.
    package var childReaped = false
    /// hangwatch's own children that are no part of the job (its watchdog, JobWatchdog.swift).
    package var own: Set<Int32> = []

    /// Live (not zombie) descendants of `root`, nearest first; one scan of /proc.
    package func members() -> [Int32] { descendants().map(\.pid) }

    /// The members as found by one scan: pid and start time.
    package func descendants() -> [ProcFS.Descendant] { ProcFS.descendants(of: root, excluding: own) }

    /// The members, each through a handle that cannot come to mean another process; a member
    /// that exited since the scan (its pid perhaps recycled already) is left out.
    package func memberHandles() -> [ProcessHandle] {
        descendants().compactMap { ProcessHandle(pid: $0.pid, startTicks: $0.startTicks) }
    }

    /// The child's group, while its leader is unreaped (so the id is still its own).
    private func signalChildGroup(_ signal: Int32) {
        if let childGroup, !childReaped { kill(-childGroup, signal) }
    }

    /// Sends `signal` to the child's group and to every member; the members that refused it.
    @discardableResult
    package func signalAll(_ signal: Int32) -> [Unsignalled] {
        signalChildGroup(signal)
        var refused: [Unsignalled] = []
        for member in memberHandles() where member.send(signal) == EPERM { refused.append(Unsignalled(pid: member.pid)) }
        return refused
    }

    /// SIGKILL for every member left: members are frozen with SIGSTOP before the kill, and the
    /// round repeats until a scan finds none, so a fork loop cannot outrun it (a stopped process
    /// forks no more; its orphans come to hangwatch and to the next scan). Returns the members
    /// that could not be signalled; they may outlive the job.
    package func killRemaining(reapOrphans: () -> Void) -> [Unsignalled] {
        var refused: [Unsignalled] = []
        for _ in 0..<1_000 {
            reapOrphans()
            let alive = memberHandles().filter { member in !refused.contains { $0.pid == member.pid } }
            if alive.isEmpty { break }
            signalChildGroup(SIGSTOP)
            for member in alive { member.send(SIGSTOP) }
            for member in memberHandles() where member.send(SIGKILL) == EPERM && !refused.contains(where: { $0.pid == member.pid }) {
                refused.append(Unsignalled(pid: member.pid))
            }
            signalChildGroup(SIGKILL)
            PlatformThread.sleep(seconds: 0.002)
        }
        reapOrphans()
        return refused
    }
}
