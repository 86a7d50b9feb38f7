// A stored or shown report leaves out what `--redact` names (Redaction, HangwatchSnapshot): the
// report's own parts, after its snapshot was redacted (DumpProcessor.store), or a report built
// from a whole capture (hangwatch dump, the uploader).
import HangwatchSnapshot

extension Report {
    /// Leaves out what `redaction` says from every part of the report: its process's and its
    /// tree's arguments, annotation values, the stderr tail, and says so in `redacted`. A report
    /// built from an already redacted snapshot stays as it is (redacting twice changes nothing).
    package mutating func redact(_ redaction: Redaction) {
        guard !redaction.isEmpty else { return }
        process.arguments = redaction.redact(arguments: process.arguments)
        annotations = redaction.redact(annotations: annotations)
        redacted = Redaction.recorded(in: annotations).names
        if redaction.contains(.kernelLog), var kill = killed {
            kill.evidence = kill.evidence.map { $0.hasPrefix(KillExplanation.kernelEvidencePrefix) ? KillExplanation.kernelEvidencePrefix + Redaction.placeholder : $0 }
            killed = kill
        }
        if let tail = context?.stderrTail {
            context?.stderrTail = redaction.contains(.stderrTail) ? nil
                : redaction.contains(.keyValues) ? Redaction.redactingKeyValues(in: tail) : tail
        }
        if var tree = processTree {
            for index in tree.processes.indices {
                tree.processes[index].arguments = redaction.redact(arguments: tree.processes[index].arguments)
            }
            processTree = tree
        }
    }
}
