// Process-wide owner of the fatal-signal handlers (signal dispositions belong to the process,
// so one client owns them). Keeps the C side armed: a pre-opened `.locked` dump file, the
// prepared process/modules/annotations sections. (A hang staged when it crashes is stitched
// into the crash report by its processor: HangStitch, Sources/HangwatchProcessing/HangStitch.swift.)
import HangwatchPlatform
import HangwatchDatabase
import HangwatchSnapshot
import CHangwatchCapture
import FoundationEssentials
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

package enum CrashHandling {
    struct Owner {
        let database: CrashReportDatabase
        let bundleID: String
        var options: CrashHandlerOptions
        var captureOptions: CaptureOptions
        var armedFile: IntermediateDumpFile?
        var annotations: [String: String]
        var refresher: PlatformThread?
    }

    private static let state = Mutex<Owner?>(nil)

    static var isInstalled: Bool { state.withLock { $0 != nil } }

    package static func install(database: CrashReportDatabase, bundleID: String, annotations: [String: String],
                        captureOptions: CaptureOptions, options: CrashHandlerOptions, callback: CrashCallback?) throws {
        guard options.otherThreadFrames >= 0, options.otherThreadFrames <= Int(HWC_MAX_FRAMES_LIMIT) else {
            throw CrashHandlingError.invalidOptions("otherThreadFrames must be 0...\(HWC_MAX_FRAMES_LIMIT)")
        }
        guard options.otherThreadsTimeout.isFinite, options.otherThreadsTimeout >= 0, options.otherThreadsTimeout <= 60 else {
            throw CrashHandlingError.invalidOptions("otherThreadsTimeout must be 0...60 seconds")
        }
        guard options.alternateStackBytes >= 16 * 1024, options.alternateStackBytes <= 64 << 20 else {
            throw CrashHandlingError.invalidOptions("alternateStackBytes must be 16 KiB...64 MiB")
        }
        guard options.alternateStackCount > 0, options.alternateStackCount <= 65536 else {
            throw CrashHandlingError.invalidOptions("alternateStackCount must be 1...65536")
        }
        if let interval = options.alternateStackRefreshInterval, !(interval.isFinite && interval >= 0.01) {
            throw CrashHandlingError.invalidOptions("alternateStackRefreshInterval must be at least 0.01 seconds")
        }
        try LiveCapture.prepare(options: captureOptions)
        try state.withLock { owner in
            if let existing = owner, existing.database.path != database.path || existing.bundleID != bundleID {
                throw CrashHandlingError.ownedByAnotherClient(bundleID: existing.bundleID, databasePath: existing.database.path)
            }
            var config = hwc_crash_config(alternate_stack_bytes: UInt32(options.alternateStackBytes),
                                          alternate_stack_count: UInt32(options.alternateStackCount),
                                          other_thread_frames: UInt32(options.otherThreadFrames), reserved: 0,
                                          other_threads_timeout_ns: UInt64(options.otherThreadsTimeout * 1e9))
            var message = [CChar](repeating: 0, count: 256)
            if hwc_crash_install(&config, &message, message.count) != 0 {
                throw CrashHandlingError.installFailed(String(decoding: message.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
            }
            hwc_crash_set_callback(callback)
            var current = owner ?? Owner(database: database, bundleID: bundleID, options: options,
                                         captureOptions: captureOptions, annotations: annotations)
            current.options = options
            current.annotations = annotations
            try armDumpFile(&current)
            try prepareSections(current)
            if current.refresher == nil, let interval = options.alternateStackRefreshInterval {
                current.refresher = startRefresher(interval: interval, captureOptions: captureOptions)
            }
            owner = current
        }
        registerExitCleanup
        sweepAlternateStacks(captureOptions: captureOptions)
    }

    package static func uninstall() {
        hwc_crash_uninstall()
        hwc_crash_set_callback(nil)
        state.withLock { owner in
            discardArmedFile(&owner)
            owner = nil
        }
    }

    /// Re-encodes the prepared sections (annotations changed, or a library was dlopen'ed).
    package static func refresh(bundleID: String, databasePath: String, annotations: [String: String]? = nil) throws {
        try state.withLock { owner in
            guard var current = owner, current.bundleID == bundleID, current.database.path == databasePath else { return }
            if let annotations { current.annotations = annotations }
            try armDumpFile(&current)
            try prepareSections(current)
            owner = current
        }
    }

    /// Asks every thread that accepts a capture signal to take an alternate stack (the C
    /// answer hook does it); a capture of queues only is the cheapest request that reaches all.
    /// With signals by necessity (only a thread itself can install its alternate stack): the
    /// one capture that interrupts blocking calls, once, when crash handlers are installed.
    package static func sweepAlternateStacks(captureOptions: CaptureOptions) {
        var options = captureOptions
        options.method = .signals
        _ = try? LiveCapture.mainQueueThread(options: options)
    }

    // MARK: - Internals

    /// Keeps one pre-opened `.locked` file armed. A file someone removed (nlink 0) is replaced.
    private static func armDumpFile(_ owner: inout Owner) throws {
        if let file = owner.armedFile {
            var info = stat()
            if fstat(file.fd, &info) == 0 && info.st_nlink > 0 { return }
        }
        let file = try owner.database.createIntermediateDump(bundleID: owner.bundleID)
        let finished = owner.database.intermediate.pathOf(file.name.finishedName)
        let previous = hwc_crash_arm_dump_file(file.fd, file.path, finished)
        if previous == -2 {
            try? owner.database.discard(file)
            throw CrashHandlingError.installFailed("database path too long for the crash handler")
        }
        if let old = owner.armedFile { try? owner.database.discard(old) }
        owner.armedFile = file
    }

    private static func discardArmedFile(_ owner: inout Owner?) {
        guard let file = owner?.armedFile else { return }
        _ = hwc_crash_arm_dump_file(-1, nil, nil)
        try? owner?.database.discard(file)
        owner?.armedFile = nil
    }

    private static func prepareSections(_ owner: Owner) throws {
        let annotations = owner.annotations
        let process = CrashContextEncoder.processSection(ProcessIdentity.current(bundleID: owner.bundleID))
        let tail = CrashContextEncoder.tailSection(modules: LoadedModules.list(), annotations: annotations)
        if hwc_crash_set_prepared_sections(process, UInt64(process.count), tail, UInt64(tail.count)) != 0 {
            throw CrashHandlingError.installFailed("cannot map memory for the prepared crash context")
        }
    }

    /// Runs for the life of the process (nil if no thread could be started: sweeps then only
    /// happen on request).
    private static func startRefresher(interval: Double, captureOptions: CaptureOptions) -> PlatformThread? {
        let thread = try? PlatformThread(name: "hangwatch-altstk") {
            while true {
                PlatformThread.sleep(seconds: interval)
                sweepAlternateStacks(captureOptions: captureOptions)
            }
        }
        thread?.detach()
        return thread
    }

    /// The armed file is unused when the process exits normally: remove it rather than leave
    /// an empty `.locked` file behind for the next processor to clear.
    private static let registerExitCleanup: Void = {
        atexit {
            // exit() racing a crash on another thread: the dump being written is not ours to remove.
            if hwc_crash_thread() != 0 { return }
            _ = CrashHandling.state.withLockIfAvailable { owner in CrashHandling.discardArmedFile(&owner) }
        }
    }()
}
