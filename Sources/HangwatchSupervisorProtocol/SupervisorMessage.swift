// The liveness datagrams between a monitored program (HangMonitor) and its supervisor
// (`hangwatch run`): one text line per datagram, versioned by its first word. Both sides
// link this target and nothing else of each other.
/// One datagram from a monitored program to `hangwatch run`. Text, versioned by its first word.
package enum SupervisorMessage: Equatable, Sendable {
    case heartbeat
    case hang(tid: Int32?, stagedPath: String?)
    case recovered(seconds: Double?)

    package static let environmentVariable = "HANGWATCH_MONITOR_SOCKET"
    package static let prefix = "hangwatch/1"

    package var datagram: String {
        switch self {
        case .heartbeat: return "\(Self.prefix) heartbeat"
        case let .hang(tid, staged):
            return "\(Self.prefix) hang" + (tid.map { " tid=\($0)" } ?? "") + (staged.map { " staged=\($0)" } ?? "")
        case .recovered(let seconds): return "\(Self.prefix) recovered" + (seconds.map { " seconds=\($0)" } ?? "")
        }
    }

    package init?(datagram: String) {
        var words = datagram.split(separator: " ").map(String.init)
        guard words.first == Self.prefix, words.count >= 2 else { return nil }
        words.removeFirst()
        let kind = words.removeFirst()
        var fields: [String: String] = [:]
        for word in words {
            guard let equals = word.firstIndex(of: "=") else { continue }
            fields[String(word[..<equals])] = String(word[word.index(after: equals)...])
        }
        switch kind {
        case "heartbeat": self = .heartbeat
        case "hang": self = .hang(tid: fields["tid"].flatMap { Int32($0) }, stagedPath: fields["staged"])
        case "recovered": self = .recovered(seconds: fields["seconds"].flatMap { Double($0) })
        default: return nil
        }
    }
}
