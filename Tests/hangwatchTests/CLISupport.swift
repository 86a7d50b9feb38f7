// Runs the real `hangwatch` executable against a private database and reads what it left.
import HangwatchDatabase
import HangwatchReport
import Foundation
import HangwatchTestSupport
import Testing

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

/// Every function name in a thread's frames.
func functionNames(_ thread: Report.Thread) -> [String] { thread.frames.compactMap(\.function) }
