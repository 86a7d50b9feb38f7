// Shared by all test targets: start the package's own fixture programs as real child
// processes, wait for them with deadlines, and read what they printed.
import Foundation
#if canImport(Glibc)
import Glibc
#endif

public enum TestSupportError: Error, CustomStringConvertible {
    case timedOut(String)
    case missingProduct(String)

    public var description: String {
        switch self {
        case .timedOut(let what): return "timed out: \(what)"
        case .missingProduct(let name): return "missing build product \(name): run `swift build --build-tests` first"
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
    var template = Array("\(NSTemporaryDirectory())/\(label).XXXXXX".utf8CString)
    let made = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
    guard made != nil else { throw POSIXError(.init(rawValue: errno) ?? .EIO) }
    return String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
}

public func removeTemporaryDirectory(_ path: String) {
    try? FileManager.default.removeItem(atPath: path)
}

/// A running child whose stdout and stderr go to files (no pipe can fill up and block it).
public final class ChildProcess: @unchecked Sendable {
    public let process = Process()
    public let stdoutPath: String
    public let stderrPath: String
    private let directory: String

    public var pid: Int32 { process.processIdentifier }

    public init(_ executable: String, _ arguments: [String] = [], environment: [String: String] = [:]) throws {
        directory = try makeTemporaryDirectory("hangwatch-child")
        stdoutPath = directory + "/stdout"
        stderrPath = directory + "/stderr"
        _ = FileManager.default.createFile(atPath: stdoutPath, contents: nil)
        _ = FileManager.default.createFile(atPath: stderrPath, contents: nil)
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        var env = ProcessInfo.processInfo.environment
        env["HANGWATCH_TEST_RUNNER_PID"] = String(getpid()) // fixtures that never exit die with the test run
        for (key, value) in environment { env[key] = value }
        process.environment = env
        process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: stdoutPath))
        process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: stderrPath))
        process.standardInput = FileHandle.nullDevice
        try process.run()
    }

    /// Starts one of the package's executables by product name.
    public convenience init(product: String, _ arguments: [String] = [], environment: [String: String] = [:]) throws {
        try self.init(try productPath(product), arguments, environment: environment)
    }

    deinit {
        if process.isRunning { kill(pid, SIGKILL); process.waitUntilExit() }
        removeTemporaryDirectory(directory)
    }

    public var stdout: String { (try? String(contentsOfFile: stdoutPath, encoding: .utf8)) ?? "" }
    public var stderr: String { (try? String(contentsOfFile: stderrPath, encoding: .utf8)) ?? "" }

    public func signal(_ number: Int32) { kill(pid, number) }

    /// Waits until stdout contains `text`; throws (and says what the child printed) after `timeout` seconds.
    @discardableResult
    public func waitForOutput(_ text: String, timeout: Double = 30) throws -> String {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            let out = stdout
            if out.contains(text) { return out }
            if !process.isRunning {
                let final = stdout
                if final.contains(text) { return final }
                throw TestSupportError.timedOut("child exited (\(process.terminationStatus)) before printing \"\(text)\"; stdout: \(final) stderr: \(stderr)")
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
        while process.isRunning {
            if Date() > deadline {
                kill(pid, SIGKILL)
                process.waitUntilExit()
                throw TestSupportError.timedOut("child did not exit within \(timeout)s; stdout: \(stdout) stderr: \(stderr)")
            }
            usleep(5_000)
        }
        process.waitUntilExit()
        switch process.terminationReason {
        case .uncaughtSignal: return 128 + process.terminationStatus
        default: return process.terminationStatus
        }
    }
}
