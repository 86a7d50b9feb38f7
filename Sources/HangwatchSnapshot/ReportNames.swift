// Names reports spell, spelled here only: the names hang targets go by (`hang.target`, events,
// metric dimensions, the configuration file, `hangwatch run`'s protocol) — HangMonitor's
// `WatchTarget.description` and the report renderer build and read them with these — and a
// thread's scheduling state. (Thread roles and capture statuses: ProcessSnapshot.swift.)

/// The names of hang targets (`HangInfo.target`, `hang.target` in reports).
public enum HangTargetName {
    /// The main Dispatch queue (also the MainActor and `RunLoop.main`).
    public static let mainQueue = "main-queue"
    /// The Swift-concurrency cooperative pool.
    public static let cooperativePool = "cooperative-pool"
    private static let queuePrefix = "queue:"

    /// A named DispatchQueue: `queue:<label>`.
    public static func queue(label: String) -> String { queuePrefix + label }

    /// The label of a `queue:<label>` name; nil for any other name.
    public static func queueLabel(of name: String) -> String? {
        name.hasPrefix(queuePrefix) ? String(name.dropFirst(queuePrefix.count)) : nil
    }

    private static let operationPrefix = "operation:"

    /// An operation `HangMonitor.watch` runs with a time limit: `operation:<name>`.
    public static func operation(_ name: String) -> String { operationPrefix + name }

    /// The name of an `operation:<name>` name; nil for any other name.
    public static func operationName(of name: String) -> String? {
        name.hasPrefix(operationPrefix) ? String(name.dropFirst(operationPrefix.count)) : nil
    }
}

/// The annotations an operation hang carries (`HangMonitor.watch`): its name and its task's
/// address (hex), by which the report finds the culprit among the tasks.
package enum OperationAnnotation {
    package static let name = "hang.operation"
    package static let task = "hang.operationTask"
}

/// A thread's scheduling state as Linux reports it (field 3 of /proc/…/stat): one letter. A
/// letter this type has no name for (a newer kernel's) is kept as it is.
public struct ThreadState: Hashable, Sendable, CustomStringConvertible, ExpressibleByStringLiteral {
    /// The letter, as the kernel wrote it ("" when unknown).
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
}
