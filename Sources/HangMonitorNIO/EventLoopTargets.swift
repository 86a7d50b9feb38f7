// SwiftNIO event loops as HangMonitor targets. An event loop is one thread running posted
// work: a handler that blocks it stalls every connection on that loop, and NIO itself has no
// timed detector (only preconditionInEventLoop traps). Each loop is pinged on its own with
// `execute`, and its hung thread is the loop's own thread (the one that ran the last ping).
import HangMonitor
import NIOCore

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
}

extension Array where Element == WatchTarget {
    /// `WatchTarget.eventLoops(of:)`, so that `[.mainQueue] + .eventLoops(of: group)` reads as it should.
    public static func eventLoops(of group: any EventLoopGroup) -> [WatchTarget] { WatchTarget.eventLoops(of: group) }
}
