// Who holds a claim, precisely enough to tell "that processor died" from "pid reused":
// boot id + pid namespace + pid + the process start time (clock ticks since boot, from
// /proc/PID/stat). A claim is only judged dead from this identity when the claimer ran on
// the same boot in the same pid namespace; otherwise only its age can release it.
import HangwatchSnapshot
import Foundation
#if canImport(Glibc)
import Glibc
#endif

package struct ClaimerIdentity: Sendable, Equatable {
    var bootID: String
    var pidNamespace: UInt64
    var pid: Int32
    var startTicks: UInt64

    var fields: String { "\(bootID)~\(pidNamespace)~\(pid)~\(startTicks)" }

    init(bootID: String, pidNamespace: UInt64, pid: Int32, startTicks: UInt64) {
        self.bootID = bootID
        self.pidNamespace = pidNamespace
        self.pid = pid
        self.startTicks = startTicks
    }

    init?(fields: [Substring]) {
        guard fields.count == 4, !fields[0].isEmpty, fields[0].allSatisfy(\.isHexDigit),
              let namespace = UInt64(fields[1]), let pid = Int32(fields[2]), pid > 0,
              let ticks = UInt64(fields[3]) else { return nil }
        self.init(bootID: String(fields[0]), pidNamespace: namespace, pid: pid, startTicks: ticks)
    }

    /// The calling process. Computed per call: a forked child must not claim under its parent's pid.
    static func current() -> ClaimerIdentity {
        let pid = getpid()
        return ClaimerIdentity(bootID: bootID(), pidNamespace: currentPidNamespace(), pid: pid,
                               startTicks: startTicks(of: pid) ?? 0)
    }

    enum Liveness { case alive, dead, unknown }

    /// Whether the claimer still runs, as far as this process can see.
    func liveness(seenFrom observer: ClaimerIdentity) -> Liveness {
        guard bootID == observer.bootID else { return .dead } // the machine rebooted since
        guard pidNamespace == observer.pidNamespace, pidNamespace != 0 else { return .unknown }
        if kill(pid, 0) != 0 && errno == ESRCH { return .dead }
        guard let (state, ticks) = Self.stateAndStartTicks(of: pid) else { return .unknown }
        if state == "Z" || state == "X" { return .dead } // exited, not yet reaped by its parent
        return ticks == startTicks ? .alive : .dead // a different start time: the pid was reused
    }

    /// First 16 hex digits of the kernel's boot id ("unknownboot" sorts as a distinct boot).
    static func bootID() -> String {
        guard let text = readSmallFile("/proc/sys/kernel/random/boot_id") else { return "0" }
        let hex = text.filter(\.isHexDigit)
        return hex.isEmpty ? "0" : String(hex.prefix(16))
    }

    static func currentPidNamespace() -> UInt64 {
        var buffer = [CChar](repeating: 0, count: 64)
        let count = readlink("/proc/self/ns/pid", &buffer, buffer.count - 1)
        guard count > 0 else { return 0 }
        let text = String(decoding: buffer[0..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return UInt64(text.filter(\.isNumber)) ?? 0 // "pid:[4026531836]"
    }

    /// Field 22 of /proc/PID/stat: with the pid, it identifies a process across pid reuse.
    package static func startTicks(of pid: Int32) -> UInt64? {
        stateAndStartTicks(of: pid)?.startTicks
    }

    /// Fields 3 (state) and 22 (start time) of /proc/PID/stat, counted after the last ')'
    /// because the command name (field 2) may itself contain spaces and parentheses.
    static func stateAndStartTicks(of pid: Int32) -> (state: Substring, startTicks: UInt64)? {
        guard let text = readSmallFile("/proc/\(pid)/stat"), let close = text.lastIndex(of: ")") else { return nil }
        let fields = text[text.index(after: close)...].split(separator: " ")
        // fields[0] is field 3 (state), so field 22 is fields[19].
        guard fields.count > 19, let ticks = UInt64(fields[19]) else { return nil }
        return (fields[0], ticks)
    }

    private static func readSmallFile(_ path: String) -> String? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 4096)
        let count = read(fd, &buffer, buffer.count)
        guard count > 0 else { return nil }
        return String(decoding: buffer[0..<count], as: UTF8.self)
    }
}
