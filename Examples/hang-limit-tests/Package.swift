// swift-tools-version:6.1
// A small library and its tests under hang limits (HangMonitorTesting): two tests fail on
// purpose, with the blocking function and its file:line; scripts/example-hang-limit runs them
// and checks the output, and that nothing was written to disk.
import PackageDescription

let package = Package(
    name: "hang-limit-tests",
    dependencies: [
        // This repository; committed as the symlink Examples/hang-limit-tests/hangwatch.
        .package(path: "hangwatch"),
    ],
    targets: [
        .target(name: "Thumbnails"),
        .testTarget(
            name: "ThumbnailsTests",
            dependencies: [
                "Thumbnails",
                .product(name: "HangMonitorTesting", package: "hangwatch"),
                .product(name: "HangMonitor", package: "hangwatch"),
            ]
        ),
    ]
)
