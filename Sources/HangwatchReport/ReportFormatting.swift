// Small, deterministic formatters shared by the builder and the renderers.
import HangwatchSymbolication
import HangwatchSnapshot
#if canImport(Glibc)
import Glibc
#endif

package enum ReportFormatting {
    /// "0x" + 16 lowercase hex digits: addresses, registers, module bounds.
    package static func address(_ value: UInt64) -> String {
        // Every frame of a text report has one: written straight into the string's storage.
        String(unsafeUninitializedCapacity: 18) { buffer in
            let digits: StaticString = "0123456789abcdef"
            buffer[0] = UInt8(ascii: "0")
            buffer[1] = UInt8(ascii: "x")
            for position in 0..<16 {
                let nibble = Int((value >> UInt64(60 - 4 * position)) & 0xF)
                buffer[2 + position] = digits.utf8Start[nibble]
            }
            return 18
        }
    }

    /// "0x" + minimal lowercase hex: offsets.
    package static func offset(_ value: UInt64) -> String { "0x" + String(value, radix: 16) }

    /// Parses "0x…" (or bare hex) back to a number: only for reading report JSON (ReportCoding.swift).
    package static func parseHex(_ text: String) -> UInt64? {
        let digits = text.hasPrefix("0x") || text.hasPrefix("0X") ? text.dropFirst(2) : Substring(text)
        return UInt64(digits, radix: 16)
    }

    /// ISO-8601 UTC with milliseconds, e.g. "2024-05-01T12:00:00.123Z".
    package static func timestamp(_ secondsSince1970: Double) -> String { Timestamp.iso8601(secondsSince1970) }

    /// Human bytes in binary units: "512 bytes", "28 MiB", "1.5 GiB", "64 GiB".
    package static func bytes(_ value: UInt64) -> String {
        let units: [(UInt64, String)] = [(1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")]
        guard let (size, name) = units.first(where: { value >= $0.0 }) else { return "\(value) bytes" }
        let amount = Double(value) / Double(size)
        return "\(trimmed(amount, decimals: amount < 10 ? 1 : 0)) \(name)"
    }

    /// Human seconds: "2 s", "6.2 s", "0.25 s", "850 ms".
    package static func seconds(_ value: Double) -> String {
        guard value.isFinite else { return "? s" }
        if value < 0.1 { return "\(trimmed(value * 1000, decimals: value < 0.01 ? 2 : 0)) ms" }
        if value < 1 { return "\(trimmed(value, decimals: 2)) s" }
        return "\(trimmed(value, decimals: 1)) s"
    }

    private static func trimmed(_ value: Double, decimals: Int) -> String {
        var scale = 1.0
        for _ in 0..<decimals { scale *= 10 }
        let rounded = (value * scale).rounded() / scale
        // Whole numbers print without ".0" while they fit an Int exactly; a report's own
        // numbers can be anything (a crafted 1e308 s duration trapped here: scripts/fuzz).
        if abs(rounded) < 1e15, rounded == rounded.rounded() { return String(Int(rounded)) }
        var text = String(rounded)
        while text.hasSuffix("0") { text.removeLast() }
        return text
    }

    // MARK: Signals (Linux x86-64 numbering)

    /// si_code name for the signal, when it is a standard one.
    package static func signalCodeName(signal: Int32, code: Int32) -> String? {
        switch code {
        case 0: return "SI_USER"
        case 0x80: return "SI_KERNEL"
        case -1: return "SI_QUEUE"
        case -2: return "SI_TIMER"
        case -3: return "SI_MESGQ"
        case -4: return "SI_ASYNCIO"
        case -6: return "SI_TKILL"
        default: break
        }
        let perSignal: [Int32: [String]] = [
            4: ["ILL_ILLOPC", "ILL_ILLOPN", "ILL_ILLADR", "ILL_ILLTRP", "ILL_PRVOPC", "ILL_PRVREG", "ILL_COPROC", "ILL_BADSTK"],
            5: ["TRAP_BRKPT", "TRAP_TRACE", "TRAP_BRANCH", "TRAP_HWBKPT"],
            7: ["BUS_ADRALN", "BUS_ADRERR", "BUS_OBJERR", "BUS_MCEERR_AR", "BUS_MCEERR_AO"],
            8: ["FPE_INTDIV", "FPE_INTOVF", "FPE_FLTDIV", "FPE_FLTOVF", "FPE_FLTUND", "FPE_FLTRES", "FPE_FLTINV", "FPE_FLTSUB"],
            11: ["SEGV_MAPERR", "SEGV_ACCERR", "SEGV_BNDERR", "SEGV_PKUERR"],
        ]
        guard let names = perSignal[signal], code >= 1, Int(code) <= names.count else { return nil }
        return names[Int(code) - 1]
    }

    // MARK: Thread status

    /// Why a thread with this status has no stack.
    package static func missingStackReason(status: ThreadCaptureStatus) -> String {
        switch status {
        case .unreachable: return "unreachable: the thread blocks every signal capture could use"
        case .timedOut: return "timed out: the thread did not answer within the capture timeout"
        case .exited: return "exited during capture"
        case .captured, .ptrace: return "no frames could be unwound"
        }
    }
}
