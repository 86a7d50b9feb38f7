// Which `hangwatch run` a report belongs to. Pids say nothing across pid namespaces (in a
// container every child is pid 2) and pid + start time collides at the clock tick; a run id
// does not. hangwatch sets it for the child; DumpWithoutCrash and HangMonitor copy it into the
// annotations of every dump they write, and hangwatch matches reports by it.
package enum RunIdentity {
    package static let environmentVariable = "HANGWATCH_RUN_ID"
    package static let annotationKey = "hangwatch.run-id"

    /// The run this process belongs to, when `hangwatch run` started it (bounded, printable).
    package static func current(environment: [String: String]) -> String? {
        guard let value = environment[environmentVariable], (1...64).contains(value.utf8.count),
              value.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else { return nil }
        return value
    }
}
