// swift-tools-version:6.1
// A Hummingbird 2 server whose requests are traced (swift-otel, OTLP) and watched by HangMonitor,
// with HangMonitorTracing linking the two: a request that outlives its limit gets a `hang` event
// and a `hangwatch.hang` child span, and its hang report the request's traceparent.
// scripts/example-tracing builds it, hangs /hang and checks what an OTLP receiver got.
import PackageDescription

let package = Package(
    name: "tracing-server",
    dependencies: [
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1"),
        // OTLP/HTTP only: the OTLPGRPC trait (on by default) would build gRPC as well.
        .package(url: "https://github.com/swift-otel/swift-otel.git", from: "1.6.0", traits: ["OTLPHTTP"]),
        // This repository; committed as the symlink Examples/tracing-server/hangwatch -> ../.. so the
        // package identity is `hangwatch` wherever the clone lives.
        .package(path: "hangwatch"),
    ],
    targets: [
        .executableTarget(
            name: "TracingServer",
            dependencies: [
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "OTel", package: "swift-otel"),
                .product(name: "HangMonitor", package: "hangwatch"),
                .product(name: "HangMonitorService", package: "hangwatch"),
                .product(name: "HangMonitorConfiguration", package: "hangwatch"),
                .product(name: "HangMonitorTracing", package: "hangwatch"),
            ]
        ),
    ]
)
