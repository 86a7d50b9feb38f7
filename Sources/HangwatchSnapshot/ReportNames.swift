// Names reports spell, spelled here only, each with one codec: hang targets (`hang.target`,
// events, metric dimensions, the configuration file, `hangwatch run`'s protocol), how a hang
// ended, and a thread's or process's scheduling state (as /proc reports it; ProcFS reads it as
// this type). (Thread roles and capture statuses: ProcessSnapshot.swift.)

/// What stopped answering: the value of `HangInfo.target` and of `hang.target` in reports,
/// events, metric dimensions, the configuration file and `hangwatch run`'s protocol. Its one
/// codec is `name` / `init(name:)`; nothing else spells or parses a target.
public enum HangTarget: Hashable, Sendable, CustomStringConvertible, Codable, ExpressibleByStringLiteral {
    /// The main Dispatch queue (also the MainActor and `RunLoop.main`): `main-queue`.
    case mainQueue
    /// The Swift-concurrency cooperative pool: `cooperative-pool`.
    case cooperativePool
    /// A named DispatchQueue: `queue:<label>`.
    case queue(label: String)
    /// An operation `HangMonitor.watch` runs with a time limit: `operation:<name>`.
    case operation(name: String)
    /// `hangwatch run --silence`: the child wrote nothing for that long: `output`.
    case output
    /// `hangwatch run` of a systemd-notify child that missed its `WATCHDOG=1`: `systemd-watchdog`.
    case systemdWatchdog
    /// `hangwatch run --timeout`: the job outlived its deadline: `timeout`.
    case timeout
    /// Any other executor the program names (HangMonitorNIO's `event-loop:N`, a custom target).
    /// Built by `init(name:)`, never holding a name one of the other cases spells.
    case named(String)

    private static let queuePrefix = "queue:"
    private static let operationPrefix = "operation:"

    /// The target `name` spells.
    public init(name: String) {
        switch name {
        case "main-queue": self = .mainQueue
        case "cooperative-pool": self = .cooperativePool
        case "output": self = .output
        case "systemd-watchdog": self = .systemdWatchdog
        case "timeout": self = .timeout
        default:
            if name.hasPrefix(Self.queuePrefix) {
                self = .queue(label: String(name.dropFirst(Self.queuePrefix.count)))
            } else if name.hasPrefix(Self.operationPrefix) {
                self = .operation(name: String(name.dropFirst(Self.operationPrefix.count)))
            } else {
                self = .named(name)
            }
        }
    }

    /// How reports, events and metrics spell it (`main-queue`, `queue:com.example.db`, …).
    public var name: String {
        switch self {
        case .mainQueue: "main-queue"
        case .cooperativePool: "cooperative-pool"
        case .queue(let label): Self.queuePrefix + label
        case .operation(let name): Self.operationPrefix + name
        case .output: "output"
        case .systemdWatchdog: "systemd-watchdog"
        case .timeout: "timeout"
        case .named(let name): name
        }
    }

    /// `name`.
    public var description: String { name }

    /// The target a literal name spells (`"event-loop:1"`), as `init(name:)`.
    public init(stringLiteral name: String) { self.init(name: name) }

    /// Decodes the target's name.
    public init(from decoder: any Decoder) throws {
        self.init(name: try decoder.singleValueContainer().decode(String.self))
    }

    /// Encodes the target's name.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(name)
    }
}

/// How a hang ended, as far as whoever captured it knows: the one source of a hang report's
/// kind (`hang` or `fatal-hang`), of `hang.recovered` and of the `hang.outcome` annotation.
/// Its codec is `rawValue` (the dump's `HANG_OUTCOME` key and the annotation's value).
public enum HangOutcome: String, Sendable, Equatable, CaseIterable, Codable {
    /// Still hung when captured; how it ends is not known yet (a staged capture).
    case ongoing
    /// The target answered again.
    case recovered
    /// The process died hung: killed for hanging, or found dead with the hang still staged.
    case fatal = "fatal-hang"
    /// The monitor stopped while the hang lasted (hangs kept in memory).
    case unfinished

    /// The annotation reports carry it in.
    package static let annotationKey = "hang.outcome"

    /// The annotation's value; nil while the hang is still going on (no annotation is written then).
    package var annotation: String? { self == .ongoing ? nil : rawValue }

    /// Whether the target answered again.
    public var recovered: Bool { self == .recovered }
}

/// The annotations an operation hang carries (`HangMonitor.watch`): its name, its task's
/// address (hex), and the address of the task of its work where that is stuck when it is
/// another (a task the operation started), by which the report finds the culprit.
package enum OperationAnnotation {
    package static let name = "hang.operation"
    package static let task = "hang.operationTask"
    package static let culprit = "hang.operationCulprit"
    /// The operation's W3C traceparent (docs/traces.md), when the monitor had a trace link.
    package static let traceparent = "hang.operationTraceparent"
}

/// A thread's or process's scheduling state as Linux reports it (field 3 of /proc/…/stat, the
/// `State:` line of status): one letter, its codec. A letter this type has no name for (a newer
/// kernel's) is kept as it is. ProcFS reads states as this type; nothing compares letters.
public struct ThreadState: Hashable, Sendable, CustomStringConvertible, ExpressibleByStringLiteral {
    /// The letter, as the kernel wrote it ("?" when it could not be read).
    public let letter: String

    /// The state `letter` spells.
    public init(letter: String) { self.letter = letter }
    /// The state a literal letter spells (`"D"`).
    public init(stringLiteral letter: String) { self.letter = letter }
    /// The letter.
    public var description: String { letter }

    /// Running or runnable.
    public static let running: ThreadState = "R"
    /// Waiting, interruptibly (a blocking call, a futex, a sleep).
    public static let sleeping: ThreadState = "S"
    /// Waiting, uninterruptibly (disk or network file system I/O, some kernel locks).
    public static let diskSleep: ThreadState = "D"
    /// Stopped by a signal (job control).
    public static let stopped: ThreadState = "T"
    /// Stopped by a tracer (ptrace).
    public static let tracingStop: ThreadState = "t"
    /// Exited, not yet reaped.
    public static let zombie: ThreadState = "Z"
    /// Exiting.
    public static let dead: ThreadState = "X"
    /// An idle kernel thread.
    public static let idle: ThreadState = "I"
    /// Not read (the file was gone or unreadable).
    public static let unknown: ThreadState = "?"

    /// The state the first byte of a /proc field spells (the C parsers' `state` character).
    package init(byte: CChar) { self.letter = String(UnicodeScalar(UInt8(bitPattern: byte))) }

    /// Exited: a zombie not reaped yet, or dead. Its pid still names it, but it runs nothing.
    public var hasExited: Bool { self == .zombie || self == .dead }
}
