// Times as reports and the monitor's notes spell them: ISO-8601 UTC with milliseconds.
#if canImport(Glibc)
import Glibc
#endif

package enum Timestamp {
    /// ISO-8601 UTC with milliseconds, e.g. "2024-05-01T12:00:00.123Z".
    package static func iso8601(_ secondsSince1970: Double) -> String {
        guard secondsSince1970.isFinite else { return "1970-01-01T00:00:00.000Z" }
        var whole = secondsSince1970.rounded(.down)
        var millis = Int(((secondsSince1970 - whole) * 1000).rounded())
        if millis >= 1000 {
            whole += 1
            millis -= 1000
        }
        var time = time_t(whole)
        var parts = tm()
        gmtime_r(&time, &parts)
        func pad(_ value: Int32, _ width: Int) -> String {
            let text = String(value)
            return String(repeating: "0", count: max(0, width - text.count)) + text
        }
        return "\(pad(parts.tm_year + 1900, 4))-\(pad(parts.tm_mon + 1, 2))-\(pad(parts.tm_mday, 2))T"
            + "\(pad(parts.tm_hour, 2)):\(pad(parts.tm_min, 2)):\(pad(parts.tm_sec, 2)).\(pad(Int32(millis), 3))Z"
    }
}
