// The quiet capture's helper (Sources/CHangwatchCapture/hw_quiet.c) when someone else stops it,
// and the program's own PR_SET_PTRACER under Yama: real hangwatch-fixture-capture children.
import Foundation
import HangwatchTestSupport
import Testing
import HangwatchPlatform

@Suite(.ownThread) struct QuietHelperTests {
    /// The fixture captures 64 parked threads back to back; the test SIGSTOPs each helper it
    /// finds (a child of the capturing thread, through a pidfd) until one is stopped while it
    /// works. That capture returns at its deadline (0.5 s timeout + 0.5 s, measured in the
    /// child), its helper ended, the threads it never got to captured with signals; and no
    /// thread of the program is left stopped. (Before: the capture waited for ever, the threads
    /// the helper held stayed in ptrace-stop.)
    @Test func aStoppedHelperIsEndedAtItsDeadlineAndLetsEveryThreadGo() async throws {
        let child = try ChildProcess(product: "hangwatch-fixture-capture", ["stop-helper", "64"])
        let first = try await offPool { try child.waitForOutput("CAPTURER ", timeout: 60) }
        let capturer = try #require(first.split(separator: "\n").first { $0.hasPrefix("CAPTURER ") }.flatMap { Int32($0.dropFirst(9)) })
        let stopped = try await offPool { () -> [Int32] in
            var stopped: [Int32] = []
            let deadline = Date().addingTimeInterval(40)
            while !child.stdout.contains("ENDED"), Date() < deadline, child.isRunning {
                let children = ProcFS.readText("/proc/\(child.pid)/task/\(capturer)/children") ?? ""
                for helper in children.split(separator: " ").compactMap({ Int32($0) }) where !stopped.contains(helper) {
                    guard let stat = ProcFS.processStat(of: helper), stat.parent == child.pid,
                          let handle = ProcessHandle(pid: helper, startTicks: stat.startTicks), handle.send(SIGSTOP) == 0 else { continue }
                    stopped.append(helper)
                }
                usleep(200)
            }
            return stopped
        }
        let out = try await offPool { try child.waitForOutput("ENDED", timeout: 10) }
        #expect(!stopped.isEmpty)
        let line = try #require(out.split(separator: "\n").first { $0.hasPrefix("ENDED ") }.map(String.init))
        var fields: [String: Int] = [:]
        for field in line.split(separator: " ").dropFirst().prefix(3) {
            let parts = field.split(separator: "=", maxSplits: 1)
            if parts.count == 2 { fields[String(parts[0])] = Int(parts[1]) }
        }
        let elapsed = try #require(fields["elapsed_us"])
        #expect(elapsed >= 900_000 && elapsed < 2_500_000, "\(line)")
        #expect(fields["captured"] == fields["threads"], "every thread captured, by ptrace or by signals: \(line)")
        #expect(line.contains("was ended"), "\(line)")
        // The helpers stopped are gone (killed, reaped), and no thread of the program is stopped.
        try await Task.sleep(for: .milliseconds(200))
        for helper in stopped { #expect(ProcFS.processStat(of: helper)?.parent != child.pid, "helper \(helper) still there") }
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(child.pid)/task")) ?? []
        #expect(tasks.count >= 65)
        let stoppedThreads = tasks.filter { tid in
            guard let stat = ProcFS.readBytes("/proc/\(child.pid)/task/\(tid)/stat"), let parsed = ProcFS.parseStat(stat) else { return false }
            return parsed.state == CChar(UInt8(ascii: "t")) || parsed.state == CChar(UInt8(ascii: "T"))
        }
        #expect(stoppedThreads.isEmpty, "threads still stopped: \(stoppedThreads)")
    }

    /// A crash handler declares PR_SET_PTRACER_ANY so that its reporter may attach; under Yama
    /// ptrace_scope 1 a quiet capture used to declare its helper and then clear the declaration,
    /// wiping the program's. Now a declaration that lets a child trace is left alone (the helper
    /// tries without one first), and where the helper needs one, it is taken back after.
    /// Needs Yama at scope 1 (set for the test when root, and put back) and an unprivileged
    /// fixture (CAP_SYS_PTRACE passes Yama): setpriv runs it, and the prober, as nobody.
    @Test(arguments: ["any", "none"])
    func theProgramsOwnPtracerDeclarationIsLeftAsItWas(_ declared: String) async throws {
        let scopePath = "/proc/sys/kernel/yama/ptrace_scope"
        guard let scope = ProcFS.firstLine(scopePath).flatMap({ Int($0) }) else {
            print("skipped: no Yama in this kernel (\(scopePath) is missing): PR_SET_PTRACER means nothing here")
            return
        }
        guard let setpriv = ["/usr/bin/setpriv", "/bin/setpriv"].first(where: { FileManager.default.isExecutableFile(atPath: $0) }),
              let python = ["/usr/bin/python3", "/usr/local/bin/python3"].first(where: { FileManager.default.isExecutableFile(atPath: $0) })
        else {
            print("skipped: setpriv and python3 are needed to run the fixture and the prober as nobody")
            return
        }
        if scope != 1 {
            guard getuid() == 0, FileManager.default.isWritableFile(atPath: scopePath) else {
                print("skipped: Yama ptrace_scope is \(scope), and only root may set it to 1 for the test")
                return
            }
            try "1".write(toFile: scopePath, atomically: false, encoding: .utf8)
        }
        defer { if scope != 1 { try? "\(scope)".write(toFile: scopePath, atomically: false, encoding: .utf8) } }
        let nobody = ["--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", "--"]
        let fixture = try productPath("hangwatch-fixture-capture")
        let child = try ChildProcess(setpriv, nobody + [fixture, "ptracer", declared], environment: ["HANGWATCH_CAPTURE": "quiet"])
        let out = try await offPool { try child.waitForOutput("METHOD ", timeout: 60) }
        // Captured quietly either way: with the program's declaration, or with the helper's own.
        #expect(out.contains("METHOD ptrace\n"), "\(out) \(child.stderr)")
        // Another process of the same user, not an ancestor: Yama lets it attach only under ANY.
        let probe = try runProgram(setpriv, nobody + [python, "-c", """
            import ctypes, sys
            libc = ctypes.CDLL(None, use_errno=True)
            libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
            print("seize", 0 if libc.ptrace(0x4206, \(child.pid), None, None) == 0 else ctypes.get_errno())
            """], timeout: 30)
        #expect(probe.stdout.contains(declared == "any" ? "seize 0" : "seize \(EPERM)"), "\(probe.stdout) \(probe.stderr)")
    }

    /// The helper sleeps until a thread stops: it sets its own SIGCHLD back to SIG_DFL (a tracer
    /// is not sent SIGCHLD for its tracees' stops while it ignores SIGCHLD or set SA_NOCLDSTOP)
    /// and waits for it. Its signal actions are its own copy, so whatever the program set stays:
    /// ignored, a handler with SA_NOCLDSTOP, a handler. Every capture is quiet and whole, the
    /// program's handler never runs for the helper or its tracees, and it still runs for a child
    /// of the program's own.
    @Test(arguments: ["ignore", "nocldstop", "handler"])
    func theProgramsChildSignalIsLeftAsItWas(_ setting: String) async throws {
        let child = try ChildProcess(product: "hangwatch-fixture-capture", ["sigchld", setting])
        let status = try await offPool { try child.waitForExit(timeout: 120) }
        let out = child.stdout
        #expect(status == 0, "\(out) \(child.stderr)")
        let captures = out.split(separator: "\n").filter { $0.hasPrefix("CAPTURE ") }
        #expect(captures.count == 5, "\(out)")
        for line in captures { #expect(line.contains("threads=17 captured=17 "), "\(line)") }  // main + 16 parked
        #expect(out.split(separator: "\n").filter { $0 == "METHOD ptrace" }.count == 5, "\(out)")
        #expect(out.contains("DISPOSITION \(setting)\n"), "\(out)")
        #expect(out.contains("HANDLED_DURING_CAPTURES 0\n"), "\(out)")
        #expect(out.contains("HANDLED_AFTER_CHILD \(setting == "ignore" ? 0 : 1)"), "\(out)")
    }
}
