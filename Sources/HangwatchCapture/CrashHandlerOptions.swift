// What the fatal-signal handler does besides recording the crashing thread.
import HangwatchSnapshot
import HangwatchDatabase

/// The "save critical data" callback: runs inside the signal handler, first, with the signal
/// number. It is a C function pointer on purpose (it cannot capture context). See
/// docs/crash-handling.md for what is safe in it: write(2) to descriptors opened earlier,
/// atomics, preallocated memory. No allocation, no locks, no print, no Swift objects.
public typealias CrashCallback = @convention(c) (Int32) -> Void

/// How the fatal-signal handlers capture a crash (docs/crash-handling.md).
public struct CrashHandlerOptions: Sendable, Equatable {
    /// Frames recorded for each thread other than the crashing one (0: do not ask them).
    public var otherThreadFrames: Int
    /// How long the handler waits for the other threads' answers, seconds.
    public var otherThreadsTimeout: Double
    /// Size of each alternate signal stack (the handler and the chained Swift backtracer run on it).
    public var alternateStackBytes: Int
    /// How many live threads can hold one of our alternate stacks at once.
    public var alternateStackCount: Int
    /// Every this many seconds, every thread that accepts SIGPROF is asked (as a capture asks)
    /// and takes an alternate stack if it has none, so threads created after install survive a
    /// stack overflow long enough to be reported. nil: only at install and at each capture.
    public var alternateStackRefreshInterval: Double?

    /// Options; each parameter is the property of the same name.
    public init(otherThreadFrames: Int = 64, otherThreadsTimeout: Double = 0.5,
                alternateStackBytes: Int = 256 * 1024, alternateStackCount: Int = 256,
                alternateStackRefreshInterval: Double? = nil) {
        self.otherThreadFrames = otherThreadFrames
        self.otherThreadsTimeout = otherThreadsTimeout
        self.alternateStackBytes = alternateStackBytes
        self.alternateStackCount = alternateStackCount
        self.alternateStackRefreshInterval = alternateStackRefreshInterval
    }
}

/// Why the crash handlers could not be installed or changed.
public enum CrashHandlingError: Error, Equatable, CustomStringConvertible {
    /// Signal handlers are process-wide: another DumpClient already owns them.
    case ownedByAnotherClient(bundleID: String, databasePath: String)
    /// Options outside what the handlers support; the string names them.
    case invalidOptions(String)
    /// sigaction, sigaltstack or mmap failed.
    case installFailed(String)

    /// What went wrong, in a sentence.
    public var description: String {
        switch self {
        case .ownedByAnotherClient(let bundle, let path):
            return "crash handlers are already installed by the client for \(bundle) at \(path)"
        case .invalidOptions(let why): return "invalid crash handler options: \(why)"
        case .installFailed(let why): return "cannot install crash handlers: \(why)"
        }
    }
}
