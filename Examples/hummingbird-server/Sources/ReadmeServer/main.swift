import HangMonitor
import HangMonitorNIO     // its own product: only it links SwiftNIO
import HangMonitorService
import Hummingbird
import NIOPosix

var configuration = HangMonitor.Configuration(databasePath: "/var/tmp/myapp-reports", bundleID: "com.example.server")
configuration.targets = [.mainQueue, .cooperativePool] + .eventLoops(of: MultiThreadedEventLoopGroup.singleton)
configuration.keepRecoveredHangsLongerThan = .seconds(0)   // keep recovered hangs as `hang` reports (default: discarded)
configuration.dedupWindow = .seconds(300)                   // the default: the same stack again within 300 s is counted, not captured
let monitor = try HangMonitor(configuration: configuration)
// Hummingbird runs the monitor beside the server, started with it and stopped gracefully
// (a ServiceLifecycle `Service`; in a ServiceGroup of your own, the same).
let app = Application(router: Router(), services: [HangMonitorService(monitor: monitor)])
try await app.runService()
