import HangwatchSnapshot
import HangwatchDatabase
import HangwatchReport
import HangwatchMinidump
import HangwatchUpload
import HangwatchRemoteCapture
import HangwatchSupervisorProtocol
import HangMonitorConfiguration
import ArgumentParser
import Foundation

@main
struct HangwatchMain {
    static func main() {
        // `run` reads forwarded signals from a signalfd, which needs them blocked in every
        // thread: do it before anything can start a thread.
        if CommandLine.arguments.dropFirst().first == "run" {
            SignalForwarding.blockInAllThreads()
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

            Examples:
              hangwatch run --kill-after 30 -- ./my-server --port 8080
              hangwatch dump --pid 4242
              hangwatch list
              hangwatch show 3fa2
            """,
        subcommands: [Run.self, Dump.self, List.self, Show.self, ProcessDumps.self, Upload.self, Prune.self]
    )
}
