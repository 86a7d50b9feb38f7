// One bench run's figures: printed as a Markdown table and saved as JSON for comparisons.
import Foundation

struct BenchRow: Codable, Sendable {
    var section: String
    var measure: String
    /// nil when the figure could not be measured (see `note`).
    var value: Double?
    var unit: String
    /// Human-readable target, e.g. "≤ 1.05"; nil when the row is informative only.
    var target: String?
    /// Whether `value` meets `target`; nil without a target or value.
    var met: Bool?
    var note: String?

    var formattedValue: String {
        guard let value else { return "—" }
        switch unit {
        case "x": return String(format: value < 1 ? "%.2fx" : "%.1fx", value)
        case "ratio": return String(format: "%.3f", value)
        case "%": return String(format: "%+.2f %%", value)
        case "bytes": return "\(Int(value.rounded())) B"
        case "count": return "\(Int(value.rounded()))"
        default:
            if value >= 100 { return String(format: "%.0f %@", value, unit) }
            if value >= 10 { return String(format: "%.1f %@", value, unit) }
            return String(format: "%.2f %@", value, unit)
        }
    }
}

struct MachineInfo: Codable, Sendable {
    var cpus: Int
    var cpuModel: String
    var kernel: String
    var loadAverage: String
    var date: String
    var swift: String

    static func current() -> MachineInfo {
        let cpuinfo = ProcReading.text("/proc/cpuinfo") ?? ""
        let model = cpuinfo.split(separator: "\n").first { $0.hasPrefix("model name") }
            .map { $0.split(separator: ":", maxSplits: 1).last.map { $0.trimmingCharacters(in: .whitespaces) } ?? "" } ?? "unknown"
        var names = utsname()
        uname(&names)
        let release = withUnsafeBytes(of: names.release) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        let load = (ProcReading.text("/proc/loadavg") ?? "").split(separator: " ").prefix(3).joined(separator: " ")
        let formatter = ISO8601DateFormatter()
        #if compiler(>=6.3)
        let swift = "6.3+"
        #else
        let swift = "6.x"
        #endif
        return MachineInfo(cpus: Int(sysconf(Int32(_SC_NPROCESSORS_ONLN))), cpuModel: model, kernel: release,
                           loadAverage: load, date: formatter.string(from: Date()), swift: swift)
    }
}

struct BenchResults: Codable, Sendable {
    var machine: MachineInfo
    var loadAtEnd: String = ""
    var rows: [BenchRow] = []
    var durationSeconds: Double = 0

    mutating func add(_ section: String, _ measure: String, _ value: Double?, _ unit: String,
                      target: String? = nil, met: Bool? = nil, note: String? = nil) {
        rows.append(BenchRow(section: section, measure: measure, value: value, unit: unit, target: target,
                             met: value == nil ? nil : met, note: note))
    }

    func markdownTable() -> String {
        var lines = ["| # | Measure | Value | Target | Met | Note |", "|---|---|---|---|---|---|"]
        for row in rows {
            let met = row.met.map { $0 ? "yes" : "**no**" } ?? ""
            lines.append("| \(row.section) | \(row.measure) | \(row.formattedValue) | \(row.target ?? "") | \(met) | \(row.note ?? "") |")
        }
        let judged = rows.filter { $0.target != nil }
        lines.append("")
        lines.append("Targets met: \(judged.filter { $0.met == true }.count) of \(rows.count) rows"
                     + (judged.count < rows.count ? " (\(rows.count - judged.count) without a target)" : "")
                     + (judged.contains { $0.met == nil } ? "; not measured: " + judged.filter { $0.met == nil }.map(\.measure).joined(separator: ", ") : ""))
        return lines.joined(separator: "\n")
    }

    func machineLine() -> String {
        "\(machine.cpus) CPUs (`nproc`), \(machine.cpuModel), Linux \(machine.kernel), load average \(machine.loadAverage) at start / \(loadAtEnd) at end, \(machine.date), release build, run took \(Int(durationSeconds)) s"
    }

    func json() throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        return try encoder.encode(self)
    }
}
