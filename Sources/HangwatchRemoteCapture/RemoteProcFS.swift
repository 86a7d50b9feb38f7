// What out-of-process capture learns from /proc (through the one reader, HangwatchPlatform's
// ProcFS and TaskReader): the thread list, per-thread state and the process identity. Every
// read is bounded: /proc files of another process are untrusted input.
import HangwatchPlatform
import HangwatchSnapshot
import CHangwatchPtrace
#if canImport(Glibc)
import Glibc
#endif

extension RemoteCapture {
    /// Thread ids of `pid`, the main thread (tid == pid) first, the rest ascending.
    /// Empty when the process is gone.
    static func threadIDs(of pid: Int32) -> [Int32] {
        let tids = TaskReader(pid: pid)?.threadIDs() ?? []
        return tids.sorted { ($0 == pid ? 0 : 1, $0) < ($1 == pid ? 0 : 1, $1) }
    }

    struct ThreadInfo {
        var name = ""
        var state = ThreadState.unknown
        var syscall: String?
        /// The syscall line is to come from the stop's registers (`threadInfo(…, lineAfterStop:)`;
        /// the session's copyStoppedThread fills it in).
        var syscallFromStop = false
        var userCPUSeconds = 0.0
        var systemCPUSeconds = 0.0
    }

    /// Read before the thread is stopped, so the state is what the program was doing
    /// (once stopped every thread would read 't'). With `lineAfterStop`, a thread asleep in a
    /// call (S) or running (R) leaves its syscall line to the stop that follows, whose
    /// registers reveal it where HWP_SYSCALL_FROM_REGISTERS (one /proc read fewer per thread);
    /// any other (D sleep, whose call the stop waits out; stopped; a zombie) has it read now.
    static func threadInfo(pid: Int32, tid: Int32, reader: TaskReader?, lineAfterStop: Bool = false) -> ThreadInfo {
        var info = ThreadInfo()
        guard let reader else { return info }
        if let stat = reader.stat(tid: tid) {
            info.name = stat.name
            info.state = stat.state
            info.userCPUSeconds = stat.userCPUSeconds
            info.systemCPUSeconds = stat.systemCPUSeconds
        }
        if lineAfterStop && HWP_SYSCALL_FROM_REGISTERS != 0 && (info.state == .sleeping || info.state == .running) {
            info.syscallFromStop = true
        } else {
            info.syscall = reader.syscallLine(tid: tid).map(Text.trimmed)
        }
        return info
    }

    package static func identity(pid: Int32) -> ProcessIdentity {
        let name = ProcFS.comm(of: pid)
        let executable = ProcFS.readLink("/proc/\(pid)/exe") ?? ""
        let bundle = executable.split(separator: "/").last.map(String.init) ?? name
        return ProcessIdentity(pid: pid, name: name, executable: executable,
                               arguments: ProcFS.commandLine(of: pid), bundleID: bundle.isEmpty ? name : bundle)
    }
}
