import HangwatchSymbolication
import ArgumentParser
import HangwatchCommandLine
import FoundationEssentials

struct Symbols: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "symbols",
        abstract: "Write a module's symbols in Breakpad's text format, for a symbol server.",
        discussion: """
            Writes what `dump_syms` writes for an ELF executable or shared library: the module \
            id (from its GNU build-id, the id hangwatch's minidumps give the same file), its \
            functions with their line tables and inlined calls from DWARF, and the symbols no \
            function covers. Upload it to a Breakpad symbol server (Socorro, Sentry, a \
            rust-minidump symbol directory: <name>/<id>/<name>.sym) and they symbolicate \
            hangwatch's minidumps of programs using that file (docs/symbol-cache.md).

            Examples:
              hangwatch symbols .build/release/my-server > my-server.sym
              hangwatch symbols /usr/lib/x86_64-linux-gnu/libc.so.6 --output libc.so.6.sym
            """
    )

    @Argument(help: "The ELF executable or shared library.")
    var file: String

    @Option(help: "Write the symbols to this file instead of stdout.")
    var output: String?

    @Option(name: .customLong("debug-dir"), help: ArgumentHelp(
        "A directory holding separate debug files by build-id (.build-id/xx/yyyy.debug); repeat for several.",
        discussion: "Default: /usr/lib/debug."))
    var debugDirectories: [String] = []

    func run() throws {
        let text: String
        do {
            text = try BreakpadSymbols.text(module: file, debugDirectories: debugDirectories.isEmpty ? ["/usr/lib/debug"] : debugDirectories)
        } catch let error as BreakpadSymbols.Failure {
            throw CLIError(error.description)
        }
        try emit(Data(text.utf8), to: output)
    }
}
