// Real minidump readers for the tests: Debian's lldb-15 and, when importable, the pure-Python
// `minidump` package (PyPI). Both run as child processes with a deadline: a reader that
// hangs on a bad dump fails the test instead of hanging it.
import Foundation
#if canImport(Glibc)
import Glibc
#endif
import HangwatchTestSupport

package struct ReaderOutput {
    package var status: Int32
    package var output: String
}

/// Runs `executable` with stdin closed, killed after `timeout` s; stdout then stderr.
package func runReader(_ executable: String, _ arguments: [String], environment: [String: String] = [:],
               timeout: Double = 120) throws -> ReaderOutput {
    let result = try runProgram(executable, arguments, environment: environment, timeout: timeout)
    return ReaderOutput(status: result.status, output: result.stdout + result.stderr)
}

package enum LLDB {
    package static let path = "/usr/bin/lldb-15"
    /// Debian's lldb-15 reports a wrong Python path (`lldb-15 -P`); point it at python3-lldb-15.
    package static let environment = ["PYTHONPATH": "/usr/lib/llvm-15/lib/python3.11/dist-packages"]

    /// `lldb-15 --batch -c FILE -o 'thread list' -o 'bt all'`.
    package static func threadsAndBacktraces(_ minidump: String) throws -> String {
        let result = try runReader(path, ["--batch", "-c", minidump, "-o", "thread list", "-o", "bt all"],
                                   environment: environment)
        return result.output
    }

    /// Lines "thread #N: tid = T, …" of `thread list` (the selected one starts with "*").
    package static func threadLines(_ output: String) -> [String] {
        output.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
            .filter { ($0.hasPrefix("thread #") || $0.hasPrefix("* thread #")) && $0.contains("tid = ") }
    }

    /// The `bt all` block of thread `tid` (from its "thread #N" header to the next).
    package static func backtrace(of tid: Int32, in output: String) -> [String] {
        let lines = output.split(separator: "\n").map(String.init)
        guard let btStart = lines.firstIndex(where: { $0.contains("(lldb) bt all") }) else { return [] }
        let listed = threadLines(output)
        guard let position = listed.firstIndex(where: { $0.contains("tid = \(tid),") }) else { return [] }
        let number = position + 1
        var block: [String] = []
        var inside = false
        for line in lines[btStart...] {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if trimmed.hasPrefix("thread #") || trimmed.hasPrefix("* thread #") {
                let header = trimmed.hasPrefix("* ") ? String(trimmed.dropFirst(2)) : trimmed
                inside = header.hasPrefix("thread #\(number)") && !header.hasPrefix("thread #\(number)0")
                    && (header == "thread #\(number)" || header.hasPrefix("thread #\(number),"))
                continue
            }
            if inside && trimmed.contains("frame #") { block.append(trimmed) }
        }
        return block
    }
}

/// The first python3 that imports `module` (a PyPI package scripts/install-deps installs where
/// pip is allowed), or nil.
package func pythonImporting(_ module: String) -> String? {
    for candidate in ["/root/.pyenv/shims/python3", "/usr/local/bin/python3", "/usr/bin/python3"]
    where FileManager.default.isExecutableFile(atPath: candidate) {
        if let result = try? runReader(candidate, ["-c", "import \(module)"], timeout: 60), result.status == 0 {
            return candidate
        }
    }
    return nil
}

package enum PythonMinidump {
    /// The first python3 on PATH that imports `minidump`, or nil.
    package static var interpreter: String? { pythonImporting("minidump") }

    /// Thread ids, memory ranges (start, size) and module names as the package reads them, as JSON.
    package static let script = """
        import json, sys
        from minidump.minidumpfile import MinidumpFile
        m = MinidumpFile.parse(sys.argv[1])
        print(json.dumps({
          "threads": [t.ThreadId for t in m.threads.threads],
          "memory": [[s.start_virtual_address, s.size] for s in m.memory_segments.memory_segments],
          "modules": [mod.name for mod in m.modules.modules],
          "exceptionThread": m.exception.exception_records[0].ThreadId,
          "exceptionCode": int(m.exception.exception_records[0].ExceptionRecord.ExceptionCode_raw),
        }))
        """
}
