// Running the system tools tests compare against (nm, readelf, eu-addr2line, gcc, …).
import Foundation

/// Runs a program to completion and returns its stdout; throws when it fails.
@discardableResult
public func runTool(_ executable: String, _ arguments: [String]) throws -> String {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    let output = Pipe()
    process.standardOutput = output
    process.standardError = FileHandle.nullDevice
    try process.run()
    let data = output.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    guard process.terminationStatus == 0 else {
        throw ToolFailure(command: ([executable] + arguments).joined(separator: " "), status: process.terminationStatus)
    }
    return String(decoding: data, as: UTF8.self)
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

