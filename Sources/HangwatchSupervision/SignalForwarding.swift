// `hangwatch run` receives the signals it forwards (and SIGCHLD) without any handler code: they
// are blocked in every thread, one thread takes them with sigwait() and writes their numbers
// to a pipe that the supervisor's poll loop reads beside the child's output. Blocking must
// happen at the very start of `main`, before the runtime or Foundation start any thread
// (threads inherit the mask). (signalfd would do the same, but Glibc's Swift module lacks it.)
import HangwatchPlatform
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

package enum SignalForwarding {
    /// Signals passed on to the child, as the issue and `timeout(1)` users expect.
    package static let forwarded: [Int32] = [SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2]

    package static var handledSet: sigset_t {
        var set = sigset_t()
        sigemptyset(&set)
        for signal in forwarded + [SIGCHLD] { sigaddset(&set, signal) }
        return set
    }

    /// Call first thing in `main`, before any thread exists.
    package static func blockInAllThreads() {
        var set = handledSet
        pthread_sigmask(SIG_BLOCK, &set, nil)
    }

    /// Starts the sigwait thread; returns the read end of the pipe it writes signal numbers to.
    package static func startSignalPipe() -> Int32 {
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { return -1 }
        for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        _ = fcntl(fds[0], F_SETFL, O_NONBLOCK)
        let writeEnd = fds[1]
        // Runs for the life of the process; without it no signal would be forwarded.
        guard let thread = try? PlatformThread(name: "hangwatch-sigs", {
            var set = handledSet
            while true {
                var signal: Int32 = 0
                guard sigwait(&set, &signal) == 0 else { continue }
                var byte = UInt8(truncatingIfNeeded: signal)
                _ = write(writeEnd, &byte, 1)
            }
        }) else { return -1 }
        thread.detach()
        return fds[0]
    }

    /// Drains the pipe; returns the signal numbers read.
    package static func read(from fd: Int32) -> [Int32] {
        var buffer = [UInt8](repeating: 0, count: 64)
        var signals: [Int32] = []
        while true {
            let count = Glibc.read(fd, &buffer, buffer.count)
            guard count > 0 else { return signals }
            signals += buffer[0..<count].map { Int32($0) }
        }
    }
}
