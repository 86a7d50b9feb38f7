import Dispatch
import Glibc
import HangMonitor

let monitor = try HangMonitor(configuration: .init(databasePath: "/tmp/my-tool-reports", bundleID: "my-tool"))
monitor.start()
DispatchQueue.main.asyncAfter(deadline: .now() + 1) {
    print("hanging: the main queue is blocked from now on (kill \(getpid()) to end it)")
    sleep(3600)
}
dispatchMain()
