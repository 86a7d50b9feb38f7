// A Hummingbird 2 server whose requests are traced (swift-otel, OTLP) and watched by HangMonitor;
// HangMonitorTracing ties the two: a request that outlives its limit gets a `hang` event (and,
// when it ends, `hang.recovered`) on its span, a `hangwatch.hang` child span exported while the
// request is still stuck, and its hang report names the request's W3C traceparent.
// What tracing adds to a server that already watches its requests is the lines marked `// tracing`.
//   GET /ok     answers at once
//   GET /hang   blocks its task (a cooperative-pool thread) for 3 s, past its 1 s limit, then answers
// Configuration: HANGWATCH_* environment variables (HANGWATCH_DATABASE_PATH, …); swift-otel's OTEL_*
// (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_PROTOCOL, OTEL_BSP_SCHEDULE_DELAY, OTEL_SERVICE_NAME, …);
// PORT (default 8080).
import Foundation
import HangMonitor
import HangMonitorConfiguration
import HangMonitorService
import HangMonitorTracing                                              // tracing
import Hummingbird
import OTel                                                            // tracing

/// Blocks the calling thread for `seconds`, in usleeps that resume where an interruption left
/// them; says how long it took.
@inline(never) func blockingCall(seconds: Double) -> Double {
    let start = Date()
    var left = seconds
    while left > 0 {
        usleep(UInt32(min(left, 0.5) * 1_000_000))
        left = seconds - Date().timeIntervalSince(start)
    }
    return Date().timeIntervalSince(start)
}

// Every request must finish within `limit`, or it is a hang of its own (HangMonitor.watch):
// Examples/hummingbird-server's middleware.
struct WatchRequests<Context: RequestContext>: RouterMiddleware {
    let monitor: HangMonitor
    let limit: Duration
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        try await monitor.watch("\(request.method) \(request.uri.path)", limit: limit) { try await next(request, context) }
    }
}

var otel = OTel.Configuration.default                                  // tracing
otel.logs.enabled = false                                              // tracing: logs stay on the console
let observability = try OTel.bootstrap(configuration: otel)            // tracing: spans to OTLP (OTEL_* variables)
var configuration = try HangMonitor.Configuration.load(path: nil)
configuration.traceLink = HangTracing()                                // tracing: hangs onto the request's trace
let monitor = try HangMonitor(configuration: configuration)

let router = Router()
router.middlewares.add(TracingMiddleware())                            // tracing: a span per request, before the watch
router.middlewares.add(WatchRequests(monitor: monitor, limit: .seconds(1)))
router.get("ok") { _, _ in "ok\n" }
router.get("hang") { _, _ -> String in
    let took = blockingCall(seconds: 3)
    return "blocked for \(took) s\n"
}

let port = Int(ProcessInfo.processInfo.environment["PORT"] ?? "") ?? 8080
let app = Application(
    router: router,
    configuration: .init(address: .hostname("127.0.0.1", port: port)),
    // A service group stops its services in reverse: the server, then the monitor, then
    // swift-otel, which exports what is left.
    services: [observability, HangMonitorService(monitor: monitor)])   // tracing: observability
try await app.runService()
