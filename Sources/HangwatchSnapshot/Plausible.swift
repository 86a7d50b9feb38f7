// What a value read back from a file may be (docs/database.md, "What is read back"): run
// records, staged hangs' sidecars and samples come from files any process of the user can
// write, and a crafted value (±1e300, NaN, a negative count) must be refused where it is read,
// with the reason, never converted as it is further on (a trap in every processor, at every start).
package enum Plausible {
    /// A wall-clock time, seconds since 1970: finite, from 1970 to the year 9999 (Timestamp.spelledRange).
    package static func time(_ seconds: Double) -> Bool {
        seconds.isFinite && seconds >= 0 && seconds <= Timestamp.spelledRange.upperBound
    }

    /// A duration or an interval in seconds: finite, not negative, at most what `time` spans.
    package static func duration(_ seconds: Double) -> Bool { time(seconds) }

    /// A string of at most `maxBytes` UTF-8 bytes.
    package static func text(_ value: String, maxBytes: Int) -> Bool { value.utf8.count <= maxBytes }

    /// The first problem found, as the sentence a set-aside file's reason gives; nil when every check holds.
    package static func firstProblem(_ checks: KeyValuePairs<String, Bool>) -> String? {
        checks.first { !$0.value }.map { "implausible \($0.key)" }
    }
}
