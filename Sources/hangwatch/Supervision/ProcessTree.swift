// The processes of a `hangwatch run` job: the child and everything descended from it. hangwatch
// is the job's child subreaper, so an orphan (a daemonizing grandchild, a worker whose parent
// died) is reparented to hangwatch instead of init, and a walk of /proc's parent links from
// hangwatch finds every live process of the job — also those that left the child's process
// group or session, which a process-group kill (GNU timeout) would miss.
import HangwatchPlatform
#if canImport(Glibc)
import Glibc
#endif

struct ProcessTree {
    /// A process that could not be signalled (EPERM: e.g. a setuid descendant).
    struct Unsignalled: Equatable {
        var pid: Int32
        var name: String

        /// `pid` with its name as /proc has it now.
        init(pid: Int32) {
            self.pid = pid
            name = ProcFS.processStat(of: pid)?.name ?? "?"
        }
    }

    /// hangwatch itself: every process of the job descends from it.
    let root: Int32
    /// The child, the head of the job (hangwatch reaps it itself).
    let child: Int32
    /// The child's own process group, when it has one.
    let childGroup: Int32?

    /// Live (not zombie) descendants of `root`, nearest first; one scan of /proc.
    func members() -> [Int32] { ProcFS.descendants(of: root).map(\.pid) }

    /// Sends `signal` to the child's group and to every member; the members that refused it.
    @discardableResult
    func signalAll(_ signal: Int32) -> [Unsignalled] {
        if let childGroup { kill(-childGroup, signal) }
        var refused: [Unsignalled] = []
        for pid in members() where kill(pid, signal) != 0 && errno == EPERM { refused.append(Unsignalled(pid: pid)) }
        return refused
    }

    /// SIGKILL for every member left: members are frozen with SIGSTOP before the kill, and the
    /// round repeats until a scan finds none, so a fork loop cannot outrun it (a stopped process
    /// forks no more; its orphans come to hangwatch and to the next scan). Returns the members
    /// that could not be signalled; they may outlive the job.
    func killRemaining(reapOrphans: () -> Void) -> [Unsignalled] {
        var refused: [Unsignalled] = []
        for _ in 0..<1_000 {
            reapOrphans()
            let alive = members().filter { pid in !refused.contains { $0.pid == pid } }
            if alive.isEmpty { break }
            if let childGroup { kill(-childGroup, SIGSTOP) }
            for pid in alive { kill(pid, SIGSTOP) }
            for pid in members() where kill(pid, SIGKILL) != 0 && errno == EPERM && !refused.contains(where: { $0.pid == pid }) {
                refused.append(Unsignalled(pid: pid))
            }
            if let childGroup { kill(-childGroup, SIGKILL) }
            PlatformThread.sleep(seconds: 0.002)
        }
        reapOrphans()
        return refused
    }
}
