// The W3C Trace Context `traceparent` (https://www.w3.org/TR/trace-context/#traceparent-header),
// the one form in which a hang report names a request's trace (docs/traces.md). It comes from a
// tracing library in the watched process, and back from dumps and reports on disk: only the
// exact form is kept, so a report never carries anything else under that name.

/// Checks W3C `traceparent` values: `00-<32 hex trace id>-<16 hex span id>-<2 hex flags>`.
public enum Traceparent {
    /// Its length: version, trace id, span id and flags with their three dashes.
    public static let length = 55

    /// `value` when it is a traceparent (lowercase hex; version not `ff`; trace and span ids
    /// not all zeros), else nil.
    public static func validated(_ value: String) -> String? {
        let bytes = Array(value.utf8)
        guard bytes.count == length, bytes[2] == UInt8(ascii: "-"), bytes[35] == UInt8(ascii: "-"),
              bytes[52] == UInt8(ascii: "-") else { return nil }
        let fields = [bytes[0..<2], bytes[3..<35], bytes[36..<52], bytes[53..<55]]
        guard fields.allSatisfy({ $0.allSatisfy(isLowerHex) }), fields[0] != [UInt8(ascii: "f"), UInt8(ascii: "f")],
              fields[1].contains(where: { $0 != UInt8(ascii: "0") }), fields[2].contains(where: { $0 != UInt8(ascii: "0") })
        else { return nil }
        return value
    }

    /// The trace id of a valid traceparent (32 hex digits).
    public static func traceID(of traceparent: String) -> Substring {
        traceparent.dropFirst(3).prefix(32)
    }

    /// The span id of a valid traceparent (16 hex digits).
    public static func spanID(of traceparent: String) -> Substring {
        traceparent.dropFirst(36).prefix(16)
    }

    private static func isLowerHex(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains(byte)
    }
}
