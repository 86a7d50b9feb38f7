// How a hang reaches the application's distributed traces (docs/traces.md). HangMonitor itself
// knows no tracing library: `Configuration.traceLink` is an adapter, and the opt-in module
// HangMonitorTracing (Sources/HangMonitorTracing) is the one for swift-distributed-tracing.
// `watch` asks the link for the operation's trace once (on the caller's task, as cheaply as
// a task-local read); everything else happens on the monitor thread, and only when a hang
// involves the operation: its W3C traceparent for the report, and the hang's events.

/// Ties watched operations (`HangMonitor.watch`) to the application's distributed traces.
/// Set one as `Configuration.traceLink`; HangMonitorTracing's `HangTracing` is the adapter for
/// swift-distributed-tracing.
public protocol HangTraceLink: Sendable {
    /// Called by `watch` on the task that runs the operation, once: the trace the operation
    /// belongs to (for swift-distributed-tracing, the task's current `ServiceContext`), nil
    /// when there is none. It runs for every operation, so it should not allocate.
    func currentTrace() -> (any Sendable)?
    /// Called on the monitor thread when a hang involves the operation: the trace's W3C
    /// `traceparent` (`00-<32 hex trace id>-<16 hex span id>-<2 hex flags>`), nil when not known.
    /// A value of any other form is not kept.
    func traceparent(of trace: any Sendable) -> String?
    /// Tells the trace about a hang that involves the operation: it began, it ended. Called on
    /// the monitor thread (keep it short: the monitor waits for it), except for the end of an
    /// operation's own hang (it passed its limit): that is told on the operation's task as
    /// `watch` returns, while the request's span is still open.
    func record(_ event: HangTraceEvent, in trace: any Sendable)
    /// Called on the monitor thread for a hang of a process that is gone (a fatal hang it
    /// promotes): the trace `traceparent` names, to `record` its end in; nil when the link
    /// cannot continue a trace from a traceparent.
    func trace(continuing traceparent: String) -> (any Sendable)?
}

/// What the monitor tells an operation's trace about a hang that involves the operation.
public struct HangTraceEvent: Sendable, Equatable {
    /// Which moment of the hang.
    public enum Kind: String, Sendable {
        /// The hang was detected (the operation passed its limit, or a thread it began on hung).
        case began = "hang"
        /// It ended: the target answered again, or the operation finished.
        case recovered = "hang.recovered"
        /// A crash report of this process took it over.
        case superseded = "hang.superseded"
        /// The monitor stopped while it lasted (its hangs kept in memory).
        case unfinished = "hang.unfinished"
        /// The process died with it: told by the monitor that promotes it to a fatal-hang
        /// report (the process's next start, or a running monitor of the same bundle id), in a
        /// trace continued from the traceparent its staged files kept.
        case fatal = "hang.fatal"
    }

    /// Which moment of the hang; its raw value is the event's name.
    public var kind: Kind
    /// The hung target: `main-queue`, `event-loop:1`, `operation:GET /users/:id`, ….
    public var target: String
    /// How long the hang had lasted, seconds.
    public var durationSeconds: Double
    /// The hung thread, when the monitor knows one.
    public var hungThread: Int32?
    /// The id of a report of this hang, when there is or may be one: on `began`, the id of its
    /// fatal-hang report should the process die with it; on `recovered` and `unfinished`, the
    /// report kept of it (a target's hang; `keepRecoveredHangsLongerThan`); on `superseded`,
    /// the crash report that took it over; on `fatal`, its fatal-hang report.
    public var reportID: String?

    /// An event; each parameter is the property of the same name.
    public init(kind: Kind, target: String, durationSeconds: Double, hungThread: Int32? = nil, reportID: String? = nil) {
        self.kind = kind
        self.target = target
        self.durationSeconds = durationSeconds
        self.hungThread = hungThread
        self.reportID = reportID
    }
}
