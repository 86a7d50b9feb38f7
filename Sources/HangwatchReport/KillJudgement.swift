// What ended a process from outside, from what the system still says once it is gone
// (docs/killed.md): its memory cgroup's OOM-kill counter against the value it had when the
// process was last seen alive, and the kernel log's OOM line naming it. Used for run records
// (DumpProcessor.judgeEndedRuns) and for a `hangwatch run` child that died of a signal
// hangwatch did not send.
import HangwatchDatabase
import HangwatchPlatform
import HangwatchSnapshot
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

package enum KillJudgement {
    /// What is known of the death of process `pid`: `signal` when its parent saw it (nil: not
    /// known), its memory cgroup and the OOM-kill counter seen while it lived, when it started
    /// (wall clock: the kernel log is searched from there on).
    package static func judge(pid: Int32, signal: Int32?, cgroup: MemoryCgroup?, oomKillsSeen: UInt64?,
                              startTime: Double, sameBoot: Bool = true) -> Report.Killed {
        var evidence: [String] = []
        var state: Report.MemoryCgroupState?
        var counted = false
        if let cgroup {
            let after = sameBoot ? cgroup.oomKills() : nil
            state = Report.MemoryCgroupState(path: cgroup.path, limitBytes: sameBoot ? cgroup.limitBytes() : nil,
                                             peakBytes: sameBoot ? cgroup.peakBytes() : nil,
                                             oomKillsBefore: oomKillsSeen, oomKillsAfter: after)
            if let before = oomKillsSeen, let after, after > before {
                counted = true
                evidence.append("its memory cgroup's OOM-kill counter went from \(before) to \(after) after it was last seen alive")
            } else if after == nil && sameBoot {
                evidence.append("its memory cgroup (\(cgroup.path)) is gone or has no OOM-kill counter")
            } else if sameBoot {
                evidence.append("its memory cgroup counted no OOM kill after it was last seen alive")
            }
        }
        let line = sameBoot ? KernelLog.oomKillLine(of: pid, since: bootRelative(startTime) - 1) : nil
        if let line { evidence.append("kernel: " + Text.singleLine(line)) }
        if !sameBoot { evidence.append("the machine restarted since (its boot id changed)") }
        if let signal { evidence.append("it died of \(ReportFormatting.signalName(signal)), which hangwatch did not send") }

        let signalName = signal.map(ReportFormatting.signalName)
        let cause: KillCause
        let explanation: String
        if line != nil {
            cause = .oom
            explanation = "killed by the kernel's OOM killer (\(signalName ?? "SIGKILL")): the kernel log names it"
        } else if counted {
            cause = .oom
            explanation = "killed by an OOM killer (\(signalName ?? "SIGKILL")), most likely: its memory cgroup counted an "
                + "OOM kill after it was last seen alive (the kernel log could not confirm which process)"
        } else if signal != nil, sameBoot {
            cause = .signal
            explanation = KillExplanation.sentence(cause: .signal, signal: signal)
        } else {
            cause = .unknown
            explanation = sameBoot
                ? "ended without a clean stop, a crash or a fatal hang, and nothing says why: an uncatchable signal "
                    + "(SIGKILL from another process) or _exit(); no OOM kill was counted"
                : "ended with the machine (it restarted), or before it without a clean stop"
        }
        return Report.Killed(cause: cause, signal: signalName, explanation: explanation, evidence: evidence,
                             startTime: startTime, memoryCgroup: state)
    }

    /// A wall-clock time as seconds since boot (the kernel log's clock).
    static func bootRelative(_ wall: Double) -> Double {
        var monotonic = timespec()
        clock_gettime(CLOCK_MONOTONIC, &monotonic)
        let sinceBoot = Double(monotonic.tv_sec) + Double(monotonic.tv_nsec) / 1e9
        return wall - (Date().timeIntervalSince1970 - sinceBoot)
    }
}

extension Report.StateSample {
    /// A run record's sample.
    package init(_ sample: RunRecord.Sample) {
        self.init(time: sample.time, residentBytes: sample.residentBytes, threads: sample.threads,
                  hangs: sample.hangs.isEmpty ? nil : sample.hangs)
    }
}
