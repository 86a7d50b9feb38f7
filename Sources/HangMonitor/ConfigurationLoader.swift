// Reads config/hangwatch.json-style files and HANGWATCH_* overrides. A small strict loader
// rather than swift-configuration: we need "unknown key → error" and no extra build cost
// (see docs/hang-monitor.md, "Why not swift-configuration").
import Foundation

extension HangMonitor.Configuration {
    /// Every key the file may contain, with the environment variable that overrides it.
    public static let keys: [(file: String, environment: String)] = [
        ("threshold", "HANGWATCH_THRESHOLD"),
        ("sampleInterval", "HANGWATCH_SAMPLE_INTERVAL"),
        ("maxSamples", "HANGWATCH_MAX_SAMPLES"),
        ("databasePath", "HANGWATCH_DATABASE_PATH"),
        ("bundleID", "HANGWATCH_BUNDLE_ID"),
        ("targets", "HANGWATCH_TARGETS"),
        ("keepRecoveredHangsLongerThan", "HANGWATCH_KEEP_RECOVERED_HANGS_LONGER_THAN"),
        ("dedupWindow", "HANGWATCH_DEDUP_WINDOW"),
        ("suspendWhenTraced", "HANGWATCH_SUSPEND_WHEN_TRACED"),
    ]
    /// Bounded read: a config file is small; anything bigger is not ours.
    static let maxFileBytes = 64 * 1024

    /// Loads `path` (nil: no file, defaults only), applies `HANGWATCH_*` from `environment`,
    /// validates. Named queues cannot come from a file: pass them in `queues`.
    public static func load(path: String?, environment: [String: String] = ProcessInfo.processInfo.environment,
                            queues: [DispatchQueue] = []) throws -> HangMonitor.Configuration {
        var values: [String: Any] = [:]
        if let path { values = try readFile(path) }
        for (fileKey, envKey) in keys {
            guard let raw = environment[envKey] else { continue }
            values[fileKey] = EnvironmentValue(variable: envKey, text: raw)
        }
        var config = HangMonitor.Configuration(databasePath: "/var/tmp/hangwatch", bundleID: "hangwatch.unnamed")
        if let v = values["threshold"] { config.threshold = try duration(v, "threshold") }
        if let v = values["sampleInterval"] { config.sampleInterval = try duration(v, "sampleInterval") }
        if let v = values["maxSamples"] { config.maxSamples = try integer(v, "maxSamples") }
        if let v = values["databasePath"] { config.databasePath = try string(v, "databasePath") }
        if let v = values["bundleID"] { config.bundleID = try string(v, "bundleID") }
        if let v = values["keepRecoveredHangsLongerThan"] {
            config.keepRecoveredHangsLongerThan = (v as? JSONValue) == .null ? nil : try duration(v, "keepRecoveredHangsLongerThan")
        }
        if let v = values["dedupWindow"] { config.dedupWindow = try duration(v, "dedupWindow") }
        if let v = values["suspendWhenTraced"] { config.suspendWhenTraced = try boolean(v, "suspendWhenTraced") }
        if let v = values["targets"] { config.targets = try targets(v, queues: queues) }
        else { config.targets = [.mainQueue] + queues.map { .queue($0) } }
        do { try config.validate() } catch let error as ConfigurationError {
            throw ConfigurationError(key: nameOf(error.key, in: values), problem: error.problem)
        }
        return config
    }

    /// An environment override keeps its variable's name so errors name what the user set.
    private struct EnvironmentValue { var variable: String; var text: String }

    private static func nameOf(_ key: String, in values: [String: Any]) -> String {
        (values[key] as? EnvironmentValue)?.variable ?? key
    }

    private static func readFile(_ path: String) throws -> [String: Any] {
        try readObject(path).mapValues { $0 as Any }
    }

    private static func readObject(_ path: String) throws -> [String: JSONValue] {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw ConfigurationError(key: path, problem: "cannot open: \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var bytes = [UInt8](repeating: 0, count: maxFileBytes + 1)
        var used = 0
        while used < bytes.count {
            let n = bytes[used...].withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if n < 0 {
                if errno == EINTR { continue }
                throw ConfigurationError(key: path, problem: "cannot read: \(String(cString: strerror(errno)))")
            }
            if n == 0 { break }
            used += n
        }
        guard used <= maxFileBytes else { throw ConfigurationError(key: path, problem: "larger than \(maxFileBytes) bytes") }
        let parsed: JSONValue
        do { parsed = try JSONDecoder().decode(JSONValue.self, from: Data(bytes[..<used])) } catch {
            throw ConfigurationError(key: path, problem: "not valid JSON: \(error)")
        }
        guard case .object(var object) = parsed else { throw ConfigurationError(key: path, problem: "top level must be a JSON object") }
        object.removeValue(forKey: "$comment")
        let known = Set(keys.map(\.file))
        if let unknown = object.keys.sorted().first(where: { !known.contains($0) }) {
            throw ConfigurationError(key: unknown, problem: "unknown key in \(path) (known: \(keys.map(\.file).joined(separator: ", ")))")
        }
        return object
    }

    private static func duration(_ value: Any, _ key: String) throws -> Duration {
        let seconds: Double
        if let env = value as? EnvironmentValue {
            guard let parsed = Double(env.text.trimmingCharacters(in: .whitespaces)), parsed.isFinite else {
                throw ConfigurationError(key: env.variable, problem: "expected seconds as a number, got \"\(env.text)\"")
            }
            seconds = parsed
        } else if case .number(let number) = value as? JSONValue {
            seconds = number
        } else {
            throw ConfigurationError(key: key, problem: "expected seconds as a number, got \(value)")
        }
        guard seconds.isFinite, abs(seconds) < 1e9 else { throw ConfigurationError(key: nameOf(key, value), problem: "out of range: \(seconds)") }
        guard seconds >= 0 else { throw ConfigurationError(key: nameOf(key, value), problem: "must not be negative, got \(seconds) s") }
        return .secondsValue(seconds)
    }

    private static func nameOf(_ key: String, _ value: Any) -> String { (value as? EnvironmentValue)?.variable ?? key }

    private static func integer(_ value: Any, _ key: String) throws -> Int {
        if let env = value as? EnvironmentValue {
            guard let parsed = Int(env.text.trimmingCharacters(in: .whitespaces)) else {
                throw ConfigurationError(key: env.variable, problem: "expected an integer, got \"\(env.text)\"")
            }
            guard parsed >= 0 else { throw ConfigurationError(key: env.variable, problem: "must not be negative, got \(parsed)") }
            return parsed
        }
        guard case .number(let number) = value as? JSONValue, number == number.rounded(), abs(number) < 1e9 else {
            throw ConfigurationError(key: key, problem: "expected an integer, got \(value)")
        }
        guard number >= 0 else { throw ConfigurationError(key: key, problem: "must not be negative, got \(Int(number))") }
        return Int(number)
    }

    private static func string(_ value: Any, _ key: String) throws -> String {
        if let env = value as? EnvironmentValue { return env.text }
        guard case .string(let text) = value as? JSONValue else { throw ConfigurationError(key: key, problem: "expected a string, got \(value)") }
        return text
    }

    private static func boolean(_ value: Any, _ key: String) throws -> Bool {
        if let env = value as? EnvironmentValue {
            switch env.text.lowercased() {
            case "1", "true", "yes", "on": return true
            case "0", "false", "no", "off": return false
            default: throw ConfigurationError(key: env.variable, problem: "expected true or false, got \"\(env.text)\"")
            }
        }
        guard case .bool(let flag) = value as? JSONValue else {
            throw ConfigurationError(key: key, problem: "expected true or false, got \(value)")
        }
        return flag
    }

    /// "main-queue", "cooperative-pool", or "queue:LABEL" naming one of `queues`.
    private static func targets(_ value: Any, queues: [DispatchQueue]) throws -> [WatchTarget] {
        let names: [String]
        let key = nameOf("targets", value)
        if let env = value as? EnvironmentValue {
            names = env.text.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        } else if case .array(let list) = value as? JSONValue {
            names = try list.map { item in
                guard case .string(let name) = item else { throw ConfigurationError(key: key, problem: "expected target names (strings), got \(item)") }
                return name
            }
        } else {
            throw ConfigurationError(key: key, problem: "expected a list of target names, got \(value)")
        }
        return try names.map { name in
            switch name {
            case "main-queue": return .mainQueue
            case "cooperative-pool": return .cooperativePool
            default:
                if name.hasPrefix("queue:") {
                    let label = String(name.dropFirst("queue:".count))
                    guard let queue = queues.first(where: { $0.label == label }) else {
                        throw ConfigurationError(key: key, problem: "\"\(name)\": no DispatchQueue with label \"\(label)\" was passed to load(queues:)")
                    }
                    return .queue(queue)
                }
                throw ConfigurationError(key: key, problem: "unknown target \"\(name)\" (known: main-queue, cooperative-pool, queue:LABEL)")
            }
        }
    }
}

/// JSON with its types kept apart (a Foundation NSNumber cannot tell `true` from `1` here).
enum JSONValue: Decodable, Equatable, CustomStringConvertible {
    case null, bool(Bool), number(Double), string(String), array([JSONValue]), object([String: JSONValue])

    init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() { self = .null }
        else if let flag = try? container.decode(Bool.self) { self = .bool(flag) }
        else if let number = try? container.decode(Double.self) { self = .number(number) }
        else if let text = try? container.decode(String.self) { self = .string(text) }
        else if let list = try? container.decode([JSONValue].self) { self = .array(list) }
        else { self = .object(try container.decode([String: JSONValue].self)) }
    }

    var description: String {
        switch self {
        case .null: return "null"
        case .bool(let b): return String(b)
        case .number(let n): return String(n)
        case .string(let s): return "\"\(s)\""
        case .array(let a): return "[" + a.map(\.description).joined(separator: ", ") + "]"
        case .object: return "an object"
        }
    }
}
