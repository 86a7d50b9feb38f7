import HangwatchPlatform
import HangwatchSymbolication
import ArgumentParser
import HangwatchCommandLine
import FoundationEssentials
import Glibc

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

            With --store DIR the file goes into that layout under DIR. Keep the symbols of each \
            build you deploy there, and hangwatch names the frames of a report processed after \
            the binary was replaced (a fatal hang found at the next start of a new version): \
            set HANGWATCH_SYMBOL_STORE=DIR (several: DIR1:DIR2) for show, dump and process; the \
            report's module line says "[breakpad-symbols] symbols from DIR/…".

            Examples:
              hangwatch symbols .build/release/my-server > my-server.sym
              hangwatch symbols /usr/lib/x86_64-linux-gnu/libc.so.6 --output libc.so.6.sym
              hangwatch symbols .build/release/my-server --store /var/lib/my-server/symbols
              HANGWATCH_SYMBOL_STORE=/var/lib/my-server/symbols hangwatch process
            """
    )

    @Argument(help: "The ELF executable or shared library.")
    var file: String

    @Option(help: "Write the symbols to this file instead of stdout.")
    var output: String?

    @Option(help: "Write the symbols into this symbol store: DIR/<name>/<id>/<name>.sym (directories made 0700).")
    var store: String?

    @Option(name: .customLong("debug-dir"), help: ArgumentHelp(
        "A directory holding separate debug files by build-id (.build-id/xx/yyyy.debug); repeat for several.",
        discussion: "Default: /usr/lib/debug."))
    var debugDirectories: [String] = []

    func validate() throws {
        guard output == nil || store == nil else { throw ValidationError("give --output or --store, not both") }
    }

    func run() throws {
        try checkIsAFile()
        for directory in debugDirectories where !Self.isDirectory(directory) {
            throw CLIError("--debug-dir \(directory): \(errno == 0 ? "not a directory" : String(cString: strerror(errno)))")
        }
        let text: String
        do {
            text = try BreakpadSymbols.text(module: file, debugDirectories: debugDirectories.isEmpty ? ["/usr/lib/debug"] : debugDirectories)
        } catch let error as BreakpadSymbols.Failure {
            throw CLIError(error.description)
        }
        try emit(Data(text.utf8), to: try store.map(storePath) ?? output)
    }

    /// A file that is missing, unreadable or not a regular file is reported as such, not as "not an ELF file".
    private func checkIsAFile() throws {
        var info = stat()
        guard stat(file, &info) == 0 else { throw CLIError("cannot read \(file): \(String(cString: strerror(errno)))") }
        guard info.st_mode & S_IFMT == S_IFREG else {
            throw CLIError("\(file) is not a regular file: give an ELF executable or shared library")
        }
        guard access(file, R_OK) == 0 else { throw CLIError("cannot read \(file): \(String(cString: strerror(errno)))") }
    }

    /// `path` is a directory (through links); otherwise errno gives the reason, or is 0 when it is something else.
    static func isDirectory(_ path: String) -> Bool {
        var info = stat()
        errno = 0
        return stat(path, &info) == 0 && info.st_mode & S_IFMT == S_IFDIR
    }

    /// The file's place in the store, the store and its two directories made (0700) when missing.
    private func storePath(_ store: String) throws -> String {
        guard let buildID = ELFBuildID.read(path: file),
              let path = BreakpadSymbolStore.path(in: store, modulePath: file, buildID: buildID) else {
            throw CLIError("\(file) has no GNU build-id: a symbol store is keyed by it")
        }
        var directory = path
        var made: [String] = []
        for _ in 0..<3 {
            directory = String(directory[..<directory.lastIndex(of: "/")!])
            made.insert(directory, at: 0)
        }
        for directory in made where mkdir(directory, 0o700) != 0 && errno != EEXIST {
            throw CLIError("cannot make \(directory): \(String(cString: strerror(errno)))")
        }
        return path
    }
}
