// How a monitored program tells a supervisor it is alive:
// - `hangwatch run` sets HANGWATCH_MONITOR_SOCKET: heartbeats, detected hangs (target, hung
//   threads, start time, the staged dump's bundle id and id) and recoveries go there as
//   `SupervisorMessage`s;
// - systemd (or `hangwatch run`) sets NOTIFY_SOCKET and WATCHDOG_USEC: `WATCHDOG=1` is sent
//   from the main queue itself, so a hung main queue stops petting the watchdog.
// Sends never block (MSG_DONTWAIT): a slow supervisor must not slow the main queue.
import FoundationEssentials
import HangwatchSupervisorProtocol
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

final class SupervisorLink: Sendable {
    private let fd: Int32
    private let monitorAddress: String?
    private let notifyAddress: String?
    /// Minimum nanoseconds between two heartbeats / WATCHDOG=1.
    private let heartbeatInterval: UInt64
    private let lastHeartbeat = Atomic<UInt64>(0)

    /// nil when no supervisor is listening.
    init?(environment: [String: String] = ProcessInfo.processInfo.environment, threshold: UInt64) {
        let monitor = environment[SupervisorMessage.environmentVariable].flatMap { $0.hasPrefix("/") ? $0 : nil }
        var notify = environment["NOTIFY_SOCKET"].flatMap { $0.hasPrefix("/") || $0.hasPrefix("@") ? $0 : nil }
        // sd_notify's rule: the watchdog is meant for WATCHDOG_PID only, when it is set.
        if let pid = environment["WATCHDOG_PID"], pid != String(getpid()) { notify = nil }
        guard monitor != nil || notify != nil else { return nil }
        fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return nil }
        monitorAddress = monitor
        notifyAddress = notify
        var interval = threshold / 4
        if let usec = environment["WATCHDOG_USEC"].flatMap(UInt64.init), usec > 0 { interval = min(interval, usec * 1_000 / 2) }
        heartbeatInterval = max(interval, 10_000_000)
    }

    deinit { close(fd) }

    /// Called on the main queue each time it answers a ping.
    func mainQueueAnswered(now: UInt64) {
        let last = lastHeartbeat.load(ordering: .relaxed)
        guard now &- last >= heartbeatInterval,
              lastHeartbeat.compareExchange(expected: last, desired: now, ordering: .relaxed).exchanged else { return }
        if let monitorAddress { send(SupervisorMessage.heartbeat.datagram, to: monitorAddress) }
        if let notifyAddress { send("WATCHDOG=1", to: notifyAddress) }
    }

    func hangDetected(_ hang: MonitorHang) {
        guard let monitorAddress else { return }
        send(SupervisorMessage.hang(hang).datagram, to: monitorAddress)
    }

    func hangRecovered(seconds: Double) {
        guard let monitorAddress else { return }
        send(SupervisorMessage.recovered(seconds: seconds).datagram, to: monitorAddress)
    }

    private func send(_ text: String, to path: String) {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        var bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else { return }
        if bytes.first == UInt8(ascii: "@") { bytes[0] = 0 }  // Linux abstract namespace
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: bytes) }
        let length = socklen_t(MemoryLayout<sa_family_t>.size + bytes.count + (bytes.first == 0 ? 0 : 1))
        let payload = Array(text.utf8)
        _ = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                sendto(fd, payload, payload.count, Int32(MSG_DONTWAIT) | Int32(MSG_NOSIGNAL), $0, length)
            }
        }
    }
}
