// The few system call numbers hangwatch reads meaning into, from the first field of
// /proc/PID/task/TID/syscall (docs/platform-facts.md): a thread blocked in wait4/waitid is
// waiting for a child; one in futex is blocked on a lock or condition; one in epoll_wait is an
// event loop with nothing to do.
package enum Syscalls {
    #if arch(x86_64)
    package static let futex: Int = 202
    /// What a call interrupted by a stop (ptrace, SIGSTOP) with a timeout goes on in; its arguments stay.
    package static let restart: Int = 219
    package static let wait4: Int = 61
    package static let waitid: Int = 247
    /// epoll_wait, epoll_pwait, epoll_pwait2: an event loop waiting for work.
    package static let eventWaits: Set<Int> = [232, 281, 441]
    #elseif arch(arm64)
    package static let futex: Int = 98
    package static let restart: Int = 128
    package static let wait4: Int = 260
    package static let waitid: Int = 95
    package static let eventWaits: Set<Int> = [22, 441]
    #else
    #error("hangwatch supports x86_64 and aarch64 (docs/architectures.md)")
    #endif

    /// The syscall number of a /proc syscall line ("202 0x… …"); nil for "running", "-1 …"
    /// (not in a syscall) or an empty line.
    package static func number(ofLine line: String?) -> Int? {
        guard let line, let first = line.split(separator: " ", maxSplits: 1).first, let number = Int(first),
              number >= 0 else { return nil }
        return number
    }

    /// The six arguments of a /proc syscall line ("NR arg0 … arg5 sp pc", hex); nil for a line
    /// that is not in a syscall or is malformed.
    package static func arguments(ofLine line: String?) -> [UInt64]? {
        guard number(ofLine: line) != nil, let fields = line?.split(separator: " "), fields.count >= 7 else { return nil }
        var values: [UInt64] = []
        for field in fields[1...6] {
            guard field.hasPrefix("0x"), let value = UInt64(field.dropFirst(2), radix: 16) else { return nil }
            values.append(value)
        }
        return values
    }
}
