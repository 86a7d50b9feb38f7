// Shared by all test targets: start the package's own fixture programs (and system tools) as
// real child processes, wait for them with deadlines, and read what they printed.
//
// Children are started with posix_spawn and reaped with wait4(pid, WNOHANG), never with
// Foundation's Process: on Linux its isRunning is driven by a socket the child inherits, so a
// grandchild that keeps that socket open (a daemon, a job left running) keeps the child
// "running" after it has died, and waitUntilExit then waits forever. A CI run hung that way.
import Foundation
#if canImport(Glibc)
import Glibc
#endif

public enum TestSupportError: Error, CustomStringConvertible {
    case timedOut(String)
    case missingProduct(String)
    case spawnFailed(String, Int32)

    public var description: String {
        switch self {
        case .timedOut(let what): return "timed out: \(what)"
        case .missingProduct(let name): return "missing build product \(name): run `swift build --build-tests` first"
        case .spawnFailed(let path, let code): return "cannot start \(path): \(String(cString: strerror(code)))"
        }
    }
}

/// Where `swift build` put the executables: beside the running test bundle.
public var productsDirectory: URL {
    let exe = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
    return exe.deletingLastPathComponent()
}

public func productPath(_ name: String) throws -> String {
    let path = productsDirectory.appendingPathComponent(name).path
    guard FileManager.default.isExecutableFile(atPath: path) else { throw TestSupportError.missingProduct(name) }
    return path
}

/// A fresh private directory, removed by the caller with `removeTemporaryDirectory`.
public func makeTemporaryDirectory(_ label: String = "hangwatch-test") throws -> String {
    var base = NSTemporaryDirectory()
    while base.count > 1 && base.hasSuffix("/") { base.removeLast() }
    var template = Array("\(base)/\(label).XXXXXX".utf8CString)
    let made = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
    guard made != nil else { throw POSIXError(.init(rawValue: errno) ?? .EIO) }
    return String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
}

public func removeTemporaryDirectory(_ path: String) {
    try? FileManager.default.removeItem(atPath: path)
}

/// A running child whose stdout and stderr go to files (no pipe can fill up and block it).
/// Every wait has a deadline; a child still running when its owner is released is killed.
public final class ChildProcess: @unchecked Sendable {
    public let pid: pid_t
    public let stdoutPath: String
    public let stderrPath: String
    private let directory: String
    private let lock = NSLock()
    private var waitStatus: Int32?
    private var usage: rusage?

    /// - Parameter stdoutDescriptor: a descriptor to give the child as its stdout instead of
    ///   the file (e.g. a pipe nobody reads); `stdout` is then empty.
    /// - Parameter stdinDescriptor: a descriptor to give the child as its stdin instead of
    ///   /dev/null (e.g. the read end of a pipe the test writes to).
    public init(_ executable: String, _ arguments: [String] = [], environment: [String: String] = [:],
                stdoutDescriptor: Int32? = nil, stdinDescriptor: Int32? = nil) throws {
        directory = try makeTemporaryDirectory("hangwatch-child")
        stdoutPath = directory + "/stdout"
        stderrPath = directory + "/stderr"
        var env = ProcessInfo.processInfo.environment
        // What a supervisor of the test run told the runner (scripts/test runs the suite under
        // `hangwatch run`) is not the fixtures' business: each test gives its own.
        for name in inheritedSupervisionVariables { env[name] = nil }
        env["HANGWATCH_TEST_RUNNER_PID"] = String(getpid()) // fixtures that never exit die with the test run
        for (key, value) in environment { env[key] = value }

        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        let envp = env.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { (argv + envp).forEach { free($0) } }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        if let stdinDescriptor {
            posix_spawn_file_actions_adddup2(&actions, stdinDescriptor, 0)
        } else {
            posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        }
        if let stdoutDescriptor {
            posix_spawn_file_actions_adddup2(&actions, stdoutDescriptor, 1)
            _ = FileManager.default.createFile(atPath: stdoutPath, contents: nil)
        } else {
            posix_spawn_file_actions_addopen(&actions, 1, stdoutPath, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        }
        posix_spawn_file_actions_addopen(&actions, 2, stderrPath, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        // Nothing else of the test runner leaks into the child: a pipe or socket a child holds
        // must not keep another test waiting (glibc ≥ 2.34; not in the Glibc module's headers).
        if let closeFrom = addCloseFrom { _ = closeFrom(&actions, 3) }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        // The runner's blocked signals and ignored SIGPIPE are not the child's business.
        var none = sigset_t()
        sigemptyset(&none)
        posix_spawnattr_setsigmask(&attributes, &none)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for signal in [SIGPIPE, SIGINT, SIGTERM, SIGCHLD] { sigaddset(&defaults, signal) }
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))

        var child: pid_t = 0
        var spawned = posix_spawn(&child, executable, &actions, &attributes, argv, envp)
        // A program a test has just written may still be open for writing in a child another
        // test thread is starting (forked before the write was closed, not yet at its exec or
        // its closefrom): exec refuses it with ETXTBSY for that moment. Seen once in a fresh-clone
        // CI run (DebuginfodTests, a copied fixture); Go's os/exec retries the same way.
        for _ in 0..<50 where spawned == ETXTBSY {
            usleep(10_000)
            spawned = posix_spawn(&child, executable, &actions, &attributes, argv, envp)
        }
        guard spawned == 0 else {
            removeTemporaryDirectory(directory)
            throw TestSupportError.spawnFailed(executable, spawned)
        }
        pid = child
    }

    /// Starts one of the package's executables by product name.
    public convenience init(product: String, _ arguments: [String] = [], environment: [String: String] = [:],
                            stdoutDescriptor: Int32? = nil, stdinDescriptor: Int32? = nil) throws {
        try self.init(try productPath(product), arguments, environment: environment, stdoutDescriptor: stdoutDescriptor,
                      stdinDescriptor: stdinDescriptor)
    }

    deinit {
        if reap(block: false) == nil {
            kill(pid, SIGKILL)
            _ = reap(block: true)
        }
        removeTemporaryDirectory(directory)
    }

    public var stdout: String { (try? String(contentsOfFile: stdoutPath, encoding: .utf8)) ?? "" }
    public var stderr: String { (try? String(contentsOfFile: stderrPath, encoding: .utf8)) ?? "" }

    public func signal(_ number: Int32) {
        // A reaped pid may already belong to another process.
        if reap(block: false) == nil { kill(pid, number) }
    }

    public var isRunning: Bool { reap(block: false) == nil }

    /// The CPU time (user + system, seconds) the child used, once it has ended and been reaped
    /// here: what a time bound on a child is measured by (its own work, not the test's wall clock).
    public var cpuSeconds: Double? {
        lock.lock()
        defer { lock.unlock() }
        return usage.map { used in
            Double(used.ru_utime.tv_sec + used.ru_stime.tv_sec) + Double(used.ru_utime.tv_usec + used.ru_stime.tv_usec) / 1e6
        }
    }

    /// The raw wait status once the child has ended (reaping it), nil while it runs.
    private func reap(block: Bool) -> Int32? {
        lock.lock()
        defer { lock.unlock() }
        if let waitStatus { return waitStatus }
        var status: Int32 = 0
        var used = rusage()
        while true {
            let got = wait4(pid, &status, block ? 0 : WNOHANG, &used)
            if got == pid {
                waitStatus = status
                usage = used
                return status
            }
            if got == 0 { return nil }
            if errno == EINTR { continue }
            waitStatus = 0x7f00 // ECHILD: reaped elsewhere; say "exit 127" rather than wait forever
            return waitStatus
        }
    }

    /// Waits until stdout contains `text`; throws (and says what the child printed) after `timeout` seconds.
    @discardableResult
    public func waitForOutput(_ text: String, timeout: Double = 30) throws -> String {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            let out = stdout
            if out.contains(text) { return out }
            if let status = reap(block: false) {
                let final = stdout
                if final.contains(text) { return final }
                throw TestSupportError.timedOut("child exited (\(Self.shellStatus(status))) before printing \"\(text)\"; stdout: \(final) stderr: \(stderr)")
            }
            usleep(5_000)
        }
        throw TestSupportError.timedOut("\"\(text)\" after \(timeout)s; stdout: \(stdout) stderr: \(stderr)")
    }

    /// Waits for the child to exit; kills it and throws after `timeout` seconds.
    /// Returns the exit status, or 128+N for death by signal N (as a shell reports it).
    @discardableResult
    public func waitForExit(timeout: Double = 60) throws -> Int32 {
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            if let status = reap(block: false) { return Self.shellStatus(status) }
            if Date() > deadline {
                kill(pid, SIGKILL)
                _ = reap(block: true)
                throw TestSupportError.timedOut("child did not exit within \(timeout)s; stdout: \(stdout) stderr: \(stderr)")
            }
            usleep(5_000)
        }
    }

    static func shellStatus(_ status: Int32) -> Int32 {
        let signal = status & 0x7f
        return signal != 0 ? 128 + signal : (status >> 8) & 0xff
    }
}

private let inheritedSupervisionVariables = [
    "HANGWATCH_RUN_ID", "HANGWATCH_MONITOR_SOCKET", "NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID",
]

private typealias AddCloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32
private let addCloseFrom: AddCloseFrom? = dlsym(nil, // RTLD_DEFAULT
                                           "posix_spawn_file_actions_addclosefrom_np")
    .map { unsafeBitCast($0, to: AddCloseFrom.self) }

/// What a program run to its end printed.
public struct ProgramResult: Sendable {
    public var status: Int32
    public var stdout: String
    public var stderr: String
    /// The CPU time the program used (user + system, seconds).
    public var cpuSeconds: Double = 0
}

/// Runs a program to its end (killing it after `timeout` seconds, which throws).
public func runProgram(_ executable: String, _ arguments: [String], environment: [String: String] = [:],
                       timeout: Double = 120) throws -> ProgramResult {
    let child = try ChildProcess(executable, arguments, environment: environment)
    let status = try child.waitForExit(timeout: timeout)
    return ProgramResult(status: status, stdout: child.stdout, stderr: child.stderr, cpuSeconds: child.cpuSeconds ?? 0)
}
