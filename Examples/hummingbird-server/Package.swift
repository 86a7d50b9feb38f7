// swift-tools-version:6.1
// A Hummingbird 2 server that links HangMonitor and hangs on purpose, route by route:
// scripts/example-server builds it, drives it with curl and checks every report.
import PackageDescription

let package = Package(
    name: "hummingbird-server",
    dependencies: [
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1"),
        // This repository; scripts/example-server links it as Examples/hummingbird-server/hangwatch
        // so the package identity is `hangwatch` wherever the clone lives.
        .package(path: "hangwatch"),
    ],
    targets: [
        .executableTarget(
            name: "HangServer",
            dependencies: [
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HangMonitor", package: "hangwatch"),
                .product(name: "HangMonitorNIO", package: "hangwatch"),
                .product(name: "HangMonitorService", package: "hangwatch"),
                .product(name: "HangMonitorConfiguration", package: "hangwatch"),
            ]
        ),
        // README.md's server snippet, word for word: scripts/example-server checks that the two
        // agree and builds it, so the README's code compiles against Hummingbird.
        .executableTarget(
            name: "ReadmeServer",
            dependencies: [
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HangMonitor", package: "hangwatch"),
                .product(name: "HangMonitorNIO", package: "hangwatch"),
                .product(name: "HangMonitorService", package: "hangwatch"),
            ]
        ),
    ]
)
