import HangwatchPlatform
import ArgumentParser
import FoundationEssentials
import Glibc
import HangwatchCommandLine

/// `hangwatch upload …` runs `hangwatch-upload` (built and installed beside `hangwatch`) with
/// the same arguments: only uploading loads libcurl (and its TLS libraries), so every other
/// subcommand starts without them.
struct UploadLauncher: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "upload",
        abstract: "Send pending reports to a crash server (Crashpad's upload protocol). See: hangwatch upload --help"
    )

    @Argument(parsing: .captureForPassthrough, help: "Passed on to hangwatch-upload.")
    var arguments: [String] = []

    func run() throws { try Self.exec(arguments) }

    static var helperPath: String {
        let executable = ProcFS.readLink("/proc/self/exe") ?? CommandLine.arguments[0]
        return Paths.parent(of: executable) + "/hangwatch-upload"
    }

    /// Replaces this process with hangwatch-upload; returns only by throwing.
    static func exec(_ arguments: [String]) throws -> Never {
        let path = helperPath
        let argv = ([path] + arguments).map { strdup($0) } + [nil]
        execv(path, argv)
        let why = String(cString: strerror(errno))
        throw CLIError("cannot run \(path) (it is built and installed beside hangwatch): \(why)")
    }
}
