// How a `killed` report says what ended the process (docs/killed.md): the one-line reason
// (`hangwatch list`, the text report's title, `hangwatch run`'s summary) and the lines of the
// text report's header.
import HangwatchPlatform
import HangwatchSnapshot

package enum KillExplanation {
    /// How the kernel log's line starts in `evidence` (what `Redaction.kernelLog` leaves out).
    package static let kernelEvidencePrefix = "kernel: "

    /// The sentence a kill gets when nothing more than its cause and signal is known.
    package static func sentence(cause: KillCause, signal: Int32?) -> String {
        let signalName = signal.map(SignalNames.name)
        switch cause {
        case .oom:
            return "killed by an OOM killer" + (signalName.map { " (\($0))" } ?? "")
        case .signal:
            return "killed by \(signalName ?? "a signal"), which hangwatch did not send (another process, the system or the program itself); no OOM kill was counted"
        case .unknown:
            return "ended without a clean close, a crash or a fatal hang" + (signalName.map { " (\($0))" } ?? "")
                + "; nothing says why: " + unhandledEnds + ", or the system"
        }
    }

    /// What ends a process with no clean stop and leaves no trace of why: a signal whose default
    /// action ends it, which it did not handle (signal(7): Term and Core), or `_exit()`.
    package static let unhandledEnds = "a signal it did not handle whose default action ends a process (SIGKILL, which "
        + "no program can handle; SIGTERM from a plain kill, SIGINT, SIGHUP, SIGQUIT, SIGPIPE, SIGALRM, SIGUSR1, SIGUSR2…), "
        + "or _exit()"

    /// One line: the cause, the limit it reached, when it was last seen alive.
    package static func headline(_ killed: Report.Killed) -> String {
        var text = killed.explanation
        if killed.cause == .oom, let limit = killed.memoryCgroup?.limitBytes {
            text += " at its memory cgroup's limit of \(megabytes(limit))"
        }
        return text
    }

    /// The text report's lines about the kill.
    package static func lines(_ killed: Report.Killed) -> [String] {
        let signal = killed.signal.flatMap { killed.explanation.contains($0) ? nil : " (\($0))" } ?? ""
        var lines = ["Killed:     \(killed.cause.rawValue)\(signal): \(killed.explanation)"]
        if let alive = killed.lastSeenAlive {
            var text = "Last seen:  \(ReportFormatting.timestamp(alive)) alive"
            if let start = killed.startTime { text += ", \(ReportFormatting.seconds(max(0, alive - start))) after it started" }
            lines.append(text + "; it was killed after that")
        }
        if let cgroup = killed.memoryCgroup {
            var text = "Memory:     cgroup \(cgroup.path)"
            if let limit = cgroup.limitBytes { text += ", limit \(megabytes(limit))" }
            if let peak = cgroup.peakBytes { text += ", peak \(megabytes(peak))" }
            if let before = cgroup.oomKillsBefore, let after = cgroup.oomKillsAfter { text += ", OOM kills \(before) → \(after)" }
            lines.append(text)
        }
        for fact in killed.evidence { lines.append("Evidence:   \(fact)") }
        if let liveness = killed.lastLiveness { lines.append("Liveness:   last message \"\(liveness)\"") }
        if !killed.samples.isEmpty {
            lines.append("Its last states (resident memory, threads):")
            for sample in killed.samples.suffix(12) {
                let hangs = sample.hangs.map { $0.isEmpty ? "" : "  hung: " + $0.joined(separator: ", ") } ?? ""
                lines.append("  \(ReportFormatting.timestamp(sample.time))  \(megabytes(sample.residentBytes))  \(Text.counted(sample.threads, "thread"))\(hangs)")
            }
            if let trend = trend(killed.samples) { lines.append("  resident memory \(trend)") }
        }
        return lines
    }

    /// "grew by 180.0 MiB in 3.0 s" from the first and last samples.
    static func trend(_ samples: [Report.StateSample]) -> String? {
        guard let first = samples.first, let last = samples.last, last.time > first.time else { return nil }
        let delta = Int64(bitPattern: last.residentBytes &- first.residentBytes)
        let verb = delta >= 0 ? "grew by" : "shrank by"
        return "\(verb) \(megabytes(UInt64(delta.magnitude))) in \(ReportFormatting.seconds(last.time - first.time))"
    }

    /// MiB, as `--memory-max` and systemd's MemoryMax= count.
    static func megabytes(_ bytes: UInt64) -> String {
        let value = Double(bytes) / 1_048_576
        return value >= 100 ? "\(Int(value.rounded())) MiB" : "\((value * 10).rounded() / 10) MiB"
    }
}
