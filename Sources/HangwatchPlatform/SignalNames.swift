#if canImport(Glibc)
import Glibc
#endif

/// Signal names, spelled once (Linux numbering) for reports, messages and `--kill-signal`.
package enum SignalNames {
    /// Signals 1 … 31 without their "SIG".
    private static let names = [
        "HUP", "INT", "QUIT", "ILL", "TRAP", "ABRT", "BUS", "FPE", "KILL", "USR1", "SEGV", "USR2", "PIPE", "ALRM", "TERM",
        "STKFLT", "CHLD", "CONT", "STOP", "TSTP", "TTIN", "TTOU", "URG", "XCPU", "XFSZ", "VTALRM", "PROF", "WINCH", "IO",
        "PWR", "SYS",
    ]
    /// glibc's SIGRTMIN: 32 and 33 are the threading library's own.
    private static let realTimeMinimum: Int32 = 34

    /// "SIGKILL" for 9, "SIGRTMIN+6" for 40, "SIG32" for a number without a name.
    package static func name(_ number: Int32) -> String {
        if number >= 1, Int(number) <= names.count { return "SIG" + names[Int(number) - 1] }
        if number >= realTimeMinimum, number <= 64 { return "SIGRTMIN+\(number - realTimeMinimum)" }
        return "SIG\(number)"
    }

    /// The signal a name from `name(_:)` or a user's option means ("SIGTERM", "term", "15",
    /// "SIG32", "SIGRTMIN+2"); nil for anything else.
    package static func number(_ text: String) -> Int32? {
        var name = text.uppercased()
        if name.hasPrefix("SIG") { name.removeFirst(3) }
        if let value = Int32(name) { return (1...64).contains(value) ? value : nil }
        if let index = names.firstIndex(of: name) { return Int32(index + 1) }
        if name.hasPrefix("RTMIN+"), let offset = Int32(name.dropFirst(6)), offset >= 0, offset <= 64 - realTimeMinimum {
            return realTimeMinimum + offset
        }
        return nil
    }
}
