import ArgumentParser
import HangwatchSnapshot
import HangwatchPlatform
import HangwatchSymbolication
import HangwatchDatabase
import HangwatchReport
import HangwatchMinidump
import HangwatchRemoteCapture
import HangwatchSupervisorProtocol
import HangMonitorConfiguration
import FoundationEssentials
import Glibc
import HangwatchCommandLine

/// Reports given by path on the command line: a report JSON file or an intermediate dump.
enum ReportFiles {
    /// Reports are small; anything larger than this is not one of ours.
    static let maximumReportBytes = 64 << 20

    static func load(path: String, symbolicator: Symbolicator) throws -> Report {
        // Read as the database reads its own files: a regular file only, never through a
        // link, never blocking on a FIFO, bounded.
        let data: Data
        do {
            let (directory, name) = try DatabaseDirectory.openParent(of: path)
            defer { directory.closeDirectory() }
            data = try directory.readFile(name, limit: Int64(maximumReportBytes))
        } catch DatabaseError.fileTooLarge {
            throw CLIError("\(path) is larger than \(maximumReportBytes >> 20) MiB: not a report")
        } catch {
            throw CLIError("cannot read \(path): \(error)")
        }
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
        } catch let error where [.badMagic, .truncatedHeader].contains(error.reason) {
            // Neither a report's JSON nor a dump's header: not one of ours, whatever else it is.
            throw CLIError("\(path) is not a hangwatch report or dump: a report is JSON (it starts with {), "
                + "an intermediate dump starts with HWIDUMP")
        } catch {
            throw CLIError("\(path) is neither a report (JSON) nor a readable intermediate dump: \(error)")
        }
        return ReportBuilder.makeReport(from: snapshot, id: UUID().uuidString.lowercased(),
                                        kind: ReportKind(implying: snapshot.reason), symbolicator: symbolicator)
    }
}

extension SymbolCache {
    /// The user's symbol cache (`HANGWATCH_SYMBOL_CACHE`, `$XDG_CACHE_HOME/hangwatch/symbols`,
    /// `~/.cache/hangwatch/symbols`), shared by every command that symbolicates.
    static let commandLine = SymbolCache.standard(environment: ProcessInfo.processInfo.environment)
}

extension Symbolicator {
    /// What every command that symbolicates uses: the user's symbol cache, and for modules
    /// replaced since their capture the Breakpad symbol stores of `HANGWATCH_SYMBOL_STORE`, then
    /// the debuginfod servers of `HANGWATCH_DEBUGINFOD_URLS` — or with `debuginfod`
    /// (--debuginfod) those of `DEBUGINFOD_URLS` (docs/symbol-cache.md).
    static func commandLine(debuginfod: Bool = false) -> Symbolicator {
        let environment = ProcessInfo.processInfo.environment
        return Symbolicator(cache: .commandLine, symbolStores: BreakpadSymbolStore.directories(environment: environment),
                            debuginfod: Debuginfod.standard(environment: environment, cache: .commandLine,
                                                            askingDebuginfodURLs: debuginfod))
    }

    /// Reports on stderr, once each, why a source of names was not used (the symbol cache's
    /// directory was refused, or debuginfod servers sent something other than a file). The report
    /// itself shows only that modules lack names.
    func sayNotices() {
        for notice in notices { warn(Text.singleLine(notice)) }
    }
}

/// `--debuginfod`, for the commands that symbolicate reports of programs that may have been
/// replaced since their capture (`show`, `process`).
struct DebuginfodOption: ParsableArguments {
    @Flag(name: .customLong("debuginfod"), help: ArgumentHelp(
        "Ask the debuginfod servers of DEBUGINFOD_URLS for the names of programs replaced since their capture.",
        discussion: "HANGWATCH_DEBUGINFOD_URLS, when set, is asked without this flag (and wins over DEBUGINFOD_URLS)."))
    var enabled = false

    /// Said once when a report still has modules without names that the servers of
    /// DEBUGINFOD_URLS were not asked for.
    func hint(for report: Report) {
        let environment = ProcessInfo.processInfo.environment
        let unnamed = report.modules.filter { $0.lacksNames && !$0.buildID.isEmpty }.count
        guard unnamed > 0, !enabled, environment["HANGWATCH_DEBUGINFOD_URLS"] == nil,
              !(environment["DEBUGINFOD_URLS"] ?? "").allSatisfy(\.isWhitespace) else { return }
        warn("\(unnamed) module\(unnamed == 1 ? " has" : "s have") no names (replaced since the capture); "
            + "DEBUGINFOD_URLS is set: add --debuginfod to ask its servers")
    }
}
