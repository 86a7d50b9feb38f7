// What ended a process from outside, from what the system still says once it is gone
// (docs/killed.md): its memory cgroup's OOM-kill counter against the value it had when the
// process was last seen alive, and the kernel log's OOM line naming it. Used for run records
// (DumpProcessor.judgeEndedRuns) and for a `hangwatch run` child that died of a signal
// hangwatch did not send; both become a report through the one killed-report path
// (KilledReports.swift).
import HangwatchDatabase
import HangwatchReport
import HangwatchPlatform
import HangwatchSnapshot
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

package enum KillJudgement {
    /// The process whose death is judged: the kernel log's OOM line must name it by all three.
    package struct Subject: Sendable {
        package var pid: Int32
        /// Its name as the kernel spells it (comm: at most 15 bytes; longer names are cut there).
        package var name: String
        /// When it started and when it was dead at the latest (wall clock): a line outside says
        /// nothing of it (its pid may have been another process's by then).
        package var life: ClosedRange<Double>

        /// `startedAt` and `deadBy`, wall clock; a time that is not finite counts as the other (never a trap).
        package init(pid: Int32, name: String, startedAt: Double, deadBy: Double) {
            self.pid = pid
            self.name = name
            let start = startedAt.isFinite ? startedAt : (deadBy.isFinite ? deadBy : 0)
            life = start ... (deadBy.isFinite ? max(deadBy, start) : start)
        }
    }

    /// What is known of the death of `subject`: `signal` when its parent saw it (nil: not
    /// known), its memory cgroup and the OOM-kill counter seen while it lived. The kernel's OOM
    /// line counts only when it names the process by pid and name within its life, and, where
    /// the cgroup counts OOM kills, the counter agrees: a line about another process (a pid
    /// reused since) is never copied into the report.
    package static func judge(_ subject: Subject, signal: Int32?, cgroup: MemoryCgroup?, oomKillsSeen: UInt64?,
                              sameBoot: Bool = true) -> Report.Killed {
        var evidence: [String] = []
        var state: Report.MemoryCgroupState?
        var counted = false, counterDenies = false
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
                counterDenies = oomKillsSeen != nil
                evidence.append("its memory cgroup counted no OOM kill after it was last seen alive")
            }
        }
        let kill = sameBoot
            ? KernelLog.oomKill(of: subject.pid, named: subject.name,
                                within: bootRelative(subject.life.lowerBound) - 1 ... bootRelative(subject.life.upperBound) + 1)
            : nil
        let found = kill?.line
        // The counter is the process's own cgroup's: a line it contradicts is not taken — unless
        // the kernel's line itself names that cgroup as the killed process's (the counter can
        // have counted the kill before the process was last seen alive: the OOM killer counts,
        // sends SIGKILL, and the process takes a while to die).
        let namesItsCgroup = kill?.taskCgroup.map { cgroup?.path.hasSuffix($0) == true && $0.hasPrefix("/") && $0.count > 1 } ?? false
        let line = counterDenies && !namesItsCgroup ? nil : found
        if let line { evidence.append(KillExplanation.kernelEvidencePrefix + Text.singleLine(line)) }
        if namesItsCgroup && counterDenies, let taskCgroup = kill?.taskCgroup {
            evidence.append("the kernel's OOM line puts it in its own memory cgroup (\(Text.singleLine(taskCgroup))): taken although "
                + "the counter had counted the kill by the time it was last seen alive")
        }
        if found != nil && counterDenies && !namesItsCgroup {
            evidence.append("the kernel log has an OOM kill of pid \(subject.pid) named \(subject.name), which its cgroup's counter "
                + "does not agree with: not taken")
        }
        if !sameBoot { evidence.append("the machine restarted since (its boot id changed)") }
        if let signal { evidence.append("it died of \(SignalNames.name(signal)), which hangwatch did not send") }

        let signalName = signal.map(SignalNames.name)
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
                ? "ended without a clean stop, a crash or a fatal hang, and nothing says why: "
                    + KillExplanation.unhandledEnds + "; no OOM kill was counted"
                : "ended with the machine (it restarted), or before it without a clean stop"
        }
        return Report.Killed(cause: cause, signal: signalName, explanation: explanation, evidence: evidence,
                             startTime: subject.life.lowerBound, memoryCgroup: state)
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
