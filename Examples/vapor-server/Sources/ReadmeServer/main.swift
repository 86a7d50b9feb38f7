import HangMonitor
import HangMonitorNIO
import Vapor

/// Starts the monitor once Vapor has booted and stops it on shutdown.
struct HangMonitorLifecycle: LifecycleHandler {
    let monitor: HangMonitor
    func didBoot(_ application: Application) throws { monitor.start() }
    func shutdown(_ application: Application) { monitor.stop() }
}

let app = try await Application.make(.detect())
var configuration = HangMonitor.Configuration(databasePath: "/var/tmp/myapp-reports", bundleID: "com.example.server")
// Vapor's blocking work goes to app.threadPool: watched as a pool, as the cooperative pool is.
configuration.targets = [.mainQueue, .cooperativePool, .threadPool(app.threadPool)] + .eventLoops(of: app.eventLoopGroup)
let monitor = try HangMonitor(configuration: configuration)
app.lifecycle.use(HangMonitorLifecycle(monitor: monitor))
try await app.execute()
try await app.asyncShutdown()
