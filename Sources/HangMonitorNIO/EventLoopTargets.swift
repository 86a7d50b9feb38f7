// SwiftNIO's executors as HangMonitor targets.
// - An event loop is one thread running posted work: a handler that blocks it stalls every
//   connection on that loop, and NIO itself has no timed detector (only
//   preconditionInEventLoop traps). Each loop is pinged on its own with `execute`, and its hung
//   thread is the loop's own thread (the one that ran the last ping).
// - A `NIOThreadPool` (Vapor's `app.threadPool`, `NonBlockingFileIO`) is where blocking work
//   goes: when every thread of it is blocked, work queued behind waits, and nothing reports it.
//   It is a `.pool` target (PoolHangThreads.swift describes how its hung threads are found).
import HangMonitor
import NIOCore
import NIOPosix

extension WatchTarget {
    /// One target per event loop of `group`, named `event-loop:0`, `event-loop:1`, … in the
    /// group's order (what reports, events and metrics call them):
    ///
    ///     targets: [.mainQueue, .cooperativePool] + .eventLoops(of: MultiThreadedEventLoopGroup.singleton)
    public static func eventLoops(of group: any EventLoopGroup) -> [WatchTarget] {
        var targets: [WatchTarget] = []
        for (index, loop) in group.makeIterator().enumerated() {
            targets.append(.custom(name: "event-loop:\(index)", post: { job in loop.execute(job) }))
        }
        return targets
    }

    /// A `NIOThreadPool` as a pool target, named `name` (default `thread-pool`): hung when none
    /// of its threads takes a ping within the threshold, because all of them are blocked and
    /// work waits behind them. Vapor's is `app.threadPool`:
    ///
    ///     targets: [.mainQueue, .threadPool(app.threadPool)] + .eventLoops(of: app.eventLoopGroup)
    ///
    /// A pool that is shut down runs the ping at once (as NIO does with work it cannot take),
    /// so a stopping pool is never a hang.
    public static func threadPool(_ pool: NIOThreadPool, name: String = "thread-pool") -> WatchTarget {
        .pool(name: name, post: { job in pool.submit { _ in job() } })
    }
}

extension Array where Element == WatchTarget {
    /// `WatchTarget.eventLoops(of:)`, so that `[.mainQueue] + .eventLoops(of: group)` reads as it should.
    public static func eventLoops(of group: any EventLoopGroup) -> [WatchTarget] { WatchTarget.eventLoops(of: group) }
}
