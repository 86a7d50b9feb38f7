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
// and stop when the two differ. `list` and `dump` become a `ListRequest` and a `DumpRequest` of
// plain values, without a `List` or `Dump`: a swift-argument-parser command's property wrappers
// cost their own generic instantiations and conformance scans even when nothing parses them
// (0.87 M instructions of the 4 M `list` took on an empty database).
import ArgumentParser
import HangwatchCommandLine
import FoundationEssentials
import Glibc

/// What QuickStart hands `main` to run.
protocol RunnableCommand {
    mutating func run() throws
}

enum QuickStart {
    /// What swift-argument-parser's `exit(withError:)` prints and returns for an error a command
    /// threw: `Error: ` and the error's description on standard error, exit status 1 — without the
    /// usage text it builds first and then does not print for such an error (4.8 M instructions, a
    /// third of a `hangwatch dump` that finds no process). Its own error types go through it.
    static func exit(withError error: any Error) -> Never {
        // A CLIError (the form in which most commands' errors reach here) is printed with its own description:
        // a cast to a protocol (LocalizedError, CustomStringConvertible, String(describing:)'s own)
        // that the runtime has not answered before scans every conformance record of the binary,
        // 0.2 M instructions each, while a cast to a concrete type compares two pointers.
        if let ours = error as? CLIError { fail(ours.description) }
        if error is ValidationError || error is CleanExit || error is ExitCode { Hangwatch.exit(withError: error) }
        fail((error as? LocalizedError)?.errorDescription ?? String(describing: error))
    }

    /// `Error: DESCRIPTION` on standard error (nothing for an empty one), exit status 1.
    private static func fail(_ description: String) -> Never {
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
            if let list = parsed as? List { return String(reflecting: list.request) }
            return String(reflecting: parsed)
        }
        precondition(
            expected == String(reflecting: command),
            "QuickStart read \(arguments) as \(String(reflecting: command)), swift-argument-parser as \(expected ?? "an error")"
        )
        #endif
        return command
    }

    private static func list(_ arguments: ArraySlice<String>) -> ListRequest? {
        guard let found = read(arguments, flags: ["--json"], options: ["--database", "--config"]) else { return nil }
        return ListRequest(common: CommonOptions(database: found[option: "--database"], config: found[option: "--config"]),
                           json: found.flags.contains("--json"))
    }

    private static func dump(_ arguments: ArraySlice<String>) -> DumpRequest? {
        guard let found = read(arguments, flags: ["--save", "--tree"],
                               options: ["--database", "--config", "--redact", "--pid", "--format", "--samples", "--interval", "--output"]),
              let pid = found[option: "--pid"].flatMap({ Int32($0) }),
              // Dump's defaults, repeated here.
              let format = ReportFormat(rawValue: found[option: "--format"] ?? "text"),
              let samples = Int(found[option: "--samples"] ?? "1"),
              let interval = Int(found[option: "--interval"] ?? "20") else { return nil }
        let request = DumpRequest(
            common: CommonOptions(database: found[option: "--database"], config: found[option: "--config"], redact: found[option: "--redact"]),
            pid: pid, format: format, samples: samples, interval: interval, output: found[option: "--output"],
            save: found.flags.contains("--save"), tree: found.flags.contains("--tree"))
        // A failed validation goes back to swift-argument-parser, which reports it.
        guard (try? request.validate()) != nil else { return nil }
        return request
    }

    /// What `read` found: the flags present and the options given, each at most once.
    private struct Found {
        var flags: [String] = []
        var options: [(name: String, value: String)] = []

        subscript(option name: String) -> String? { options.first { $0.name == name }?.value }
    }

    /// The flags present and the options' values; nil for anything else (an unknown or repeated
    /// name, a missing or dash-led value, a positional argument). Arrays, not a Set or Dictionary:
    /// their storage's first use makes the Swift runtime look up String's Hashable conformance
    /// by scanning every conformance record of the binary (0.28 M instructions).
    private static func read(_ arguments: ArraySlice<String>, flags: [String], options: [String]) -> Found? {
        var found = Found()
        var rest = arguments
        while let argument = rest.popFirst() {
            if flags.contains(argument) {
                guard !found.flags.contains(argument) else { return nil }
                found.flags.append(argument)
                continue
            }
            guard let (name, value) = option(argument, in: &rest), options.contains(name), found[option: name] == nil,
                  isPlainValue(value) else { return nil }
            found.options.append((name, value))
        }
        return found
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
