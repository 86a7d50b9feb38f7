// The quiet capture against what a program may put in its way (issue 27): a seccomp filter that
// kills ptrace, and other captures of the same process tracing its main thread. Real
// hangwatch-fixture-hang children; every time is measured in the child.
import Foundation
import HangwatchTestSupport
import Testing
@testable import HangMonitor
import HangwatchDatabase
import HangwatchReport

@Suite(.ownThread) struct HarmlessCaptureTests {
    /// systemd's `SystemCallFilter=` kills a process that calls ptrace (KILL_PROCESS by default;
    /// KILL_THREAD is the older action): the helper, a clone of the program, inherits the filter
    /// and dies of SIGSYS at its first PTRACE_SEIZE. The hang is captured with signals at once,
    /// its hung thread's frames kept; `capture.method` and one `failed` event say why; the helper
    /// dumped no core, and it died once, not at every sample.
    @Test(arguments: ["kill-process", "kill-thread"])
    func aSeccompFilterThatKillsPtraceCostsNoStackAndNoCoreFile(_ action: String) async throws {
        let db = try makeTemporaryDirectory()
        let cwd = try makeTemporaryDirectory("hangwatch-cwd")
        defer { removeTemporaryDirectory(db); removeTemporaryDirectory(cwd) }
        let child = try startFixture("dispatchmain", "recover", seconds: 2, database: db, threshold: 0.5, extra: [
            "HANGWATCH_FIXTURE_SECCOMP": action, "HANGWATCH_FIXTURE_CWD": cwd, "HANGWATCH_CAPTURE": "quiet",
            "HANGWATCH_SAMPLE_INTERVAL": "0.05", "HANGWATCH_KEEP_RECOVERED_HANGS_LONGER_THAN": "0",
        ])
        #expect(try await offPool { try child.waitForExit(timeout: 60) } == 0, "\(child.stdout) \(child.stderr)")
        let all = events(in: child.stdout)
        let recovered = try #require(all.first { $0.name == "recovered" }, "\(child.stdout)")
        let report = try readReport(try #require(recovered.string("reportPath"), "\(child.stdout)"))
        let method = report.annotations["capture.method"] ?? ""
        #expect(method.hasPrefix("signals (the capture helper was killed by SIGSYS"), "\(method)")
        #expect(!method.contains("core dumped"), "\(method)")
        let hung = try #require(report.threads.first { $0.roles.contains(.hung) }, "\(report.threads.map { ($0.tid, $0.roles) })")
        #expect(hung.frames.contains { $0.function?.contains("hangFixtureSleepOnMainQueue") == true },
                "\(hung.frames.map { $0.function ?? ReportFormatting.address($0.address) })")
        // The samples, after the helper's death, used signals: the hang's profile is the sleep.
        #expect((recovered.int("sampleCount") ?? 0) >= 10, "\(child.stdout)")
        let failures = all.filter { $0.name == "failed" && $0.string("stage") == "quiet-capture" }
        #expect(failures.count == 1, "\(child.stdout)")
        #expect(failures.first?.string("message")?.contains("killed by SIGSYS") == true, "\(child.stdout)")
        // A core file would be where core_pattern says: in the child's working directory when the
        // pattern is a plain name. Elsewhere (a pipe to systemd-coredump, an absolute path) only
        // the kernel's word is seen, the wait status's core flag checked above.
        let pattern = (try? String(contentsOfFile: "/proc/sys/kernel/core_pattern", encoding: .utf8))?
            .trimmingCharacters(in: .whitespacesAndNewlines) ?? "|"
        if pattern.hasPrefix("|") || pattern.contains("/") {
            print("core_pattern is \(pattern): no core file can be looked for in the child's directory")
        } else {
            #expect(((try? FileManager.default.contentsOfDirectory(atPath: cwd)) ?? []).isEmpty)
        }
    }

    /// Another capture of the same process (DumpClient.capture, back to back, on a thread of its
    /// own) traces the main thread most of the time: the fixture's main thread sits in vfork (D),
    /// which each helper waits 50 ms for. TracerPid names our own helper then, which is no
    /// debugger: three 2 s blocks of a queue are three hangs of their full length, and detection
    /// is never suspended. (Before, a monitor restarted its wait whenever it saw the helper: a
    /// 2.0 s block was timed 1.49 s, or not at all.)
    @Test func ownCaptureHelpersNeitherShortenNorHideAHang() async throws {
        let db = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(db) }
        let child = try startFixture("vfork", "own-tracer", seconds: 2, database: db, threshold: 0.5, extra: [
            "HANGWATCH_TARGETS": "queue:fixture.worker", "HANGWATCH_CAPTURE": "quiet", "HANGWATCH_DEDUP_WINDOW": "0",
        ])
        #expect(try await offPool { try child.waitForExit(timeout: 90) } == 0, "\(child.stdout) \(child.stderr)")
        let all = events(in: child.stdout)
        #expect(all.first { $0.name == "first-capture" }?.string("method") == "ptrace", "\(child.stdout)")
        #expect((all.first { $0.name == "captures" }?.int("count") ?? 0) >= 20, "\(child.stdout)")
        #expect(!all.contains { $0.name == "suspended-while-traced" }, "\(child.stdout)")
        let slept = all.filter { $0.name == "slept" }.compactMap { $0.double("seconds") }
        let recovered = all.filter { $0.name == "recovered" }.compactMap { $0.double("durationSeconds") }
        #expect(slept.count == 3 && recovered.count == 3, "\(child.stdout)")
        // A monitor that overslept (a loaded machine) forgives that time: the length is judged
        // only without that.
        guard !all.contains(where: { $0.name == "rebaselined" }) else { return }
        for (block, hang) in zip(slept, recovered) {
            #expect(hang >= block - 0.1, "a \(block) s block timed \(hang) s: \(child.stdout)")
        }
    }
}
