// What a report may leave out (issue 11): what the program was given or printed, and raw
// memory, which a report sent to an upload server should carry only when the user agrees.
// Applied to a snapshot before anything is built from it (DumpProcessor: the report, the
// dump kept beside it, so minidumps and uploads too), and by HangMonitor at capture, so a
// redacted value is not even staged. docs/report-schema.md lists what a report contains.

/// Parts of a report to leave out. Configured as a comma-separated list of names:
/// `arguments`, `key-values`, `stderr`, `stack-memory`, `kernel-log` (or `all`, or `none`).
public struct Redaction: OptionSet, Sendable, Hashable, CustomStringConvertible {
    /// The parts as bits.
    public let rawValue: Int
    /// The parts `rawValue` holds.
    public init(rawValue: Int) { self.rawValue = rawValue }

    /// Every command-line argument after the program (argv[1...]) becomes `<redacted>`, in the
    /// report, its process tree and the minidump's command-line stream.
    public static let arguments = Redaction(rawValue: 1 << 0)
    /// `KEY=VALUE` tokens (`TOKEN=abc`, `--password=abc`) in arguments, annotation values and
    /// the stderr tail keep their key: `KEY=<redacted>`.
    public static let keyValues = Redaction(rawValue: 1 << 1)
    /// The tail of the job's stderr that `hangwatch run` attaches.
    public static let stderrTail = Redaction(rawValue: 1 << 2)
    /// Each thread's stack window: the raw stack bytes a minidump carries (unwound frames stay).
    public static let stackMemory = Redaction(rawValue: 1 << 3)
    /// The kernel log's line a `killed` report gives as evidence (it names the process's user
    /// and memory figures): `kernel: <redacted>`.
    public static let kernelLog = Redaction(rawValue: 1 << 4)
    /// Everything above.
    public static let all: Redaction = [.arguments, .keyValues, .stderrTail, .stackMemory, .kernelLog]

    /// What replaces a redacted value.
    public static let placeholder = "<redacted>"
    /// The annotation that records what a report had redacted (e.g. "arguments,stack-memory").
    public static let annotationKey = "hangwatch.redacted"

    static let names: [(Redaction, String)] = [
        (.arguments, "arguments"), (.keyValues, "key-values"), (.stderrTail, "stderr"), (.stackMemory, "stack-memory"),
        (.kernelLog, "kernel-log"),
    ]

    /// Parses "arguments,stack-memory", "all" or "none" (or ""): a name it does not know is an
    /// error that lists the ones it does.
    public init(names list: String) throws(RedactionError) {
        self = []
        for name in list.split(separator: ",").map({ $0.filter { !$0.isWhitespace } }) where !name.isEmpty {
            switch name {
            case "all": formUnion(.all)
            case "none": break
            default:
                guard let known = Self.names.first(where: { $0.1 == name }) else { throw RedactionError(name: String(name)) }
                insert(known.0)
            }
        }
    }

    /// The names, comma-separated ("" when nothing is redacted).
    public var description: String { names?.joined(separator: ",") ?? "" }

    /// `text` with the value of every `KEY=VALUE` token replaced: a token is a run of
    /// non-whitespace; its key, before the first `=`, is 1–128 characters of A-Z a-z 0-9 _ . -
    /// (so `--password=x` is one, `a == b` and `x=` are not changed). Whitespace is kept as is.
    public static func redactingKeyValues(in text: String) -> String {
        var output = ""
        output.reserveCapacity(text.utf8.count)
        var token = ""
        func flush() {
            defer { token = "" }
            guard let equals = token.firstIndex(of: "="), equals != token.startIndex,
                  token.index(after: equals) != token.endIndex else { output += token; return }
            let key = token[..<equals]
            guard key.utf8.count <= 128, key.utf8.allSatisfy(isKeyByte) else { output += token; return }
            output += key + "=" + placeholder
        }
        for character in text {
            if character.isWhitespace { flush(); output.append(character) } else { token.append(character) }
        }
        flush()
        return output
    }

    private static func isKeyByte(_ byte: UInt8) -> Bool {
        (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A)
            || byte == 0x5F || byte == 0x2E || byte == 0x2D
    }

    /// Annotations with `KEY=VALUE` values redacted (when this redaction asks for it) and the
    /// `hangwatch.redacted` annotation naming everything left out so far, this one included.
    public func redact(annotations: [String: String]) -> [String: String] {
        var result = annotations
        if contains(.keyValues) {
            for (key, value) in annotations where key != Self.annotationKey {
                result[key] = Self.redactingKeyValues(in: value)
            }
        }
        result[Self.annotationKey] = Self.recorded(in: annotations).union(self).description
        return result
    }

    /// What the annotations say was left out already.
    public static func recorded(in annotations: [String: String]) -> Redaction {
        (try? Redaction(names: annotations[annotationKey] ?? "")) ?? []
    }

    /// The names, one per element; nil when nothing is redacted (a report's `redacted`).
    public var names: [String]? { isEmpty ? nil : Self.names.filter { contains($0.0) }.map(\.1) }

    /// argv with what this redaction leaves out replaced (argv[0], the program, is kept).
    public func redact(arguments: [String]) -> [String] {
        guard let program = arguments.first else { return arguments }
        if contains(.arguments) { return [program] + Array(repeating: Self.placeholder, count: arguments.count - 1) }
        if contains(.keyValues) { return [program] + arguments.dropFirst().map(Self.redactingKeyValues) }
        return arguments
    }
}

/// A redaction name that is not one (in a configuration or `--redact`).
public struct RedactionError: Error, Equatable, CustomStringConvertible {
    /// The name that is not a redaction.
    public var name: String
    /// An error about `name`.
    public init(name: String) { self.name = name }
    /// The name, and the names that are known.
    public var description: String {
        "unknown redaction \"\(name)\" (known: \(Redaction.names.map(\.1).joined(separator: ", ")), all, none)"
    }
}

extension ProcessSnapshot {
    /// This snapshot with what `redaction` leaves out removed, and the annotation that records it.
    package func redacted(_ redaction: Redaction) -> ProcessSnapshot {
        guard !redaction.isEmpty else { return self }
        var copy = self
        copy.process.arguments = redaction.redact(arguments: process.arguments)
        copy.annotations = redaction.redact(annotations: annotations)
        if redaction.contains(.stackMemory) {
            for index in copy.threads.indices { copy.threads[index].stackMemory = [] }
        }
        return copy
    }
}
