// The programs the bench runs beside itself, named once: scripts/bench builds them and puts them
// in the bench's own directory. `hangwatch-bench --check-programs` (scripts/bench --build-only,
// which CI runs on a clean scratch path) says whether each is there before any section needs it.
import Foundation
#if canImport(Glibc)
import Glibc
#endif

enum BenchProgram: String, CaseIterable {
    /// The CLI as README.md installs it (the Swift runtime linked in): sections 4, 7, 9, 10.
    case hangwatch
    /// Section 7's yardstick, a Foundation hello-world linked the same way.
    case hello = "hangwatch-bench-hello"
    /// Section 2's program that links HangMonitor only.
    case monitorOnly = "hangwatch-fixture-monitor-only"
    /// Section 4's C program.
    case cTarget = "hangwatch-bench-c-target"
    /// Section 8's SwiftNIO server.
    case server = "hangwatch-bench-server"
    /// Section 9's program of many suspended tasks.
    case tasks = "hangwatch-fixture-tasks"

    /// Its path: beside this bench's executable.
    var path: String { (ProcReading.executablePath() as NSString).deletingLastPathComponent + "/" + rawValue }

    /// Its path, or a failure that says how to build it.
    func require() throws -> String {
        guard access(path, X_OK) == 0 else { throw BenchFailure("\(path) missing: build the \(rawValue) product in release too (scripts/bench)") }
        return path
    }

    /// Section 10's server (HANGWATCH_BENCH_SERVER, which scripts/bench sets when it builds it).
    static var largeServer: String? {
        ProcessInfo.processInfo.environment["HANGWATCH_BENCH_SERVER"].flatMap { $0.isEmpty ? nil : $0 }
    }

    /// Every program the sections run, and section 10's server when it is named: what is
    /// missing, one line each.
    static func problems() -> [String] {
        var found: [String] = []
        for program in allCases {
            do { _ = try program.require() } catch { found.append("\(error)") }
        }
        if let server = largeServer, access(server, X_OK) != 0 { found.append("\(server) missing (HANGWATCH_BENCH_SERVER)") }
        return found
    }
}
