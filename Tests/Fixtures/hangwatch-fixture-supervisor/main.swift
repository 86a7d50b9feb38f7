// `hangwatch run`'s supervisor (Sources/HangwatchSupervision/Supervisor.swift) driven as the
// command drives it, over a shell command, with a reporter that prints each call it gets as a
// JSON line — what Tests/HangwatchSupervisionTests checks. A process of its own: the supervisor
// blocks signals, waits for its children and reaps its orphans, none of which a test process
// that runs other tests beside it may do.
//
//   hangwatch-fixture-supervisor SILENCE KILL_AFTER TIMEOUT SCRIPT
//
// SILENCE, KILL_AFTER and TIMEOUT are seconds (0: not set); SCRIPT runs under /bin/sh -c.
import FoundationEssentials
import Glibc
import HangwatchSnapshot
import HangwatchSupervision

SignalForwarding.blockInAllThreads()  // as hangwatch's main does, before any thread exists

/// One call the supervisor made, as a JSON line (keys sorted: "call" comes first).
struct Call: Encodable {
    var call: String
    var target: String?
    var seconds: Double?
    var status: Int32?
    var killedForHang: Bool?
    var stderrTail: String?
    var signalsSent: [Int32]?
    var error: String?
}

let encoder: JSONEncoder = {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.sortedKeys]
    return encoder
}()

func emit(_ call: Call) {
    guard let line = try? encoder.encode(call) else { return }
    _ = (line + Data("\n".utf8)).withUnsafeBytes { write(STDOUT_FILENO, $0.baseAddress, $0.count) }
}

/// Each call of the supervisor, as it came.
final class Recorder: SupervisorReporting {
    func hangBegan(pid: pid_t, cause: HangCause, startedAt: Date) {
        emit(Call(call: "hangBegan", target: cause.target.name))
    }
    func hangEnded(pid: pid_t, cause: HangCause, duration: Double) {
        emit(Call(call: "hangEnded", target: cause.target.name, seconds: duration))
    }
    func killingForHang(pid: pid_t, cause: HangCause, duration: Double) {
        emit(Call(call: "killingForHang", target: cause.target.name, seconds: duration))
    }
    func crashCaught(pid: pid_t, snapshot: ProcessSnapshot?, failure: String?) {}
    func childExited(pid: pid_t, status: ChildExit, killedForHang: Bool, stderrTail: [UInt8],
                     unsignalled: [ProcessTree.Unsignalled], signalsSent: Set<Int32>, lastLiveness: String?) {
        emit(Call(call: "childExited", status: status.shellStatus, killedForHang: killedForHang,
                  stderrTail: String(decoding: stderrTail, as: UTF8.self), signalsSent: signalsSent.sorted()))
    }
    func sampleChild(pid: pid_t) {}
}

let arguments = CommandLine.arguments
guard arguments.count == 5, let silence = Double(arguments[1]), let killAfter = Double(arguments[2]),
      let timeout = Double(arguments[3]) else {
    _ = "usage: hangwatch-fixture-supervisor SILENCE KILL_AFTER TIMEOUT SCRIPT\n".withCString { write(STDERR_FILENO, $0, strlen($0)) }
    exit(64)
}
var options = SupervisorOptions()
options.silence = silence > 0 ? silence : nil
options.killAfter = killAfter > 0 ? killAfter : nil
options.timeout = timeout > 0 ? timeout : nil
let recorder = Recorder()
do {
    let child = try ChildLauncher.spawn(executable: "/bin/sh", arguments: ["sh", "-c", arguments[4]],
                                        environment: ProcessInfo.processInfo.environment, setWatchdogPID: false)
    let exit = try Supervisor(child: child, options: options, notify: nil, monitor: nil, reporting: recorder).run()
    emit(Call(call: "returned", status: exit.shellStatus))
} catch {
    emit(Call(call: "failed", error: "\(error)"))
    exit(1)
}
