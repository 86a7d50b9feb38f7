// The bench's server (hangwatch-bench section 8): a SwiftNIO HTTP/1.1 server whose handlers
// run on the cooperative pool, as Hummingbird 2's async handlers do, so a request touches an
// event loop, the pool and back. Its HangMonitor watches the main queue, the pool and both
// event loops with its default settings; the bench switches it on and off between windows.
//
//   hangwatch-bench-server on|off|watched DATABASE
//
// Prints {"port":N} once listening on 127.0.0.1 (the monitor running or not, as asked).
// `watched`: every `/` request runs under `HangMonitor.watch` inside a request's trace context
// (a ServiceContext with a value, as a tracer's span gives), as a traced server's middleware
// does. Two monitors run, one with HangMonitorTracing's trace link and one without, and
// /trace/on and /trace/off say which one watches the requests: the bench alternates it
// between two servers to measure what the link costs a request (docs/traces.md).
//   GET /stats          {"requests":R,"cpuMicros":C,"hangs":H}, answered on the event loop:
//                       requests answered so far (only `/`), the process's CPU time from
//                       getrusage, and the hangs the monitor detected
//   GET /monitor/start  starts the monitor; GET /monitor/stop stops it
//   GET /stall-loop     blocks its event loop for 3 s: the control that shows the monitor watches
//   GET /trace/on       (watched) the monitor with the trace link watches the requests; /trace/off: the other
import Dispatch
import Foundation
import HangMonitor
import HangMonitorNIO
import HangMonitorTracing
import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization
import Tracing
#if canImport(Glibc)
import Glibc
#endif

let requestsAnswered = Atomic<Int>(0)
let hangsDetected = Atomic<Int>(0)
/// `watched`: whether the monitor with the trace link watches the requests.
let tracing = Atomic<Bool>(false)

/// What a tracer's span puts in a request's context: here, its ids.
enum RequestSpanKey: ServiceContextKey { typealias Value = String }
let requestContext: ServiceContext = {
    var context = ServiceContext.topLevel
    context[RequestSpanKey.self] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    return context
}()

/// A few microseconds of arithmetic on the pool, the optimiser cannot drop: a handler's work.
@inline(never) func handlerWork(_ seed: Int) -> Int {
    var value = seed
    for step in 0..<2_000 { value = value &* 6364136223846793005 &+ step }
    return value
}

func processCPUMicros() -> Int {
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    func micros(_ t: timeval) -> Int { Int(t.tv_sec) * 1_000_000 + Int(t.tv_usec) }
    return micros(usage.ru_utime) + micros(usage.ru_stime)
}

final class Handler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart
    private var path = ""
    private var keepAlive = true

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case let .head(head):
            path = head.uri
            keepAlive = head.isKeepAlive
        case .body:
            break
        case .end:
            let keepAlive = keepAlive
            if path == "/stall-loop" {   // the bench's control: a real 3 s event-loop hang
                // The capture's signal ends a sleep early (EINTR): keep blocking until 3 s have passed.
                let end = DispatchTime.now().uptimeNanoseconds + 3_000_000_000
                while DispatchTime.now().uptimeNanoseconds < end { usleep(10_000) }
                respond(context: context, body: "stalled", keepAlive: keepAlive)
                return
            }
            if path == "/monitor/start" || path == "/monitor/stop" {
                let start = path == "/monitor/start"
                // stop() joins the monitor thread: not on an event loop.
                let done = context.eventLoop.makePromise(of: Int.self)
                DispatchQueue.global().async {
                    if start { monitor.start() } else { monitor.stop() }
                    done.succeed(0)
                }
                respond(after: done.futureResult, context: context, body: { _ in start ? "started" : "stopped" }, keepAlive: keepAlive)
                return
            }
            if path == "/trace/on" || path == "/trace/off" {
                tracing.store(path == "/trace/on", ordering: .relaxed)
                respond(context: context, body: path, keepAlive: keepAlive)
                return
            }
            if path == "/stats" {
                let stats = #"{"requests":\#(requestsAnswered.load(ordering: .relaxed)),"cpuMicros":\#(processCPUMicros()),"hangs":\#(hangsDetected.load(ordering: .relaxed))}"#
                respond(context: context, body: stats, keepAlive: keepAlive)
                return
            }
            let promise = context.eventLoop.makePromise(of: Int.self)
            let seed = requestsAnswered.load(ordering: .relaxed)
            if let watching = watching {
                let monitor = tracing.load(ordering: .relaxed) ? watching.traced : watching.plain
                promise.completeWithTask {
                    await ServiceContext.withValue(requestContext) {
                        await monitor.watch("GET /", limit: .seconds(30)) { handlerWork(seed) }
                    }
                }
            } else {
                promise.completeWithTask { handlerWork(seed) }
            }
            respond(after: promise.futureResult, context: context, body: { value in
                requestsAnswered.add(1, ordering: .relaxed)
                return value == 42 ? "42" : "ok"
            }, keepAlive: keepAlive)
        }
    }

    /// Answers once `future` (completed elsewhere, e.g. on the pool) is done, back on the loop.
    private func respond(after future: EventLoopFuture<Int>, context: ChannelHandlerContext,
                         body: @escaping @Sendable (Int) -> String, keepAlive: Bool) {
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        future.whenSuccess { value in
            let (handler, context) = loopBound.value
            handler.respond(context: context, body: body(value), keepAlive: keepAlive)
        }
    }

    private func respond(context: ChannelHandlerContext, body: String, keepAlive: Bool) {
        var headers = HTTPHeaders()
        headers.add(name: "content-length", value: String(body.utf8.count))
        headers.add(name: "content-type", value: "text/plain")
        if !keepAlive { headers.add(name: "connection", value: "close") }
        context.write(wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: .ok, headers: headers))), promise: nil)
        context.write(wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(string: body)))), promise: nil)
        let done = context.eventLoop.makePromise(of: Void.self)
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: done)
        if !keepAlive {
            let channel = context.channel
            done.futureResult.whenComplete { _ in channel.close(promise: nil) }
        }
    }
}

let arguments = Array(CommandLine.arguments.dropFirst())
guard arguments.count == 2, ["on", "off", "watched"].contains(arguments[0]) else {
    FileHandle.standardError.write(Data("usage: hangwatch-bench-server on|off|watched DATABASE\n".utf8))
    exit(64)
}
// Two loops whatever the CPU affinity (the bench pins the server to one CPU, and NIO's
// System.coreCount follows the affinity).
let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
let monitor: HangMonitor
do {
    monitor = try HangMonitor(configuration: .init(
        databasePath: arguments[1], bundleID: "bench-server",
        targets: [.mainQueue, .cooperativePool] + .eventLoops(of: group),
        eventHandler: { event in if case .detected = event { hangsDetected.add(1, ordering: .relaxed) } }))
} catch {
    FileHandle.standardError.write(Data("hangwatch-bench-server: \(error)\n".utf8))
    exit(2)
}
if arguments[0] != "off" { monitor.start() }
/// `watched`: the monitors that watch the requests, without and with the trace link (besides
/// `monitor`, which watches the loops, the pool and the main queue).
let watching: (plain: HangMonitor, traced: HangMonitor)?
if arguments[0] == "watched" {
    do {
        let plain = try HangMonitor(configuration: .init(databasePath: arguments[1], bundleID: "bench-server-watch"))
        let traced = try HangMonitor(configuration: .init(databasePath: arguments[1], bundleID: "bench-server-traced",
                                                          traceLink: HangTracing()))
        plain.start()
        traced.start()
        watching = (plain, traced)
    } catch {
        FileHandle.standardError.write(Data("hangwatch-bench-server: \(error)\n".utf8))
        exit(2)
    }
} else {
    watching = nil
}
let channel: Channel
do {
    channel = try ServerBootstrap(group: group)
        .serverChannelOption(.backlog, value: 256)
        .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
        .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
        .childChannelInitializer { channel in
            channel.eventLoop.makeCompletedFuture {
                try channel.pipeline.syncOperations.configureHTTPServerPipeline()
                try channel.pipeline.syncOperations.addHandler(Handler())
            }
        }
        .bind(host: "127.0.0.1", port: 0).wait()
} catch {
    FileHandle.standardError.write(Data("hangwatch-bench-server: cannot listen: \(error)\n".utf8))
    exit(2)
}
FileHandle.standardOutput.write(Data(#"{"port":\#(channel.localAddress?.port ?? 0)}"#.utf8 + [UInt8(ascii: "\n")]))
dispatchMain()
