// Starting the watched child: resolve the command as a shell would (127 not found, 126 not
// executable), hand it stdin, pipes for stdout/stderr (so hangwatch can notice silence and
// keep the stderr tail), default signal dispositions and an empty signal mask.
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

package enum LaunchError: Error, CustomStringConvertible {
    case commandNotFound(String)
    case notExecutable(String, String)
    case spawnFailed(String, String)

    package var description: String {
        switch self {
        case .commandNotFound(let name): return "\(name): command not found"
        case .notExecutable(let path, let why): return "\(path): cannot execute: \(why)"
        case .spawnFailed(let path, let why): return "\(path): could not start: \(why)"
        }
    }

    /// What a shell exits with in the same situation.
    package var exitCode: Int32 {
        switch self {
        case .commandNotFound: return 127
        case .notExecutable, .spawnFailed: return 126
        }
    }
}

package struct LaunchedChild {
    package let pid: pid_t
    /// Read ends of the child's stdout and stderr.
    package let stdoutFD: Int32
    package let stderrFD: Int32
    /// Write end of the start gate (`holdAtStart`): the command is not exec'ed until this is
    /// closed (`LaunchedChild.openStartGate()`).
    package var startGateFD: Int32? = nil
    /// The child leads a process group of its own (pgid = pid).
    package var ownProcessGroup = false

    package func openStartGate() {
        if let startGateFD { close(startGateFD) }
    }
}

package enum ChildLauncher {
    /// Finds `name` the way execvp does: a name with a slash is used as is, otherwise each PATH entry.
    package static func resolve(_ name: String, path: String? = ProcessInfo.processInfo.environment["PATH"]) throws -> String {
        func check(_ candidate: String) throws -> Bool {
            var info = stat()
            guard stat(candidate, &info) == 0 else { return false }
            if (info.st_mode & S_IFMT) == S_IFDIR { throw LaunchError.notExecutable(candidate, "is a directory") }
            guard access(candidate, X_OK) == 0 else { throw LaunchError.notExecutable(candidate, "permission denied") }
            return true
        }
        if name.contains("/") {
            guard try check(name) else { throw LaunchError.commandNotFound(name) }
            return name
        }
        var firstNotExecutable: LaunchError?
        for directory in (path ?? "/usr/local/bin:/usr/bin:/bin").split(separator: ":", omittingEmptySubsequences: false) {
            let candidate = (directory.isEmpty ? "." : String(directory)) + "/" + name
            do {
                if try check(candidate) { return candidate }
            } catch let error as LaunchError {
                firstNotExecutable = firstNotExecutable ?? error
            }
        }
        throw firstNotExecutable ?? LaunchError.commandNotFound(name)
    }

    /// Spawns `arguments` (arguments[0] already resolved to `executable`) with `environment`.
    /// `setWatchdogPID`: run through `/bin/sh` so the child's own pid lands in WATCHDOG_PID
    /// before exec (sd_notify libraries compare it with getpid()); the pid stays the same.
    /// `holdAtStart` (needs `setWatchdogPID`): the shell waits on a pipe (its fd 3) before exec,
    /// so a tracer can attach before the command's first instruction; see `openStartGate()`.
    /// `ownProcessGroup`: the child leads a new process group, so the job can be signalled as
    /// one (a terminal's job control does the same for a shell's pipeline).
    package static func spawn(executable: String, arguments: [String], environment: [String: String],
                      setWatchdogPID: Bool, holdAtStart: Bool = false, ownProcessGroup: Bool = false) throws -> LaunchedChild {
        var outPipe: [Int32] = [0, 0], errPipe: [Int32] = [0, 0], gatePipe: [Int32] = [-1, -1]
        // pipe2 is not visible from Glibc's module; hangwatch spawns from one thread, so
        // setting FD_CLOEXEC right after pipe() cannot leak into another child.
        guard pipe(&outPipe) == 0, pipe(&errPipe) == 0 else {
            throw LaunchError.spawnFailed(executable, String(cString: strerror(errno)))
        }
        let gated = holdAtStart
        if gated, pipe(&gatePipe) != 0 { throw LaunchError.spawnFailed(executable, String(cString: strerror(errno))) }
        for fd in outPipe + errPipe + gatePipe where fd >= 0 { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, outPipe[1], 1)
        posix_spawn_file_actions_adddup2(&actions, errPipe[1], 2)
        if gated { posix_spawn_file_actions_adddup2(&actions, gatePipe[0], 3) }

        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var flags = resetSignals(&attributes)
        if ownProcessGroup {
            posix_spawnattr_setpgroup(&attributes, 0)
            flags |= POSIX_SPAWN_SETPGROUP
        }
        posix_spawnattr_setflags(&attributes, Int16(flags))

        var argv = arguments
        var path = executable
        if setWatchdogPID || gated {
            path = "/bin/sh"
            // The gate's read sees end-of-file once hangwatch closes the write end.
            let watchdog = setWatchdogPID ? "WATCHDOG_PID=$$; export WATCHDOG_PID; " : ""
            let gate = gated ? "read hangwatch_gate <&3; " : ""
            let closeGate = gated ? " 3<&-" : ""
            argv = ["sh", "-c", "\(watchdog)\(gate)exec \"$0\" \"$@\"\(closeGate)", executable] + arguments.dropFirst()
        }
        let env = environment.map { "\($0.key)=\($0.value)" }
        var pid: pid_t = 0
        let result = withCStrings(argv) { cArgv in
            withCStrings(env) { cEnv in
                posix_spawn(&pid, path, &actions, &attributes, cArgv, cEnv)
            }
        }
        close(outPipe[1])
        close(errPipe[1])
        if gated { close(gatePipe[0]) }
        guard result == 0 else {
            close(outPipe[0])
            close(errPipe[0])
            if gated { close(gatePipe[1]) }
            throw LaunchError.spawnFailed(executable, String(cString: strerror(result)))
        }
        return LaunchedChild(pid: pid, stdoutFD: outPipe[0], stderrFD: errPipe[0], startGateFD: gated ? gatePipe[1] : nil,
                             ownProcessGroup: ownProcessGroup)
    }
}

/// What hangwatch's children start with, whatever hangwatch blocked or caught (its signals are
/// read from a signalfd, so blocked): an empty signal mask and default dispositions. Returns
/// the flags that make posix_spawn apply them.
package func resetSignals(_ attributes: inout posix_spawnattr_t) -> Int32 {
    var empty = sigset_t(), all = sigset_t()
    sigemptyset(&empty)
    sigfillset(&all)
    sigdelset(&all, SIGKILL)
    sigdelset(&all, SIGSTOP)
    posix_spawnattr_setsigmask(&attributes, &empty)
    posix_spawnattr_setsigdefault(&attributes, &all)
    return POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF
}

/// Calls `body` with a NULL-terminated C array of the strings, valid only during the call.
package func withCStrings<R>(_ strings: [String], _ body: (UnsafePointer<UnsafeMutablePointer<CChar>?>) -> R) -> R {
    let pointers = strings.map { strdup($0) } + [nil]
    defer { pointers.forEach { free($0) } }
    return pointers.withUnsafeBufferPointer { body($0.baseAddress!) }
}
