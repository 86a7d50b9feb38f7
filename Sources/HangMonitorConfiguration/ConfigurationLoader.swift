// Reads config/hangwatch.json-style files and HANGWATCH_* overrides through apple/swift-configuration
// (a ConfigReader over its environment-variables provider and an in-memory provider holding the
// checked file: precedence and value conversion are its job), with the project's strictness layered on top: swift-configuration ignores
// keys nobody reads, coerces `1` to `true`, treats `null` as absent and turns unconvertible values
// into defaults unless asked with `required…`. So the file is read bounded and checked key by key
// (known key, JSON type) before the reader sees it, and every present key is read with `required…`
// and range-checked, an error naming the file key or the environment variable that set it.
import HangMonitor
import HangwatchSnapshot
import Dispatch
import FoundationEssentials
import HangwatchPlatform
import Glibc
internal import Configuration

extension HangMonitor.Configuration {
    /// Every key the file may contain, with the environment variable that overrides it.
    /// The variable is swift-configuration's encoding of the key `hangwatch.<key>`.
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
        ("redact", "HANGWATCH_REDACT"),
        ("runRecordInterval", "HANGWATCH_RUN_RECORD_INTERVAL"),
    ]
    /// Bounded read: a config file is small; anything bigger is not ours.
    static let maxFileBytes = 64 * 1024

    /// What a key holds; decides the JSON type the file must use and how the reader converts it.
    private enum Kind {
        case duration, optionalDuration, integer, string, boolean, nameList

        var expectation: String {
            switch self {
            case .duration, .optionalDuration: return "expected seconds as a number"
            case .integer: return "expected an integer"
            case .string: return "expected a string"
            case .boolean: return "expected true or false"
            case .nameList: return "expected a list of names"
            }
        }

        func accepts(_ value: JSONValue) -> Bool {
            switch (self, value) {
            case (.optionalDuration, .null): return true
            case (.duration, _), (.optionalDuration, _): return value.doubleValue != nil
            case (.integer, _): return value.doubleValue.map { $0 == $0.rounded() && abs($0) < 1e9 } ?? false
            case (.string, .string), (.boolean, .bool): return true
            case (.nameList, .array(let items)): return items.allSatisfy { if case .string = $0 { true } else { false } }
            default: return false
            }
        }
    }

    private static let kinds: [String: Kind] = [
        "threshold": .duration, "sampleInterval": .duration, "maxSamples": .integer, "databasePath": .string,
        "bundleID": .string, "targets": .nameList, "keepRecoveredHangsLongerThan": .optionalDuration,
        "dedupWindow": .duration, "suspendWhenTraced": .boolean, "redact": .nameList, "runRecordInterval": .duration,
    ]

    /// Loads `path` (nil: no file, defaults only), applies `HANGWATCH_*` from `environment`,
    /// validates. Named queues cannot come from a file: pass them in `queues`.
    public static func load(path: String?, environment: [String: String] = ProcessInfo.processInfo.environment,
                            queues: [DispatchQueue] = []) throws -> HangMonitor.Configuration {
        var providers: [any ConfigProvider] = []
        let overrides = environmentOverrides(environment)
        // Highest precedence first: HANGWATCH_<KEY> is the key `hangwatch.<key>` to this provider.
        providers.append(EnvironmentVariablesProvider(environmentVariables: overrides).prefixKeys(with: "hangwatch"))
        var fileObject: [String: JSONValue] = [:]
        if let path {
            let bytes = try readBounded(path)
            fileObject = try checkedObject(bytes, path: path)
            providers.append(InMemoryProvider(name: path, values: configValues(of: fileObject)))
        }
        let source = Source(reader: ConfigReader(providers: providers), environment: overrides, file: fileObject)

        var config = HangMonitor.Configuration(databasePath: "/var/tmp/hangwatch", bundleID: "hangwatch.unnamed")
        if let v = try source.duration("threshold") { config.threshold = v }
        if let v = try source.duration("sampleInterval") { config.sampleInterval = v }
        if let v = try source.integer("maxSamples") { config.maxSamples = v }
        if let v = try source.string("databasePath") { config.databasePath = v }
        if let v = try source.string("bundleID") { config.bundleID = v }
        config.keepRecoveredHangsLongerThan = try source.duration("keepRecoveredHangsLongerThan")
        if let v = try source.duration("dedupWindow") { config.dedupWindow = v }
        if let v = try source.boolean("suspendWhenTraced") { config.suspendWhenTraced = v }
        if let v = try source.duration("runRecordInterval") { config.runRecordInterval = v }
        if let names = try source.names("redact") {
            do { config.redaction = try Redaction(names: names.joined(separator: ",")) } catch {
                throw ConfigurationError(key: source.name(of: "redact"), problem: "\(error)")
            }
        }
        if let names = try source.names("targets") { config.targets = try targets(names, key: source.name(of: "targets"), queues: queues) }
        else { config.targets = [.mainQueue] + queues.map { .queue($0) } }
        do { try config.validate() } catch let error as ConfigurationError {
            throw ConfigurationError(key: source.name(of: error.key), problem: error.problem)
        }
        return config
    }

    static func environmentVariable(of key: String) -> String? { keys.first { $0.file == key }?.environment }

    /// Only our variables reach the provider (nothing else of the environment is read or kept).
    /// Compatibility with the loader before swift-configuration: numbers and booleans may carry
    /// surrounding blanks, and booleans also accept on/off (swift-configuration: true/false/yes/no/1/0).
    private static func environmentOverrides(_ environment: [String: String]) -> [String: String] {
        var overrides: [String: String] = [:]
        for (key, variable) in keys {
            guard let text = environment[variable] else { continue }
            switch kinds[key] {
            case .duration?, .optionalDuration?, .integer?:
                overrides[variable] = Text.trimmed(text)
            case .boolean?:
                let trimmed = Text.trimmed(text)
                switch trimmed.lowercased() {
                case "on": overrides[variable] = "true"
                case "off": overrides[variable] = "false"
                default: overrides[variable] = trimmed
                }
            default:
                overrides[variable] = text
            }
        }
        return overrides
    }

    /// The reader plus where each key came from, so errors name what the user actually wrote.
    private struct Source {
        let reader: ConfigReader
        let environment: [String: String]
        let file: [String: JSONValue]

        func fromEnvironment(_ key: String) -> String? {
            environmentVariable(of: key).flatMap { environment[$0] }
        }
        /// The environment variable if it set `key`, else the file key (or whatever `key` is).
        func name(of key: String) -> String {
            if let variable = environmentVariable(of: key), environment[variable] != nil { return variable }
            return key
        }
        /// Present means "the user set it": `null` in the file is absent (keepRecovered… only).
        func isPresent(_ key: String) -> Bool {
            if fromEnvironment(key) != nil { return true }
            if let value = file[key], value != .null { return true }
            return false
        }
        /// Reads a present key with a `required…` accessor, so a value that does not convert is an
        /// error rather than swift-configuration's fallback to a default.
        func read<Value>(_ key: String, _ get: (ConfigKey) throws -> Value) throws -> Value? {
            guard isPresent(key) else { return nil }
            do { return try get(ConfigKey(key)) } catch {
                let expectation = kinds[key]?.expectation ?? "unreadable value"
                let got = fromEnvironment(key).map { "\"\($0)\"" } ?? file[key]?.description ?? "nothing"
                throw ConfigurationError(key: name(of: key), problem: "\(expectation), got \(got)")
            }
        }

        func duration(_ key: String) throws -> Duration? {
            guard let seconds = try read(key, { try reader.requiredDouble(forKey: $0) }) else { return nil }
            guard seconds.isFinite, abs(seconds) < 1e9 else { throw ConfigurationError(key: name(of: key), problem: "out of range: \(seconds)") }
            guard seconds >= 0 else { throw ConfigurationError(key: name(of: key), problem: "must not be negative, got \(seconds) s") }
            return .secondsValue(seconds)
        }

        func integer(_ key: String) throws -> Int? {
            guard let value = try read(key, { try reader.requiredInt(forKey: $0) }) else { return nil }
            guard value >= 0 else { throw ConfigurationError(key: name(of: key), problem: "must not be negative, got \(value)") }
            return value
        }

        func string(_ key: String) throws -> String? { try read(key) { try reader.requiredString(forKey: $0) } }

        func boolean(_ key: String) throws -> Bool? { try read(key) { try reader.requiredBool(forKey: $0) } }

        /// Environment: comma-separated; blanks around names and empty items are ignored.
        func names(_ key: String) throws -> [String]? {
            try read(key) { try reader.requiredStringArray(forKey: $0) }.map { $0.filter { !$0.isEmpty } }
        }
    }

    private static func readBounded(_ path: String) throws -> [UInt8] {
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
        return Array(bytes[..<used])
    }

    /// The strictness swift-configuration does not have: a JSON object of known keys, each of
    /// the JSON type its key needs (`true` is not `1`, a string is not a number, `null` only where
    /// documented). `"$comment"` is allowed and never read.
    private static func checkedObject(_ bytes: [UInt8], path: String) throws -> [String: JSONValue] {
        let parsed: JSONValue
        do { parsed = try JSONDecoder().decode(JSONValue.self, from: Data(bytes)) } catch {
            throw ConfigurationError(key: path, problem: "not valid JSON: \(error)")
        }
        guard case .object(var object) = parsed else { throw ConfigurationError(key: path, problem: "top level must be a JSON object") }
        object.removeValue(forKey: "$comment")
        for key in object.keys.sorted() {
            guard let kind = kinds[key] else {
                throw ConfigurationError(key: key, problem: "unknown key in \(path) (known: \(keys.map(\.file).joined(separator: ", ")))")
            }
            guard let value = object[key], kind.accepts(value) else {
                throw ConfigurationError(key: key, problem: "\(kind.expectation), got \(object[key]?.description ?? "nothing")")
            }
        }
        return object
    }

    /// The checked file object as swift-configuration values (the file is parsed once, by
    /// `checkedObject`; `null` is an absent key).
    private static func configValues(of object: [String: JSONValue]) -> [AbsoluteConfigKey: ConfigValue] {
        var values: [AbsoluteConfigKey: ConfigValue] = [:]
        for (key, value) in object {
            let content: ConfigContent
            switch (kinds[key], value) {
            case (.integer?, _): content = .int(Int(value.doubleValue ?? 0))
            case (.duration?, _), (.optionalDuration?, _):
                guard let seconds = value.doubleValue else { continue }
                content = .double(seconds)
            case (_, .string(let text)): content = .string(text)
            case (_, .bool(let flag)): content = .bool(flag)
            case (_, .array(let items)):
                content = .stringArray(items.compactMap { if case .string(let text) = $0 { text } else { nil } })
            default: continue
            }
            values[AbsoluteConfigKey([key])] = ConfigValue(content, isSecret: false)
        }
        return values
    }

    /// "main-queue", "cooperative-pool", or "queue:LABEL" naming one of `queues`.
    private static func targets(_ names: [String], key: String, queues: [DispatchQueue]) throws -> [WatchTarget] {
        try names.map { name in
            switch HangTarget(name: name) {
            case .mainQueue: return .mainQueue
            case .cooperativePool: return .cooperativePool
            case .queue(let label):
                guard let queue = queues.first(where: { $0.label == label }) else {
                    throw ConfigurationError(key: key, problem: "\"\(name)\": no DispatchQueue with label \"\(label)\" was passed to load(queues:)")
                }
                return .queue(queue)
            default:
                let known = [HangTarget.mainQueue, .cooperativePool, .queue(label: "LABEL")].map(\.name).joined(separator: ", ")
                throw ConfigurationError(key: key, problem: "unknown target \"\(name)\" (known: \(known))")
            }
        }
    }
}
