// The few system call numbers hangwatch reads meaning into, from the first field of
// /proc/PID/task/TID/syscall (docs/platform-facts.md): a thread blocked in wait4/waitid is
// waiting for a child; one in futex is blocked on a lock or condition; one in epoll_wait is an
// event loop with nothing to do.
package enum Syscalls {
    #if arch(x86_64)
    package static let futex: Int = 202
    /// restart_syscall: where a call with a timeout continues after a stop (ptrace, SIGSTOP) interrupts it; same arguments.
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
        // Read as bytes, without splitting: a capture parses a line per thread (512 of them
        // cost 4.6 ms split into Substrings).
        guard let line else { return nil }
        var number = 0, digits = 0
        for byte in line.utf8 {
            if byte == UInt8(ascii: " ") { break }
            guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9"), digits < 9 else { return nil }
            number = number * 10 + Int(byte - UInt8(ascii: "0"))
            digits += 1
        }
        return digits > 0 ? number : nil
    }

    /// The /proc TID/syscall line the kernel writes for a thread blocked in call `number`
    /// ("NR 0xarg0 … 0xarg5 0xsp 0xpc", its seq_printf's format), or "running" when `number`
    /// is negative: what a capture that read the call from a stopped thread's registers
    /// reports, in the words of a line read from /proc.
    package static func line(number: Int64, arguments: [UInt64], sp: UInt64, pc: UInt64) -> String {
        guard number >= 0 else { return "running" }
        // Written in place, then one String: a capture writes a line per thread (String(_:radix:)
        // per value cost 2.6 µs a line, a growing byte array about 1 µs).
        return String(unsafeUninitializedCapacity: lineCapacity) { buffer in
            var at = 0
            func put(_ value: UInt64, hex: Bool) {
                let base: UInt64 = hex ? 16 : 10
                var digits = 1, rest = value
                while rest >= base { rest /= base; digits += 1 }
                rest = value
                for position in stride(from: at + digits - 1, through: at, by: -1) {
                    let digit = UInt8(truncatingIfNeeded: rest % base)
                    buffer[position] = digit < 10 ? UInt8(ascii: "0") + digit : UInt8(ascii: "a") + digit - 10
                    rest /= base
                }
                at += digits
            }
            func putHex(_ value: UInt64) {
                buffer[at] = UInt8(ascii: " ")
                buffer[at + 1] = UInt8(ascii: "0")
                buffer[at + 2] = UInt8(ascii: "x")
                at += 3
                put(value, hex: true)
            }
            put(UInt64(number), hex: false)
            for value in arguments.prefix(6) { putHex(value) }
            putHex(sp)
            putHex(pc)
            return at
        }
    }

    /// The longest line `line` writes: a 19-digit number and eight values of 3 + 16 bytes.
    private static let lineCapacity = 19 + 8 * 19

    /// The six arguments of a /proc syscall line ("NR arg0 … arg5 sp pc", hex); nil for a line
    /// that is not in a syscall or is malformed.
    package static func arguments(ofLine line: String?) -> [UInt64]? {
        guard let line, number(ofLine: line) != nil else { return nil }
        var values: [UInt64] = []
        values.reserveCapacity(6)
        var field = 0, inField = false, position = 0  // position within the field
        var value: UInt64 = 0, valid = true
        func endField() -> Bool {
            defer { inField = false }
            guard field >= 1 && field <= 6 else { return true }
            guard valid, position > 2 else { return false }
            values.append(value)
            return true
        }
        for byte in line.utf8 {
            if byte == UInt8(ascii: " ") {
                if inField {
                    guard endField() else { return nil }
                    field += 1
                    if field > 6 { break }
                }
                continue
            }
            if !inField { inField = true; position = 0; value = 0; valid = true }
            if field >= 1 && field <= 6 {
                switch position {
                case 0: valid = valid && byte == UInt8(ascii: "0")
                case 1: valid = valid && byte == UInt8(ascii: "x")
                default:
                    guard let digit = Text.hexDigit(byte), position < 18 else { valid = false; break }
                    value = value << 4 | UInt64(digit)
                }
            }
            position += 1
        }
        if inField {
            guard endField() else { return nil }
        }
        return values.count == 6 ? values : nil
    }
}
