// Crashes on purpose, one way per MODE, after installing the crash handlers:
//   crash-fixture MODE DATABASE [CRITICAL-FILE]
// Each crashing function is @inline(never) and named after what it does, so the tests can
// find it in the crashed thread's symbolicated frames.
import CHangwatchFixtureCrashSupport
import DumpWithoutCrash
import HangwatchDatabase
import HangwatchSnapshot
import HangwatchPlatform
import Dispatch
import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

@inline(never) func crashByNullDereference(_ address: Int) {
    UnsafeMutablePointer<Int>(bitPattern: address)!.pointee = 42
}

@inline(never) func crashByFatalError(_ reason: String) -> Never {
    fatalError("crash-fixture fatal: \(reason)")
}

@inline(never) func crashByIndexOutOfRange(_ values: [Int], _ index: Int) -> Int {
    values[index]
}

@inline(never) func crashByForceUnwrap(_ value: Int?) -> Int {
    value!
}

@inline(never) func crashByAbort() {
    abort()
}

@inline(never) func recurseWithoutEnd(_ depth: Int) -> Int {
    var padding = (depth, depth, depth, depth, depth, depth, depth, depth)
    return withUnsafeMutablePointer(to: &padding) { pointer in recurseWithoutEnd(depth + 1) + pointer.pointee.0 }
}

@inline(never) func crashOnWorkerThread() {
    crashByNullDereference(16)
}

@inline(never) func crashOnDispatchPool() {
    crashByNullDereference(24)
}

/// Threads created after install get their alternate stack from the periodic sweep (never by
/// calling anything themselves): only look, bounded, so the overflow is not raced on a busy machine.
func waitForAlternateStackFromSweep() {
    for _ in 0..<2000 {
        var current = stack_t()
        if sigaltstack(nil, &current) == 0 && Int(current.ss_flags) & Int(SS_DISABLE) == 0 { return }
        usleep(10_000)
    }
    FileHandle.standardError.write("no alternate stack after 20 s\n".data(using: .utf8)!)
}

final class StartGate: Sendable {
    let open = Atomic<Int32>(0)
}

@inline(never) func crashConcurrently(_ gate: StartGate) {
    while gate.open.load(ordering: .acquiring) == 0 { sched_yield() }  // both threads released together
    crashByNullDereference(32)
}

let arguments = CommandLine.arguments
guard arguments.count >= 3 else {
    FileHandle.standardError.write("usage: crash-fixture MODE DATABASE [CRITICAL-FILE]\n".data(using: .utf8)!)
    exit(2)
}
let mode = arguments[1]
// during-capture: a live capture waits up to 3 s for a thread stalled in vfork while main crashes.
// With signals: the quiet capture gives a thread that does not stop up after 50 ms, and holds
// the slots no longer than that (docs/hang-monitor.md, "How capture works").
let client = try DumpClient(databasePath: arguments[2], bundleID: "hangwatch-fixture-crash",
                            captureOptions: mode == "during-capture" ? CaptureOptions(timeout: 3, method: .signals) : CaptureOptions())
client.annotations = ["fixture-mode": mode]
var options = CrashHandlerOptions()
if mode.hasSuffix("-overflow") { options.alternateStackRefreshInterval = 0.05 }
if mode == "callback-malloc" {
    try client.installCrashHandlers(options: options, saveCriticalData: hwf_allocate_in_callback)
} else if arguments.count >= 4 {
    hwf_set_critical_fd(open(arguments[3], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600))
    try client.installCrashHandlers(options: options, saveCriticalData: hwf_save_critical_data)
} else {
    try client.installCrashHandlers(options: options)
}
FileHandle.standardOutput.write("installed \(mode)\n".data(using: .utf8)!)

let scratch = NSTemporaryDirectory() + "/crash-fixture-\(getpid())"
switch mode {
case "null", "callback-malloc": crashByNullDereference(8)
case "fatal": crashByFatalError("mode \(mode)")
case "index": print(crashByIndexOutOfRange([1, 2, 3], arguments.count + 5))
case "unwrap": print(crashByForceUnwrap(arguments.count > 100 ? 1 : nil))
case "abort": crashByAbort()
case "fpe": print(hwf_divide(Int32(arguments.count), 0))
case "trap": hwf_trap()
case "int3": hwf_breakpoint()
case "bus": print(hwf_touch_truncated_mapping(scratch))
case "overflow": print(recurseWithoutEnd(0))
case "thread", "thread-overflow":
    let thread = Thread {
        if mode == "thread-overflow" {
            waitForAlternateStackFromSweep()
            print(recurseWithoutEnd(0))
        }
        crashOnWorkerThread()
    }
    thread.start()
case "dispatch", "dispatch-overflow":
    DispatchQueue.global().async {
        if mode == "dispatch-overflow" {
            waitForAlternateStackFromSweep()
            print(recurseWithoutEnd(0))
        }
        crashOnDispatchPool()
    }
case "two":
    let gate = StartGate()
    for _ in 0..<2 { Thread { crashConcurrently(gate) }.start() }
    usleep(50_000)
    gate.open.store(1, ordering: .releasing)
case "staged":
    // A hang staged as HangMonitor stages one (StagingArea, under this process's lease), then a
    // crash: the crash dump's processor stitches the hang into the crash report.
    let staging = client.database.stagingArea
    let start = Date().timeIntervalSince1970 - 2
    let hang = HangInfo(target: .mainQueue, thresholdSeconds: 1, durationSeconds: 2, outcome: .ongoing, startTime: start)
    let staged = try staging.begin(HangSidecar(
        bundleID: client.bundleID, pid: getpid(), processStartTicks: ProcFS.startTicks(of: getpid()) ?? 0, target: hang.target,
        thresholdSeconds: hang.thresholdSeconds, startTime: start, lastSeenTime: start + 2, sampleCount: 0,
        hungThread: nil, hungThreads: nil, signature: ""))
    try staging.write(client.capture(reason: .hang(hang)), of: staged)
    crashByNullDereference(40)
case "during-capture":
    let capturing = StartGate(), named = StartGate()
    let stalled = Thread {
        named.open.store(1, ordering: .releasing)
        hwf_stall_in_vfork(4)  // names itself "vfork-stalled"; the Swift backtracer waits for it too: keep it short
    }
    stalled.start()
    while named.open.load(ordering: .acquiring) == 0 { usleep(1000) }
    usleep(200_000)  // now in vfork
    let live = Thread {
        PlatformThread.setCurrentName("live-capture")  // Foundation's name setter does not always reach the kernel
        capturing.open.store(1, ordering: .releasing)
        _ = try? client.dumpWithoutCrashAndDeferProcessing()
    }
    live.start()
    while capturing.open.load(ordering: .acquiring) == 0 { usleep(1000) }
    usleep(1_000_000)  // the capture now waits for the stalled thread
    crashByNullDereference(48)
case "unwind-binding":
    // Not a crash: after install (and a capture, so libunwind is loaded) name the objects that
    // the process-wide _Unwind_* symbols resolve to (docs/platform-facts.md fact 3).
    _ = try client.dumpWithoutCrash()
    var lines = ["libunwind loaded: \(hwf_library_loaded("libunwind.so.8") != 0 ? "yes" : "no")"]
    for symbol in ["_Unwind_RaiseException", "_Unwind_Backtrace"] {
        if let file = hwf_object_defining(symbol) {
            lines.append("\(symbol) in \(String(cString: file).split(separator: "/").last ?? "")")
        } else {
            lines.append("\(symbol) unresolved")
        }
    }
    FileHandle.standardError.write((lines.joined(separator: "\n") + "\n").data(using: .utf8)!)
    exit(0)
default:
    FileHandle.standardError.write("unknown mode \(mode)\n".data(using: .utf8)!)
    exit(2)
}
// Crashes on other threads happen while the main thread waits here. A loop: the crash
// handler's capture signal interrupts sleep(3), which then returns early.
let deadline = Date().addingTimeInterval(30)
while Date() < deadline { sleep(1) }
exit(3)

