// HangMonitor → hangwatch messages (one per datagram, text, versioned by the first word).
// TODO(lead): move beside HangMonitor's sender so both sides share one definition.

enum MonitorMessage: Equatable {
    case heartbeat
    case hang(tid: Int32?, stagedPath: String?)
    case recovered(seconds: Double?)

    static let prefix = "hangwatch/1"

    init?(datagram: String) {
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
