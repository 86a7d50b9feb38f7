// swift-tools-version:6.1
// A Vapor 4 server that links HangMonitor, with routes that hang it one place at a time
// (HangServer), and README.md's Vapor snippet word for word (ReadmeServer). scripts/example-vapor
// checks that the README and docs agree with them, builds both against Vapor, hangs HangServer
// route by route and checks each report.
import PackageDescription

let package = Package(
    name: "vapor-server",
    dependencies: [
        .package(url: "https://github.com/vapor/vapor.git", from: "4.122.3"),
        // This repository; committed as the symlink Examples/vapor-server/hangwatch.
        .package(path: "hangwatch"),
    ],
    targets: [
        .executableTarget(
            name: "HangServer",
            dependencies: [
                .product(name: "Vapor", package: "vapor"),
                .product(name: "HangMonitor", package: "hangwatch"),
                .product(name: "HangMonitorConfiguration", package: "hangwatch"),
                .product(name: "HangMonitorNIO", package: "hangwatch"),
                .product(name: "HangMonitorTracing", package: "hangwatch"),
            ]
        ),
        .executableTarget(
            name: "ReadmeServer",
            dependencies: [
                .product(name: "Vapor", package: "vapor"),
                .product(name: "HangMonitor", package: "hangwatch"),
                .product(name: "HangMonitorNIO", package: "hangwatch"),
            ]
        ),
    ]
)
