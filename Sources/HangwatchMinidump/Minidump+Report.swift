// Minidumps of stored reports. A report written with its intermediate dump beside it
// (`<id>.hwdump`) gives a minidump with stack memory; one without (older reports, reports given
// as a JSON file) is rebuilt from the report's registers, frames and modules: still a valid
// minidump, with empty stack ranges (readers then show only the frame the registers give).
import HangwatchReport
import HangwatchPlatform
import HangwatchDatabase
import HangwatchSnapshot
import FoundationEssentials

extension ProcessSnapshot {
    /// What a report still knows of its snapshot: registers, frame addresses, modules,
    /// annotations; never stack bytes.
    package init(report: Report) {
        let reason: CaptureReason
        switch report.kind {
        case .crash:
            reason = .crash(report.signal?.info ?? SignalInfo(number: 0, code: 0, address: 0, tid: 0))
        case .hang, .fatalHang:
            let hang = report.hang
            reason = .hang(HangInfo(target: hang?.target ?? "unknown", thresholdSeconds: hang?.thresholdSeconds ?? 0,
                                    durationSeconds: hang?.durationSeconds ?? 0, outcome: HangOutcome(reportedBy: report),
                                    startTime: hang?.startTime ?? 0))
        case .dump:
            reason = .dumpRequested
        case .killed:
            reason = .killed(KillInfo(signal: report.killed?.signal.flatMap(SignalNames.number),
                                      cause: report.killed?.cause ?? .unknown))
        }
        let threads = report.threads.map { thread -> ThreadSnapshot in
            var registers: Registers?
            if let named = thread.registers {
                let values = Registers.names.compactMap { named[$0] }
                if values.count == Registers.names.count { registers = Registers(values: values) }
            }
            // Inlined frames share their address's index: one address per index.
            var frames: [UInt64] = []
            var lastIndex = -1
            for frame in thread.frames where frame.index != lastIndex {
                lastIndex = frame.index
                frames.append(frame.address)
            }
            return ThreadSnapshot(info: thread.info, registers: registers, frames: frames)
        }
        self.init(reason: reason, timestamp: report.timestamp, process: report.process,
                  threads: threads, modules: report.modules.map(\.snapshot), annotations: report.annotations,
                  captureDurationSeconds: report.captureDurationSeconds, incomplete: report.incomplete)
    }
}

extension CrashReportDatabase {
    /// The snapshot a minidump of report `id` is made from: its kept intermediate dump when
    /// there is a readable one, otherwise rebuilt from the report (no stack bytes).
    package func snapshotForMinidump(id: String) throws -> ProcessSnapshot {
        let report = try Report.decode(from: readReport(id: id))
        if let dump = try readReportDump(id: id), let snapshot = try? IntermediateDumpReader.read(bytes: [UInt8](dump)) {
            return snapshot
        }
        return ProcessSnapshot(report: report)
    }

    /// A standard minidump of the stored report `id` (exact id).
    package func minidump(forReport id: String) throws -> [UInt8] {
        MinidumpWriter.minidump(from: try snapshotForMinidump(id: id),
                                metadata: MinidumpMetadata(reportID: UUID(uuidString: id), clientID: clientID))
    }
}
