// hangwatch's side of the job's watchdog (`hangwatch job-watchdog`, Sources/hangwatch/Commands/
// JobWatchdog.swift, says what it does and why): started before the job, told of the job's
// processes as hangwatch finds them, told "done" when hangwatch ends as it meant to.
import HangwatchPlatform
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// hangwatch's side: starts the watchdog and tells it of the job.
package final class JobWatchdogLink {
    /// The watchdog's pid: not a process of the job (ProcessTree leaves it out).
    package let pid: pid_t
    private let input: Int32
    private var told: Set<[UInt64]> = []

    /// The watchdog's subcommand (Sources/hangwatch/Commands/JobWatchdog.swift).
    package static let commandName = "job-watchdog"
    /// How many processes the watchdog holds before it sweeps out those no longer alive (never
    /// a live one: JobWatchdog.swift, `Members`); and how many this side remembers having told.
    package static let maxMembers = 65_536

    /// Starts `hangwatch job-watchdog` (this executable), in a process group of its own so that
    /// a signal to hangwatch's group (a terminal's ^C, GNU timeout's kill) does not end it too.
    /// `wholeTree` false (`--kill-tree no`): only the processes it is told of are ended, not their descendants.
    package init(cgroup: MemoryCgroup?, wholeTree: Bool) throws {
        var ends: [Int32] = [0, 0]
        guard pipe(&ends) == 0 else { throw SupervisorError.watchdog(String(cString: strerror(errno))) }
        // The write end stays hangwatch's alone: a job that inherited it would keep the watchdog waiting.
        _ = fcntl(ends[1], F_SETFD, FD_CLOEXEC)
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, ends[0], 0)
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        let flags = resetSignals(&attributes)
        posix_spawnattr_setpgroup(&attributes, 0)
        posix_spawnattr_setflags(&attributes, Int16(flags | POSIX_SPAWN_SETPGROUP))
        // This very executable, even if an upgrade replaced its file since.
        let executable = "/proc/self/exe"
        let arguments = ["hangwatch", Self.commandName] + (cgroup.map { ["--cgroup", $0.path] } ?? [])
            + (wholeTree ? [] : ["--told-only"])
        var pid: pid_t = 0
        let result = withCStrings(arguments) { argv in
            withCStrings(["PATH=/usr/bin:/bin"]) { envp in posix_spawn(&pid, executable, &actions, &attributes, argv, envp) }
        }
        close(ends[0])
        guard result == 0 else {
            close(ends[1])
            throw SupervisorError.watchdog(String(cString: strerror(result)))
        }
        self.pid = pid
        input = ends[1]
    }

    /// Tells the watchdog of processes of the job (each once).
    package func tell(_ members: [(pid: Int32, startTicks: UInt64)]) {
        // Bounded: past it, everything is told again (the watchdog keeps one member per pid).
        if told.count > Self.maxMembers { told.removeAll(keepingCapacity: true) }
        var lines = ""
        for member in members where told.insert([UInt64(UInt32(bitPattern: member.pid)), member.startTicks]).inserted {
            lines += "+ \(member.pid) \(member.startTicks)\n"
        }
        send(lines)
    }

    /// hangwatch ends as it meant to (the job ended, or was left as `--kill-tree no` says): the
    /// watchdog exits without a signal sent, and is reaped.
    package func done() {
        send("done\n")
        close(input)
        var status: Int32 = 0
        _ = waitpid(pid, &status, 0)
    }

    private func send(_ text: String) {
        guard !text.isEmpty else { return }
        // A watchdog that is gone (someone killed it) costs hangwatch nothing: SIGPIPE is ignored.
        _ = Array(text.utf8).withUnsafeBytes { write(input, $0.baseAddress, $0.count) }
    }
}
