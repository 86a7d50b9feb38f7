// Reads what hangwatch-fixture-capture prints (see its Report.swift) and resolves addresses against
// the fixture's own symbol table with `nm`, a test-only stand-in for real symbolication.
import Foundation
import HangwatchSnapshot
import HangwatchTestSupport

package struct FixtureThread {
    package var fields: [String: String]
    package var tid: Int32 { Int32(fields["tid"] ?? "") ?? -1 }
    package var name: String { fields["name"] ?? "" }
    package var state: String { fields["state"] ?? "" }
    /// nil when the fixture printed a status this build does not know.
    package var status: ThreadCaptureStatus? { ThreadCaptureStatus(name: fields["status"] ?? "") }
    package var roles: ThreadRoles { ThreadRoles(names: (fields["roles"] ?? "").split(separator: ",").map(String.init)) }
    package var syscall: String { fields["syscall"] ?? "" }
    package var queue: String { fields["queue"] ?? "" }
    package var frames: [UInt64] { (fields["frames"] ?? "").split(separator: ",").compactMap { UInt64($0.dropFirst(2), radix: 16) } }
}

package struct FixtureOutput {
    package var snapshot: [String: String] = [:]
    package var threads: [FixtureThread] = []
    package var modules: [[String: String]] = []
    package var tasksBefore: [Int32] = []
    package var tasksAfter: [Int32] = []
    package var lines: [String] = []

    package init(_ text: String) {
        for line in text.split(separator: "\n").map(String.init) {
            lines.append(line)
            let words = line.split(separator: " ").map(String.init)
            guard let kind = words.first else { continue }
            let fields = Self.fields(words.dropFirst())
            switch kind {
            case "SNAPSHOT": snapshot = fields
            case "THREAD": threads.append(FixtureThread(fields: fields))
            case "MODULE": modules.append(fields)
            case "TASKS_BEFORE": tasksBefore = words.count > 1 ? words[1].split(separator: ",").compactMap { Int32($0) } : []
            case "TASKS_AFTER": tasksAfter = words.count > 1 ? words[1].split(separator: ",").compactMap { Int32($0) } : []
            default: break
            }
        }
    }

    package static func fields(_ words: ArraySlice<String>) -> [String: String] {
        var result: [String: String] = [:]
        for word in words {
            guard let equals = word.firstIndex(of: "=") else { continue }
            let value = String(word[word.index(after: equals)...])
            result[String(word[..<equals])] = value == "-" ? "" : decode(value)
        }
        return result
    }

    package static func decode(_ text: String) -> String {
        text.replacingOccurrences(of: "%20", with: " ").replacingOccurrences(of: "%0A", with: "\n")
            .replacingOccurrences(of: "%25", with: "%")
    }

    package func thread(named name: String) -> FixtureThread? { threads.first { $0.name == name } }

    /// `frames` as "file+0xoffset" by the modules the fixture listed (for failure messages: a
    /// frame's function can be looked up afterwards, its process gone).
    package func describe(_ frames: [UInt64]) -> String {
        let known = modules.compactMap { module -> (path: String, base: UInt64, start: UInt64, end: UInt64)? in
            guard let path = module["path"], let base = UInt64((module["base"] ?? "").dropFirst(2), radix: 16),
                  let start = UInt64((module["start"] ?? "").dropFirst(2), radix: 16),
                  let end = UInt64((module["end"] ?? "").dropFirst(2), radix: 16) else { return nil }
            return (path, base, start, end)
        }
        return frames.map { address in
            guard let module = known.first(where: { $0.start <= address && address < $0.end }) else { return "0x" + String(address, radix: 16) }
            return (module.path.split(separator: "/").last.map(String.init) ?? module.path) + "+0x" + String(address &- module.base, radix: 16)
        }.joined(separator: " ")
    }

    /// Load bias of the module at `path`.
    package func base(of path: String) -> UInt64? {
        modules.first { $0["path"] == path }.flatMap { UInt64(($0["base"] ?? "").dropFirst(2), radix: 16) }
    }
}

/// Address ranges (link-time) of the defined symbols of an ELF file, from `nm -S --defined-only`.
package struct SymbolRanges {
    package var ranges: [(name: String, start: UInt64, end: UInt64)] = []

    package init(file: String) throws {
        let data = try runTool("/usr/bin/nm", ["-S", "--defined-only", file])
        for line in data.split(separator: "\n") {
            let parts = line.split(separator: " ", maxSplits: 3)
            guard parts.count == 4, let start = UInt64(parts[0], radix: 16), let size = UInt64(parts[1], radix: 16) else { continue }
            ranges.append((String(parts[3]), start, start + size))
        }
    }

    /// Whether one of `frames` (runtime addresses, module loaded with `bias`) lies in a symbol
    /// whose mangled name contains `identifier`. Return addresses point after their call, so
    /// `frame - 1` is what must fall inside the caller.
    package func contains(_ identifier: String, frames: [UInt64], bias: UInt64) -> Bool {
        let matching = ranges.filter { $0.name.contains(identifier) }
        return frames.contains { frame in
            let linkTime = frame &- bias &- 1
            return matching.contains { linkTime >= $0.start && linkTime < $0.end }
        }
    }
}
