// The names hang targets go by in reports (`hang.target`), events, metric dimensions, the
// configuration file and `hangwatch run`'s protocol: spelled here only. HangMonitor's
// `WatchTarget.description` and the report renderer build and read them with these.

/// The names of hang targets (`HangInfo.target`, `hang.target` in reports).
public enum HangTargetName {
    /// The main Dispatch queue (also the MainActor and `RunLoop.main`).
    public static let mainQueue = "main-queue"
    /// The Swift-concurrency cooperative pool.
    public static let cooperativePool = "cooperative-pool"
    private static let queuePrefix = "queue:"

    /// A named DispatchQueue: `queue:<label>`.
    public static func queue(label: String) -> String { queuePrefix + label }

    /// The label of a `queue:<label>` name; nil for any other name.
    public static func queueLabel(of name: String) -> String? {
        name.hasPrefix(queuePrefix) ? String(name.dropFirst(queuePrefix.count)) : nil
    }
}
