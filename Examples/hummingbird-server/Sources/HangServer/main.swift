// Each route hangs one of the places a Swift server runs code; HangMonitor watches them all.
//   GET /ok                   answers at once
//   GET /block-pool           blocks a cooperative-pool thread for 3 s (a blocking call in an async handler)
//   GET /block-loop           blocks one of the server's event loops for 3 s
//   GET /block-main           blocks the main queue for 3 s
//   GET /deadlock             two tasks take two locks in opposite orders: the pool threads never come back
// Configuration: HANGWATCH_* environment variables (HANGWATCH_DATABASE_PATH, HANGWATCH_THRESHOLD, …);
// PORT (default 8080).
import Foundation
import HangMonitor
import HangMonitorConfiguration
import HangMonitorNIO
import HangMonitorService
import Hummingbird
import NIOPosix

@inline(never) func blockingDatabaseCall(seconds: Double) { blockFor(seconds) }
@inline(never) func blockingOnEventLoop(seconds: Double) { blockFor(seconds) }
@inline(never) func blockingOnMainQueue(seconds: Double) { blockFor(seconds) }

func blockFor(_ seconds: Double) {
    let end = Date().addingTimeInterval(seconds)
    while Date() < end { usleep(10_000) }
}

final class Account: @unchecked Sendable { let lock = NSLock() }
let checking = Account(), savings = Account()

@inline(never) func transfer(from: Account, to: Account, arrived: DispatchGroup) {
    from.lock.lock()
    arrived.leave()
    arrived.wait()          // both hold their first lock: each now waits for the other's
    to.lock.lock()
}

let loops = MultiThreadedEventLoopGroup.singleton
var configuration = try HangMonitor.Configuration.load(path: nil)
configuration.targets = [.mainQueue, .cooperativePool] + .eventLoops(of: loops)
let monitor = try HangMonitor(configuration: configuration)

let router = Router()
router.get("ok") { _, _ in "ok\n" }
router.get("block-pool") { _, _ -> String in
    blockingDatabaseCall(seconds: 3)
    return "blocked a pool thread\n"
}
router.get("block-loop") { _, _ -> String in
    loops.next().execute { blockingOnEventLoop(seconds: 3) }
    return "blocking an event loop\n"
}
router.get("block-main") { _, _ -> String in
    DispatchQueue.main.async { blockingOnMainQueue(seconds: 3) }
    return "blocking the main queue\n"
}
router.get("deadlock") { _, _ -> String in
    let arrived = DispatchGroup()
    arrived.enter(); arrived.enter()
    Task.detached { transfer(from: checking, to: savings, arrived: arrived) }
    Task.detached { transfer(from: savings, to: checking, arrived: arrived) }
    return "deadlocking\n"
}

let port = Int(ProcessInfo.processInfo.environment["PORT"] ?? "") ?? 8080
let app = Application(
    router: router,
    configuration: .init(address: .hostname("127.0.0.1", port: port)),
    services: [HangMonitorService(monitor: monitor)],
    eventLoopGroupProvider: .shared(loops))
try await app.runService()
