// Hangs on the request's trace (docs/traces.md): a real monitor in this process, a request
// span of swift-distributed-tracing's in-memory tracer, an operation that outlives its limit.
import Testing
import Foundation
import Synchronization
import HangwatchTestSupport
import HangMonitor
import HangMonitorTracing
import DumpWithoutCrash
import HangwatchReport
import HangwatchDatabase
import HangwatchSnapshot
import HangwatchStageTestSupport
import Tracing
import InMemoryTracing

@Suite(.ownThreadAlone) struct HangTracingTests {
    /// W3C-shaped ids (the in-memory tracer's own are "trace-1"), so that the link's
    /// traceparent can be built from them.
    static func tracer() -> InMemoryTracer {
        let next = Atomic<UInt64>(0x1000)
        let hex = { @Sendable (digits: Int) -> String in
            let value = next.add(1, ordering: .relaxed).newValue
            let text = String(value, radix: 16)
            return String(repeating: "0", count: digits - text.count) + text
        }
        return InMemoryTracer(idGenerator: .init(nextTraceID: { "4bf92f3577b34da6" + hex(16) }, nextSpanID: { hex(16) }))
    }

    /// The in-memory tracer propagates its own keys, not `traceparent`: the link is given how to
    /// read one (as a program whose tracer propagates another way would).
    static func link(_ tracer: InMemoryTracer) -> HangTracing {
        HangTracing(tracer: tracer, traceparent: { context in
            context.inMemorySpanContext.map { "00-\($0.traceID)-\($0.spanID)-01" }
        }, context: { traceparent in
            var context = ServiceContext.topLevel
            context.inMemorySpanContext = InMemorySpanContext(traceID: String(Traceparent.traceID(of: traceparent)),
                                                              spanID: String(Traceparent.spanID(of: traceparent)), parentSpanID: nil)
            return context
        })
    }

    /// `<db>/staging/<bundle>@<id>.hang.dump` → `<id>`.
    static func id(ofStaged path: String) -> String {
        let name = path.split(separator: "/").last ?? ""
        return String((name.split(separator: "@").last ?? "").prefix { $0 != "." })
    }

    /// The monitor's events, and each staged hang's sidecar as it was when the hang was detected.
    final class Events: Sendable {
        private let events = Mutex<[HangEvent]>([])
        private let sidecars = Mutex<[String]>([])
        func record(_ event: HangEvent) {
            events.withLock { $0.append(event) }
            if case .detected(_, _, let path?, _) = event, path.hasSuffix(".hang.dump"),
               let data = FileManager.default.contents(atPath: String(path.dropLast(".dump".count)) + ".json") {
                sidecars.withLock { $0.append(String(decoding: data, as: UTF8.self)) }
            }
        }
        var all: [HangEvent] { events.withLock { $0 } }
        var stagedSidecars: [String] { sidecars.withLock { $0 } }

        /// Until the monitor has told a recovery, 5 s at most (the expectations after say if not).
        func waitForRecovery() async throws {
            for _ in 0..<100 where !all.contains(where: { if case .recovered = $0 { true } else { false } }) {
                try await Task.sleep(for: .milliseconds(50))
            }
        }
    }

    @Test func anOperationPastItsLimitPutsItsTraceInTheReportAndTheHangOnItsSpan() async throws {
        let db = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(db) }
        let tracer = Self.tracer()
        let events = Events()
        let monitor = try HangMonitor(configuration: .init(
            threshold: .seconds(10), databasePath: db, bundleID: "test.tracing", keepRecoveredHangsLongerThan: .zero,
            eventHandler: events.record, traceLink: Self.link(tracer)))
        monitor.start()
        defer { monitor.stop() }

        // The request: a span, and in it a watched operation that takes 1.5 s of a 0.3 s limit.
        let requestSpan = tracer.startSpan("GET /users/:id", context: .topLevel, ofKind: .server)
        let request = requestSpan.spanContext
        try await ServiceContext.withValue(requestSpan.context) {
            try await monitor.watch("GET /users/:id", limit: .milliseconds(300)) {
                try await Task.sleep(for: .milliseconds(1500))
            }
        }
        requestSpan.end()
        try await events.waitForRecovery()

        // The request's span has both events, and each is a span of its own under it.
        let finished = tracer.finishedSpans
        let span = try #require(finished.first { $0.operationName == "GET /users/:id" })
        #expect(span.events.map(\.name) == ["hang", "hang.recovered"], "\(events.all)")
        let own = finished.filter { $0.operationName.hasPrefix("hangwatch.") }
        #expect(own.map(\.operationName) == ["hangwatch.hang", "hangwatch.hang.recovered"])
        for child in own {
            #expect(child.traceID == request.traceID && child.parentSpanID == request.spanID)
            #expect(child.attributes["hangwatch.target"]?.toSpanAttribute() == .string("operation:GET /users/:id"))
        }
        let began = try #require(span.events.first)
        let duration = try #require(began.attributes["hangwatch.duration_s"]?.toSpanAttribute())
        if case .double(let seconds) = duration { #expect(seconds >= 0.3 && seconds < 1.5, "\(seconds)") } else {
            Issue.record("duration: \(duration)")
        }

        // The kept report names the request's trace, and its id is the one the events give.
        let reports = try DumpClient(databasePath: db, bundleID: "test.tracing").processIntermediateDumps()
        let report = try #require(reports.first { $0.kind == .hang })
        let traceparent = "00-\(request.traceID)-\(request.spanID)-01"
        // Staged with the hang, for whoever promotes it should the process die.
        #expect(events.stagedSidecars.count == 1 && events.stagedSidecars.allSatisfy { $0.contains(traceparent) }, "\(events.stagedSidecars)")
        #expect(report.tasks?.tasks.first?.traceparent == traceparent, "\(report.tasks?.tasks.prefix(2).map(\.operation) ?? [])")
        #expect(ReportRenderer.reason(report).hasSuffix("trace \(request.traceID)"), "\(ReportRenderer.reason(report))")
        #expect(ReportRenderer.text(report).contains("operation GET /users/:id, trace \(request.traceID)"))
        // The staged hang's id: its report's, had the process died with it.
        let staged = try #require(span.events.first?.attributes["hangwatch.report_id"]?.toSpanAttribute())
        let detected = events.all.compactMap { event -> String? in
            if case .detected(_, _, let path?, _) = event { return path } else { return nil }
        }.first
        #expect(detected.map { path in staged == .string(Self.id(ofStaged: path)) } == true, "\(staged) \(detected ?? "-")")
        // What JSON keeps, JSON gives back.
        #expect(try Report.decode(from: ReportRenderer.json(report)).tasks?.tasks.first?.traceparent == traceparent)
    }

    /// A target's hang (an executor's thread blocked) with a request running on that thread: the
    /// request's span gets the hang as the monitor sees it begin and end, and the report names
    /// the request's trace where it says what the hung thread was serving.
    @Test func aHungThreadPutsTheHangOnTheSpanOfTheRequestItWasServing() async throws {
        let db = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(db) }
        let tracer = Self.tracer()
        let events = Events()
        let loop = ThreadExecutor(name: "test-loop")
        defer { loop.shutdown() }
        let post: @Sendable (@escaping @Sendable () -> Void) -> Void = { ping in Task(executorPreference: loop) { ping() } }
        let monitor = try HangMonitor(configuration: .init(
            threshold: .milliseconds(400), databasePath: db, bundleID: "test.traced-loop", targets: [.custom(name: "loop:test", post: post)],
            keepRecoveredHangsLongerThan: .zero, eventHandler: events.record, traceLink: Self.link(tracer)))
        monitor.start()
        defer { monitor.stop() }
        try await Task.sleep(for: .milliseconds(300))  // pings answered: the monitor knows the loop's thread

        let requestSpan = tracer.startSpan("GET /loop", context: .topLevel, ofKind: .server)
        let request = requestSpan.spanContext
        let context = requestSpan.context
        await Task(executorPreference: loop) {
            await ServiceContext.withValue(context) {
                await monitor.watch("GET /loop", limit: .seconds(30)) { _ = usleep(1_500_000) }  // blocks the loop's thread
            }
        }.value
        try await events.waitForRecovery()
        requestSpan.end()

        let span = try #require(tracer.finishedSpans.first { $0.operationName == "GET /loop" })
        #expect(span.events.map(\.name) == ["hang", "hang.recovered"], "\(events.all)")
        #expect(span.events.first?.attributes["hangwatch.target"]?.toSpanAttribute() == .string("loop:test"))
        let report = try #require(try DumpClient(databasePath: db, bundleID: "test.traced-loop").processIntermediateDumps().first)
        let operation = try #require(report.hang?.operations.first)
        #expect(operation.traceparent == "00-\(request.traceID)-\(request.spanID)-01")
        #expect(operation.onHungThread)
        #expect(span.events.last?.attributes["hangwatch.report_id"]?.toSpanAttribute() == .string(report.id))
        let reason = ReportRenderer.reason(report)
        #expect(reason.contains("while serving GET /loop (started "), "\(reason)")
        #expect(reason.contains("; trace \(request.traceID))"), "\(reason)")
        #expect(ReportRenderer.text(report).contains("trace \(request.traceID) span \(request.spanID)"))
    }

    /// A process died with its hang staged: the monitor that promotes it (here, the next start of
    /// the same bundle) tells the request's trace it was fatal, with the fatal report's id.
    @Test func aFatalHangIsToldToItsTraceByTheMonitorThatPromotesIt() async throws {
        let db = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(db) }
        let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        // The dead process: a pid that was, and a staged hang whose lease nobody holds.
        let gone = Process()
        gone.executableURL = URL(fileURLWithPath: "/bin/true")
        try gone.run()
        gone.waitUntilExit()
        let staging = try CrashReportDatabase(path: db).stagingArea
        var snapshot = DumpSamples.hang()
        snapshot.process.pid = gone.processIdentifier
        snapshot.process.bundleID = "test.fatal"
        let now = Date().timeIntervalSince1970
        var sidecar = HangSidecar(bundleID: "test.fatal", pid: gone.processIdentifier, processStartTicks: 1, target: .operation(name: "GET /x"),
                                  thresholdSeconds: 1, startTime: now - 10, lastSeenTime: now - 2, sampleCount: 0,
                                  hungThread: nil, hungThreads: nil, signature: "s")
        sidecar.traceparents = [traceparent]
        let staged = try staging.begin(sidecar)
        try staging.write(snapshot, of: staged)
        staging.release([staged])

        let tracer = Self.tracer()
        let monitor = try HangMonitor(configuration: .init(threshold: .seconds(10), databasePath: db, bundleID: "test.fatal",
                                                           traceLink: Self.link(tracer)))
        monitor.start()  // promotes before it returns
        monitor.stop()
        let fatal = try #require(tracer.finishedSpans.first { $0.operationName == "hangwatch.hang.fatal" }, "\(tracer.finishedSpans.map(\.operationName))")
        #expect(fatal.traceID == "4bf92f3577b34da6a3ce929d0e0e4736" && fatal.parentSpanID == "00f067aa0ba902b7")
        #expect(fatal.attributes["hangwatch.target"]?.toSpanAttribute() == .string("operation:GET /x"))
        let report = try #require(try DumpClient(databasePath: db, bundleID: "test.fatal").processIntermediateDumps().first)
        #expect(report.kind == .fatalHang)
        #expect(fatal.attributes["hangwatch.report_id"]?.toSpanAttribute() == .string(report.id))
        #expect(fatal.attributes["hangwatch.report_id"]?.toSpanAttribute() == .string(staged.id.lowercased()))
    }

    /// A staged hang whose sidecar names something else as a traceparent (a crafted file): set
    /// aside in failed/ with the reason, as any sidecar with values no monitor writes, and no
    /// trace is told anything.
    @Test func aForgedTraceparentInASidecarIsSetAsideNotTold() async throws {
        let db = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(db) }
        let staging = try CrashReportDatabase(path: db).stagingArea
        let now = Date().timeIntervalSince1970
        var sidecar = HangSidecar(bundleID: "test.forged", pid: 999_999, processStartTicks: 1, target: .mainQueue, thresholdSeconds: 1,
                                  startTime: now - 10, lastSeenTime: now - 2, sampleCount: 0, hungThread: nil, hungThreads: nil, signature: "s")
        sidecar.traceparents = ["00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\u{1B}[2J"]
        let staged = try staging.begin(sidecar)
        try staging.write(DumpSamples.hang(), of: staged)
        staging.release([staged])

        let tracer = Self.tracer()
        let monitor = try HangMonitor(configuration: .init(threshold: .seconds(10), databasePath: db, bundleID: "test.forged",
                                                           traceLink: Self.link(tracer)))
        monitor.start()
        monitor.stop()
        #expect(tracer.finishedSpans.isEmpty)
        let failed = (try? FileManager.default.contentsOfDirectory(atPath: db + "/failed")) ?? []
        #expect(failed.contains { $0.hasSuffix(".hang.json") } && failed.contains { $0.hasSuffix(".hang.dump") }, "\(failed)")
    }

    /// An operation outside of any trace, and a monitor with no link: the reports are as before
    /// and nothing is traced.
    @Test func withoutATraceNothingIsTraced() async throws {
        let db = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(db) }
        let tracer = Self.tracer()
        let events = Events()
        let monitor = try HangMonitor(configuration: .init(
            threshold: .seconds(10), databasePath: db, bundleID: "test.untraced", keepRecoveredHangsLongerThan: .zero,
            eventHandler: events.record, traceLink: Self.link(tracer)))
        monitor.start()
        defer { monitor.stop() }
        try await monitor.watch("GET /plain", limit: .milliseconds(200)) { try await Task.sleep(for: .milliseconds(800)) }
        try await events.waitForRecovery()
        #expect(tracer.finishedSpans.isEmpty && tracer.activeSpans.isEmpty)
        let report = try #require(try DumpClient(databasePath: db, bundleID: "test.untraced").processIntermediateDumps().first)
        #expect(report.tasks?.tasks.first?.operation == "GET /plain")
        #expect(report.tasks?.tasks.first?.traceparent == nil)
        #expect(!ReportRenderer.text(report).contains("trace "))
    }
}
