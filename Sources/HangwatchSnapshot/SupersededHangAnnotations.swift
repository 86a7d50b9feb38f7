// A hang staged when the process crashed travels inside the crash dump as four annotations
// (the crash handler can only copy prepared bytes); processing takes them out again and
// turns them into the report's `context.supersededHang`.
package enum SupersededHangAnnotations {
    static let targetKey = "hangwatch.superseded-hang.target"
    static let thresholdKey = "hangwatch.superseded-hang.threshold"
    static let startKey = "hangwatch.superseded-hang.start-time"
    static let fileKey = "hangwatch.superseded-hang.file"

    package struct Hang: Sendable, Equatable {
        package var target: String
        package var thresholdSeconds: Double
        /// Wall clock, seconds since 1970.
        package var startTime: Double
        /// The staged file's name in staging/.
        package var stagedFileName: String?
    }

    package static func annotations(for hang: HangInfo, stagedFileName: String) -> [String: String] {
        [targetKey: hang.target, thresholdKey: String(hang.thresholdSeconds),
         startKey: String(hang.startTime), fileKey: stagedFileName]
    }

    /// Removes the annotations from `snapshot`; the hang when it is a crash snapshot that carried one.
    package static func extract(from snapshot: inout ProcessSnapshot) -> Hang? {
        guard let target = snapshot.annotations.removeValue(forKey: targetKey) else { return nil }
        let threshold = snapshot.annotations.removeValue(forKey: thresholdKey).flatMap(Double.init) ?? 0
        let start = snapshot.annotations.removeValue(forKey: startKey).flatMap(Double.init) ?? snapshot.timestamp
        let file = snapshot.annotations.removeValue(forKey: fileKey)
        guard case .crash = snapshot.reason else { return nil }
        return Hang(target: target, thresholdSeconds: threshold, startTime: start, stagedFileName: file)
    }
}
