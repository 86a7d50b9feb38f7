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

/// What a program did when run to its end under a python3 parent that measured it: its exit
/// status, output, peak resident memory (ru_maxrss of RUSAGE_CHILDREN, KiB) and wall time.
/// Bounds on memory are measured this way, in a process of their own, never in the parallel
/// test process.
public struct MeasuredRun: Sendable {
    public var status: Int32
    public var stdout: String
    public var stderr: String
    public var peakKiB: Int
    public var seconds: Double
}

public func runMeasured(_ executable: String, _ arguments: [String], environment: [String: String] = [:],
                        timeout: Double = 120) throws -> MeasuredRun {
    let wrapper = """
        import json, resource, subprocess, sys, time
        started = time.monotonic()
        done = subprocess.run(sys.argv[1:], capture_output=True)
        print(json.dumps({"status": done.returncode, "peak": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
                          "seconds": time.monotonic() - started, "stdout": done.stdout.decode("utf-8", "replace"),
                          "stderr": done.stderr.decode("utf-8", "replace")}))
        """
    let child = try ChildProcess("/usr/bin/python3", ["-c", wrapper, executable] + arguments, environment: environment)
    _ = try child.waitForExit(timeout: timeout)
    guard let line = child.stdout.split(separator: "\n").last,
          let fields = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] else {
        throw TestSupportError.spawnFailed("python3 measuring \(executable): \(child.stderr)", 0)
    }
    return MeasuredRun(status: Int32(fields["status"] as? Int ?? -1), stdout: fields["stdout"] as? String ?? "",
                       stderr: fields["stderr"] as? String ?? "", peakKiB: fields["peak"] as? Int ?? .max,
                       seconds: fields["seconds"] as? Double ?? .infinity)
}
