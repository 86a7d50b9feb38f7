// What the monitor watches and how strictly. Validated once, up front: a bad value is an
// error naming its key, never a silent default (see ConfigurationLoader for file + env).
import Dispatch
import HangwatchCapture
import HangwatchDatabase
import HangwatchSnapshot
import Logging
import CoreMetrics

/// Something the monitor pings.
public enum WatchTarget: Sendable, Hashable, CustomStringConvertible {
    /// The main Dispatch queue (also drives the MainActor and `RunLoop.main`).
    case mainQueue
    /// A named DispatchQueue the program owns; pings are `queue.async`.
    case queue(DispatchQueue)
    /// The Swift-concurrency cooperative pool: a detached task must start within the threshold.
    case cooperativePool
    /// Any executor the program owns — an event loop, a custom executor, a worker thread:
    /// `post` must run the closure it is given on that executor (e.g. `{ loop.execute($0) }`).
    /// `name` is how reports, events and metrics call it: 1–64 characters of
    /// A-Z a-z 0-9 . _ - : (HangMonitorNIO's `.eventLoops(of:)` names loops `event-loop:N`).
    /// The hung thread is the one that ran the previous ping (an event loop's own thread).
    case custom(name: String, post: @Sendable (@escaping @Sendable () -> Void) -> Void)
    /// A pool of threads that takes posted work in turn — a `NIOThreadPool` (HangMonitorNIO's
    /// `.threadPool(_:)`), a worker pool: `post` must hand the closure to the pool. `name` as for
    /// `custom`. Hung when no thread of the pool runs a ping within the threshold; over only after
    /// several pings in a row are answered promptly (one ping slipping in between two blocked jobs
    /// does not end the hang); its hung threads are the pool's threads stuck in the program's
    /// code, and its samples follow the blocked work from thread to thread
    /// (docs/hang-monitor.md, "Pool hangs").
    case pool(name: String, post: @Sendable (@escaping @Sendable () -> Void) -> Void)

    /// What a hang of it reports (`hang.target`).
    public var hangTarget: HangTarget {
        switch self {
        case .mainQueue: return .mainQueue
        case .queue(let queue): return .queue(label: queue.label)
        case .cooperativePool: return .cooperativePool
        case .custom(let name, _), .pool(let name, _): return HangTarget(name: name)
        }
    }

    /// Whether several threads take its pings in turn (the cooperative pool, a `.pool`): its
    /// hang ends only after several prompt answers in a row, and its hung threads are found by
    /// their stacks.
    var isPool: Bool {
        switch self {
        case .cooperativePool, .pool: return true
        case .mainQueue, .queue, .custom: return false
        }
    }

    /// As it appears in reports (`hang.target`), events and metric dimensions.
    public var description: String { hangTarget.name }

    /// Two targets are the same when they watch the same thing: the same queue object, or the same
    /// custom name.
    public static func == (lhs: WatchTarget, rhs: WatchTarget) -> Bool {
        switch (lhs, rhs) {
        case (.mainQueue, .mainQueue), (.cooperativePool, .cooperativePool): return true
        case (.queue(let a), .queue(let b)): return a === b
        case (.custom(let a, _), .custom(let b, _)), (.pool(let a, _), .pool(let b, _)): return a == b
        default: return false
        }
    }
    /// Hashes the target's name (`description`).
    public func hash(into hasher: inout Hasher) { hasher.combine(description) }
}

/// A configuration value that cannot be used: the key (or environment variable, or file) and why.
public struct ConfigurationError: Error, Equatable, CustomStringConvertible {
    /// The offending key (file key or environment variable), or the file path.
    public var key: String
    /// What is wrong with the value, and what is accepted.
    public var problem: String
    /// An error about `key`.
    public init(key: String, problem: String) { self.key = key; self.problem = problem }
    /// `hangwatch configuration: KEY: PROBLEM`.
    public var description: String { "hangwatch configuration: \(key): \(problem)" }
}

extension HangMonitor {
    /// What a `HangMonitor` watches, how strictly, and where its hangs go; checked when the monitor
    /// is created.
    public struct Configuration: Sendable {
        /// How late a ping may be before it is a hang. Default 2 s.
        public var threshold: Duration
        /// The crash-report database; staged hangs live in `<databasePath>/staging`.
        public var databasePath: String
        /// Identifies this program's reports in a database shared by several programs.
        public var bundleID: String
        /// What to ping. Default: the main queue.
        public var targets: [WatchTarget]
        /// How often the hung thread is sampled while a hang lasts. Default 50 ms.
        public var sampleInterval: Duration
        /// Samples kept per hang (the sidecar's last-seen time keeps updating past it). Default 200.
        public var maxSamples: Int
        /// Recovered hangs at least this long are kept as `kind: hang` reports. nil = none kept.
        public var keepRecoveredHangsLongerThan: Duration?
        /// A hang with the same stack signature within this window is counted, not re-dumped.
        public var dedupWindow: Duration
        /// While a debugger/tracer is attached (`TracerPid` ≠ 0) no hang is reported.
        public var suspendWhenTraced: Bool
        /// Called on the monitor thread for every outcome; keep it short.
        public var eventHandler: (@Sendable (HangEvent) -> Void)?
        /// Where the monitor logs its events (swift-log).
        public var logger: Logger
        /// nil = the globally bootstrapped `MetricsSystem`.
        public var metricsFactory: (any MetricsFactory)?
        /// What this program's hang dumps leave out from the start (`[.arguments, .stackMemory]`,
        /// …): applied to every capture before it is staged or stored. Default: nothing.
        public var redaction: Redaction
        /// How often the monitor refreshes this process's run record — the last heartbeat and a
        /// sample of resident memory, threads and the hangs in progress — from which the next
        /// processor of the database reports a process killed from outside (the OOM killer,
        /// `kill -9`; docs/killed.md). `.zero`: no run record. Default 5 s.
        public var runRecordInterval: Duration
        /// Ties watched operations to the application's distributed traces: a hang report names
        /// each operation's trace, and the trace gets the hang's events (docs/traces.md).
        /// HangMonitorTracing's `HangTracing()` is the link for swift-distributed-tracing.
        /// Default: none.
        public var traceLink: (any HangTraceLink)?

        /// A configuration; every parameter is the property of the same name (docs/hang-monitor.md
        /// lists the defaults and the limits `HangMonitor.init(configuration:)` checks).
        public init(threshold: Duration = .seconds(2), databasePath: String, bundleID: String,
                    targets: [WatchTarget] = [.mainQueue], sampleInterval: Duration = .milliseconds(50),
                    maxSamples: Int = 200, keepRecoveredHangsLongerThan: Duration? = nil,
                    dedupWindow: Duration = .seconds(300), suspendWhenTraced: Bool = true,
                    eventHandler: (@Sendable (HangEvent) -> Void)? = nil,
                    logger: Logger = Logger(label: "hangwatch.monitor"),
                    metricsFactory: (any MetricsFactory)? = nil, redaction: Redaction = [],
                    runRecordInterval: Duration = .seconds(5), traceLink: (any HangTraceLink)? = nil) {
            self.threshold = threshold
            self.databasePath = databasePath
            self.bundleID = bundleID
            self.targets = targets
            self.sampleInterval = sampleInterval
            self.maxSamples = maxSamples
            self.keepRecoveredHangsLongerThan = keepRecoveredHangsLongerThan
            self.dedupWindow = dedupWindow
            self.suspendWhenTraced = suspendWhenTraced
            self.eventHandler = eventHandler
            self.logger = logger
            self.metricsFactory = metricsFactory
            self.redaction = redaction
            self.runRecordInterval = runRecordInterval
            self.traceLink = traceLink
        }

        /// Throws a `ConfigurationError` naming the first bad key.
        public func validate() throws {
            func positive(_ value: Duration, _ key: String) throws {
                guard value > .zero else { throw ConfigurationError(key: key, problem: "must be > 0, got \(value.seconds) s") }
            }
            try positive(threshold, "threshold")
            try positive(sampleInterval, "sampleInterval")
            if runRecordInterval < .zero {
                throw ConfigurationError(key: "runRecordInterval", problem: "must be ≥ 0 (0: no run record), got \(runRecordInterval.seconds) s")
            }
            if dedupWindow < .zero { throw ConfigurationError(key: "dedupWindow", problem: "must be ≥ 0, got \(dedupWindow.seconds) s") }
            if let keep = keepRecoveredHangsLongerThan, keep < .zero {
                throw ConfigurationError(key: "keepRecoveredHangsLongerThan", problem: "must be ≥ 0, got \(keep.seconds) s")
            }
            guard maxSamples >= 0 else { throw ConfigurationError(key: "maxSamples", problem: "must be ≥ 0, got \(maxSamples)") }
            guard !databasePath.isEmpty else { throw ConfigurationError(key: "databasePath", problem: "must not be empty") }
            guard isValidBundleID(bundleID) else {
                throw ConfigurationError(key: "bundleID", problem: "must be 1–128 characters of A-Z a-z 0-9 . _ - (it is part of file names), got \"\(bundleID)\"")
            }
            do { try CrashReportDatabase.validateBundleID(bundleID) } catch {
                throw ConfigurationError(key: "bundleID", problem: "\(error)")
            }
            guard !targets.isEmpty else { throw ConfigurationError(key: "targets", problem: "must name at least one target") }
            var names = Set<String>()
            for target in targets {
                switch target {
                case .custom(let name, _), .pool(let name, _):
                    guard isValidTargetName(name) else {
                        throw ConfigurationError(key: "targets", problem: "a custom or pool target's name must be 1–64 characters of A-Z a-z 0-9 . _ - :, got \"\(name)\"")
                    }
                case .mainQueue, .queue, .cooperativePool:
                    break
                }
                guard names.insert(target.description).inserted else {
                    throw ConfigurationError(key: "targets", problem: "\(target.description) is watched twice")
                }
            }
        }
    }
}

func isValidTargetName(_ name: String) -> Bool {
    (1...64).contains(name.utf8.count) && name.utf8.allSatisfy { c in
        (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A) || c == 0x2E || c == 0x5F || c == 0x2D || c == 0x3A
    }
}

func isValidBundleID(_ id: String) -> Bool {
    guard (1...128).contains(id.utf8.count), id != ".", id != ".." else { return false }
    return id.utf8.allSatisfy { c in
        (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A) || c == 0x2E || c == 0x5F || c == 0x2D
    }
}

extension Duration {
    package var seconds: Double {
        let parts = components
        return Double(parts.seconds) + Double(parts.attoseconds) / 1e18
    }
    /// Whole nanoseconds, 0 for a negative duration, at most 2^62 (146 years): a limit past it
    /// never comes, and sums with a monotonic time cannot overflow.
    var nanoseconds: UInt64 {
        let parts = components
        guard parts.seconds >= 0 else { return 0 }
        let ceiling: UInt64 = 1 << 62
        guard parts.seconds < Int64(ceiling / 1_000_000_000) else { return ceiling }
        return min(ceiling, UInt64(parts.seconds) * 1_000_000_000 + UInt64(max(0, parts.attoseconds) / 1_000_000_000))
    }
    package static func secondsValue(_ value: Double) -> Duration { .nanoseconds(Int64((value * 1e9).rounded())) }
}
