// What every hangwatch executable shares: the global options (--database, --config and
// where the database is when neither is given), one-line errors, and writing output files.
// `hangwatch` and `hangwatch-upload` (which only `hangwatch upload` runs) both link it.
import ArgumentParser
import FoundationEssentials
import Glibc
import HangwatchPlatform
import HangMonitor
import HangMonitorConfiguration
import HangwatchDatabase
import HangwatchSnapshot

/// `--database` and `--config`, accepted by every subcommand.
package struct GlobalOptions: ParsableArguments {
    package init() {}

    @Option(name: .customLong("database"), help: ArgumentHelp(
        "Report database directory.",
        discussion: "Default: HANGWATCH_DATABASE_PATH, the config file's databasePath, then $XDG_STATE_HOME/hangwatch (~/.local/state/hangwatch)."))
    package var database: String?

    @Option(name: .customLong("config"), help: "Configuration file (JSON, the format of config/hangwatch.json); HANGWATCH_* variables override it.")
    package var config: String?

    package var values: CommonOptions { CommonOptions(database: database, config: config) }

    /// The configuration from --config and HANGWATCH_* variables; nil when neither is given.
    package func configuration(environment: [String: String]? = nil) throws -> HangMonitor.Configuration? {
        try values.configuration(environment: environment)
    }

}

/// --database, --config and --redact as plain values, and what they decide: where the database
/// is, the configuration, the redaction. The option structs forward here; QuickStart, which
/// builds no swift-argument-parser command, uses it directly.
package struct CommonOptions: Equatable, Sendable {
    package var database: String?
    package var config: String?
    package var redact: String?

    package init(database: String? = nil, config: String? = nil, redact: String? = nil) {
        self.database = database
        self.config = config
        self.redact = redact
    }

    /// The configuration from --config and HANGWATCH_* variables (this process's, when
    /// `environment` is nil); nil when neither is given.
    package func configuration(environment: [String: String]? = nil) throws -> HangMonitor.Configuration? {
        // Only the configuration's own variables count: HANGWATCH_SYMBOL_CACHE, say, is not one.
        // Looked up one by one: the whole environment as a dictionary is built only when it is used
        // (0.65 M instructions, more than the rest of a `hangwatch dump` that finds no process).
        let isSet: (String) -> Bool = { name in environment.map { $0[name] != nil } ?? (getenv(name) != nil) }
        guard config != nil || HangMonitor.Configuration.keys.contains(where: { isSet($0.environment) }) else {
            return nil
        }
        do {
            return try HangMonitor.Configuration.load(path: config, environment: environment ?? ProcessInfo.processInfo.environment)
        } catch let error as ConfigurationError {
            // It names itself: "hangwatch configuration: KEY: PROBLEM".
            throw CLIError("\(error)")
        } catch {
            throw CLIError("configuration: \(error)")
        }
    }

    /// The database directory to use, most specific source first.
    package func databasePath() throws -> String {
        if let database { return database }
        if config != nil || getenv("HANGWATCH_DATABASE_PATH") != nil, let configured = try configuration() {
            return configured.databasePath
        }
        return Self.defaultDatabasePath(variable: UserDirectories.processVariable)
    }

    package static func defaultDatabasePath(variable: (String) -> String?) -> String {
        if let state = variable("XDG_STATE_HOME"), state.hasPrefix("/") { return state + "/hangwatch" }
        let home = UserDirectories.home(variable: variable) ?? "/"
        return home + "/.local/state/hangwatch"
    }

    /// --redact, else HANGWATCH_REDACT or the config file's `redact`.
    package func redaction() throws -> Redaction {
        if let redact {
            do { return try Redaction(names: redact) } catch { throw CLIError("--redact: \(error)") }
        }
        return try configuration()?.redaction ?? []
    }
}

/// `--redact`, for the commands that make or send reports (run, process, dump, upload).
package struct RedactionOption: ParsableArguments {
    package init() {}

    @Option(name: .customLong("redact"), help: ArgumentHelp(
        "What the reports this command makes or sends leave out: a comma-separated list of arguments, key-values, stderr, stack-memory, kernel-log (or all, none).",
        discussion: "Default: HANGWATCH_REDACT, then the config file's redact. arguments: argv after the program; key-values: the value of KEY=VALUE tokens in arguments, annotations and the stderr tail; stderr: the job's stderr tail; stack-memory: the raw stack bytes minidumps carry; kernel-log: the kernel log line a killed report gives as evidence. Made reports leave it out of the dump kept beside them too, so of their minidumps and uploads; upload leaves it out of what it sends, whatever the stored report holds (docs/report-schema.md).",
        valueName: "list"))
    package var redact: String?

    /// A --redact that names something unknown is a usage error, like any bad option value.
    package func validate() throws { try Self.validate(redact) }

    /// The same check without a swift-argument-parser struct (QuickStart's commands).
    package static func validate(_ redact: String?) throws {
        guard let redact else { return }
        do { _ = try Redaction(names: redact) } catch { throw ValidationError("--redact: \(error)") }
    }

    /// --redact, else HANGWATCH_REDACT or the config file's `redact`.
    package func redaction(_ global: GlobalOptions) throws -> Redaction {
        var values = global.values
        values.redact = redact
        return try values.redaction()
    }
}

package func openDatabase(_ global: GlobalOptions) throws -> CrashReportDatabase { try openDatabase(global.values) }

package func openDatabase(_ options: CommonOptions) throws -> CrashReportDatabase {
    let path = try options.databasePath()
    do {
        return try CrashReportDatabase(path: path)
    } catch {
        throw CLIError("database \(path): \(error)")
    }
}

/// Writes `data` to FILE (0600, replaced atomically: the database's one atomic write) or stdout.
package func emit(_ data: Data, to output: String?) throws {
    guard let output else {
        StandardStream.write(data, to: STDOUT_FILENO)
        return
    }
    do {
        let (directory, name) = try DatabaseDirectory.openParent(of: output)
        defer { directory.closeDirectory() }
        try directory.writeAtomically(name, data)
    } catch {
        throw CLIError("cannot write \(output): \(error)")
    }
}

/// A one-line error: printed as "hangwatch: MESSAGE", exit status 1 (or the given one).
package struct CLIError: Error, CustomStringConvertible {
    package let description: String
    package init(_ description: String) { self.description = description }
}

/// What `hangwatch --version` prints: this build's version (CHANGELOG.md names what is in it),
/// the report schema it writes and the `hangwatch run` protocol it speaks.
package enum HangwatchVersion {
    /// Raised with each release; `-dev` until the first.
    package static let number = "0.1.0-dev"

    package static func line(reportSchema: Int, supervisorProtocol: String) -> String {
        "hangwatch \(number) (report schema \(reportSchema), run protocol \(supervisorProtocol))"
    }
}
