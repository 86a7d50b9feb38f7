// A captured process tree as a report: the likely culprit's capture is the report, and every
// member of the tree, with the threads of the other captured ones, goes into its processTree
// (docs/report-schema.md). Used by `hangwatch run` and `hangwatch dump --tree`.
import HangwatchPlatform
import HangwatchSnapshot
import HangwatchReport
import HangwatchRemoteCapture

extension TreeCaptureResult {
    /// The culprit's snapshot with its likeliest hung thread given the `hung` role, unless a
    /// thread already has it; nil when no member of the tree could be captured.
    package func culpritSnapshot(markingHungThread: Bool) -> ProcessSnapshot? {
        guard var snapshot = culprit?.snapshot else { return nil }
        if markingHungThread, !snapshot.threads.contains(where: { $0.roles.contains(.hung) }),
           let tid = TreeCapture.hungThread(of: snapshot) {
            snapshot.markHung([tid])
        }
        return snapshot
    }

    /// The report's processTree: each member's threads and modules from `makeReport`
    /// (symbolicated), except the culprit's, which are the report's own.
    package func reportTree(makeReport: (ProcessSnapshot) -> Report) -> Report.ProcessTree {
        let processes = members.map { member -> Report.TreeProcess in
            var process = Report.TreeProcess(
                pid: member.pid, parentPID: member.parentPID, depth: member.depth, name: member.name,
                executable: member.snapshot?.process.executable, arguments: member.arguments,
                activity: member.activity.rawValue, captureError: member.failure)
            if let snapshot = member.snapshot, member.pid != culpritPID {
                let report = makeReport(snapshot)
                process.threads = report.threads
                process.modules = report.modules
            }
            return process
        }
        return Report.ProcessTree(
            rootPID: rootPID, culpritPID: culpritPID, culpritReason: culpritReason, processesFound: processesFound,
            maxProcesses: limits.maxProcesses, timeBudgetSeconds: limits.timeBudgetSeconds,
            maxThreadsPerProcess: limits.maxThreadsPerProcess, maxThreads: limits.maxThreads, processes: processes)
    }
}
