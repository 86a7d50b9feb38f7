import HangwatchSnapshot
import HangwatchDatabase
import HangwatchReport
import HangwatchMinidump
import HangwatchRemoteCapture
import HangwatchSupervisorProtocol
import HangMonitorConfiguration
import ArgumentParser
import HangwatchCommandLine
import HangwatchPlatform
import HangwatchSupervision
import FoundationEssentials
import Glibc

@main
struct HangwatchMain {
    static func main() {
        // `run` reads forwarded signals from a signalfd, which needs them blocked in every
        // thread: do it before anything can start a thread.
        let subcommand = CommandLine.arguments.dropFirst().first
        if subcommand == "run" {
            SignalForwarding.blockInAllThreads()
        }
        // Before any parsing: `hangwatch upload --help` is the helper's help.
        if subcommand == "upload" {
            do { try UploadLauncher.exec(Array(CommandLine.arguments.dropFirst(2))) } catch {
                warn("\(error)")
                exit(127)
            }
        }
        // The common `hangwatch list` and `hangwatch dump` without swift-argument-parser's
        // start-up cost (QuickStart.swift).
        if var command = QuickStart.command(for: Array(CommandLine.arguments.dropFirst())) {
            do { try command.run() } catch { QuickStart.exit(withError: error) }
            return
        }
        Hangwatch.main()
    }
}

struct Hangwatch: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "hangwatch",
        abstract: "Find out why a program stopped responding, and what it was doing when it crashed.",
        discussion: """
            Reports live in a database directory: --database, else HANGWATCH_DATABASE_PATH, else \
            the databasePath of --config FILE, else $XDG_STATE_HOME/hangwatch (~/.local/state/hangwatch).

            A module symbolicated a second time is indexed in a symbol cache, $XDG_CACHE_HOME/hangwatch/symbols \
            (~/.cache/hangwatch/symbols); HANGWATCH_SYMBOL_CACHE=DIR uses another directory, \
            HANGWATCH_SYMBOL_CACHE=off none (docs/symbol-cache.md).

            Exit status: 0 when the command did what it was asked; 64 for a command line it \
            refuses (an unknown option, a missing or bad value: the message names the option and \
            the value); 1 for any other error (a file or database that cannot be read, a process \
            that cannot be captured). Once its child started, `run` exits with the child's status (see run --help).

            Examples:
              hangwatch run --kill-after 30 -- ./my-server --port 8080
              hangwatch dump --pid 4242
              hangwatch list
              hangwatch show 3fa2
            """,
        version: HangwatchVersion.line(reportSchema: Report.currentSchemaVersion, supervisorProtocol: SupervisorMessage.prefix),
        subcommands: [Run.self, Dump.self, List.self, Show.self, ProcessDumps.self, UploadLauncher.self, Prune.self, Symbols.self,
                      JobWatchdogCommand.self]
    )
}
