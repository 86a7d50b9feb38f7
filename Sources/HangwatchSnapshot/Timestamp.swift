// Times as reports and the monitor's notes spell them: ISO-8601 UTC with milliseconds.
#if canImport(Glibc)
import Glibc
#endif

package enum Timestamp {
    /// The times a report can spell: years 0001 to 9999. Any other number (a crafted record's
    /// ±1e300) is clamped to this range, never converted as it is (time_t(1e300) traps).
    package static let spelledRange: ClosedRange<Double> = -62_135_596_800 ... 253_402_300_799

    /// ISO-8601 UTC with milliseconds, e.g. "2024-05-01T12:00:00.123Z".
    package static func iso8601(_ secondsSince1970: Double) -> String {
        guard secondsSince1970.isFinite else { return "1970-01-01T00:00:00.000Z" }
        let (whole, millis) = split(secondsSince1970)
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

    /// The time `iso8601` spells, as a number: rounded to the millisecond, 0 when not finite.
    /// Reports keep times at this resolution, so a report decoded from its JSON (`parseISO8601`
    /// gives the same number) equals the report it was rendered from.
    package static func millisecondResolution(_ secondsSince1970: Double) -> Double {
        guard secondsSince1970.isFinite else { return 0 }
        let (whole, millis) = split(secondsSince1970)
        return milliseconds(whole: whole, millis: Double(millis))
    }

    /// Whole seconds and the milliseconds `iso8601` rounds the rest to (0...999).
    private static func split(_ secondsSince1970: Double) -> (whole: Double, millis: Int) {
        let clamped = min(max(secondsSince1970, spelledRange.lowerBound), spelledRange.upperBound)
        var whole = clamped.rounded(.down)
        var millis = Int(((clamped - whole) * 1000).rounded())
        if millis >= 1000 {
            whole += 1
            millis -= 1000
            if whole > spelledRange.upperBound { (whole, millis) = (spelledRange.upperBound, 999) }
        }
        return (whole, millis)
    }

    /// One formula for both directions, so writing and parsing agree to the last bit.
    private static func milliseconds(whole: Double, millis: Double) -> Double { (whole * 1000 + millis) / 1000 }
}

extension Timestamp {
    /// Seconds since 1970 of "YYYY-MM-DDTHH:MM:SS[.fraction]Z" (what `iso8601` writes); nil otherwise.
    /// Reading report JSON needs it (Sources/HangwatchReport/ReportCoding.swift).
    package static func parseISO8601(_ text: String) -> Double? {
        let bytes = Array(text.utf8)
        func number(_ range: Range<Int>) -> Int? {
            guard range.upperBound <= bytes.count else { return nil }
            var value = 0
            for byte in bytes[range] {
                guard byte >= 48 && byte <= 57 else { return nil }
                value = value * 10 + Int(byte - 48)
            }
            return value
        }
        guard bytes.count >= 20, bytes[4] == 0x2D, bytes[7] == 0x2D, bytes[10] == 0x54, bytes[13] == 0x3A, bytes[16] == 0x3A,
              bytes.last == 0x5A, let year = number(0..<4), let month = number(5..<7), let day = number(8..<10),
              let hour = number(11..<13), let minute = number(14..<16), let second = number(17..<19),
              (1...12).contains(month), (1...31).contains(day), hour < 24, minute < 60, second < 61 else { return nil }
        // The fraction as an integer count of 10^-digits seconds (at most 17 digits: fits an Int).
        var fraction = 0
        var digits = 0
        if bytes.count > 20 {
            guard bytes[19] == 0x2E, bytes.count <= 20 + 18 else { return nil }
            for byte in bytes[20..<(bytes.count - 1)] {
                guard byte >= 48 && byte <= 57 else { return nil }
                fraction = fraction * 10 + Int(byte - 48)
                digits += 1
            }
        } else if bytes.count != 20 {
            return nil
        }
        var parts = tm()
        parts.tm_year = Int32(year - 1900)
        parts.tm_mon = Int32(month - 1)
        parts.tm_mday = Int32(day)
        parts.tm_hour = Int32(hour)
        parts.tm_min = Int32(minute)
        parts.tm_sec = Int32(second)
        let whole = Double(timegm(&parts))
        if digits <= 3 {
            // What `iso8601` writes: exactly `millisecondResolution` of the time it was given.
            var millis = fraction
            for _ in digits..<3 { millis *= 10 }
            return milliseconds(whole: whole, millis: Double(millis))
        }
        var scale = 1.0
        for _ in 0..<digits { scale *= 10 }
        return whole + Double(fraction) / scale
    }
}
