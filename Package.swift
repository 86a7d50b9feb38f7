// swift-tools-version:6.1
import PackageDescription

// One target per pipeline stage (docs/architecture.md draws them):
//
//   capture ──▶ snapshot ──▶ intermediate dump ──▶ database ──▶ processing ──▶ report ──▶ minidump / upload
//   (live, crash,            (HangwatchSnapshot)   (storage:    (dumps into    (model,
//    remote ptrace)                                 names,       reports,       rendered)
//                                                   leases)      stitching)
//
// C lives only in the small `CHangwatch…` shims, each owned by exactly one Swift target.
// What a server links for a watchdog (HangMonitor) stops at capture + database: no libdw,
// libelf, zlib, ptrace or FoundationNetworking. Those belong to processing, remote capture
// and upload, which only the CLI and the DumpWithoutCrash facade link.
let package = Package(
    name: "hangwatch",
    products: [
        .library(name: "DumpWithoutCrash", targets: ["DumpWithoutCrash"]),
        .library(name: "HangMonitor", targets: ["HangMonitor"]),
        .library(name: "HangMonitorService", targets: ["HangMonitorService"]),
        .library(name: "HangMonitorConfiguration", targets: ["HangMonitorConfiguration"]),
        .library(name: "HangMonitorNIO", targets: ["HangMonitorNIO"]),
        .library(name: "HangMonitorTracing", targets: ["HangMonitorTracing"]),
        .library(name: "HangMonitorTesting", targets: ["HangMonitorTesting"]),
        .executable(name: "hangwatch", targets: ["hangwatch"]),
        .executable(name: "hangwatch-upload", targets: ["hangwatch-upload"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.6.3"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.7.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.6.0"),
        // No JSON trait: its JSONSnapshot needs the full Foundation (JSONSerialization), which
        // would load libFoundation into the CLI; the loader parses the file itself.
        .package(url: "https://github.com/apple/swift-configuration", from: "1.4.0", traits: []),
        // Only HangMonitorNIO (and the tests) use it: a program that depends on HangMonitor alone
        // resolves the package but never builds nor links it (docs/hang-monitor.md, "Event loops").
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        // Only HangMonitorTracing (and its tests) use it (docs/traces.md). 1.7 has the
        // in-memory tracer the tests use.
        .package(url: "https://github.com/apple/swift-distributed-tracing", from: "1.7.3"),
    ],
    targets: [
        // MARK: C shims (async-signal-safe code, or a thin wrapper of one C library)

        // Intermediate-dump writer primitives and the format's key numbers (one place, never renumbered).
        .target(name: "CHangwatchDump"),
        // The one parser of each /proc text file (stat, status, maps), for Swift and for the C
        // that cannot run Swift (a signal handler, the quiet-capture helper); and kcmp, which tells
        // a process sharing its parent's memory (the quiet-capture helper) from one of its own.
        .target(name: "CHangwatchProcFS"),
        // Swift tasks read out of a process's memory (process_vm_readv; docs/tasks.md).
        .target(name: "CHangwatchTasks"),
        // Signal handlers and in-handler unwinding; libunwind is dlopen'ed RTLD_LOCAL
        // (docs/platform-facts.md fact 3).
        // The DWARF call-frame stepper both capture paths unwind their copies with (libunwind
        // only for what it does not do).
        .target(name: "CHangwatchCFI", dependencies: ["CHangwatchDump"]),
        .target(
            name: "CHangwatchCapture",
            dependencies: ["CHangwatchDump", "CHangwatchProcFS", "CHangwatchCFI"],
            linkerSettings: [.linkedLibrary("dl"), .linkedLibrary("pthread")]
        ),
        // Offline symbolication through elfutils' libdw (never called from a handler), dlopen'ed on
        // first use (hw_libdw.h: a program that only captures starts without it).
        .target(name: "CHangwatchSymbols", linkerSettings: [.linkedLibrary("dl")]),
        // Out-of-process capture: ptrace stop + libunwind-ptrace, loaded with dlmopen.
        .target(name: "CHangwatchPtrace", dependencies: ["CHangwatchDump", "CHangwatchProcFS", "CHangwatchCFI"],
                linkerSettings: [.linkedLibrary("dl")]),
        // prctl for `hangwatch run` (child subreaper).
        .target(name: "CHangwatchSupervision"),
        // gzip for uploads and pprof profiles (owned by HangwatchReport, Gzip.swift).
        .target(name: "CHangwatchZlib", linkerSettings: [.linkedLibrary("z")]),
        // hangwatch's one HTTP client, bounded (a POST for uploads, a GET to a file for debuginfod),
        // through libcurl dlopen'ed on the first request (docs/upload.md: why not URLSession).
        .target(name: "CHangwatchCurl", linkerSettings: [.linkedLibrary("dl")]),

        // MARK: pipeline stages (package-internal modules)

        // The snapshot model every stage passes on, the names reports spell (targets, outcomes,
        // thread states), and the intermediate dump format (reader, writer).
        .target(name: "HangwatchSnapshot", dependencies: ["CHangwatchDump"]),
        // Platform pieces every stage shares: the one /proc reader (this process and others; states
        // read as the snapshot's ThreadState), the one ELF build-id reader (memory and files), threads
        // and locks on pthreads (no full Foundation).
        .target(name: "HangwatchPlatform", dependencies: ["CHangwatchProcFS", "HangwatchSnapshot"]),
        // The crash-report database, storage only: pending dumps, claims, reports, pruning, staging,
        // run records (names, leases, atomic moves; no report kinds, no stitching).
        .target(name: "HangwatchDatabase", dependencies: ["HangwatchSnapshot", "HangwatchPlatform"]),
        // What becomes of a hang whose process died while staged (promoted, or superseded by a
        // crash), and how a process ended among the reports: processing's policy that a
        // HangMonitor runs at start, so without symbolication (no libdw, libelf).
        .target(name: "HangwatchPromotion", dependencies: ["HangwatchSnapshot", "HangwatchDatabase"]),
        // Every live Swift task of a process (this one or another) with its await chain.
        .target(name: "HangwatchTaskCapture", dependencies: ["HangwatchSnapshot", "HangwatchPlatform", "CHangwatchTasks"]),
        // In-process capture of every thread, and the fatal-signal handlers.
        .target(
            name: "HangwatchCapture",
            dependencies: ["HangwatchSnapshot", "HangwatchPlatform", "HangwatchDatabase", "HangwatchTaskCapture", "CHangwatchCapture"]
        ),
        // Addresses to function, file and line (ELF symbol tables, DWARF, Swift demangling), the
        // symbol cache (per-module indexes in a private directory kept by the database's file rules),
        // and debug files fetched from debuginfod servers (CHangwatchCurl, only when asked).
        .target(
            name: "HangwatchSymbolication",
            dependencies: ["HangwatchSnapshot", "HangwatchPlatform", "HangwatchDatabase", "CHangwatchSymbols", "CHangwatchCurl"]
        ),
        // The report model, its builder and renderers (text, JSON, folded, flame graphs, pprof), and
        // gzip (CHangwatchZlib) for pprof and uploads.
        .target(
            name: "HangwatchReport",
            dependencies: ["HangwatchSnapshot", "HangwatchPlatform", "HangwatchSymbolication", "CHangwatchZlib"]
        ),
        // The liveness datagrams a monitored program sends to `hangwatch run`.
        .target(name: "HangwatchSupervisorProtocol", dependencies: ["HangwatchSnapshot"]),
        // Turning dumps into reports: DumpProcessor, the one stitch step of a staged hang
        // (HangStitch), the one killed-report path, the verdict on ended runs.
        .target(
            name: "HangwatchProcessing",
            dependencies: ["HangwatchSnapshot", "HangwatchPlatform", "HangwatchDatabase", "HangwatchPromotion", "HangwatchSymbolication",
                           "HangwatchReport", "HangwatchSupervisorProtocol"]
        ),
        // Minidumps (MDMP) from reports and their dumps.
        .target(name: "HangwatchMinidump", dependencies: ["HangwatchSnapshot", "HangwatchPlatform", "HangwatchDatabase", "HangwatchReport"]),
        // Crashpad-protocol upload (its HTTP client: CHangwatchCurl).
        .target(
            name: "HangwatchUpload",
            dependencies: ["HangwatchDatabase", "HangwatchSnapshot", "HangwatchReport", "HangwatchMinidump", "CHangwatchCurl"]
        ),
        // Another process's threads, captured from outside with ptrace.
        .target(name: "HangwatchRemoteCapture", dependencies: ["HangwatchSnapshot", "HangwatchPlatform", "HangwatchTaskCapture", "CHangwatchPtrace"]),
        // One hang's owner from detection to its end (TrackedHang: staged, sampled, superseded,
        // ended; its HangLifecycle), fed by HangMonitor's monitor thread and by `hangwatch run`
        // alike; it writes through HangKeeping (the staging area) and HangEndingSink.
        .target(name: "HangwatchLifecycle", dependencies: ["HangwatchSnapshot", "HangwatchDatabase"]),

        // MARK: products

        // Crashpad's verbs over the whole pipeline.
        .target(
            name: "DumpWithoutCrash",
            dependencies: ["HangwatchSnapshot", "HangwatchDatabase", "HangwatchCapture", "HangwatchReport", "HangwatchProcessing",
                           "HangwatchMinidump", "HangwatchUpload", "HangwatchSymbolication", "HangwatchSupervisorProtocol"]
        ),
        // The watchdog: capture + database only (hangs stay intermediate dumps until processed).
        .target(
            name: "HangMonitor",
            dependencies: [
                "HangwatchSnapshot", "HangwatchPlatform", "HangwatchDatabase", "HangwatchPromotion", "HangwatchCapture",
                "HangwatchSupervisorProtocol", "HangwatchTaskCapture", "HangwatchLifecycle",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
            ]
        ),
        // HangMonitor as a swift-service-lifecycle Service.
        .target(
            name: "HangMonitorService",
            dependencies: ["HangMonitor", .product(name: "ServiceLifecycle", package: "swift-service-lifecycle")]
        ),
        // Every event loop of a SwiftNIO EventLoopGroup as a watch target.
        .target(
            name: "HangMonitorNIO",
            dependencies: ["HangMonitor", .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOPosix", package: "swift-nio")]
        ),
        // Hangs on the request's trace, through swift-distributed-tracing (docs/traces.md).
        .target(
            name: "HangMonitorTracing",
            dependencies: ["HangMonitor", .product(name: "Tracing", package: "swift-distributed-tracing")]
        ),
        // Hang limits in tests (a Swift Testing trait, withHangLimit): hangs kept in memory,
        // symbolicated for the failure's stack, so this one links processing too.
        .target(
            name: "HangMonitorTesting",
            dependencies: [
                "HangMonitor", "HangwatchCapture", "HangwatchSnapshot", "HangwatchDatabase", "HangwatchReport", "HangwatchSymbolication",
                "HangwatchPlatform",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
            ]
        ),
        // HangMonitor.Configuration from a JSON file and HANGWATCH_* environment variables.
        .target(
            name: "HangMonitorConfiguration",
            dependencies: ["HangMonitor", "HangwatchPlatform", "HangwatchSnapshot", .product(name: "Configuration", package: "swift-configuration")]
        ),
        // `hangwatch run`'s supervision: launching the job, watching its liveness, output and
        // deadlines, capturing it when it hangs and reporting how it ended (docs/architecture.md).
        .target(
            name: "HangwatchSupervision",
            dependencies: [
                "HangwatchPlatform", "HangwatchSnapshot", "HangwatchDatabase", "HangwatchLifecycle",
                "HangwatchReport", "HangwatchProcessing", "HangwatchSymbolication", "HangwatchRemoteCapture", "HangwatchTaskCapture",
                "HangwatchSupervisorProtocol",
            ]
        ),
        // What the hangwatch executables share: global options, errors, output files.
        .target(
            name: "HangwatchCommandLine",
            dependencies: [
                "HangwatchPlatform", "HangwatchDatabase", "HangMonitor", "HangMonitorConfiguration",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        // The CLI. It links no upload code: `hangwatch upload` execs hangwatch-upload.
        .executableTarget(
            name: "hangwatch",
            dependencies: [
                "HangwatchCommandLine", "HangwatchPlatform", "HangMonitor", "HangMonitorConfiguration", "HangwatchSupervisorProtocol",
                "HangwatchSnapshot", "HangwatchDatabase", "HangwatchSymbolication", "HangwatchReport", "HangwatchProcessing",
                "HangwatchMinidump", "HangwatchRemoteCapture", "HangwatchTaskCapture", "CHangwatchSupervision", "HangwatchSupervision",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            // SwiftPM exports every symbol of an executable (so that tests could link it): 9,700
            // names in hangwatch's dynamic symbol table, which the Swift runtime's start-up scans
            // (dladdr, 0.33 M instructions of every command). Nothing loads hangwatch as a library.
            // SwiftPM refuses unsafe flags only in the products another package depends on: a
            // package using HangMonitor or DumpWithoutCrash never builds this executable.
            linkerSettings: [.unsafeFlags(["-Xlinker", "--no-export-dynamic"], .when(platforms: [.linux], configuration: .release))]
        ),
        // `hangwatch upload`: the only executable that loads FoundationNetworking (libcurl is loaded by
        // every command that sends or fetches, on its first request).
        .executableTarget(
            name: "hangwatch-upload",
            dependencies: [
                "HangwatchCommandLine", "HangwatchPlatform", "HangwatchDatabase", "HangwatchReport", "HangwatchUpload",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),

        // The kernel's part of a quiet capture alone: the floor the bench pairs with each quiet capture.
        .target(name: "CHangwatchBenchFloor", dependencies: ["CHangwatchDump"], path: "Sources/CHangwatchBenchFloor"),
        // The benchmark: `scripts/bench`. Re-executes itself for its child programs.
        .executableTarget(
            name: "hangwatch-bench",
            dependencies: ["HangwatchCapture", "HangwatchSnapshot", "HangwatchReport", "HangMonitor", "HangwatchPlatform",
                           "HangwatchRemoteCapture", "HangwatchSymbolication", "HangwatchTaskCapture", "CHangwatchBenchFloor",
                           "HangMonitorTracing", .product(name: "Tracing", package: "swift-distributed-tracing")],
            path: "Sources/hangwatch-bench"
        ),
        // The bench's C target: 65 threads 30 frames deep, for hangwatch dump vs eu-stack on C.
        .executableTarget(name: "hangwatch-bench-c-target", dependencies: ["CHangwatchBenchFloor", "CHangwatchProcFS"],
                          path: "Sources/hangwatch-bench-c-target"),
        // The bench's start-up yardstick: a Foundation hello-world built the same way.
        .executableTarget(name: "hangwatch-bench-hello", path: "Sources/hangwatch-bench-hello"),
        // The bench's server (section 8): SwiftNIO HTTP/1.1, handlers on the pool, monitor on or off.
        .executableTarget(name: "hangwatch-bench-server", dependencies: [
            "HangMonitor", "HangMonitorNIO", "HangMonitorTracing",
            .product(name: "Tracing", package: "swift-distributed-tracing"),
            .product(name: "NIOCore", package: "swift-nio"),
            .product(name: "NIOPosix", package: "swift-nio"),
            .product(name: "NIOHTTP1", package: "swift-nio"),
        ], path: "Sources/hangwatch-bench-server"),
        // Coverage-guided fuzzing of the readers (scripts/fuzz); a normal build replays inputs.
        .target(name: "CHangwatchFuzz"),
        .executableTarget(name: "hangwatch-fuzz", dependencies: [
            "HangwatchSnapshot", "HangwatchDatabase", "HangwatchReport", "HangwatchProcessing", "HangwatchMinidump", "HangwatchSymbolication",
            "CHangwatchFuzz",
            "CHangwatchProcFS",
            "CHangwatchSymbols",
        ]),
        // The bundled demo: hangs, recovers, then hangs for good. Links HangMonitor only.
        .executableTarget(name: "hangwatch-demo", dependencies: ["HangMonitor"]),

        // MARK: tests and the child programs they run (hang and crash on purpose)

        .target(name: "CHangwatchFixtureHangSupport", path: "Tests/Fixtures/hangwatch-fixture-hang-support"),
        .target(name: "CHangwatchFixtureCrashSupport", path: "Tests/Fixtures/hangwatch-fixture-crash-support"),
        .executableTarget(name: "hangwatch-fixture-capture", dependencies: ["DumpWithoutCrash", "HangwatchCapture", "HangwatchSnapshot",
                                                                      "HangwatchPlatform"],
                          path: "Tests/Fixtures/hangwatch-fixture-capture"),
        .executableTarget(name: "hangwatch-fixture-hang", dependencies: ["HangMonitor", "HangMonitorConfiguration", "DumpWithoutCrash",
                                                                   "CHangwatchFixtureHangSupport", "CHangwatchFixtureCrashSupport"],
                          path: "Tests/Fixtures/hangwatch-fixture-hang"),
        .executableTarget(name: "hangwatch-fixture-tasks", dependencies: ["HangwatchTaskCapture", "HangwatchSnapshot"],
                          path: "Tests/Fixtures/hangwatch-fixture-tasks"),
        .executableTarget(name: "hangwatch-fixture-supervisor", dependencies: ["HangwatchSupervision", "HangwatchSnapshot"],
                          path: "Tests/Fixtures/hangwatch-fixture-supervisor"),
        // Links HangMonitor only: the library set and memory of a watchdog-only server.
        .executableTarget(name: "hangwatch-fixture-monitor-only", dependencies: ["HangMonitor"],
                          path: "Tests/Fixtures/hangwatch-fixture-monitor-only"),
        .executableTarget(name: "hangwatch-fixture-remote", dependencies: ["CHangwatchPtrace", "CHangwatchFixtureCrashSupport"],
                          path: "Tests/Fixtures/hangwatch-fixture-remote"),
        .executableTarget(name: "hangwatch-fixture-database", dependencies: ["DumpWithoutCrash"],
                          path: "Tests/Fixtures/hangwatch-fixture-database"),
        .executableTarget(name: "hangwatch-fixture-crash", dependencies: ["DumpWithoutCrash", "HangwatchDatabase", "HangwatchSnapshot",
                                                                    "HangwatchPlatform", "CHangwatchFixtureCrashSupport"],
                          path: "Tests/Fixtures/hangwatch-fixture-crash"),
        .target(name: "HangwatchTestSupport", path: "Tests/Support"),
        // What the stages' tests share: sample dumps and fixtures' paths (Tests/Fixtures/data, read
        // by path), a database sandbox, the minidump readers, symbol and upload helpers.
        .target(
            name: "HangwatchStageTestSupport",
            dependencies: ["HangwatchSnapshot", "HangwatchDatabase", "HangwatchReport", "HangwatchUpload",
                           "HangwatchRemoteCapture", "HangwatchSymbolication", "HangwatchPlatform", "HangwatchTestSupport"],
            path: "Tests/StageSupport"
        ),

        // MARK: tests, one target per stage (Sources' layout), then the products

        .testTarget(name: "HangwatchPlatformTests", dependencies: ["HangwatchPlatform", "CHangwatchProcFS", "HangwatchTestSupport"]),
        // Each stage's tests import that stage (and the stages they need for inputs), never the facade.
        .testTarget(name: "HangwatchSnapshotTests", dependencies: ["HangwatchSnapshot", "HangwatchStageTestSupport"]),
        .testTarget(name: "HangwatchDatabaseTests", dependencies: [
            "HangwatchDatabase", "HangwatchSnapshot", "HangwatchReport", "HangwatchStageTestSupport", "HangwatchTestSupport",
        ]),
        .testTarget(name: "HangwatchCaptureTests", dependencies: [
            "HangwatchCapture", "HangwatchSnapshot", "HangwatchDatabase", "HangwatchReport", "HangwatchProcessing", "HangwatchRemoteCapture",
            "HangwatchSymbolication", "HangwatchPlatform", "HangwatchStageTestSupport", "HangwatchTestSupport", "HangwatchTaskCapture",
        ]),
        .testTarget(name: "HangwatchSymbolicationTests", dependencies: [
            "HangwatchSymbolication", "HangwatchSnapshot", "HangwatchRemoteCapture", "HangwatchPlatform", "HangwatchStageTestSupport",
            "HangwatchTestSupport",
        ]),
        .testTarget(name: "HangwatchReportTests", dependencies: [
            "HangwatchReport", "HangwatchSnapshot", "HangwatchRemoteCapture", "HangwatchSymbolication", "HangwatchPlatform",
            "HangwatchStageTestSupport", "HangwatchTestSupport",
        ]),
        .testTarget(name: "HangwatchMinidumpTests", dependencies: [
            "HangwatchMinidump", "HangwatchReport", "HangwatchDatabase", "HangwatchSnapshot", "HangwatchCapture",
            "HangwatchRemoteCapture", "HangwatchSymbolication", "HangwatchStageTestSupport", "HangwatchTestSupport",
        ]),
        .testTarget(name: "HangwatchProcessingTests", dependencies: [
            "HangwatchProcessing", "HangwatchPromotion", "HangwatchReport", "HangwatchDatabase", "HangwatchSnapshot",
            "HangwatchStageTestSupport", "HangwatchTestSupport",
        ]),
        .testTarget(name: "HangwatchUploadTests", dependencies: [
            "HangwatchUpload", "HangwatchProcessing", "HangwatchMinidump", "HangwatchReport", "HangwatchDatabase", "HangwatchSnapshot",
            "HangwatchStageTestSupport", "HangwatchTestSupport",
        ]),
        .testTarget(name: "HangwatchRemoteCaptureTests", dependencies: [
            "HangwatchRemoteCapture", "HangwatchSnapshot", "HangwatchPlatform", "HangwatchStageTestSupport", "HangwatchTestSupport",
        ]),
        // The facade's own tests: what `import DumpWithoutCrash` gives a program.
        .testTarget(name: "DumpWithoutCrashTests", dependencies: [
            "DumpWithoutCrash", "HangwatchRemoteCapture", "HangwatchSymbolication", "HangwatchStageTestSupport",
            "HangwatchTestSupport", "HangMonitorTesting",
        ]),
        .testTarget(name: "HangMonitorTests", dependencies: [
            "HangMonitor", "HangMonitorService", "HangMonitorConfiguration", "DumpWithoutCrash", "HangwatchSymbolication",
            "HangwatchTestSupport", "HangMonitorNIO", "HangwatchPlatform",
            .product(name: "MetricsTestKit", package: "swift-metrics"),
            .product(name: "NIOPosix", package: "swift-nio"),
        ]),
        .testTarget(name: "HangMonitorTracingTests", dependencies: [
            "HangMonitor", "HangMonitorTracing", "HangwatchTestSupport", "DumpWithoutCrash", "HangwatchReport",
            "HangwatchDatabase", "HangwatchSnapshot", "HangwatchStageTestSupport",
            .product(name: "Tracing", package: "swift-distributed-tracing"),
            .product(name: "InMemoryTracing", package: "swift-distributed-tracing"),
        ]),
        .testTarget(name: "HangMonitorTestingTests", dependencies: ["HangMonitorTesting", "HangMonitor", "HangwatchTestSupport"]),
        .testTarget(name: "HangwatchSupervisionTests", dependencies: [
            "HangwatchLifecycle", "HangwatchSnapshot", "HangwatchDatabase", "HangwatchTestSupport", "HangwatchSupervision",
            "HangwatchSupervisorProtocol",
        ]),
        .testTarget(name: "hangwatchTests", dependencies: [
            "DumpWithoutCrash", "HangMonitor", "HangMonitorService", "HangMonitorConfiguration", "HangwatchTestSupport", "HangwatchPlatform",
        ]),
    ]
)
