// One line in a server's ServiceGroup: the monitor runs while the group runs.
import HangMonitor
import ServiceLifecycle

public struct HangMonitorService: Service {
    public let monitor: HangMonitor

    public init(monitor: HangMonitor) { self.monitor = monitor }
    public init(configuration: HangMonitor.Configuration) throws { monitor = try HangMonitor(configuration: configuration) }

    /// Starts the monitor, waits for graceful shutdown or cancellation, then stops it.
    public func run() async throws {
        monitor.start()
        defer { monitor.stop() }
        try? await gracefulShutdown()
    }
}
