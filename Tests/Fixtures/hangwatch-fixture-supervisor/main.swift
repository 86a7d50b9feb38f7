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

func emit(_ fields: [String: String]) {
    let body = fields.sorted { $0.key < $1.key }.map { "\"\($0.key)\":\($0.value)" }.joined(separator: ",")
    let line = "{\(body)}\n"
    _ = line.withCString { write(STDOUT_FILENO, $0, strlen($0)) }
}

/// `text` as a JSON string (the few characters a shell script's output has that need escaping).
func quoted(_ text: String) -> String {
    var out = "\""
    for scalar in text.unicodeScalars {
        switch scalar {
        case "\"": out += "\\\""
        case "\\": out += "\\\\"
        case "\n": out += "\\n"
        default: out.unicodeScalars.append(scalar.value < 0x20 ? " " : scalar)
        }
    }
    return out + "\""
}

/// Each call of the supervisor, as it came.
final class Recorder: SupervisorReporting {
    func hangBegan(pid: pid_t, cause: HangCause, startedAt: Date) {
        emit(["call": quoted("hangBegan"), "target": quoted(cause.target.name)])
    }
    func hangEnded(pid: pid_t, cause: HangCause, duration: Double) {
        emit(["call": quoted("hangEnded"), "target": quoted(cause.target.name), "seconds": String(duration)])
    }
    func killingForHang(pid: pid_t, cause: HangCause, duration: Double) {
        emit(["call": quoted("killingForHang"), "target": quoted(cause.target.name), "seconds": String(duration)])
    }
    func crashCaught(pid: pid_t, snapshot: ProcessSnapshot?, failure: String?) {}
    func childExited(pid: pid_t, status: ChildExit, killedForHang: Bool, stderrTail: [UInt8],
                     unsignalled: [ProcessTree.Unsignalled], signalsSent: Set<Int32>, lastLiveness: String?) {
        emit(["call": quoted("childExited"), "status": String(status.shellStatus), "killedForHang": String(killedForHang),
              "stderrTail": quoted(String(decoding: stderrTail, as: UTF8.self)),
              "signalsSent": "[" + signalsSent.sorted().map(String.init).joined(separator: ",") + "]"])
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
    emit(["call": quoted("returned"), "status": String(exit.shellStatus)])
} catch {
    emit(["call": quoted("failed"), "error": quoted("\(error)")])
    exit(1)
}
