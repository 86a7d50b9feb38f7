// Clocks, statistics, /proc readings and child processes shared by every bench section.
import Foundation
import HangwatchPlatform
import HangwatchCapture
#if canImport(Glibc)
import Glibc
#endif

enum Clock {
    /// CLOCK_MONOTONIC in nanoseconds (vDSO: ~20 ns, cheap enough for the spinning thread).
    @inline(__always) static func nanos() -> UInt64 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
    }

    /// CPU time of the calling thread (a real syscall, ~0.3 µs).
    @inline(__always) static func threadCPUNanos() -> UInt64 {
        var now = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now)
        return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
    }

    /// CPU time of this process's children that have been waited for (getrusage
    /// RUSAGE_CHILDREN, user + system, µs resolution): a quiet capture's helper, once reaped.
    static func reapedChildrenCPUNanos() -> UInt64 {
        var usage = rusage()
        getrusage(RUSAGE_CHILDREN.rawValue, &usage)
        let micros = (usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1_000_000 + usage.ru_utime.tv_usec + usage.ru_stime.tv_usec
        return UInt64(max(micros, 0)) * 1000
    }

    static func seconds() -> Double { Double(nanos()) / 1e9 }

    static func sleep(seconds: Double) {
        guard seconds > 0 else { return }
        var request = timespec(tv_sec: Int(seconds), tv_nsec: Int((seconds - seconds.rounded(.down)) * 1e9))
        var remaining = timespec()
        while nanosleep(&request, &remaining) != 0 && errno == EINTR { request = remaining }
    }
}

enum Stats {
    static func median(_ values: [Double]) -> Double {
        guard !values.isEmpty else { return .nan }
        let sorted = values.sorted()
        let middle = sorted.count / 2
        return sorted.count % 2 == 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2
    }

    static func max(_ values: [Double]) -> Double { values.max() ?? .nan }
    static func min(_ values: [Double]) -> Double { values.min() ?? .nan }
}

/// Bench-side readings over the package's one /proc reader (Sources/HangwatchPlatform/ProcFS.swift).
enum ProcReading {
    static func text(_ path: String, limit: Int = 1 << 20) -> String? { ProcFS.readText(path, limit: limit) }

    /// A "Key:   value kB" line of a /proc status file, as a number.
    static func statusValue(_ key: String, path: String = "/proc/self/status") -> Double? {
        ProcFS.status(path)[key]?.split(whereSeparator: { $0 == " " || $0 == "\t" }).first.flatMap { Double($0) }
    }

    /// Involuntary context switches of one thread of this process (the scheduler took its CPU away).
    static func involuntarySwitches(tid: Int32) -> Double {
        statusValue("nonvoluntary_ctxt_switches", path: "/proc/self/task/\(tid)/status") ?? 0
    }

    /// User + system CPU seconds of the whole process (getrusage: scheduler-accurate, not ticks).
    static func processCPUSeconds() -> Double {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        func seconds(_ t: timeval) -> Double { Double(t.tv_sec) + Double(t.tv_usec) / 1e6 }
        return seconds(usage.ru_utime) + seconds(usage.ru_stime)
    }

    static func executablePath() -> String { ProcFS.readLink("/proc/self/exe") ?? CommandLine.arguments[0] }
}

/// The calling thread's kernel id, through the capture shim (hwc_gettid).
func currentTID() -> Int32 { LiveCapture.currentThreadID() }

struct BenchFailure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// A child program with its stdout read line by line; killed if it outlives `deadline`.
final class ChildProgram: @unchecked Sendable {
    let process = Process()
    private let output = Pipe()
    private var buffered = Data()
    let arguments: [String]

    init(executable: String, arguments: [String], environment: [String: String]? = nil,
         stderr: FileHandle? = FileHandle.standardError, deadline: Double = 120) throws {
        self.arguments = arguments
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        if let environment { process.environment = environment }
        process.standardOutput = output
        process.standardError = stderr
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let process = self.process
        DispatchQueue.global().asyncAfter(deadline: .now() + deadline) {
            if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        }
    }

    var pid: Int32 { process.processIdentifier }

    /// The next line, or nil at end of output.
    func readLine() -> String? {
        while true {
            if let newline = buffered.firstIndex(of: UInt8(ascii: "\n")) {
                let line = String(decoding: buffered[buffered.startIndex..<newline], as: UTF8.self)
                buffered = Data(buffered[(newline + 1)...])
                return line
            }
            let more = output.fileHandleForReading.availableData
            if more.isEmpty {
                if buffered.isEmpty { return nil }
                defer { buffered = Data() }
                return String(decoding: buffered, as: UTF8.self)
            }
            buffered.append(more)
        }
    }

    /// Skips lines until one starts with `prefix`; fails at end of output.
    func expectLine(prefix: String) throws -> String {
        while let line = readLine() {
            if line.hasPrefix(prefix) { return line }
            FileHandle.standardError.write(Data("  child: \(line)\n".utf8))
        }
        throw BenchFailure("child \(arguments.first ?? "") ended before printing \(prefix)")
    }

    func stop() {
        if process.isRunning { kill(pid, SIGKILL) }
        process.waitUntilExit()
    }
}

/// Wall time of one run of a command, output to `outputPath`, and its exit status. posix_spawn +
/// waitpid, not Foundation's Process: its waitUntilExit polls the run loop and added ~50 ms to
/// every measured command here (51 ms for /bin/true), which flattered the slow peers' ratios.
func timeCommand(_ executable: String, _ arguments: [String], outputPath: String,
                 environment: [String: String]? = nil) throws -> (seconds: Double, status: Int32) {
    let started = Clock.seconds()
    let command = try startCommand(executable, arguments, outputPath: outputPath, environment: environment)
    let status = waitCommand(command)
    return (Clock.seconds() - started, status)
}

/// A command started with its output in a file (commands that must run at the same time).
struct StartedCommand {
    let pid: pid_t
}

func startCommand(_ executable: String, _ arguments: [String], outputPath: String,
                  environment: [String: String]? = nil) throws -> StartedCommand {
    let sink = open(outputPath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
    guard sink >= 0 else { throw BenchFailure("cannot write \(outputPath)") }
    defer { close(sink) }
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
    posix_spawn_file_actions_adddup2(&actions, sink, 1)
    posix_spawn_file_actions_adddup2(&actions, sink, 2)
    let argv = ([executable] + arguments).map { strdup($0) } + [nil]
    defer { argv.forEach { free($0) } }
    let environmentStrings = environment.map { $0.map { "\($0.key)=\($0.value)" } }
    let envp: [UnsafeMutablePointer<CChar>?]? = environmentStrings.map { $0.map { strdup($0) } + [nil] }
    defer { envp?.forEach { free($0) } }
    var pid: pid_t = 0
    let result = envp.map { posix_spawn(&pid, executable, &actions, nil, argv, $0) } ?? posix_spawn(&pid, executable, &actions, nil, argv, environ)
    guard result == 0 else { throw BenchFailure("cannot start \(executable): \(String(cString: strerror(result)))") }
    return StartedCommand(pid: pid)
}

/// Waits for a started command: its exit status, or 128 + the signal that ended it.
func waitCommand(_ command: StartedCommand) -> Int32 { waitCommandUsage(command).status }

/// Waits for a started command: its exit status (as `waitCommand`) and its peak resident memory
/// in KiB (wait4's ru_maxrss: the most it ever had resident, file pages mapped included).
func waitCommandUsage(_ command: StartedCommand) -> (status: Int32, peakKiB: Double) {
    var status: Int32 = 0
    var usage = rusage()
    while wait4(command.pid, &status, 0, &usage) < 0 && errno == EINTR {}
    let exited = status & 0x7F == 0
    return (exited ? (status >> 8) & 0xFF : 128 + (status & 0x7F), Double(usage.ru_maxrss))
}

/// First executable named `name` on PATH (or the path itself if it contains a slash).
func findExecutable(_ name: String) -> String? {
    if name.contains("/") { return access(name, X_OK) == 0 ? name : nil }
    let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
    for directory in path.split(separator: ":") {
        let candidate = "\(directory)/\(name)"
        if access(candidate, X_OK) == 0 { return candidate }
    }
    return nil
}

func makeTemporaryDirectory() throws -> String {
    var template = Array((NSTemporaryDirectory() + "/hangwatch-bench.XXXXXX").utf8CString)
    guard let made = mkdtemp(&template) else { throw BenchFailure("mkdtemp failed: errno \(errno)") }
    return String(cString: made)
}

func progress(_ text: String) {
    FileHandle.standardError.write(Data("[bench] \(text)\n".utf8))
}

/// One line to stdout with a single write(2): children talk to the bench this way, unbuffered.
func emitLine(_ text: String) {
    let bytes = Array((text + "\n").utf8)
    var offset = 0
    while offset < bytes.count {
        let written = bytes[offset...].withUnsafeBytes { write(STDOUT_FILENO, $0.baseAddress, $0.count) }
        if written <= 0 { if errno == EINTR { continue } else { return } }
        offset += written
    }
}

/// A copy of the running bench without DWARF, for valgrind: Debian 12's valgrind (3.19) cannot
/// read the toolchain's DWARF 5. Made once per run, in `workDirectory`.
func valgrindReadyBench(workDirectory: String) throws -> String {
    let bench = workDirectory + "/bench-stripped"
    if access(bench, X_OK) == 0 { return bench }
    guard let objcopy = findExecutable("objcopy"),
          try timeCommand(objcopy, ["--strip-debug", ProcReading.executablePath(), bench], outputPath: workDirectory + "/objcopy.txt").status == 0
    else { throw BenchFailure("objcopy --strip-debug of the bench failed (binutils)") }
    return bench
}
