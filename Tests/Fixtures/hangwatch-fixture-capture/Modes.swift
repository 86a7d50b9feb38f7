// The benchmark, stress and linkage modes of capture-fixture.
import DumpWithoutCrash
import HangwatchCapture
import HangwatchPlatform
import HangwatchSnapshot
import Foundation
import Synchronization

let parkedThreads = Atomic<Int>(0)
let stopSpawning = Atomic<Bool>(false)

/// Work after the recursive call that the optimiser cannot see through, so the recursion
/// stays real frames instead of becoming a loop (the benchmark needs the depth).
@inline(never) @_optimize(none) func keepFrame(_ value: inout Int) { value &+= 1 }

@inline(never) func descendThenPark(_ depth: Int) -> Int {
    if depth > 0 {
        var result = descendThenPark(depth - 1)
        keepFrame(&result)
        return result
    }
    parkedThreads.add(1, ordering: .sequentiallyConsistent)
    while parkedThreads.load(ordering: .relaxed) >= 0 { sleep(60) }
    return 0
}

func summary(_ snapshot: ProcessSnapshot) -> String {
    let captured = snapshot.threads.filter { $0.status == .captured }.count
    let timedOut = snapshot.threads.filter { $0.status == .timedOut }.count
    let exited = snapshot.threads.filter { $0.status == .exited }.count
    let unreachable = snapshot.threads.filter { $0.status == .unreachable }.count
    let frames = snapshot.threads.map(\.frames.count).reduce(0, +)
    let main = snapshot.threads.first { $0.roles.contains(.mainThread) }
    return "CAPTURE threads=\(snapshot.threads.count) captured=\(captured) timedOut=\(timedOut) exited=\(exited) unreachable=\(unreachable) frames=\(frames) main=\(main.map { $0.status.name } ?? "missing") duration_us=\(Int(snapshot.captureDurationSeconds * 1e6))"
}

func runParkedThreads(count: Int, captures: Int) -> Never {
    for index in 0..<count {
        startThread("hw-parked-\(index)") { _ = descendThenPark(30) }
    }
    waitUntil("\(count) parked threads", timeout: 60) { parkedThreads.load(ordering: .sequentiallyConsistent) == count }
    var lines: [String] = []
    do {
        try LiveCapture.prepare()
        for _ in 0..<max(captures, 1) {
            lines.append(summary(try LiveCapture.captureProcess(reason: .dumpRequested, bundleID: "hangwatch-fixture-capture")))
        }
    } catch {
        emitAndExit("ERROR \(error)", status: 2)
    }
    emitAndExit(lines.joined(separator: "\n"))
}

/// Parked threads captured in-process once, their frames printed ("FRAMES tid hex,hex,…"), then
/// the process waits, parked, for the test to capture it again from outside (ptrace).
func runParkedThreadsForComparison(count: Int) -> Never {
    for index in 0..<count {
        startThread("hw-parked-\(index)") { _ = descendThenPark(20) }
    }
    waitUntil("\(count) parked threads", timeout: 60) { parkedThreads.load(ordering: .sequentiallyConsistent) == count }
    do {
        let snapshot = try LiveCapture.captureProcess(reason: .dumpRequested, bundleID: "hangwatch-fixture-capture")
        var lines = ["UNWINDER \(LiveCapture.handlerUnwinder)"]
        for thread in snapshot.threads where thread.name.hasPrefix("hw-parked-") {
            lines.append("FRAMES \(thread.tid) \(thread.status.name) " + thread.frames.map { String($0, radix: 16) }.joined(separator: ","))
        }
        FileHandle.standardOutput.write((lines.joined(separator: "\n") + "\nHOLD\n").data(using: .utf8)!)
    } catch {
        emitAndExit("ERROR \(error)", status: 2)
    }
    while true { sleep(60) }
}

/// Threads are born and die continuously while the process is captured again and again:
/// capture must neither hang nor crash, and exited threads must be reported as such.
func runStress(captures: Int) -> Never {
    for spawner in 0..<2 {
        startThread("hw-spawner-\(spawner)") {
            while !stopSpawning.load(ordering: .relaxed) {
                let thread = Thread { usleep(UInt32.random(in: 0..<2_000)) }
                thread.start()
                usleep(200)
            }
        }
    }
    let group = DispatchGroup()
    for _ in 0..<4 { DispatchQueue.global().async(group: group) { usleep(50_000) } }
    var lines: [String] = []
    do {
        for _ in 0..<captures {
            lines.append(summary(try LiveCapture.captureProcess(reason: .dumpRequested, bundleID: "hangwatch-fixture-capture",
                                                                options: CaptureOptions(timeout: 0.5, stackBytes: 256))))
            if let sampled = try? LiveCapture.sampleStack(tid: getpid()) { lines.append("SAMPLE frames=\(sampled.count)") }
        }
    } catch {
        emitAndExit("ERROR \(error)", status: 2)
    }
    stopSpawning.store(true, ordering: .relaxed)
    emitAndExit(lines.joined(separator: "\n"))
}

func printUnwindResolution() -> Never {
    do {
        try LiveCapture.prepare()
        let snapshot = try LiveCapture.captureProcess(reason: .dumpRequested, bundleID: "hangwatch-fixture-capture")
        var lines = [summary(snapshot)]
        let libunwind = snapshot.modules.first { $0.path.contains("libunwind.so") }
        lines.append("LIBUNWIND_LOADED \(libunwind.map { encoded($0.path) } ?? "no")")
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "_Unwind_RaiseException") else {
            emitAndExit(lines.joined(separator: "\n") + "\nUNWIND_RAISE unresolved", status: 2)
        }
        // dladdr is not exported to Swift here; the snapshot's module ranges say the same.
        let address = UInt64(UInt(bitPattern: symbol))
        let owner = snapshot.modules.first { $0.start <= address && address < $0.end }
        lines.append("UNWIND_RAISE \(encoded(owner?.path ?? "unknown"))")
        emitAndExit(lines.joined(separator: "\n"))
    } catch {
        emitAndExit("ERROR \(error)", status: 2)
    }
}

/// A capture machinery that cannot load its unwinder says which library and why.
func reportMissingUnwinder() -> Never {
    do {
        try LiveCapture.prepare(options: CaptureOptions(unwindLibrary: "libunwind-hangwatch-missing.so.8"))
        emitAndExit("PREPARED unexpectedly", status: 2)
    } catch {
        // The failure is sticky: a later capture reports it too instead of crashing.
        let again = (try? LiveCapture.captureProcess(reason: .dumpRequested, bundleID: "hangwatch-fixture-capture")) == nil
        emitAndExit("CAPTURE_ERROR \(encoded(String(describing: error)))\nSECOND_CAPTURE_FAILED \(again)")
    }
}

let chainedSignals = Atomic<Int>(0)

/// Another SIGPROF handler installed first (a profiler, say) still gets signals that are not
/// capture requests, and never sees the capture's own.
func checkChaining() -> Never {
    _ = signal(SIGPROF) { _ in chainedSignals.add(1, ordering: .relaxed) }
    for index in 1...plainWorkerCount { startThread("hw-worker-\(index)") { parkPlainWorker() } }
    waitUntil("the workers") { backgroundThreadsReady.load(ordering: .sequentiallyConsistent) == plainWorkerCount }
    do {
        // SIGPROF for every thread, so every request passes through the chaining decision.
        try LiveCapture.prepare(options: CaptureOptions(ordinarySignal: nil))
        kill(getpid(), SIGPROF)
        usleep(50_000)
        let before = chainedSignals.load(ordering: .relaxed)
        var lines = ["CHAINED_AFTER_KILL \(before)"]
        for _ in 0..<5 {
            lines.append(summary(try LiveCapture.captureProcess(reason: .dumpRequested, bundleID: "hangwatch-fixture-capture")))
        }
        lines.append("CHAINED_AFTER_CAPTURES \(chainedSignals.load(ordering: .relaxed))")
        emitAndExit(lines.joined(separator: "\n"))
    } catch {
        emitAndExit("ERROR \(error)", status: 2)
    }
}

/// A line on stdout at once (the test reads it while the process goes on).
func say(_ line: String) {
    let bytes = Array((line + "\n").utf8)
    _ = bytes.withUnsafeBytes { write(1, $0.baseAddress, $0.count) }
}

func monotonicNow() -> Double {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
}

/// `stop-helper N`: N parked threads captured back to back (quietly, 0.5 s timeout) until a
/// capture's helper is ended at its deadline — the test stops it (SIGSTOP) from outside. Says
/// "CAPTURER tid" (whose children the helpers are) first, then "ENDED" with that capture's
/// duration measured here and its method, and parks until killed: the test then reads every
/// thread's state. "NEVER" after 60 s without such a capture.
func runUntilHelperEnded(count: Int) -> Never {
    for index in 0..<count {
        startThread("hw-parked-\(index)") { _ = descendThenPark(10) }
    }
    waitUntil("\(count) parked threads", timeout: 60) { parkedThreads.load(ordering: .sequentiallyConsistent) == count }
    do {
        try LiveCapture.prepare()
        say("CAPTURER \(LiveCapture.currentThreadID())")
        let end = monotonicNow() + 60
        while monotonicNow() < end {
            let start = monotonicNow()
            let snapshot = try LiveCapture.captureProcess(reason: .dumpRequested, bundleID: "hangwatch-fixture-capture",
                                                          options: CaptureOptions(timeout: 0.5, method: .quiet))
            let elapsed = monotonicNow() - start
            let method = snapshot.annotations[LiveCapture.methodAnnotation] ?? ""
            guard method.contains("was ended") else { continue }
            let captured = snapshot.threads.filter { $0.status == .captured }.count
            say("ENDED elapsed_us=\(Int(elapsed * 1e6)) captured=\(captured) threads=\(snapshot.threads.count) method=\(method)")
            while true { sleep(60) }
        }
    } catch {
        emitAndExit("ERROR \(error)", status: 2)
    }
    emitAndExit("NEVER", status: 3)
}

/// `ptracer any|none`: with `any`, the program declares PR_SET_PTRACER_ANY first (as a crash
/// handler does, so that any process may attach to it); then 4 parked threads, one quiet capture
/// ("METHOD …"), and it parks until killed: the test tries to attach from another process.
func runWithPtracer(_ declared: String) -> Never {
    if declared == "any" {
        // prctl is variadic (not imported): through libc by name. PR_SET_PTRACER, PR_SET_PTRACER_ANY.
        typealias Prctl = @convention(c) (Int32, UInt, UInt, UInt, UInt) -> Int32
        guard unsafeBitCast(dlsym(nil, "prctl"), to: Prctl.self)(0x5961_6d61, UInt.max, 0, 0, 0) == 0 else {
            emitAndExit("ERROR PR_SET_PTRACER: errno \(errno)", status: 2)
        }
    }
    for index in 0..<4 {
        startThread("hw-parked-\(index)") { _ = descendThenPark(5) }
    }
    waitUntil("4 parked threads", timeout: 60) { parkedThreads.load(ordering: .sequentiallyConsistent) == 4 }
    do {
        let snapshot = try LiveCapture.captureProcess(reason: .dumpRequested, bundleID: "hangwatch-fixture-capture",
                                                      options: CaptureOptions(method: .quiet))
        say("METHOD \(snapshot.annotations[LiveCapture.methodAnnotation] ?? "")")
    } catch {
        emitAndExit("ERROR \(error)", status: 2)
    }
    while true { sleep(60) }
}

/// Where the profiled program spends its time: a busy loop.
@inline(never) func fixtureProfileSpin() {
    var x: UInt64 = 1
    while true { x = x &* 6364136223846793005 &+ 1442695040888963407; if x == 0 { print(x) } }
}

/// Where the profiled program waits.
@inline(never) func fixtureProfileSleep() {
    while true { sleep(60) }
}

/// `profile DATABASE OUT`: the library's profile of this process, written to OUT.
func writeOwnProfile(database: String, to path: String) {
    startThread("profile-spin") { fixtureProfileSpin() }
    startThread("profile-sleep") { fixtureProfileSleep() }
    usleep(200_000)
    do {
        let client = try DumpClient(databasePath: database, bundleID: "com.example.profile-fixture")
        var invalid = "none"
        do { _ = try client.pprofProfile(samples: 0) } catch { invalid = "\(error)" }
        let profile = try client.pprofProfile(samples: 50, interval: .milliseconds(10))
        try profile.write(to: URL(fileURLWithPath: path))
        emitAndExit("PROFILE \(profile.count)\nINVALID \(invalid)")
    } catch {
        emitAndExit("ERROR \(error)", status: 2)
    }
}

/// SIGCHLD handler calls (`sigchld handler`).
let childSignals = Atomic<Int>(0)

/// The program's SIGCHLD as `setting` says (ignore: SIG_IGN; nocldstop: a handler with
/// SA_NOCLDSTOP; handler: a counting handler), 16 parked threads, 5 quiet captures; then what
/// its SIGCHLD is now, how often the handler ran during the captures, and after a child of its
/// own was spawned and reaped (the helper's own SIGCHLD is its business: QuietHelperTests).
func runWithChildSignal(_ setting: String) -> Never {
    var action = sigaction()
    sigemptyset(&action.sa_mask)
    switch setting {
    case "ignore": action.__sigaction_handler.sa_handler = SIG_IGN
    case "nocldstop", "handler":
        action.__sigaction_handler.sa_handler = { _ in childSignals.add(1, ordering: .sequentiallyConsistent) }
        action.sa_flags = setting == "nocldstop" ? SA_NOCLDSTOP : 0
    default: emitAndExit("ERROR unknown setting \(setting)", status: 64)
    }
    guard sigaction(SIGCHLD, &action, nil) == 0 else { emitAndExit("ERROR sigaction: errno \(errno)", status: 2) }
    for index in 0..<16 {
        startThread("hw-parked-\(index)") { _ = descendThenPark(10) }
    }
    waitUntil("16 parked threads", timeout: 60) { parkedThreads.load(ordering: .sequentiallyConsistent) == 16 }
    var lines: [String] = []
    do {
        for _ in 0..<5 {
            let snapshot = try LiveCapture.captureProcess(reason: .dumpRequested, bundleID: "hangwatch-fixture-capture",
                                                          options: CaptureOptions(method: .quiet))
            lines.append("METHOD \(snapshot.annotations[LiveCapture.methodAnnotation] ?? "")")
            lines.append(summary(snapshot))
        }
    } catch {
        emitAndExit("ERROR \(error)", status: 2)
    }
    var now = sigaction()
    sigaction(SIGCHLD, nil, &now)
    let handler = unsafeBitCast(now.__sigaction_handler.sa_handler, to: Int.self)
    let kind = handler == unsafeBitCast(SIG_IGN, to: Int.self) ? "ignore"
        : handler == 0 ? "default" : now.sa_flags & SA_NOCLDSTOP != 0 ? "nocldstop" : "handler"
    lines.append("DISPOSITION \(kind)")
    lines.append("HANDLED_DURING_CAPTURES \(childSignals.load(ordering: .sequentiallyConsistent))")
    var child: pid_t = 0
    let argv: [UnsafeMutablePointer<CChar>?] = [strdup("/bin/true"), nil]
    guard posix_spawn(&child, "/bin/true", nil, nil, argv, environ) == 0 else { emitAndExit("ERROR posix_spawn", status: 2) }
    var status: Int32 = 0
    while waitpid(child, &status, 0) < 0 && errno == EINTR {}  // ECHILD when ignored: reaped by the kernel
    waitUntil("the child's SIGCHLD", timeout: 10) { setting == "ignore" || childSignals.load(ordering: .sequentiallyConsistent) > 0 }
    lines.append("HANDLED_AFTER_CHILD \(childSignals.load(ordering: .sequentiallyConsistent))")
    emitAndExit(lines.joined(separator: "\n"))
}

/// Per thread id (0…pid_max): odd while the thread `churnThreads` started under that id lives,
/// bumped at its start and at its end (a recycled id starts a new generation).
nonisolated(unsafe) var generations: UnsafeMutablePointer<Atomic<UInt32>>?

/// Two threads that start threads without end, each living 1 to 3 ms: in /proc's thread list
/// threads leave all the time, before and after the ones that stay.
func churnThreads() {
    let limit = (try? String(contentsOfFile: "/proc/sys/kernel/pid_max", encoding: .utf8)).flatMap { Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) } ?? 4_194_304
    let table = UnsafeMutablePointer<Atomic<UInt32>>.allocate(capacity: limit + 1)
    for id in 0...limit { (table + id).initialize(to: Atomic<UInt32>(0)) }
    generations = table
    for churner in 0..<2 {
        startThread("hw-churner-\(churner)") {
            var seed = UInt64(churner + 1)
            while true {
                seed = seed &* 6364136223846793005 &+ 1442695040888963407
                var attributes = pthread_attr_t()
                pthread_attr_init(&attributes)
                pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED))
                pthread_attr_setstacksize(&attributes, 64 * 1024)
                var thread = pthread_t()
                let life = 1000 + Int(seed >> 33) % 2000  // µs
                let started = pthread_create(&thread, &attributes, { argument in
                    guard let generations else { return nil }
                    let tid = Int(LiveCapture.currentThreadID())
                    generations[tid].add(1, ordering: .sequentiallyConsistent)
                    usleep(UInt32(Int(bitPattern: argument)))
                    generations[tid].add(1, ordering: .sequentiallyConsistent)
                    return nil
                }, UnsafeMutableRawPointer(bitPattern: life))
                pthread_attr_destroy(&attributes)
                if started != 0 { usleep(100) }  // at a thread limit: let some end
            }
        }
    }
}

/// Lists this process's threads (TaskReader, as every capture does) for `seconds` while
/// `churnThreads` runs; a listing misses a thread when one that lived from before it began
/// until after it ended (the same generation, odd, at both ends) is not in it. Prints
/// "LISTINGS n MISSED m THREADS average".
func runListingsUnderChurn(seconds: Double) -> Never {
    churnThreads()
    usleep(200_000)
    guard let reader = TaskReader(), var previous = reader.threadIDs(), let generations else {
        emitAndExit("ERROR no task directory", status: 2)
    }
    var listings = 0, missed = 0, listed = 0
    let end = Date().addingTimeInterval(seconds)
    while Date() < end {
        let alive = previous.compactMap { tid -> (tid: Int32, generation: UInt32)? in
            let generation = generations[Int(tid)].load(ordering: .sequentiallyConsistent)
            return generation & 1 == 1 ? (tid, generation) : nil
        }
        guard let tids = reader.threadIDs() else { emitAndExit("ERROR listing: errno \(errno)", status: 2) }
        let now = Set(tids)
        if alive.contains(where: { !now.contains($0.tid) && generations[Int($0.tid)].load(ordering: .sequentiallyConsistent) == $0.generation }) {
            missed += 1
        }
        listings += 1
        listed += tids.count
        previous = tids
    }
    emitAndExit("LISTINGS \(listings) MISSED \(missed) THREADS \(listed / max(listings, 1))")
}
