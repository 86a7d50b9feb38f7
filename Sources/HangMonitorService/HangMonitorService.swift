// One line in a server's ServiceGroup: the monitor runs while the group runs.
import HangMonitor
import ServiceLifecycle

/// A `HangMonitor` as a swift-service-lifecycle `Service`: started when the service group runs
/// it, stopped on graceful shutdown or cancellation.
public struct HangMonitorService: Service {
    /// The monitor it runs.
    public let monitor: HangMonitor

    /// Runs `monitor`.
    public init(monitor: HangMonitor) { self.monitor = monitor }
    /// Creates the monitor from `configuration` (throws what `HangMonitor.init(configuration:)` throws).
    public init(configuration: HangMonitor.Configuration) throws { monitor = try HangMonitor(configuration: configuration) }

    /// Starts the monitor, waits for graceful shutdown or cancellation, then stops it.
    public func run() async throws {
        monitor.start()
        defer { monitor.stop() }
        try? await gracefulShutdown()
    }
}
