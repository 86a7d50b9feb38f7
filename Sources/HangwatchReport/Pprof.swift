// pprof profiles of a report's samples: a gzipped profile.proto (github.com/google/pprof,
// proto/profile.proto), what `go tool pprof`, Pyroscope, Parca, Grafana and speedscope open.
// docs/pprof.md says what each field holds. Drawn, in order of preference, from the raw samples
// (addresses, so locations, mappings with build ids, inlined functions, files and lines), from
// the report's sampled stacks (names only), or from every thread's stack, one sample each.
import HangwatchPlatform
import HangwatchSymbolication
import HangwatchSnapshot
import FoundationEssentials

/// Where a profile's samples come from when their addresses are at hand: a hang's kept dump,
/// or the samples `hangwatch dump --samples` just took.
package struct PprofSource {
    package var samples: [StackSample]
    package var modules: [ModuleSnapshot]
    /// The capture's tasks: a sample's thread that runs one is labelled with it.
    package var tasks: [TaskSnapshot]
    package var symbolicator: Symbolicator

    package init(samples: [StackSample], modules: [ModuleSnapshot], tasks: [TaskSnapshot] = [], symbolicator: Symbolicator) {
        self.samples = samples
        self.modules = modules
        self.tasks = tasks
        self.symbolicator = symbolicator
    }

    /// The hang samples of `snapshot` (a report's kept intermediate dump); nil when it has none.
    package init?(snapshot: ProcessSnapshot, symbolicator: Symbolicator) {
        guard case .hang(let info) = snapshot.reason, !info.samples.isEmpty else { return nil }
        self.init(samples: info.samples, modules: snapshot.modules, tasks: snapshot.tasks?.tasks ?? [], symbolicator: symbolicator)
    }
}

package enum Pprof {
    /// The gzipped profile.proto of `report`'s samples; `source` gives their addresses when known.
    package static func profile(_ report: Report, source: PprofSource? = nil) -> Data? {
        Gzip.compress(Data(encode(report, source: source)))
    }

    /// The profile.proto message itself, uncompressed.
    package static func encode(_ report: Report, source: PprofSource? = nil) -> [UInt8] {
        var profile = PprofBuilder(report: report, modules: source?.modules ?? report.modules.map(\.snapshot), tasks: source?.tasks ?? [])
        for sample in samples(of: report, source: source) { profile.add(sample) }
        return profile.finish()
    }

    /// One sample: its stack innermost first, one entry per address (that address's frames,
    /// inlined ones first, as `Report.Frame` lists them), and the thread it was taken from.
    struct Sample {
        var stack: [[Report.Frame]]
        var count: Int
        var tid: Int32?
    }

    static func samples(of report: Report, source: PprofSource?) -> [Sample] {
        if let source, !source.samples.isEmpty {
            let frames = ReportBuilder.frames(ofSamples: source.samples, modules: source.modules, symbolicator: source.symbolicator)
            return zip(source.samples, frames).compactMap { sample, frames in
                sample.count > 0 ? Sample(stack: byAddress(frames), count: sample.count, tid: sample.tid) : nil
            }
        }
        if let stacks = report.hang?.stacks ?? report.profile?.stacks, !stacks.isEmpty {
            // Names only (a report without its dump): one frame per name, no address.
            return stacks.map { stack in
                Sample(stack: stack.frames.reversed().enumerated().map { index, name in [Report.Frame(index: index, address: 0, function: name)] },
                       count: stack.count, tid: nil)
            }
        }
        return report.threads.filter { !$0.frames.isEmpty }.map { Sample(stack: byAddress($0.frames), count: 1, tid: $0.tid) }
    }

    /// Frames grouped by the address they were symbolicated from (inlined frames share its index).
    static func byAddress(_ frames: [Report.Frame]) -> [[Report.Frame]] {
        var groups: [[Report.Frame]] = []
        for frame in frames {
            if let last = groups.last?.last, last.index == frame.index {
                groups[groups.count - 1].append(frame)
            } else {
                groups.append([frame])
            }
        }
        return groups
    }
}

/// The tables of a profile as it is built: strings, functions, locations and mappings, each
/// entry written once and referred to by its id.
private struct PprofBuilder {
    // profile.proto's field numbers.
    private enum Field {
        static let sampleType = 1, sample = 2, mapping = 3, location = 4, function = 5, stringTable = 6
        static let timeNanos = 9, durationNanos = 10, periodType = 11, period = 12, comment = 13, defaultSampleType = 14
    }

    private struct LocationKey: Hashable {
        var address: UInt64
        var returnAddress: Bool
        /// For frames without an address (names only).
        var name: String
    }

    private struct FunctionKey: Hashable {
        var name: String
        var file: String
    }

    private struct Mapping {
        var module: ModuleSnapshot
        var hasFunctions = false, hasFilenames = false, hasLineNumbers = false, hasInlineFrames = false
    }

    private let report: Report
    private let modules: [ModuleSnapshot]
    private let periodNanoseconds: Int64
    private let labels: PprofLabels
    private var strings: [String] = [""]
    private var stringIDs: [String: Int64] = ["": 0]
    private var functionIDs: [FunctionKey: UInt64] = [:]
    private var locationIDs: [LocationKey: UInt64] = [:]
    private var mappingIDs: [String: Int] = [:]
    private var mappings: [Mapping] = []
    private var body = ProtobufWriter()

    init(report: Report, modules: [ModuleSnapshot], tasks: [TaskSnapshot]) {
        self.report = report
        self.modules = modules
        labels = PprofLabels(report: report, tasks: tasks)
        // pprof takes the first mapping for the program's own ("File:" in its header).
        if let executable = modules.first(where: { $0.path == report.process.executable }) {
            mappingIDs[executable.path] = 0
            mappings.append(Mapping(module: executable))
        }
        let seconds: Double
        if let hang = report.hang, hang.samples > 0 {
            seconds = hang.durationSeconds / Double(hang.samples)    // the spacing of its samples, on average
        } else {
            seconds = report.profile?.intervalSeconds ?? 0
        }
        periodNanoseconds = seconds.isFinite && seconds > 0 ? Int64(min(seconds, 1e9) * 1e9) : 0
    }

    mutating func add(_ sample: Pprof.Sample) {
        let locations = sample.stack.enumerated().map { index, frames in location(frames, returnAddress: index > 0) }
        // (key, str) or (key, num), as string-table ids.
        let labels = self.labels.of(thread: sample.tid).map { key, value -> (Int64, Int64?, Int64) in
            switch value {
            case .text(let text): (string(key), string(text), 0)
            case .number(let number): (string(key), nil, number)
            }
        }
        let count = Int64(sample.count)
        let wall = count.multipliedReportingOverflow(by: periodNanoseconds)
        body.message(Field.sample) { message in
            message.packed(1, locations)
            message.packed(2, [UInt64(count), UInt64(bitPattern: wall.overflow ? .max : wall.partialValue)])
            for (key, text, number) in labels {
                message.message(3) { label in
                    label.int(1, key)
                    if let text { label.int(2, text) } else { label.int(3, number) }
                }
            }
        }
    }

    /// The profile: the samples added, then the tables they refer to.
    mutating func finish() -> [UInt8] {
        var out = ProtobufWriter()
        let (samples, count, wall, unit) = (string("samples"), string("count"), string("wall"), string("nanoseconds"))
        out.message(Field.sampleType) { $0.int(1, samples); $0.int(2, count) }
        out.message(Field.sampleType) { $0.int(1, wall); $0.int(2, unit) }
        var bytes = out.bytes + body.bytes
        out = ProtobufWriter()
        for (index, mapping) in mappings.enumerated() { write(mapping, id: UInt64(index + 1), to: &out) }
        let start = report.hang?.startTime ?? report.timestamp
        let duration = report.hang?.durationSeconds ?? report.profile.map { Double($0.samples) * $0.intervalSeconds } ?? 0
        out.int(Field.timeNanos, nanoseconds(start))
        out.int(Field.durationNanos, nanoseconds(duration))
        out.message(Field.periodType) { $0.int(1, wall); $0.int(2, unit) }
        out.int(Field.period, periodNanoseconds)
        let comments = ["hangwatch \(report.kind.rawValue) report \(report.id)", ReportRenderer.reason(report)]
        out.packed(Field.comment, comments.map { UInt64(string($0)) })
        out.int(Field.defaultSampleType, samples)
        for text in strings { out.string(Field.stringTable, text) }
        bytes += out.bytes
        return bytes
    }

    private func nanoseconds(_ seconds: Double) -> Int64 {
        seconds.isFinite && seconds > 0 && seconds < 9e9 ? Int64(seconds * 1e9) : 0
    }

    private mutating func string(_ text: String) -> Int64 {
        if let id = stringIDs[text] { return id }
        let id = Int64(strings.count)
        strings.append(text)
        stringIDs[text] = id
        return id
    }

    /// The location of one address (its frames, inlined first), written the first time it is met.
    private mutating func location(_ frames: [Report.Frame], returnAddress: Bool) -> UInt64 {
        let first = frames[0]
        let key = LocationKey(address: first.address, returnAddress: returnAddress,
                              name: first.address == 0 ? ReportRenderer.foldedName(first) : "")
        if let id = locationIDs[key] { return id }
        let id = UInt64(locationIDs.count + 1)
        locationIDs[key] = id
        let mapping = first.module.flatMap { mappingID($0, frames: frames) } ?? 0
        let lines = frames.map { frame in (function(frame), Int64(frame.line ?? 0), Int64(frame.column ?? 0)) }
        body.message(Field.location) { message in
            message.uint(1, id)
            message.uint(2, mapping)
            message.uint(3, first.address)
            for (function, line, column) in lines {
                message.message(4) { $0.uint(1, function); $0.int(2, line); $0.int(3, column) }
            }
        }
        return id
    }

    private mutating func function(_ frame: Report.Frame) -> UInt64 {
        let key = FunctionKey(name: ReportRenderer.foldedName(frame), file: frame.file ?? "")
        if let id = functionIDs[key] { return id }
        let id = UInt64(functionIDs.count + 1)
        functionIDs[key] = id
        let (name, file) = (string(key.name), string(key.file))
        body.message(Field.function) { message in
            message.uint(1, id)
            // No system_name: symbolication keeps only the demangled name, and a system_name
            // equal to the name would have pprof take the name for a C++ one and cut its "(…)".
            message.int(2, name)
            message.int(4, file)
        }
        return id
    }

    /// The mapping of the module at `path` (0 when no captured module has that path); what
    /// `frames` know is recorded in its has_* flags.
    private mutating func mappingID(_ path: String, frames: [Report.Frame]) -> UInt64? {
        let index: Int
        if let known = mappingIDs[path] {
            index = known
        } else {
            guard let module = modules.first(where: { $0.path == path }) else { return nil }
            index = mappings.count
            mappingIDs[path] = index
            mappings.append(Mapping(module: module))
        }
        mappings[index].hasFunctions = mappings[index].hasFunctions || frames.contains { $0.function != nil }
        mappings[index].hasFilenames = mappings[index].hasFilenames || frames.contains { $0.file != nil }
        mappings[index].hasLineNumbers = mappings[index].hasLineNumbers || frames.contains { $0.line != nil }
        mappings[index].hasInlineFrames = mappings[index].hasInlineFrames || frames.contains(where: \.inlined)
        return UInt64(index + 1)
    }

    private mutating func write(_ mapping: Mapping, id: UInt64, to out: inout ProtobufWriter) {
        let module = mapping.module
        let (file, buildID) = (string(module.path), string(module.buildID))
        out.message(Field.mapping) { message in
            message.uint(1, id)
            message.uint(2, module.start)
            message.uint(3, module.end)
            // The file offset of memory_start: its link-time address (the first PT_LOAD's
            // offset and address are equal in the objects linkers write).
            message.uint(4, module.start &- module.base)
            message.int(5, file)
            message.int(6, buildID)
            message.bool(7, mapping.hasFunctions)
            message.bool(8, mapping.hasFilenames)
            message.bool(9, mapping.hasLineNumbers)
            message.bool(10, mapping.hasInlineFrames)
        }
    }
}

/// The labels of a sample: the hang's target on every sample; its thread's name, id and roles,
/// and the Swift task that thread runs, when the sample's thread is known.
private struct PprofLabels {
    enum Value {
        case text(String)
        case number(Int64)
    }

    private let target: String?
    private let threads: [Int32: Report.Thread]

    private let tasks: [TaskSnapshot]

    init(report: Report, tasks: [TaskSnapshot]) {
        self.tasks = tasks
        target = report.hang?.target.name
        var threads: [Int32: Report.Thread] = [:]
        for thread in report.threads where threads[thread.tid] == nil { threads[thread.tid] = thread }
        self.threads = threads
    }

    func of(thread tid: Int32?) -> [(String, Value)] {
        var labels: [(String, Value)] = []
        if let target { labels.append(("target", .text(target))) }
        guard let tid else { return labels }
        labels.append(("thread_id", .number(Int64(tid))))
        if let thread = threads[tid] {
            labels.append(("thread", .text(thread.name)))
            if !thread.roles.isEmpty { labels.append(("role", .text(thread.roles.names.joined(separator: ",")))) }
        }
        for task in tasks where task.thread == tid {
            labels.append(("task", .text(task.name.map { "\(task.id) \($0)" } ?? String(task.id))))
        }
        return labels
    }
}
