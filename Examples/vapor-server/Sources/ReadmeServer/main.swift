import HangMonitor
import HangMonitorNIO
import NIOPosix
import Vapor

/// Starts the monitor once Vapor has booted and stops it on shutdown.
struct HangMonitorLifecycle: LifecycleHandler {
    let monitor: HangMonitor
    func didBoot(_ application: Application) throws { monitor.start() }
    func shutdown(_ application: Application) { monitor.stop() }
}

var configuration = HangMonitor.Configuration(databasePath: "/var/tmp/myapp-reports", bundleID: "com.example.server")
configuration.targets = [.mainQueue, .cooperativePool] + .eventLoops(of: MultiThreadedEventLoopGroup.singleton)
let monitor = try HangMonitor(configuration: configuration)
let app = try await Application.make(.detect())   // on MultiThreadedEventLoopGroup.singleton
app.lifecycle.use(HangMonitorLifecycle(monitor: monitor))
try await app.execute()
try await app.asyncShutdown()
