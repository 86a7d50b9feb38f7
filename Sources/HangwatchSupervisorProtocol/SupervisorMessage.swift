// The liveness datagrams between a monitored program (HangMonitor) and its supervisor
// (`hangwatch run`): one text line per datagram, versioned by its first word. Both sides
// link this target and nothing else of each other. docs/hang-monitor.md ("Under hangwatch
// run") documents both versions; this build sends version 2 and reads 1 and 2.
import HangwatchSnapshot

/// One datagram from a monitored program to `hangwatch run`.
package enum SupervisorMessage: Equatable, Sendable {
    case heartbeat
    case hang(MonitorHang)
    case recovered(seconds: Double?)

    package static let environmentVariable = "HANGWATCH_MONITOR_SOCKET"
    package static let prefix = "hangwatch/2"
    /// What version 1 (hangwatch before schemaVersion 2 reports) sent; still read.
    package static let versionOnePrefix = "hangwatch/1"
    /// A datagram longer than this is not one of ours.
    package static let maximumLength = 4096
    /// Hung threads named in one message at most.
    package static let maximumThreads = 64
    /// Watched operations named in one message at most (the longest-running first).
    package static let maximumOperations = 8
    /// The most of an operation's name a message carries, in bytes.
    package static let maximumOperationNameBytes = 64

    package var datagram: String {
        switch self {
        case .heartbeat: return "\(Self.prefix) heartbeat"
        case .hang(let hang):
            var words = ["\(Self.prefix) hang"]
            if let target = hang.target { words.append("target=\(Self.escape(target.name))") }
            if !hang.threads.isEmpty { words.append("threads=" + hang.threads.prefix(Self.maximumThreads).map(String.init).joined(separator: ",")) }
            if let start = hang.startTime { words.append("start=\(start)") }
            if let bundle = hang.bundleID { words.append("bundle=\(Self.escape(bundle))") }
            if let staged = hang.stagedID { words.append("staged=\(Self.escape(staged))") }
            if let database = hang.databasePath { words.append("database=\(Self.escape(database))") }
            if let threshold = hang.thresholdSeconds { words.append("threshold=\(threshold)") }
            let line = words.joined(separator: " ")
            // As many of the operations as fit: a longer datagram would not be read at all. The
            // list is escaped as a whole, as every value is (its names once more, within).
            var operations = ""
            for count in stride(from: min(hang.operations.count, Self.maximumOperations), to: 0, by: -1) {
                let value = Self.escape(hang.operations.prefix(count).map(Self.operationItem).joined(separator: ","))
                if line.utf8.count + " operations=".utf8.count + value.utf8.count <= Self.maximumLength {
                    operations = " operations=" + value
                    break
                }
            }
            return line + operations
        case .recovered(let seconds): return "\(Self.prefix) recovered" + (seconds.map { " seconds=\($0)" } ?? "")
        }
    }

    /// nil for anything that is not a well-formed message of version 1 or 2 (unknown kinds
    /// included); unknown fields are skipped.
    package init?(datagram: String) {
        guard datagram.utf8.count <= Self.maximumLength else { return nil }
        var words = datagram.split(separator: " ").map(String.init)
        guard let version = words.first, version == Self.prefix || version == Self.versionOnePrefix, words.count >= 2 else { return nil }
        words.removeFirst()
        let kind = words.removeFirst()
        var fields: [String: String] = [:]
        for word in words {
            guard let equals = word.firstIndex(of: "=") else { continue }
            fields[String(word[..<equals])] = Self.unescape(String(word[word.index(after: equals)...]))
        }
        switch kind {
        case "heartbeat": self = .heartbeat
        case "hang":
            var hang = MonitorHang()
            if version == Self.versionOnePrefix {
                // Version 1: the main queue, one thread, the staged dump's path.
                hang.threads = fields["tid"].flatMap { Int32($0) }.map { [$0] } ?? []
                hang.stagedPath = fields["staged"]
            } else {
                hang.target = fields["target"].flatMap { $0.isEmpty || $0.utf8.count > 256 ? nil : HangTarget(name: $0) }
                hang.threads = (fields["threads"] ?? "").split(separator: ",").prefix(Self.maximumThreads)
                    .compactMap { Int32($0) }.filter { $0 > 0 }
                hang.startTime = fields["start"].flatMap { Double($0) }.flatMap { $0.isFinite && $0 > 0 ? $0 : nil }
                hang.bundleID = fields["bundle"]
                hang.stagedID = fields["staged"]
                hang.databasePath = fields["database"].flatMap { $0.hasPrefix("/") && !$0.utf8.contains(0) ? $0 : nil }
                hang.thresholdSeconds = fields["threshold"].flatMap { Double($0) }.flatMap { $0.isFinite && $0 > 0 && $0 <= 86_400 ? $0 : nil }
                hang.operations = (fields["operations"] ?? "").split(separator: ",").prefix(Self.maximumOperations)
                    .compactMap { Self.operation(item: $0) }
            }
            self = .hang(hang)
        case "recovered": self = .recovered(seconds: fields["seconds"].flatMap { Double($0) })
        default: return nil
        }
    }

    /// One operation of `operations=`: `thread/start/limit/traceparent/name`, the traceparent
    /// `-` when none, the name cut and escaped (an escaped value has no `/` nor `,`).
    static func operationItem(_ operation: RunningOperation) -> String {
        let name = RunningOperation(name: String(decoding: operation.name.utf8.prefix(maximumOperationNameBytes), as: UTF8.self),
                                    startTime: 0, limitSeconds: 0, task: 0, thread: 0).name
        return "\(operation.thread)/\(operation.startTime)/\(operation.limitSeconds)/\(operation.traceparent ?? "-")/\(escape(name))"
    }

    /// An item `operationItem` wrote; nil when it is not one.
    static func operation(item: Substring) -> RunningOperation? {
        let parts = item.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 5, let thread = Int32(parts[0]), thread > 0,
              let start = Double(parts[1]), Plausible.time(start), let limit = Double(parts[2]), Plausible.duration(limit)
        else { return nil }
        let name = unescape(String(parts[4]))
        guard !name.isEmpty, name.utf8.count <= maximumOperationNameBytes else { return nil }
        // A traceparent of another form is dropped by RunningOperation.init.
        return RunningOperation(name: name, startTime: start, limitSeconds: limit, task: 0, thread: thread,
                                traceparent: parts[3] == "-" ? nil : String(parts[3]))
    }

    /// Field values are single words: bytes other than [A-Za-z0-9._:@-] are %XX.
    static func escape(_ text: String) -> String {
        var out = ""
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: ":"), UInt8(ascii: "@"), UInt8(ascii: "-"):
                out.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                out += "%" + String(decoding: [hexDigits[Int(byte >> 4)], hexDigits[Int(byte & 15)]], as: UTF8.self)
            }
        }
        return out
    }

    private static let hexDigits = Array("0123456789ABCDEF".utf8)

    static func unescape(_ text: String) -> String {
        var bytes: [UInt8] = []
        var utf8 = Array(text.utf8)[...]
        while let byte = utf8.popFirst() {
            if byte == UInt8(ascii: "%"), utf8.count >= 2,
               let value = UInt8(String(decoding: utf8.prefix(2), as: UTF8.self), radix: 16) {
                bytes.append(value)
                utf8 = utf8.dropFirst(2)
            } else {
                bytes.append(byte)
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}

/// A hang a monitored program's HangMonitor detected, as reported to its supervisor.
package struct MonitorHang: Equatable, Sendable {
    /// What stopped answering (sent by its name: "main-queue", "cooperative-pool",
    /// "event-loop:2", …); nil in version 1 messages, which were always about the main queue.
    package var target: HangTarget?
    /// The hung threads the monitor found (the main-queue drainer, an event loop's thread,
    /// pool threads stuck in the same frames).
    package var threads: [Int32]
    /// When the hang started, seconds since 1970 (the late ping's send time).
    package var startTime: Double?
    /// The monitor's bundle id: the staged dump is `<database>/staging/<bundleID>@<stagedID>.hang.dump`.
    package var bundleID: String?
    package var stagedID: String?
    /// Version 1 sent the staged dump's path instead.
    package var stagedPath: String?
    /// The database the monitor stages in (absolute), when the monitor sent it: the supervisor may store
    /// its report in another one, and then takes the staged hang over from this one, so one
    /// event is one report. An optional field of version 2 (older supervisors skip it).
    package var databasePath: String?
    /// The threshold the monitor measured this hang against, seconds (an operation's own limit
    /// for an operation). An optional field of version 2: older supervisors skip it, and a
    /// message without it is judged against `hangwatch run`'s own threshold.
    package var thresholdSeconds: Double?
    /// The watched operations running when the hang began (`HangMonitor.watch`), with their
    /// traceparents (docs/traces.md): at most `maximumOperations`, names cut to 64 bytes, as
    /// many as fit in one datagram. An optional field of version 2 (older supervisors skip it).
    package var operations: [RunningOperation]

    package init(target: HangTarget? = nil, threads: [Int32] = [], startTime: Double? = nil, bundleID: String? = nil,
                 stagedID: String? = nil, stagedPath: String? = nil, databasePath: String? = nil, thresholdSeconds: Double? = nil,
                 operations: [RunningOperation] = []) {
        self.target = target
        self.threads = threads
        self.startTime = startTime
        self.bundleID = bundleID
        self.stagedID = stagedID
        self.stagedPath = stagedPath
        self.databasePath = databasePath
        self.thresholdSeconds = thresholdSeconds
        self.operations = operations
    }

    /// The target, with version 1's implied main queue.
    package var hangTarget: HangTarget { target ?? .mainQueue }
}
