// A process named so that the name cannot come to mean another process (docs/platform-facts.md,
// "Signalling and tracing only what is ours"). A pid is recycled as soon as its process is
// reaped: `kill(pid)` a moment later may hit a stranger. A pidfd (Linux 5.3) refers to one
// process for its whole life, and a signal sent through it fails with ESRCH once that process
// is gone. The handle is opened and *then* the process is checked to be the one meant (its
// start time, read after the pidfd exists): a pidfd opened on a recycled pid fails the check.
// Without pidfds (an older kernel or glibc), the start time is re-checked right before each
// kill: a narrower window, not none.
#if canImport(Glibc)
import Glibc
#endif

package final class ProcessHandle {
    package let pid: Int32
    package let startTicks: UInt64
    /// -1 without a pidfd.
    private let fd: Int32

    /// A handle on `pid` if it is still the process that started at `startTicks` (field 22 of
    /// /proc/PID/stat, as it was read when the process was found); nil when it is gone or the
    /// pid now names another process.
    package init?(pid: Int32, startTicks: UInt64) {
        guard pid > 0 else { return nil }
        let fd = Self.pidfdOpen?(pid, 0) ?? -1
        guard ProcFS.startTicks(of: pid) == startTicks else {
            if fd >= 0 { close(fd) }
            return nil
        }
        self.pid = pid
        self.startTicks = startTicks
        self.fd = fd
    }

    deinit { if fd >= 0 { close(fd) } }

    /// Sends `signal` (0: only checks whether it is alive). 0, or the errno: ESRCH once the process
    /// is gone (never another process's), EPERM when it is not ours to signal.
    @discardableResult
    package func send(_ signal: Int32) -> Int32 {
        if fd >= 0, let send = Self.pidfdSendSignal {
            return send(fd, signal, nil, 0) == 0 ? 0 : errno
        }
        guard ProcFS.startTicks(of: pid) == startTicks else { return ESRCH }
        return kill(pid, signal) == 0 ? 0 : errno
    }

    /// Whether signals go through a pidfd (false: start time re-checked before each kill).
    package var hasPidfd: Bool { fd >= 0 && Self.pidfdSendSignal != nil }

    // glibc 2.36's wrappers, found at run time so an older glibc still runs (then without pidfds).
    private typealias PidfdOpen = @convention(c) (Int32, UInt32) -> Int32
    private typealias PidfdSendSignal = @convention(c) (Int32, Int32, UnsafeMutableRawPointer?, UInt32) -> Int32
    private static let pidfdOpen: PidfdOpen? = dlsym(nil, "pidfd_open").map { unsafeBitCast($0, to: PidfdOpen.self) }
    private static let pidfdSendSignal: PidfdSendSignal? =
        dlsym(nil, "pidfd_send_signal").map { unsafeBitCast($0, to: PidfdSendSignal.self) }
}
