// The trace link for swift-distributed-tracing (docs/traces.md): an opt-in module, as
// HangMonitorNIO is, so that only programs that trace link the tracing library. It depends on
// the `Tracing` API alone: where spans go (swift-otel, another exporter) is the program's own
// `InstrumentationSystem.bootstrap`, read when a hang happens, not when the link is made.
import HangMonitor
import Tracing

/// Ties watched operations (`HangMonitor.watch`, the watch middleware) to the request's trace
/// through swift-distributed-tracing: set it as `configuration.traceLink = HangTracing()`.
///
/// Each operation keeps the `ServiceContext` it began in (a task-local read, no allocation).
/// When a hang involves it, its hang report names the request's W3C traceparent, and the
/// request's span gets the hang's events: `hang` when it is detected, `hang.recovered` (or
/// `hang.superseded`, `hang.unfinished`) when it ends, each with the attributes
/// `hangwatch.target`, `hangwatch.duration_s`, `hangwatch.thread` and `hangwatch.report_id`.
/// A span's events are exported when the span ends, which a stuck request does not do: each
/// event is also a span of its own, `hangwatch.hang` (`hangwatch.hang.recovered`, …), a child
/// of the request's span, ended at once, so that the backend shows it while the request is
/// still stuck.
public struct HangTracing: HangTraceLink {
    private let tracer: (any Tracer)?
    private let traceparentOf: (@Sendable (ServiceContext) -> String?)?
    private let contextOf: (@Sendable (String) -> ServiceContext?)?

    /// The link. `tracer`: where the events go and what injects the traceparent; nil (the
    /// default): `InstrumentationSystem.tracer`, the one the program bootstrapped, as it is
    /// when a hang happens. `traceparent` and `context`: how a context's W3C traceparent is
    /// read, and how a context is made from one (to report to a trace that its hang was fatal, after a
    /// restart); by default, what the tracer injects and extracts under `traceparent`
    /// (swift-otel's W3C propagator does). Give both for a tracer that propagates another way.
    public init(tracer: (any Tracer)? = nil, traceparent: (@Sendable (ServiceContext) -> String?)? = nil,
                context: (@Sendable (String) -> ServiceContext?)? = nil) {
        self.tracer = tracer
        traceparentOf = traceparent
        contextOf = context
    }

    /// The task's current `ServiceContext`, nil outside of one.
    public func currentTrace() -> (any Sendable)? {
        ServiceContext.current
    }

    /// The context's W3C traceparent, nil when it has none.
    public func traceparent(of trace: any Sendable) -> String? {
        guard let context = trace as? ServiceContext else { return nil }
        if let traceparentOf { return traceparentOf(context) }
        var headers: [String: String] = [:]
        if let tracer { tracer.inject(context, into: &headers, using: HeaderInjector()) } else {
            InstrumentationSystem.instrument.inject(context, into: &headers, using: HeaderInjector())
        }
        return headers[Self.traceparentHeader]
    }

    /// The context the tracer extracts from `traceparent`, nil when it extracts none.
    public func trace(continuing traceparent: String) -> (any Sendable)? {
        if let contextOf { return contextOf(traceparent) }
        var context = ServiceContext.topLevel
        let headers = [Self.traceparentHeader: traceparent]
        if let tracer { tracer.extract(headers, into: &context, using: HeaderExtractor()) } else {
            InstrumentationSystem.instrument.extract(headers, into: &context, using: HeaderExtractor())
        }
        return context.isEmpty ? nil : context
    }

    /// Adds the event to the request's span (when the tracer still knows it: the span has not
    /// ended) and ends a child span of the same name, prefixed `hangwatch.`, with the same
    /// attributes.
    public func record(_ event: HangTraceEvent, in trace: any Sendable) {
        guard let context = trace as? ServiceContext else { return }
        let tracer = self.tracer ?? InstrumentationSystem.tracer
        let attributes = Self.attributes(of: event)
        if let span = tracer.activeSpan(identifiedBy: context) {
            span.addEvent(SpanEvent(name: event.kind.rawValue, attributes: attributes))
        }
        let own = tracer.startSpan(Self.spanPrefix + event.kind.rawValue, context: context, ofKind: .internal)
        own.attributes = attributes
        own.addEvent(SpanEvent(name: event.kind.rawValue, attributes: attributes))
        own.end()
    }

    /// The name the W3C Trace Context gives the header.
    static let traceparentHeader = "traceparent"
    /// What the name of each event's own span begins with.
    static let spanPrefix = "hangwatch."

    static func attributes(of event: HangTraceEvent) -> SpanAttributes {
        var attributes: SpanAttributes = [:]
        attributes["hangwatch.target"] = event.target
        attributes["hangwatch.duration_s"] = event.durationSeconds
        if let thread = event.hungThread { attributes["hangwatch.thread"] = Int64(thread) }
        if let report = event.reportID { attributes["hangwatch.report_id"] = report }
        return attributes
    }
}

/// Reads extracted values from a dictionary of headers.
private struct HeaderExtractor: Extractor {
    func extract(key: String, from carrier: [String: String]) -> String? {
        carrier[key.lowercased()]
    }
}

/// Writes injected values into a dictionary of headers.
private struct HeaderInjector: Injector {
    func inject(_ value: String, forKey key: String, into carrier: inout [String: String]) {
        carrier[key.lowercased()] = value
    }
}
