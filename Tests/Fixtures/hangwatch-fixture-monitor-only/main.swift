// A program that links HangMonitor and nothing else of hangwatch, as a server that only
// wants a watchdog would. It blocks its main queue once (a hang the monitor stages, samples
// and, once recovered, stores as a pending dump), waits, then prints one JSON line with what
// the process has mapped and how much private memory it holds.
//
//   hangwatch-fixture-monitor-only on|off DATABASE
//
// `off` never creates a monitor: the same program, the same hang, for the memory baseline.
// The tests (library set) and scripts/bench (section 2, memory) both run it.
import Dispatch
import Foundation
import HangMonitor

let arguments = CommandLine.arguments
guard arguments.count == 3, ["on", "off"].contains(arguments[1]) else {
    FileHandle.standardError.write(Data("usage: hangwatch-fixture-monitor-only on|off DATABASE\n".utf8))
    exit(2)
}
let monitoring = arguments[1] == "on"
let hangs = HangCounter()

final class HangCounter: @unchecked Sendable {
    private let lock = NSLock()
    private var events: [String] = []
    func add(_ event: String) { lock.withLock { events.append(event) } }
    var all: [String] { lock.withLock { events } }
}

let monitor: HangMonitor? = monitoring ? try HangMonitor(configuration: .init(
    threshold: .milliseconds(200), databasePath: arguments[2], bundleID: "com.example.monitor-only",
    keepRecoveredHangsLongerThan: .zero,
    eventHandler: { event in
        switch event {
        case .detected: hangs.add("detected")
        case .recovered(_, _, _, let report): hangs.add(report == nil ? "recovered" : "stored")
        default: break
        }
    })) : nil
monitor?.start()

/// The whole of a /proc file (they report size 0, so read until end of file).
func readProc(_ path: String) -> String {
    guard let handle = FileHandle(forReadingAtPath: path), let data = try? handle.readToEnd() else { return "" }
    return String(decoding: data, as: UTF8.self)
}

/// Private and shared memory of this process, KiB, from /proc/self/smaps_rollup.
func memory() -> [String: Int] {
    let text = readProc("/proc/self/smaps_rollup")
    var values: [String: Int] = [:]
    for line in text.split(separator: "\n") {
        let parts = line.split(separator: " ", omittingEmptySubsequences: true)
        guard parts.count >= 2, parts[0].hasSuffix(":"), let kib = Int(parts[1]) else { continue }
        values[String(parts[0].dropLast())] = kib
    }
    return values
}

/// Every file the process has mapped, by path.
func mappedFiles() -> [String] {
    let text = readProc("/proc/self/maps")
    let paths = text.split(separator: "\n").compactMap { line -> String? in
        guard let slash = line.firstIndex(of: "/") else { return nil }
        return String(line[slash...])
    }
    return Array(Set(paths)).sorted()
}

@inline(never) func blockTheMainQueue() { Thread.sleep(forTimeInterval: 0.6) }

DispatchQueue.main.asyncAfter(deadline: .now() + 0.5) {
    blockTheMainQueue()
    DispatchQueue.main.asyncAfter(deadline: .now() + 1.0) {
        let line: [String: Any] = [
            "monitor": monitoring, "events": hangs.all, "memory": memory(), "mapped": mappedFiles(),
        ]
        let data = (try? JSONSerialization.data(withJSONObject: line, options: [.sortedKeys])) ?? Data("{}".utf8)
        FileHandle.standardOutput.write(data + Data("\n".utf8))
        monitor?.stop()
        exit(0)
    }
}
dispatchMain()
