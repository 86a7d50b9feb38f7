// Running the system tools tests compare against (nm, readelf, eu-addr2line, gcc, …).
import Foundation

/// Runs a program to completion and returns its stdout; throws when it fails or takes longer
/// than `timeout` seconds.
@discardableResult
public func runTool(_ executable: String, _ arguments: [String], timeout: Double = 120) throws -> String {
    let result = try runProgram(executable, arguments, timeout: timeout)
    guard result.status == 0 else {
        throw ToolFailure(command: ([executable] + arguments).joined(separator: " "), status: result.status)
    }
    return result.stdout
}

public struct ToolFailure: Error, CustomStringConvertible {
    public var command: String
    public var status: Int32
    public init(command: String, status: Int32) {
        self.command = command
        self.status = status
    }

    public var description: String { "\(command) exited with \(status)" }
}

/// TracerPid of every thread of `pid` (a capture must leave them all 0).
public func tracerPIDs(of pid: Int32) -> [Int32] {
    let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
    return tasks.compactMap { tid in
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/task/\(tid)/status", encoding: .utf8) else { return nil }
        return status.split(separator: "\n").first { $0.hasPrefix("TracerPid:") }
            .flatMap { Int32($0.dropFirst(10).trimmingCharacters(in: .whitespaces)) }
    }
}
