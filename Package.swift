// swift-tools-version:6.0
import PackageDescription

// Layout follows the pipeline (capture → intermediate dump → report → database → upload):
// one folder per stage inside DumpWithoutCrash, and C only in the small `C…` shim targets
// whose code must be async-signal-safe or wraps a C library.
let package = Package(
    name: "hangwatch",
    products: [
        .library(name: "DumpWithoutCrash", targets: ["DumpWithoutCrash"]),
        .library(name: "HangMonitor", targets: ["HangMonitor"]),
        .executable(name: "hangwatch", targets: ["hangwatch"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.6.3"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.7.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.6.0"),
        .package(url: "https://github.com/apple/swift-configuration", from: "1.4.0"),
    ],
    targets: [
        // Intermediate-dump writer primitives and the format's key numbers (one place, never renumbered).
        .target(name: "CHangwatchDump"),
        // Signal handlers and in-handler unwinding; libunwind is dlopen'ed RTLD_LOCAL (DESIGN.md fact 3).
        .target(
            name: "CHangwatchCapture",
            dependencies: ["CHangwatchDump"],
            linkerSettings: [.linkedLibrary("dl"), .linkedLibrary("pthread")]
        ),
        // Offline symbolication through elfutils' libdw (never called from a handler).
        .target(
            name: "CHangwatchSymbols",
            linkerSettings: [.linkedLibrary("dw"), .linkedLibrary("elf")]
        ),
        // Out-of-process capture: ptrace stop + libunwind-ptrace, also dlopen'ed RTLD_LOCAL.
        .target(
            name: "CHangwatchPtrace",
            linkerSettings: [.linkedLibrary("dl")]
        ),
        // gzip for uploads.
        .target(name: "CHangwatchZlib", linkerSettings: [.linkedLibrary("z")]),
        .target(
            name: "DumpWithoutCrash",
            dependencies: ["CHangwatchCapture", "CHangwatchDump", "CHangwatchSymbols", "CHangwatchPtrace", "CHangwatchZlib"]
        ),
        .target(
            name: "HangMonitor",
            dependencies: [
                "DumpWithoutCrash",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Configuration", package: "swift-configuration"),
            ]
        ),
        .executableTarget(
            name: "hangwatch",
            dependencies: [
                "DumpWithoutCrash",
                "HangMonitor",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        // The benchmark (issue 7): `scripts/bench`. Re-executes itself for its child programs.
        .executableTarget(name: "hangwatch-bench", dependencies: ["DumpWithoutCrash", "HangMonitor"], path: "Sources/hangwatch-bench"),
        // The bundled demo: hangs, recovers, then hangs for good.
        .executableTarget(name: "hangwatch-demo", dependencies: ["HangMonitor"]),

        // Child programs the tests run: they hang and crash on purpose.
        .executableTarget(name: "capture-fixture", dependencies: ["DumpWithoutCrash"], path: "Tests/Fixtures/capture-fixture"),
        .executableTarget(name: "hang-fixture", dependencies: ["HangMonitor"], path: "Tests/Fixtures/hang-fixture"),
        .executableTarget(name: "remote-fixture", dependencies: ["CHangwatchPtrace"], path: "Tests/Fixtures/remote-fixture"),
        .executableTarget(name: "database-fixture", dependencies: ["DumpWithoutCrash"], path: "Tests/Fixtures/database-fixture"),
        .executableTarget(name: "crash-fixture", dependencies: ["DumpWithoutCrash", "CCrashFixtureSupport"], path: "Tests/Fixtures/crash-fixture"),
        .target(name: "CCrashFixtureSupport", path: "Tests/Fixtures/crash-fixture-support"),
        .target(name: "HangwatchTestSupport", path: "Tests/Support"),

        .testTarget(
            name: "DumpWithoutCrashTests",
            dependencies: ["DumpWithoutCrash", "HangwatchTestSupport"],
            exclude: ["Fixtures"]   // read by path (#filePath), not bundled
        ),
        .testTarget(name: "HangMonitorTests", dependencies: [
            "HangMonitor", "HangwatchTestSupport",
            .product(name: "MetricsTestKit", package: "swift-metrics"),
        ]),
        .testTarget(name: "hangwatchTests", dependencies: ["DumpWithoutCrash", "HangMonitor", "HangwatchTestSupport"]),
    ]
)
