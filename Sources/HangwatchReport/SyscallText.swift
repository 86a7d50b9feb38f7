// A thread's system call as strace spells it — `futex(0x55d0…, FUTEX_WAIT_PRIVATE, 2, NULL)` —
// from the /proc syscall line a capture keeps ("NR arg0 … arg5 sp pc"). The calls threads
// commonly block in get their arguments decoded: file descriptors, counts and timeouts in
// decimal, futex operations, clocks and wait id types by name, a null pointer as NULL. Any
// other call shows its six arguments in hex, as the kernel gives them.
import HangwatchPlatform

package enum SyscallText {
    /// What a thread's /proc syscall line says, for the text report: `futex(…)`, or "not in a
    /// system call" (running, or stopped outside one); the line itself when it is not one the
    /// kernel writes. `name` is the report's name of the call; without it (a report from before
    /// the name was kept) this build's architecture names the number.
    package static func describe(_ line: String, name: String? = nil) -> String {
        if line == "running" { return "not in a system call (running)" }
        if line.hasPrefix("-1") { return "not in a system call" }
        guard let number = Syscalls.number(ofLine: line), let arguments = Syscalls.arguments(ofLine: line) else { return line }
        let call = name ?? Syscalls.name(of: number) ?? "syscall_\(number)"
        return call + "(" + decode(call, arguments).joined(separator: ", ") + ")"
    }

    /// How each argument of a decoded call is written.
    enum Argument {
        case fd, int, count, pointer, hex, milliseconds, clock, clockFlags, idType
    }

    /// The calls whose arguments are decoded, and how (the kernel's order of arguments).
    static let signatures: [String: [Argument]] = [
        "read": [.fd, .pointer, .count], "write": [.fd, .pointer, .count],
        "pread64": [.fd, .pointer, .count, .int], "pwrite64": [.fd, .pointer, .count, .int],
        "readv": [.fd, .pointer, .int], "writev": [.fd, .pointer, .int],
        "recvfrom": [.fd, .pointer, .count, .hex, .pointer, .pointer], "sendto": [.fd, .pointer, .count, .hex, .pointer, .int],
        "recvmsg": [.fd, .pointer, .hex], "sendmsg": [.fd, .pointer, .hex],
        "accept": [.fd, .pointer, .pointer], "accept4": [.fd, .pointer, .pointer, .hex], "connect": [.fd, .pointer, .int],
        "poll": [.pointer, .int, .milliseconds], "ppoll": [.pointer, .int, .pointer, .pointer, .int],
        "select": [.int, .pointer, .pointer, .pointer, .pointer], "pselect6": [.int, .pointer, .pointer, .pointer, .pointer, .pointer],
        "epoll_wait": [.fd, .pointer, .int, .milliseconds], "epoll_pwait": [.fd, .pointer, .int, .milliseconds, .pointer, .count],
        "epoll_pwait2": [.fd, .pointer, .int, .pointer, .pointer, .count],
        "nanosleep": [.pointer, .pointer], "clock_nanosleep": [.clock, .clockFlags, .pointer, .pointer],
        "wait4": [.int, .pointer, .hex, .pointer], "waitid": [.idType, .int, .pointer, .hex, .pointer],
        "close": [.fd], "fsync": [.fd], "fdatasync": [.fd], "flock": [.fd, .int], "ioctl": [.fd, .hex, .hex],
        "pause": [], "sched_yield": [], "restart_syscall": [],
        "rt_sigsuspend": [.pointer, .count], "rt_sigtimedwait": [.pointer, .pointer, .pointer, .count],
        "io_uring_enter": [.fd, .count, .count, .hex, .pointer, .count],
    ]

    static func decode(_ call: String, _ arguments: [UInt64]) -> [String] {
        if call == "futex" { return futex(arguments) }
        guard let signature = signatures[call] else { return arguments.map(hex) }
        return zip(signature, arguments).map { write($1, as: $0) }
    }

    static func write(_ value: UInt64, as argument: Argument) -> String {
        let signed = Int32(truncatingIfNeeded: value)
        switch argument {
        case .fd: return signed == -100 ? "AT_FDCWD" : String(signed)
        case .int, .milliseconds: return String(signed)
        case .count: return String(value)
        case .pointer: return value == 0 ? "NULL" : hex(value)
        case .hex: return hex(value)
        case .clock: return clockNames[Int(signed)] ?? String(signed)
        case .clockFlags: return value == 0 ? "0" : value == 1 ? "TIMER_ABSTIME" : hex(value)
        case .idType: return value < 4 ? ["P_ALL", "P_PID", "P_PGID", "P_PIDFD"][Int(value)] : String(signed)
        }
    }

    static func hex(_ value: UInt64) -> String { "0x" + String(value, radix: 16) }

    static let clockNames: [Int: String] = [
        0: "CLOCK_REALTIME", 1: "CLOCK_MONOTONIC", 2: "CLOCK_PROCESS_CPUTIME_ID", 3: "CLOCK_THREAD_CPUTIME_ID",
        4: "CLOCK_MONOTONIC_RAW", 5: "CLOCK_REALTIME_COARSE", 6: "CLOCK_MONOTONIC_COARSE", 7: "CLOCK_BOOTTIME",
        8: "CLOCK_REALTIME_ALARM", 9: "CLOCK_BOOTTIME_ALARM", 11: "CLOCK_TAI",
    ]

    /// futex(2)'s operations by number (linux/futex.h), without the private and clock flags.
    static let futexOperations = [
        "FUTEX_WAIT", "FUTEX_WAKE", "FUTEX_FD", "FUTEX_REQUEUE", "FUTEX_CMP_REQUEUE", "FUTEX_WAKE_OP", "FUTEX_LOCK_PI",
        "FUTEX_UNLOCK_PI", "FUTEX_TRYLOCK_PI", "FUTEX_WAIT_BITSET", "FUTEX_WAKE_BITSET", "FUTEX_WAIT_REQUEUE_PI",
        "FUTEX_CMP_REQUEUE_PI", "FUTEX_LOCK_PI2",
    ]

    /// `futex(uaddr, op, …)` with the arguments `op` reads: a wait's value and timeout, a
    /// wake's count, a lock's timeout.
    static func futex(_ arguments: [UInt64]) -> [String] {
        let op = arguments[1], command = Int(op & 0x7f)
        var name = command < futexOperations.count ? futexOperations[command] : hex(op & 0x7f)
        if op & 128 != 0 { name += "_PRIVATE" }
        if op & 256 != 0 { name += "|FUTEX_CLOCK_REALTIME" }
        if op & ~0x1ff != 0 { name += "|" + hex(op & ~0x1ff) }
        let address = write(arguments[0], as: .pointer), value = String(UInt32(truncatingIfNeeded: arguments[2]))
        let timeout = write(arguments[3], as: .pointer)
        switch command {
        case 0: return [address, name, value, timeout]
        case 9:
            let bitset = UInt32(truncatingIfNeeded: arguments[5])
            return [address, name, value, timeout, write(arguments[4], as: .pointer),
                    bitset == .max ? "FUTEX_BITSET_MATCH_ANY" : hex(UInt64(bitset))]
        case 1, 10: return [address, name, value]
        case 6, 8, 13: return [address, name, timeout]
        case 7: return [address, name]
        default: return [address, name, value] + arguments[3...].map(hex)
        }
    }
}
