// Prints a snapshot as one line per thread/module: `KIND key=value ...`, values percent-
// encoded for space, '%' and newline so a line always splits on spaces.
import HangwatchSnapshot
import Foundation

func encoded(_ text: String) -> String {
    var out = ""
    for character in text {
        switch character {
        case "%": out += "%25"
        case " ": out += "%20"
        case "\n": out += "%0A"
        default: out.append(character)
        }
    }
    return out.isEmpty ? "-" : out
}

func hex(_ value: UInt64) -> String { "0x" + String(value, radix: 16) }

func taskIDs() -> [Int32] {
    ((try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []).compactMap { Int32($0) }.sorted()
}

func describe(_ snapshot: ProcessSnapshot) -> String {
    var lines: [String] = []
    lines.append("SNAPSHOT pid=\(snapshot.process.pid) name=\(encoded(snapshot.process.name)) exe=\(encoded(snapshot.process.executable)) args=\(encoded(snapshot.process.arguments.joined(separator: ","))) threads=\(snapshot.threads.count) modules=\(snapshot.modules.count) duration_us=\(Int(snapshot.captureDurationSeconds * 1e6))")
    for thread in snapshot.threads {
        var fields = ["tid=\(thread.tid)", "name=\(encoded(thread.name))", "state=\(encoded(thread.state.letter))",
                      "status=\(thread.status.name)", "roles=\(encoded(thread.roles.names.joined(separator: ",")))",
                      "queue=\(encoded(thread.queueLabel ?? ""))", "syscall=\(encoded(thread.syscall ?? ""))",
                      "frames=\(encoded(thread.frames.map(hex).joined(separator: ",")))",
                      "stack=\(thread.stackMemory.count)",
                      "cpu_us=\(Int((thread.cpuSeconds.user + thread.cpuSeconds.system) * 1e6))"]
        if let registers = thread.registers {
            fields.append("pc=\(hex(registers.pc))")
            fields.append("sp=\(hex(registers.sp))")
        }
        lines.append("THREAD " + fields.joined(separator: " "))
    }
    for module in snapshot.modules {
        lines.append("MODULE base=\(hex(module.base)) start=\(hex(module.start)) end=\(hex(module.end)) buildid=\(encoded(module.buildID)) path=\(encoded(module.path))")
    }
    return lines.joined(separator: "\n")
}

/// Writes everything at once and leaves: the main queue is hung on purpose, so nothing else
/// would ever end this process.
func emitAndExit(_ text: String, status: Int32 = 0) -> Never {
    FileHandle.standardOutput.write((text + "\nEND\n").data(using: .utf8)!)
    exit(status)
}
