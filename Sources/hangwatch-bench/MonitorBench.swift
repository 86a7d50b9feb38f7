// Sections 1 and 2: detection latency and monitor overhead. Pending until HangMonitor lands.
import Foundation

enum MonitorBench {
    static func runChildIfAsked(_ arguments: [String]) throws {}

    static func detectionLatency(into results: inout BenchResults, workDirectory: String) throws {
        results.add("1", "detection latency (detected − hang start) / threshold", nil, "ratio", target: "≤ 1.05",
                    note: "pending HangMonitor")
    }

    static func overhead(into results: inout BenchResults, workDirectory: String) throws {
        results.add("2", "main-queue throughput loss, monitor on vs off", nil, "%", target: "≤ 0.5 %", note: "pending HangMonitor")
    }
}
