// Knobs and errors of in-process capture (LiveCapture).
import HangwatchDatabase
import HangwatchSnapshot
#if canImport(Glibc)
import Glibc
#endif

/// How a capture stops the other threads of the process.
public enum CaptureMethod: String, Sendable, Equatable, CaseIterable {
    /// Stopped with ptrace by a short-lived helper process that shares this process's memory,
    /// copied, and let go; unwound afterwards from the copies. No handler runs in the program,
    /// so its blocking calls restart where they were (`sleep`, `poll`, `select`, futex waits…);
    /// `epoll_wait` and a few others end with EINTR after any stop (docs/hang-monitor.md, "How
    /// capture works"). Where ptrace is refused (a debugger attached, Yama, seccomp), the threads
    /// are asked with signals instead, and the snapshot's `capture.method` annotation records this.
    case quiet
    /// Each thread is asked with a signal whose handler unwinds it: interrupts its blocking call
    /// (EINTR, a sleep cut short).
    case signals

    /// `HANGWATCH_CAPTURE` (`quiet` or `signals`), else `.quiet`.
    public static let `default`: CaptureMethod = {
        guard let value = getenv("HANGWATCH_CAPTURE").map({ String(cString: $0) }), let method = CaptureMethod(rawValue: value) else {
            return .quiet
        }
        return method
    }()
}

/// How a capture of this process is taken: how threads are stopped, how long to wait for them,
/// how deep to unwind and how much stack to keep.
public struct CaptureOptions: Sendable, Equatable {
    /// How the other threads are stopped (`CaptureMethod.default`: quiet).
    public var method: CaptureMethod
    /// How long to wait for all signalled threads to answer, seconds. A thread that has not
    /// answered by then is reported `.timedOut`; its late answer is discarded.
    public var timeout: Double
    /// Frames unwound per thread (clamped to `maxFramesLimit`).
    public var maxFrames: Int
    /// Bytes of stack copied per thread from its stack pointer up (clamped to `stackBytesLimit`);
    /// fewer where the stack ends or the thread's own descriptor begins (docs/minidump.md).
    public var stackBytes: Int

    // The following are fixed by the first capture of the process (slots are reserved once).
    /// Threads that can be captured at once; more are reported `.unreachable`.
    public var maxThreads: Int
    /// Frames reserved per slot.
    public var maxFramesLimit: Int
    /// Stack bytes reserved per slot (at most 64 KiB; 0 never copies stack memory).
    public var stackBytesLimit: Int
    /// Signal used for threads that do not block it; threads that do (Dispatch and Swift
    /// concurrency pool threads, docs/platform-facts.md fact 2) are asked with SIGPROF. nil: SIGPROF for all.
    public var ordinarySignal: Int32?
    /// The libunwind to load (dlopen'ed RTLD_LOCAL, never linked: docs/platform-facts.md fact 3).
    public var unwindLibrary: String
    /// Also read every live Swift task of the process with its await chain (docs/tasks.md): a
    /// scan of the heap that costs more than the thread capture (scripts/bench section 9), so
    /// off by default. The threads are let go before the tasks are read.
    public var includeTasks: Bool = false

    /// `ThreadSnapshot.defaultStackMemoryBytes` (slots are reserved for it anyway).
    public static let defaultStackBytes = ThreadSnapshot.defaultStackMemoryBytes

    /// SIGRTMIN+5: real-time signals queue per request and rarely carry other meaning.
    public static var defaultOrdinarySignal: Int32 { __libc_current_sigrtmin() + 5 }

    /// Options; each parameter is the property of the same name.
    public init(timeout: Double = 0.5, maxFrames: Int = 256, stackBytes: Int = CaptureOptions.defaultStackBytes,
                maxThreads: Int = 1024, maxFramesLimit: Int = 256, stackBytesLimit: Int = 16 * 1024,
                ordinarySignal: Int32? = CaptureOptions.defaultOrdinarySignal,
                unwindLibrary: String = "libunwind.so.8", method: CaptureMethod = .default) {
        self.method = method
        self.timeout = timeout
        self.maxFrames = maxFrames
        self.stackBytes = stackBytes
        self.maxThreads = maxThreads
        self.maxFramesLimit = maxFramesLimit
        self.stackBytesLimit = stackBytesLimit
        self.ordinarySignal = ordinarySignal
        self.unwindLibrary = unwindLibrary
    }
}

/// Why a capture of this process could not be taken.
public enum CaptureError: Error, Equatable, CustomStringConvertible {
    /// The capture machinery could not start (e.g. libunwind.so.8 missing); the string gives the reason.
    case unavailable(String)
    /// Options outside what capture supports.
    case invalidOptions(String)
    /// /proc/self/task could not be listed.
    case cannotEnumerateThreads(errno: Int32)
    /// `sampleStack` asked about a thread whose stack could not be obtained.
    case threadNotCaptured(tid: Int32, status: String)

    /// What went wrong, in a sentence.
    public var description: String {
        switch self {
        case .unavailable(let why): return "in-process capture unavailable: \(why)"
        case .invalidOptions(let why): return "invalid capture options: \(why)"
        case .cannotEnumerateThreads(let code): return "cannot list /proc/self/task: \(String(cString: strerror(code)))"
        case .threadNotCaptured(let tid, let status): return "thread \(tid) not captured (\(status))"
        }
    }
}
