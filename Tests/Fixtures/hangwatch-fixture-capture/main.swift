// Child program for the capture tests. Modes (argv[1]):
//   runloop | dispatchmain | asyncmain   hang the main queue in a named function under that
//       setup, capture the process from another thread, print it (Report.swift), exit 0;
//       with CAPTURE_FIXTURE_DATABASE set, also DumpClient.dumpWithoutCrash() into that database
//   threads N [CAPTURES]   N threads parked ~30 frames deep; capture CAPTURES times, print costs
//   stress [CAPTURES]      capture repeatedly while threads are created and exit
//   stop-helper N          capture N parked threads until a capture's helper is ended at its
//       deadline (the test SIGSTOPs it), then park (Modes.swift)
//   ptracer any|none       PR_SET_PTRACER_ANY or nothing declared, one capture, park (Modes.swift)
//   sigchld ignore|nocldstop|handler   the program's SIGCHLD set so, quiet captures, then its
//       disposition and handler calls, before and after a child of its own (Modes.swift)
//   churn-listings SECONDS threads start and end without pause while the thread list is read
//       again and again; prints how many listings missed a thread alive throughout (Modes.swift)
//   missing-libunwind      what capture says when its unwinder cannot be loaded
//   chain                  capture next to an earlier SIGPROF handler that must keep working
//   profile DATABASE OUT   thread "profile-spin" spins in fixtureProfileSpin, "profile-sleep"
//       sleeps in fixtureProfileSleep; DumpClient.pprofProfile(samples: 50) writes OUT; prints
//       PROFILE <bytes>, and INVALID <error> for a profile of 0 samples (Modes.swift)
//   unwind-resolve         after the capture machinery is loaded, print which library
//       `_Unwind_RaiseException` resolves to (docs/platform-facts.md fact 3)
// CAPTURE_FIXTURE_NOT_DUMPABLE=1 makes the process not dumpable first (prctl PR_SET_DUMPABLE 0):
// run as an ordinary user, ptrace then refuses even its own helper (the quiet capture's fallback).
import Dispatch
import DumpWithoutCrash
import HangwatchCapture
import Foundation

if ProcessInfo.processInfo.environment["CAPTURE_FIXTURE_NOT_DUMPABLE"] == "1" {
    // prctl is variadic (not imported): through libc by name. 4 is PR_SET_DUMPABLE.
    typealias Prctl = @convention(c) (Int32, UInt, UInt, UInt, UInt) -> Int32
    _ = unsafeBitCast(dlsym(nil, "prctl"), to: Prctl.self)(4, 0, 0, 0, 0)
}

let arguments = CommandLine.arguments
let mode = arguments.count > 1 ? arguments[1] : ""

/// The real entry point of an `async` main (what the compiler emits for one): a separate
/// executable would be needed otherwise, since top-level `await` would make every mode async.
@_silgen_name("$ss13_runAsyncMainyyyyYaKcF")
func runAsyncMain(_ body: @escaping @Sendable () async throws -> Void)

func startCapturer() {
    startThread("hw-capturer") {
        waitUntil("the main-queue hang") { mainQueueHangStarted.load(ordering: .sequentiallyConsistent) }
        waitUntil("the pool thread") { poolBusyStarted.load(ordering: .sequentiallyConsistent) }
        waitUntil("the background threads") { backgroundThreadsReady.load(ordering: .sequentiallyConsistent) == 2 + plainWorkerCount }
        usleep(300_000)  // let the sleepers reach their system calls
        let before = taskIDs()
        do {
            let snapshot = try LiveCapture.captureProcess(reason: .dumpRequested, bundleID: "hangwatch-fixture-capture",
                                                          options: CaptureOptions(stackBytes: 512))
            let after = taskIDs()
            let drainer = try LiveCapture.mainQueueThread()
            // With a database, also go through the public client: capture → report in the database.
            var reportLine = ""
            if let database = ProcessInfo.processInfo.environment["CAPTURE_FIXTURE_DATABASE"] {
                let client = try DumpClient(databasePath: database, bundleID: "com.example.capture-fixture")
                client.annotations["setup"] = mode
                reportLine = "\nREPORT \(try client.dumpWithoutCrash().id)"
            }
            emitAndExit(describe(snapshot) + "\nMAIN_QUEUE_THREAD \(drainer.map(String.init) ?? "none")" + "\nTASKS_BEFORE \(before.map(String.init).joined(separator: ","))"
                        + "\nTASKS_AFTER \(after.map(String.init).joined(separator: ","))" + reportLine)
        } catch {
            emitAndExit("ERROR \(error)", status: 2)
        }
    }
}

switch mode {
case "runloop":
    startScenery()
    startCapturer()
    DispatchQueue.main.async { hangUnderRunLoop() }
    RunLoop.main.run()
case "dispatchmain":
    startScenery()
    startCapturer()
    DispatchQueue.main.async { hangUnderDispatchMain() }
    dispatchMain()
case "asyncmain":
    startScenery()
    startCapturer()
    runAsyncMain { await hangUnderAsyncMain() }
    exit(1)  // not reached: runAsyncMain never returns
case "threads":
    runParkedThreads(count: arguments.count > 2 ? Int(arguments[2]) ?? 64 : 64,
                     captures: arguments.count > 3 ? Int(arguments[3]) ?? 1 : 1)
case "threads-hold":
    runParkedThreadsForComparison(count: arguments.count > 2 ? Int(arguments[2]) ?? 16 : 16)
case "stress":
    runStress(captures: arguments.count > 2 ? Int(arguments[2]) ?? 50 : 50)
case "stop-helper":
    runUntilHelperEnded(count: arguments.count > 2 ? Int(arguments[2]) ?? 64 : 64)
case "ptracer":
    runWithPtracer(arguments.count > 2 ? arguments[2] : "none")
case "sigchld" where arguments.count > 2:
    runWithChildSignal(arguments[2])
case "churn-listings" where arguments.count > 2:
    runListingsUnderChurn(seconds: Double(arguments[2]) ?? 3)
case "profile" where arguments.count > 3:
    writeOwnProfile(database: arguments[2], to: arguments[3])
case "unwind-resolve":
    printUnwindResolution()
case "missing-libunwind":
    reportMissingUnwinder()
case "chain":
    checkChaining()
default:
    FileHandle.standardError.write("usage: capture-fixture runloop|dispatchmain|asyncmain|threads N [CAPTURES]|threads-hold N|stress [CAPTURES]|stop-helper N|ptracer any|none|sigchld ignore|nocldstop|handler|churn-listings SECONDS|profile DATABASE OUT|unwind-resolve|missing-libunwind|chain\n".data(using: .utf8)!)
    exit(64)
}
