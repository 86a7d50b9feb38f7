// Why an out-of-process capture could not happen, in one line a user can act on.
import HangwatchPlatform
import HangwatchSnapshot
#if canImport(Glibc)
import Glibc
#endif

package enum RemoteCaptureError: Error, Equatable, Sendable, CustomStringConvertible {
    case noSuchProcess(pid: Int32)
    /// The process chosen exited and its pid names another process now: nothing of that one is read.
    case replaced(pid: Int32)
    /// ptrace cannot stop the caller's own threads.
    case cannotCaptureSelf(pid: Int32)
    /// The kernel refused (EPERM); `reason` names the rule (ownership, capability, Yama).
    case permissionDenied(pid: Int32, reason: String)
    /// Another tracer (a debugger, strace, another hangwatch) holds the process.
    case alreadyTraced(pid: Int32, tracerPID: Int32, tracerName: String)
    /// Refused for a reason outside the usual rules (seccomp, an LSM, an undumpable target)
    /// or failed with an unexpected errno.
    case ptraceFailed(pid: Int32, operation: String, errno: Int32, hint: String)
    /// libunwind-ptrace or libunwind-x86_64 could not be loaded.
    case unwinderUnavailable(detail: String)
    case invalidArgument(String)
    /// The capture thread could not be started (pthread_create error).
    case tracerThreadFailed(errno: Int32)

    package var description: String {
        switch self {
        case .replaced(let pid):
            return "process \(pid) exited during the capture (its pid now names another process, which was not captured)"
        case .noSuchProcess(let pid):
            return "no process with pid \(pid)"
        case .cannotCaptureSelf(let pid):
            return "pid \(pid) is this process: capture it in-process (DumpWithoutCrash), ptrace cannot stop its own threads"
        case .permissionDenied(let pid, let reason):
            return "not permitted to ptrace pid \(pid): \(reason)"
        case .alreadyTraced(let pid, let tracer, let name):
            let who = name.isEmpty ? "pid \(tracer)" : "pid \(tracer) (\(name))"
            return "pid \(pid) is already being traced by \(who); detach that debugger/tracer first"
        case .ptraceFailed(let pid, let operation, let code, let hint):
            let text = String(cString: strerror(code))
            return "\(operation) of pid \(pid) failed: \(text) (errno \(code))" + (hint.isEmpty ? "" : "; \(hint)")
        case .unwinderUnavailable(let detail):
            return "libunwind-ptrace is not usable (\(detail)); install the Debian package libunwind8 (runtime) or libunwind-dev"
        case .invalidArgument(let text):
            return "invalid argument: \(text)"
        case .tracerThreadFailed(let code):
            return "cannot start the capture thread: \(String(cString: strerror(code)))"
        }
    }
}

extension RemoteCapture {
    /// Turns an EPERM from PTRACE_SEIZE into the rule that caused it. Reads the target's
    /// TracerPid and owner, our credentials and capabilities, and the Yama policy.
    /// `tid`: the thread refused, whose own tracer is looked at first (a tracer may hold one
    /// thread and not the main one: the program's own quiet-capture helper).
    static func diagnosePermission(pid: Int32, tid: Int32? = nil) -> RemoteCaptureError {
        let target = ProcFS.status("/proc/\(pid)/status")
        let thread = tid.map { ProcFS.status("/proc/\(pid)/task/\($0)/status") }
        for status in [thread, target].compactMap({ $0 }) {
            if let tracer = status["TracerPid"].flatMap({ Int32($0) }), tracer != 0 {
                return .alreadyTraced(pid: pid, tracerPID: tracer, tracerName: ProcFS.comm(of: tracer))
            }
        }
        let own = ProcFS.status("/proc/self/status")
        let hasPtraceCapability = capabilityBit(19, in: own["CapEff"])  // CAP_SYS_PTRACE
        let yama = ProcFS.firstLine("/proc/sys/kernel/yama/ptrace_scope", limit: 16).flatMap { Int($0) }
        return explainDenial(pid: pid, targetUIDs: uids(target["Uid"]), ownUIDs: uids(own["Uid"]),
                             hasPtraceCapability: hasPtraceCapability, yamaScope: yama,
                             isDescendant: isDescendant(pid))
    }

    /// The decision part of `diagnosePermission`, separate so every branch can be tested.
    static func explainDenial(pid: Int32, targetUIDs: [UInt32], ownUIDs: [UInt32], hasPtraceCapability: Bool,
                              yamaScope: Int?, isDescendant: Bool) -> RemoteCaptureError {
        let ownReal = ownUIDs.first ?? UInt32(getuid())
        let sameOwner = !targetUIDs.isEmpty && targetUIDs.allSatisfy { $0 == ownReal }
        if !sameOwner && !hasPtraceCapability {
            var owner = "belongs to " + (targetUIDs.first.map { "uid \($0)" } ?? "another user")
            if Set(targetUIDs).count > 1, let real = targetUIDs.first, let effective = targetUIDs.dropFirst().first {
                owner = "runs set-user-ID (real uid \(real), effective uid \(effective))"
            }
            return .permissionDenied(pid: pid, reason: "the process \(owner) and you are uid \(ownReal) without CAP_SYS_PTRACE (run as its owner or as root)")
        }
        switch yamaScope {
        case 3?:
            return .permissionDenied(pid: pid, reason: "Yama ptrace_scope is 3 (/proc/sys/kernel/yama/ptrace_scope): ptrace is disabled for everyone until reboot")
        case 2? where !hasPtraceCapability:
            return .permissionDenied(pid: pid, reason: "Yama ptrace_scope is 2 (/proc/sys/kernel/yama/ptrace_scope): only processes with CAP_SYS_PTRACE may trace (run as root)")
        case 1? where !hasPtraceCapability && !isDescendant:
            return .permissionDenied(pid: pid, reason: "Yama ptrace_scope is 1 (/proc/sys/kernel/yama/ptrace_scope): only a parent may trace its descendants; launch it with `hangwatch run`, run as root, or set the scope to 0")
        default:
            return .ptraceFailed(pid: pid, operation: "PTRACE_SEIZE", errno: EPERM,
                                 hint: "refused although ownership, capabilities and Yama allow it: likely a seccomp filter, an LSM (AppArmor/SELinux) policy, or an undumpable (setuid) target")
        }
    }

    private static func uids(_ field: String?) -> [UInt32] {
        (field ?? "").split(whereSeparator: { $0 == " " || $0 == "\t" }).compactMap { UInt32($0) }
    }

    private static func capabilityBit(_ bit: Int, in field: String?) -> Bool {
        guard let field, let mask = UInt64(field, radix: 16) else { return false }
        return mask & (1 << UInt64(bit)) != 0
    }

    /// Whether `pid` descends from this process (what Yama scope 1 allows), walking PPid links.
    private static func isDescendant(_ pid: Int32) -> Bool {
        let me = getpid()
        var current = pid
        for _ in 0..<4096 {
            guard let parent = ProcFS.status("/proc/\(current)/status")["PPid"].flatMap({ Int32($0) }) else { return false }
            if parent == me { return true }
            if parent <= 1 { return false }
            current = parent
        }
        return false
    }
}
