import HangwatchSnapshot
import HangwatchSymbolication
import HangwatchDatabase
import HangwatchReport
import HangwatchMinidump
import HangwatchRemoteCapture
import HangwatchSupervisorProtocol
import HangMonitorConfiguration
import Foundation
import HangwatchCommandLine

/// Reports given by path on the command line: a report JSON file or an intermediate dump.
enum ReportFiles {
    /// Reports are small; anything larger than this is not one of ours.
    static let maximumReportBytes = 64 << 20

    static func load(path: String) throws -> Report {
        let handle: FileHandle
        do {
            handle = try FileHandle(forReadingFrom: URL(fileURLWithPath: path))
        } catch {
            throw CLIError("cannot open \(path): \(String(cString: strerror(errno)))")
        }
        defer { try? handle.close() }
        let data = (try? handle.read(upToCount: maximumReportBytes + 1)) ?? Data()
        guard data.count <= maximumReportBytes else { throw CLIError("\(path) is larger than \(maximumReportBytes >> 20) MiB: not a report") }
        if data.first == UInt8(ascii: "{") {
            do {
                return try Report.decode(from: data)
            } catch {
                throw CLIError("\(path) is not a valid report: \(error)")
            }
        }
        let snapshot: ProcessSnapshot
        do {
            snapshot = try IntermediateDumpReader.read(bytes: [UInt8](data))
        } catch {
            throw CLIError("\(path) is neither a report (JSON) nor a readable intermediate dump: \(error)")
        }
        return ReportBuilder.makeReport(from: snapshot, id: UUID().uuidString.lowercased(),
                                        kind: ReportKind(implying: snapshot.reason), symbolicator: Symbolicator())
    }
}
