// Each route hangs one of the places a Swift server runs code; HangMonitor watches them all.
// The blocks are single, plain blocking calls (sleep, usleep) that end early if anything
// interrupts them: the monitor's captures must not (docs/hang-monitor.md, "How capture works").
//   GET /ok, /plain/ok, /api/ok  answer at once (/plain/ok under a middleware that passes the request
//                             on, /api/ok under WatchRequests: scripts/bench section 8 loads the two)
//   GET /block-pool           blocks a cooperative-pool thread in usleep(3 s) (a blocking call in an
//                             async handler); answers how long the call took
//   GET /block-loop           blocks one of the server's event loops in sleep(5)
//   GET /block-main           blocks the main queue in sleep(5)
//   GET /deadlock             two tasks take two locks in opposite orders: the pool threads never come back
//   GET /api/leak             under WatchRequests (2 s): awaits, three calls deep, a continuation nobody
//                             resumes — no thread blocked, every ping answered; the request never ends
// Configuration: HANGWATCH_* environment variables (HANGWATCH_DATABASE_PATH, …); PORT (8080).
import Foundation
import HangMonitor
import HangMonitorConfiguration
import HangMonitorNIO
import HangMonitorService
import Hummingbird
import NIOPosix

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

// Every request it sees must finish within `limit`: one that does not is a hang of its own,
// reported with its task's await chain (HangMonitor.watch). docs/tasks.md's Hummingbird
// middleware, word for word (scripts/check-snippets checks it).
struct WatchRequests<Context: RequestContext>: RouterMiddleware {
    let monitor: HangMonitor
    let limit: Duration
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        try await monitor.watch("\(request.method) \(request.uri.path)", limit: limit) { try await next(request, context) }
    }
}

let loops = MultiThreadedEventLoopGroup.singleton
var configuration = try HangMonitor.Configuration.load(path: nil)
configuration.targets = [.mainQueue, .cooperativePool] + .eventLoops(of: loops)
let monitor = try HangMonitor(configuration: configuration)

let router = Router()
router.get("ok") { _, _ in "ok\n" }
router.get("block-pool") { _, _ -> String in
    let took = blockingDatabaseCall(seconds: 3)
    return "blocked a pool thread for \(took) s\n"
}
router.get("block-loop") { _, _ -> String in
    loops.next().execute { blockingOnEventLoop(seconds: 5) }
    return "blocking an event loop\n"
}
router.get("block-main") { _, _ -> String in
    DispatchQueue.main.async { blockingOnMainQueue(seconds: 5) }
    return "blocking the main queue\n"
}
router.get("deadlock") { _, _ -> String in
    let arrived = DispatchGroup()
    arrived.enter(); arrived.enter()
    Task.detached { transfer(from: checking, to: savings, arrived: arrived) }
    Task.detached { transfer(from: savings, to: checking, arrived: arrived) }
    return "deadlocking\n"
}

router.group("api")
    .add(middleware: WatchRequests(monitor: monitor, limit: .seconds(2)))
    .get("ok") { _, _ in "ok\n" }
    .get("leak") { _, _ -> String in
        await leakingHandler()
        return "never\n"
    }

/// Passes every request on: /plain/ok's middleware, the bench's baseline for /api/ok.
struct PassRequests<Context: RequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        try await next(request, context)
    }
}

router.group("plain")
    .add(middleware: PassRequests())
    .get("ok") { _, _ in "ok\n" }

let port = Int(ProcessInfo.processInfo.environment["PORT"] ?? "") ?? 8080
let app = Application(
    router: router,
    configuration: .init(address: .hostname("127.0.0.1", port: port)),
    services: [HangMonitorService(monitor: monitor)],
    eventLoopGroupProvider: .shared(loops))
try await app.runService()
