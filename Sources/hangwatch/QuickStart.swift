// `hangwatch list` read without swift-argument-parser, so that the CLI starts as fast as a
// Foundation hello-world (docs/performance.md, "CLI start-up"). Parsing any command line with
// swift-argument-parser costs more than the rest of `hangwatch list`: it builds the argument set
// of every command it passes by reflection (Mirror), and each Mirror, cast to its internal
// protocols and generic type it meets makes the Swift runtime scan the protocol-conformance
// records of every loaded image once (~170 k instructions a scan, 30 scans for `list` alone).
//
// Only the plain spellings are read here: `list` followed by `--json`, `--database VALUE`,
// `--config VALUE` (or `--NAME=VALUE`), each at most once, and values that are not empty and do not
// start with "-". Anything else — help, another option, a repeat, an error, a completion-script
// request — goes to swift-argument-parser as before (`Hangwatch.main()`), so its messages, help
// and usage text stay its own. The command built here is the one swift-argument-parser would build:
// debug builds (so the tests) parse every command line taken here with swift-argument-parser too,
// and stop when the two differ.
import ArgumentParser
import HangwatchCommandLine

enum QuickStart {
    /// The command for `arguments` (without the program name), or nil to let swift-argument-parser parse them.
    static func command(for arguments: [String]) -> (any ParsableCommand)? {
        guard arguments.first == "list", let command = list(arguments.dropFirst()) else { return nil }
        #if DEBUG
        let parsed = try? Hangwatch.parseAsRoot(arguments)
        precondition(
            parsed.map { String(reflecting: $0) } == String(reflecting: command),
            "QuickStart read \(arguments) as \(String(reflecting: command)), swift-argument-parser as \(parsed.map { String(reflecting: $0) } ?? "an error")"
        )
        #endif
        return command
    }

    private static func list(_ arguments: ArraySlice<String>) -> List? {
        var database: String?, config: String?, json = false
        var rest = arguments
        while let argument = rest.popFirst() {
            if argument == "--json" {
                guard !json else { return nil }
                json = true
                continue
            }
            guard let (name, value) = option(argument, in: &rest), isPlainValue(value) else { return nil }
            switch name {
            case "--database" where database == nil: database = value
            case "--config" where config == nil: config = value
            default: return nil
            }
        }
        var global = GlobalOptions()
        global.database = database
        global.config = config
        var command = List()
        command.global = global
        command.json = json
        // What swift-argument-parser does after decoding: a failure goes back to it, which reports it.
        do {
            try command.global.validate()
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
