// Who a thread is when its name was cut. Linux keeps 15 bytes of a thread's name, and
// libdispatch names its worker threads with the last 15 bytes of their root queue's label:
// "oot.default-qos" is a worker of com.apple.root.default-qos, "-qos.overcommit" one of the
// six overcommit root queues (where serial queues run), which 15 bytes cannot tell apart.
// Measured with a Swift 6.3 program's threads (/proc/PID/task/TID/comm, docs/report-schema.md).
package enum ThreadNames {
    /// The labels libdispatch names its threads after (swift-corelibs-libdispatch's root queues
    /// and manager, as its library spells them).
    static let dispatchLabels: [String] = ["maintenance", "background", "utility", "default", "user-initiated", "user-interactive"]
        .flatMap { ["com.apple.root.\($0)-qos", "com.apple.root.\($0)-qos.overcommit"] } + ["com.apple.libdispatch-manager"]

    /// The most Linux keeps of a thread's name (16 bytes with the terminating zero).
    static let kernelLimit = 15

    /// The label a thread `name` libdispatch cut stands for: "com.apple.root.default-qos";
    /// "com.apple.root.<QoS>-qos.overcommit" for the overcommit ones; nil for any other name.
    package static func dispatchLabel(of name: String) -> String? {
        guard name.utf8.count == kernelLimit else { return nil }
        let matches = dispatchLabels.filter { $0.utf8.count > kernelLimit && $0.utf8.suffix(kernelLimit).elementsEqual(name.utf8) }
        guard let first = matches.first else { return nil }
        return matches.count == 1 ? first : "com.apple.root.<QoS>-qos.overcommit"
    }
}
