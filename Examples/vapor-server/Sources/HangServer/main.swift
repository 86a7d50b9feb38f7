// Each route hangs one of the places a Vapor 4 server runs code; HangMonitor watches them all
// (Examples/hummingbird-server does the same for Hummingbird). The blocks are single, plain
// blocking calls (sleep, usleep) that end early if anything interrupts them: the monitor's
// captures must not (docs/hang-monitor.md, "How capture works").
//   GET /ok                answers at once
//   GET /block-loop        a synchronous handler blocks its event loop in sleep(5)
//   GET /block-main        blocks the main queue in sleep(5)
//   GET /block-pool        under WatchRequests (60 s): an async handler blocks a cooperative-pool
//                          thread in usleep(3 s); answers how long the call took
//   GET /block-threadpool  under WatchRequests (60 s): blocks a thread of app.threadPool (where
//                          Vapor sends blocking work) in usleep(3 s)
//   GET /deadlock          two tasks take two locks in opposite orders: the pool threads never come back
//   GET /api/leak          under WatchRequests (2 s): awaits, three calls deep, a continuation nobody
//                          resumes — no thread blocked, every ping answered; the request never ends
// Configuration: HANGWATCH_* environment variables (HANGWATCH_DATABASE_PATH, HANGWATCH_THRESHOLD, …);
// PORT (default 8080). scripts/example-vapor builds it, hangs it route by route and checks the reports.
import Foundation
import HangMonitor
import HangMonitorConfiguration
import HangMonitorNIO
import HangMonitorTracing
import Vapor

/// Says when a blocking call begins ("began blockingDatabaseCall 1795920866.954"): a target is hung
/// from the moment its last free thread blocks, and scripts/check-example-reports times how late
/// a hang was detected from there, not from the request (whose way in, from curl's start on, is
/// not the monitor's).
func began(_ function: String) { say("began \(function) \(Date().timeIntervalSince1970)") }

/// One line on standard output, written at once (print's buffer would be lost to the SIGKILL the
/// scripts give the server, and with it a line saying a call was interrupted).
func say(_ line: String) { FileHandle.standardOutput.write(Data((line + "\n").utf8)) }

/// One usleep; how long it really took (shorter if something interrupted it, which it says).
@inline(never) func blockingDatabaseCall(seconds: Double) -> Double {
    began("blockingDatabaseCall")
    let start = Date()
    if usleep(UInt32(seconds * 1_000_000)) != 0 { say("usleep in \(#function) was interrupted (errno \(errno))") }
    return Date().timeIntervalSince(start)
}
@inline(never) func blockingFileRead(seconds: Double) -> Double {
    began("blockingFileRead")
    let start = Date()
    if usleep(UInt32(seconds * 1_000_000)) != 0 { say("usleep in \(#function) was interrupted (errno \(errno))") }
    return Date().timeIntervalSince(start)
}
@inline(never) func blockingOnEventLoop(seconds: UInt32) {
    began("blockingOnEventLoop")
    sayIfInterrupted(sleep(seconds), "event loop")
}
@inline(never) func blockingOnMainQueue(seconds: UInt32) {
    began("blockingOnMainQueue")
    sayIfInterrupted(sleep(seconds), "main queue")
}

/// sleep returns the seconds it did not sleep: anything but 0 means something cut it short.
func sayIfInterrupted(_ left: UInt32, _ place: String) {
    if left > 0 { say("sleep on the \(place) was interrupted with \(left) s left") }
}

final class Account: @unchecked Sendable { let lock = NSLock() }
let checking = Account(), savings = Account()

@inline(never) func transfer(from: Account, to: Account, arrived: DispatchGroup) {
    from.lock.lock()
    arrived.leave()
    arrived.wait()          // both hold their first lock: each now waits for the other's
    to.lock.lock()
}

/// A request whose handler leaks its continuation: it never completes, and blocks nothing.
@inline(never) func awaitReply() async {
    await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in Leaked.keep(continuation) }
}
@inline(never) func fetchUser() async { await awaitReply() }
@inline(never) func leakingHandler() async { await fetchUser() }

/// The continuations nobody resumes (kept, as a forgotten callback registry keeps them).
enum Leaked {
    nonisolated(unsafe) static var continuations: [CheckedContinuation<Void, Never>] = []
    static let lock = NSLock()
    static func keep(_ continuation: CheckedContinuation<Void, Never>) { lock.withLock { continuations.append(continuation) } }
}

// docs/tasks.md's Vapor middleware, word for word (scripts/check-snippets checks it).
struct WatchRequests: AsyncMiddleware {
    let monitor: HangMonitor
    let limit: Duration
    func respond(to request: Request, chainingTo next: any AsyncResponder) async throws -> Response {
        try await monitor.watch("\(request.method) \(request.url.path)", limit: limit) { try await next.respond(to: request) }
    }
}

/// Starts the monitor once Vapor has booted and stops it on shutdown (as in README.md).
struct HangMonitorLifecycle: LifecycleHandler {
    let monitor: HangMonitor
    func didBoot(_ application: Application) throws { monitor.start() }
    func shutdown(_ application: Application) { monitor.stop() }
}

var environment = try Environment.detect()
try LoggingSystem.bootstrap(from: &environment)
let app = try await Application.make(environment)
app.http.server.configuration.hostname = "127.0.0.1"
app.http.server.configuration.port = Int(ProcessInfo.processInfo.environment["PORT"] ?? "") ?? 8080

var configuration = try HangMonitor.Configuration.load(path: nil)
configuration.targets = [.mainQueue, .cooperativePool, .threadPool(app.threadPool)] + .eventLoops(of: app.eventLoopGroup)
configuration.traceLink = HangTracing()   // hangs on the request's trace (docs/traces.md)
let monitor = try HangMonitor(configuration: configuration)
app.lifecycle.use(HangMonitorLifecycle(monitor: monitor))
let traced = app.grouped(TracingMiddleware())   // Vapor's own: a span per request, around the watch middleware

app.get("ok") { _ in "ok\n" }
app.get("block-loop") { _ -> String in
    blockingOnEventLoop(seconds: 5)
    return "blocked an event loop\n"
}
app.get("block-main") { _ -> String in
    DispatchQueue.main.async { blockingOnMainQueue(seconds: 5) }
    return "blocking the main queue\n"
}
let watched = traced.grouped(WatchRequests(monitor: monitor, limit: .seconds(60)))
watched.get("block-pool") { _ async -> String in
    let took = blockingDatabaseCall(seconds: 3)
    return "blocked a pool thread for \(took) s\n"
}
watched.get("block-threadpool") { request async throws -> String in
    let took = try await request.application.threadPool.runIfActive { blockingFileRead(seconds: 3) }
    return "blocked a thread-pool thread for \(took) s\n"
}
app.get("deadlock") { _ -> String in
    let arrived = DispatchGroup()
    arrived.enter(); arrived.enter()
    Task.detached { transfer(from: checking, to: savings, arrived: arrived) }
    Task.detached { transfer(from: savings, to: checking, arrived: arrived) }
    return "deadlocking\n"
}
traced.grouped("api").grouped(WatchRequests(monitor: monitor, limit: .seconds(2))).get("leak") { _ async -> String in
    await leakingHandler()
    return "never\n"
}

try await app.execute()
try await app.asyncShutdown()
