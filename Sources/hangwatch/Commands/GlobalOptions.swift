import ArgumentParser
import Foundation

/// `--database` and `--config`, accepted by every subcommand.
struct GlobalOptions: ParsableArguments {
    @Option(name: .customLong("database"), help: ArgumentHelp(
        "Report database directory.",
        discussion: "Default: HANGWATCH_DATABASE, the config file's databasePath, then $XDG_STATE_HOME/hangwatch (~/.local/state/hangwatch)."))
    var database: String?

    @Option(name: .customLong("config"), help: "Configuration file (JSON); see config/hangwatch.json.")
    var config: String?

    /// The database directory to use, most specific source first.
    func databasePath(configured: String? = nil) -> String {
        if let database { return database }
        let environment = ProcessInfo.processInfo.environment
        if let fromEnvironment = environment["HANGWATCH_DATABASE"], !fromEnvironment.isEmpty { return fromEnvironment }
        if let configured { return configured }
        return Self.defaultDatabasePath(environment: environment)
    }

    static func defaultDatabasePath(environment: [String: String]) -> String {
        if let state = environment["XDG_STATE_HOME"], state.hasPrefix("/") { return state + "/hangwatch" }
        let home = environment["HOME"] ?? NSHomeDirectory()
        return home + "/.local/state/hangwatch"
    }
}
