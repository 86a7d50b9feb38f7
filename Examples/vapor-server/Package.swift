// swift-tools-version:6.1
// A Vapor 4 server that links HangMonitor. For now it holds README.md's Vapor snippet word for
// word (ReadmeServer): scripts/example-vapor checks that the two agree and builds it, so the
// README's Vapor code compiles against Vapor.
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
            name: "ReadmeServer",
            dependencies: [
                .product(name: "Vapor", package: "vapor"),
                .product(name: "HangMonitor", package: "hangwatch"),
                .product(name: "HangMonitorNIO", package: "hangwatch"),
            ]
        ),
    ]
)
