// The bundled demo: a tiny "server" whose main queue handles a request every 200 ms.
// One request is slow (the main queue hangs for 3 s, then recovers); a later one
// deadlocks on a lock a background thread never releases (it hangs for good).
// Run it under `hangwatch run --kill-after 5 -- hangwatch-demo` (scripts/demo does).
import Dispatch
import Foundation
import HangMonitor

/// Unbuffered, so lines appear as they happen even through a pipe.
func say(_ line: String) { FileHandle.standardOutput.write(Data((line + "\n").utf8)) }

let databasePath = ProcessInfo.processInfo.environment["HANGWATCH_DATABASE_PATH"]
    ?? NSTemporaryDirectory() + "/hangwatch-demo-reports"
let monitor = try HangMonitor(configuration: .init(
    threshold: .seconds(2), databasePath: databasePath, bundleID: "com.example.hangwatch-demo"))
monitor.start()

let exportLock = NSLock()
nonisolated(unsafe) var requestNumber = 0   // only touched on the main queue

@inline(never) func slowDatabaseQuery() {
    // The kind of call that "usually takes 5 ms".
    Thread.sleep(forTimeInterval: 3)
}

@inline(never) func loadUserProfile() {
    slowDatabaseQuery()
}

@inline(never) func exportReport() {
    // A background job took this lock and is stuck: the main queue waits forever.
    exportLock.lock()
    exportLock.unlock()
}

@inline(never) func handleRequest(_ number: Int) {
    switch number {
    case 10:
        say("request \(number): loading a user profile (this one is slow)")
        loadUserProfile()
        say("request \(number): done, the main queue is answering again")
    case 30:
        say("request \(number): exporting a report (this one never returns)")
        exportReport()
    default:
        say("request \(number): ok")
    }
}

Thread.detachNewThread {
    Thread.current.name = "export-worker"
    // The name /proc and so the report show, set by the thread itself: Foundation's setter did
    // not always reach the kernel (a fresh-clone demo beside a release build named the lock's
    // holder "hangwatch-demo").
    try? "export-worker".write(toFile: "/proc/thread-self/comm", atomically: false, encoding: .utf8)
    Thread.sleep(forTimeInterval: 5)
    exportLock.lock()       // and never unlocks: stuck waiting for a reply that never comes
    while true { pause() }
}

_ = Timer.scheduledTimer(withTimeInterval: 0.2, repeats: true) { _ in
    requestNumber += 1
    handleRequest(requestNumber)
}
RunLoop.main.run()
