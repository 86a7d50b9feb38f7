// Who holds a claim, precisely enough to tell "that processor died" from "pid reused":
// boot id + pid namespace + pid + the process start time (clock ticks since boot, from
// /proc/PID/stat). A claim is only judged dead from this identity when the claimer ran on
// the same boot in the same pid namespace; otherwise only its age can release it.
import HangwatchPlatform
import HangwatchSnapshot
import FoundationEssentials
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
        return ClaimerIdentity(bootID: ProcFS.bootID(), pidNamespace: ProcFS.pidNamespace(), pid: pid,
                               startTicks: ProcFS.startTicks(of: pid) ?? 0)
    }

    enum Liveness { case alive, dead, unknown }

    /// Whether the claimer still runs, as far as this process can see.
    func liveness(seenFrom observer: ClaimerIdentity) -> Liveness {
        guard bootID == observer.bootID else { return .dead } // the machine rebooted since
        guard pidNamespace == observer.pidNamespace, pidNamespace != 0 else { return .unknown }
        if kill(pid, 0) != 0 && errno == ESRCH { return .dead }
        guard let (state, ticks) = ProcFS.stateAndStartTicks(of: pid) else { return .unknown }
        if state.hasExited { return .dead } // exited, not yet reaped by its parent
        return ticks == startTicks ? .alive : .dead // a different start time: the pid was reused
    }
}
