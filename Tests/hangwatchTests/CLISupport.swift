// Runs the real `hangwatch` executable against a private database and reads what it left.
import HangwatchDatabase
import HangwatchReport
import Foundation
import HangwatchTestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// A private database directory, removed when the value is released.
final class TemporaryDatabase {
    let path: String

    init() throws { path = try makeTemporaryDirectory("hangwatch-cli") + "/db" }
    deinit { removeTemporaryDirectory((path as NSString).deletingLastPathComponent) }

    var environment: [String: String] { ["HANGWATCH_DATABASE_PATH": path] }

    func reports() throws -> [Report] {
        let database = try CrashReportDatabase(path: path)
        return try database.listReports().map { try Report.decode(from: database.readReport(id: $0.id)) }
    }

    func stagingFiles() throws -> [String] { try CrashReportDatabase(path: path).stagingArea.fileNames() }
}

/// `hangwatch ARGS…` as a child process.
func hangwatch(_ arguments: [String], database: TemporaryDatabase, environment: [String: String] = [:]) throws -> ChildProcess {
    try ChildProcess(product: "hangwatch", arguments, environment: database.environment.merging(environment) { $1 })
}

/// Runs `hangwatch ARGS…` to completion: (exit status, stdout, stderr).
func runHangwatch(_ arguments: [String], database: TemporaryDatabase, timeout: Double = 60) throws -> (status: Int32, stdout: String, stderr: String) {
    let child = try hangwatch(arguments, database: database)
    let status = try child.waitForExit(timeout: timeout)
    return (status, child.stdout, child.stderr)
}

/// A live Swift process to dump, its threads parked in `parkedRecursion` (its modules give
/// symbolication and the symbol cache work to do).
func parkedSwiftTarget() throws -> ChildProcess {
    let target = try ChildProcess(product: "hangwatch-fixture-remote", ["threads", "2"])
    try target.waitForOutput("READY")
    return target
}

/// Every function name in a thread's frames.
func functionNames(_ thread: Report.Thread) -> [String] { thread.frames.compactMap(\.function) }

/// A non-blocking TCP socket listening on a free loopback port, and the port; nil when none
/// could be made. Closing it frees the port for a server a test starts.
func loopbackListener() -> (fd: Int32, port: UInt16)? {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
    guard fd >= 0 else { return nil }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) { pointer in
        pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            bind(fd, $0, length) == 0 && listen(fd, 8) == 0 && getsockname(fd, $0, &length) == 0
        }
    }
    guard bound else {
        close(fd)
        return nil
    }
    return (fd, UInt16(bigEndian: address.sin_port))
}

