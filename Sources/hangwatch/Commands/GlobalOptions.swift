import HangwatchSnapshot
import HangwatchDatabase
import HangwatchReport
import HangwatchMinidump
import HangwatchUpload
import HangwatchRemoteCapture
import HangwatchSupervisorProtocol
import HangMonitorConfiguration
import ArgumentParser
import DumpWithoutCrash
import Foundation
import HangMonitor

/// `--database` and `--config`, accepted by every subcommand.
struct GlobalOptions: ParsableArguments {
    @Option(name: .customLong("database"), help: ArgumentHelp(
        "Report database directory.",
        discussion: "Default: HANGWATCH_DATABASE_PATH, the config file's databasePath, then $XDG_STATE_HOME/hangwatch (~/.local/state/hangwatch)."))
    var database: String?

    @Option(name: .customLong("config"), help: "Configuration file (JSON, the format of config/hangwatch.json); HANGWATCH_* variables override it.")
    var config: String?

    /// The configuration from --config and HANGWATCH_* variables; nil when neither is given.
    func configuration(environment: [String: String] = ProcessInfo.processInfo.environment) throws -> HangMonitor.Configuration? {
        guard config != nil || environment.keys.contains(where: { $0.hasPrefix("HANGWATCH_") && $0 != SupervisorMessage.environmentVariable }) else {
            return nil
        }
        do {
            return try HangMonitor.Configuration.load(path: config, environment: environment)
        } catch {
            throw CLIError("configuration: \(error)")
        }
    }

    /// The database directory to use, most specific source first.
    func databasePath() throws -> String {
        if let database { return database }
        let environment = ProcessInfo.processInfo.environment
        if config != nil || environment["HANGWATCH_DATABASE_PATH"] != nil, let configured = try configuration() {
            return configured.databasePath
        }
        return Self.defaultDatabasePath(environment: environment)
    }

    static func defaultDatabasePath(environment: [String: String]) -> String {
        if let state = environment["XDG_STATE_HOME"], state.hasPrefix("/") { return state + "/hangwatch" }
        let home = environment["HOME"] ?? NSHomeDirectory()
        return home + "/.local/state/hangwatch"
    }
}

func openDatabase(_ global: GlobalOptions) throws -> CrashReportDatabase {
    let path = try global.databasePath()
    do {
        return try CrashReportDatabase(path: path)
    } catch {
        throw CLIError("database \(path): \(error)")
    }
}
