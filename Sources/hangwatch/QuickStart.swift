// `hangwatch list` and `hangwatch dump` read without swift-argument-parser, so that the CLI starts
// as fast as a Foundation hello-world and a dump is not mostly start-up (docs/performance.md,
// "7. CLI start-up"). Parsing any command line with
// swift-argument-parser costs more than the rest of `hangwatch list`: it builds the argument set
// of every command it passes by reflection (Mirror), and each Mirror, cast to its internal
// protocols and generic type it meets makes the Swift runtime scan the protocol-conformance
// records of every loaded image once (~170 k instructions a scan, 30 scans for `list` alone).
//
// Only the plain spellings are read here: the subcommand followed by its flags and `--NAME VALUE`
// (or `--NAME=VALUE`) options, each at most once, with values that are not empty and do not
// start with "-". Anything else — help, another option, a repeat, an error, a completion-script
// request — goes to swift-argument-parser as before (`Hangwatch.main()`), so its messages, help
// and usage text stay its own. The command built here is the one swift-argument-parser would build:
// debug builds (so the tests) parse every command line taken here with swift-argument-parser too,
// and stop when the two differ. `dump` becomes a `DumpRequest` of plain values without a `Dump`:
// a swift-argument-parser command's property wrappers cost their own generic instantiations and
// conformance scans even when nothing parses them.
import ArgumentParser
import HangwatchCommandLine
import FoundationEssentials
import Glibc

/// What QuickStart hands `main` to run.
protocol RunnableCommand {
    mutating func run() throws
}

extension List: RunnableCommand {}

enum QuickStart {
    /// What swift-argument-parser's `exit(withError:)` prints and returns for an error a command
    /// threw: `Error: ` and the error's description on standard error, exit status 1 — without the
    /// usage text it builds first and then does not print for such an error (4.8 M instructions, a
    /// third of a `hangwatch dump` that finds no process). Its own error types go through it.
    static func exit(withError error: any Error) -> Never {
        if error is ValidationError || error is CleanExit || error is ExitCode { Hangwatch.exit(withError: error) }
        let description = (error as? LocalizedError)?.errorDescription ?? String(describing: error)
        if !description.isEmpty {
            let line = Array("Error: \(description)\n".utf8)
            _ = line.withUnsafeBytes { write(STDERR_FILENO, $0.baseAddress, $0.count) }
        }
        Glibc.exit(EXIT_FAILURE)
    }

    /// The command for `arguments` (without the program name), or nil to let swift-argument-parser parse them.
    static func command(for arguments: [String]) -> (any RunnableCommand)? {
        let command: (any RunnableCommand)?
        switch arguments.first {
        case "list": command = list(arguments.dropFirst())
        case "dump": command = dump(arguments.dropFirst())
        default: command = nil
        }
        guard let command else { return nil }
        #if DEBUG
        let parsed = try? Hangwatch.parseAsRoot(arguments)
        let expected = parsed.map { parsed -> String in
            if let dump = parsed as? Dump { return String(reflecting: dump.request) }
            return String(reflecting: parsed)
        }
        precondition(
            expected == String(reflecting: command),
            "QuickStart read \(arguments) as \(String(reflecting: command)), swift-argument-parser as \(expected ?? "an error")"
        )
        #endif
        return command
    }

    private static func list(_ arguments: ArraySlice<String>) -> List? {
        guard let found = read(arguments, flags: ["--json"], options: ["--database", "--config"]) else { return nil }
        var command = List()
        command.global = global(found.options)
        command.json = found.flags.contains("--json")
        return validated(command, \.global)
    }

    private static func dump(_ arguments: ArraySlice<String>) -> DumpRequest? {
        guard let found = read(arguments, flags: ["--save", "--tree"],
                               options: ["--database", "--config", "--redact", "--pid", "--format", "--samples", "--interval", "--output"]),
              let pid = found.options["--pid"].flatMap({ Int32($0) }),
              // Dump's defaults, repeated here.
              let format = ReportFormat(rawValue: found.options["--format"] ?? "text"),
              let samples = Int(found.options["--samples"] ?? "1"),
              let interval = Int(found.options["--interval"] ?? "20") else { return nil }
        let request = DumpRequest(
            common: CommonOptions(database: found.options["--database"], config: found.options["--config"], redact: found.options["--redact"]),
            pid: pid, format: format, samples: samples, interval: interval, output: found.options["--output"],
            save: found.flags.contains("--save"), tree: found.flags.contains("--tree"))
        // A failed validation goes back to swift-argument-parser, which reports it.
        guard (try? request.validate()) != nil else { return nil }
        return request
    }

    /// The flags present and the options' values; nil for anything else (an unknown or repeated
    /// name, a missing or dash-led value, a positional argument).
    private static func read(_ arguments: ArraySlice<String>, flags: Set<String>, options: Set<String>)
        -> (flags: Set<String>, options: [String: String])? {
        var seenFlags: Set<String> = []
        var values: [String: String] = [:]
        var rest = arguments
        while let argument = rest.popFirst() {
            if flags.contains(argument) {
                guard seenFlags.insert(argument).inserted else { return nil }
                continue
            }
            guard let (name, value) = option(argument, in: &rest), options.contains(name), values[name] == nil,
                  isPlainValue(value) else { return nil }
            values[name] = value
        }
        return (seenFlags, values)
    }

    private static func global(_ options: [String: String]) -> GlobalOptions {
        var global = GlobalOptions()
        global.database = options["--database"]
        global.config = options["--config"]
        return global
    }

    /// What swift-argument-parser does after decoding: a failure goes back to it, which reports it.
    private static func validated<Command: ParsableCommand>(_ command: Command, _ global: WritableKeyPath<Command, GlobalOptions>) -> Command? {
        var command = command
        do {
            try command[keyPath: global].validate()
            try command.validate()
        } catch {
            return nil
        }
        return command
    }

    /// `--NAME=VALUE`, or `--NAME` and the next argument.
    private static func option(_ argument: String, in rest: inout ArraySlice<String>) -> (name: String, value: String)? {
        guard argument.hasPrefix("--") else { return nil }
        if let equals = argument.firstIndex(of: "=") {
            return (String(argument[..<equals]), String(argument[argument.index(after: equals)...]))
        }
        guard let value = rest.popFirst() else { return nil }
        return (argument, value)
    }

    private static func isPlainValue(_ value: String) -> Bool {
        !value.isEmpty && !value.hasPrefix("-")
    }
}
