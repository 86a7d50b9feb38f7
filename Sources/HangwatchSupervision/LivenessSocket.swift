// The datagram sockets a watched child talks to: systemd's notify protocol (any language,
// any sd_notify library) and HangMonitor's richer heartbeat channel.
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// A bound, non-blocking Unix datagram socket in a private directory.
package final class DatagramListener {
    package let path: String
    package let fd: Int32

    package init(directory: String, name: String) throws {
        path = directory + "/" + name
        fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw SupervisorError.socket(path, String(cString: strerror(errno))) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else {
            close(fd)
            throw SupervisorError.socket(path, "path too long for a Unix socket")
        }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard result == 0 else {
            let why = String(cString: strerror(errno))
            close(fd)
            throw SupervisorError.socket(path, why)
        }
    }

    deinit {
        close(fd)
        unlink(path)
    }

    /// Every datagram waiting, as text (each at most 4 KiB: longer ones are cut), up to 1,024
    /// a call: a child that never stops sending cannot keep the supervisor from its other work
    /// (the rest wait for the next call; the socket's buffer holds a few hundred).
    package func receiveAll() -> [String] {
        var messages: [String] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while messages.count < 1_024 {
            let count = recv(fd, &buffer, buffer.count, 0)
            guard count >= 0 else { break }
            messages.append(String(decoding: buffer[0..<count], as: UTF8.self))
        }
        return messages
    }
}

/// What a systemd-style notify datagram says about liveness.
package enum NotifyMessage: Equatable {
    case alive
    case hangTriggered
    case other

    /// A datagram holds newline-separated `KEY=VALUE` assignments.
    package static func parse(_ datagram: String) -> [NotifyMessage] {
        datagram.split(separator: "\n").map { line in
            switch line {
            case "WATCHDOG=1": return .alive
            case "WATCHDOG=trigger": return .hangTriggered
            default: return .other
            }
        }
    }
}
