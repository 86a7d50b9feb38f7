import HangwatchSnapshot
import HangwatchDatabase
import HangwatchReport
import HangwatchMinidump
import HangwatchRemoteCapture
import HangwatchSupervisorProtocol
import HangMonitorConfiguration
import ArgumentParser
import HangwatchCommandLine
import HangwatchPlatform
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// How a report is printed: `--format text|json|folded|svg|html|minidump|pprof`.
enum ReportFormat: String, ExpressibleByArgument, CaseIterable {
    case text, json, folded, svg, html, minidump, pprof

    /// `snapshot` (when known) gives the minidump its stack bytes; without it the minidump is
    /// rebuilt from the report (no stack memory). `samples` gives a pprof profile its addresses
    /// (docs/pprof.md); without them its locations are the report's names.
    func render(_ report: Report, snapshot: ProcessSnapshot? = nil, samples: PprofSource? = nil, clientID: UUID? = nil) -> Data {
        switch self {
        case .text: return Data(ReportRenderer.text(report).utf8)
        case .json: return ReportRenderer.json(report) + Data("\n".utf8)
        case .folded: return Data(ReportRenderer.folded(report).utf8)
        case .svg: return Data(FlameGraph(report: report).svg().utf8)
        case .html: return Data(FlameGraph(report: report).html().utf8)
        case .minidump:
            return Data(MinidumpWriter.minidump(from: snapshot ?? ProcessSnapshot(report: report),
                                                metadata: MinidumpMetadata(reportID: UUID(uuidString: report.id), clientID: clientID)))
        case .pprof:
            // pprof reads the protobuf uncompressed too, should zlib fail.
            return Pprof.profile(report, source: samples) ?? Data(Pprof.encode(report, source: samples))
        }
    }

    /// Writes what `render` gives to FILE or stdout (`emit(_:to:)`); a text report goes to
    /// stdout straight from its bytes, without a String or a Data (700 KB for 65 threads).
    func emit(_ report: Report, snapshot: ProcessSnapshot? = nil, samples: PprofSource? = nil, clientID: UUID? = nil,
              to output: String?) throws {
        if self == .text && output == nil {
            _ = ReportRenderer.withText(report) { StandardStream.write(UnsafeRawBufferPointer($0), to: STDOUT_FILENO) }
            return
        }
        try HangwatchCommandLine.emit(render(report, snapshot: snapshot, samples: samples, clientID: clientID), to: output)
    }

    /// Binary output never goes to a terminal or pipe by accident.
    func validate(output: String?) throws {
        if (self == .minidump || self == .pprof) && output == nil {
            throw ValidationError("--format \(rawValue) writes a binary file: give --output FILE")
        }
    }
}

