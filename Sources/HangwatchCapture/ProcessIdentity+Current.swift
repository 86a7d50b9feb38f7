// Who this process is, for the snapshots it takes of itself (read through the one /proc
// reader, HangwatchPlatform's ProcFS).
import HangwatchPlatform
import HangwatchSnapshot
#if canImport(Glibc)
import Glibc
#endif

extension ProcessIdentity {
    /// This process: pid, comm, executable and argv (bounded by `ProcFS.commandLineLimit`).
    package static func current(bundleID: String) -> ProcessIdentity {
        ProcessIdentity(pid: getpid(), name: ProcFS.comm(of: nil), executable: ProcFS.readLink("/proc/self/exe") ?? "",
                        arguments: ProcFS.commandLine(of: nil), bundleID: bundleID)
    }
}

extension TaskReader {
    /// Thread ids of this process, ascending; throws when /proc/self/task cannot be listed.
    func threadIDsOrThrow() throws -> [Int32] {
        guard let tids = threadIDs() else { throw CaptureError.cannotEnumerateThreads(errno: errno) }
        return tids
    }
}
