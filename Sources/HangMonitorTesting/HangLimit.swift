// Hang limits in tests: fail a test whose code blocks the main queue (or the cooperative
// pool, or any executor) for longer than a limit, with the blocking stack.
//
//   @Test(.hangLimit(.milliseconds(200))) func loadsTheFile() async throws { … }
//   try await withHangLimit(.milliseconds(200)) { … }          // also from XCTest
//
// Nothing is written to disk, and the monitor's logs stay silent unless a logger is given.
import Glibc
import Logging
import Testing
import HangMonitor

/// Runs `body` with a hang monitor watching `targets` (the main queue by default), and throws
/// `HangLimitExceeded` if the body's code blocked one of them for longer than `limit`. A block
/// by other code running meanwhile (another test) is not charged to this body: see
/// docs/hang-monitor.md, "Hang limits in tests". The body's own error is rethrown first.
public func withHangLimit<T>(
    _ limit: Duration, watching targets: [WatchTarget] = [.mainQueue], logger: Logger? = nil,
    isolation: isolated (any Actor)? = #isolation,
    fileID: String = #fileID, filePath: String = #filePath, function: String = #function, line: Int = #line,
    _ body: () async throws -> T
) async throws -> T {
    let owner = Test.current.map(HangLimitOwner.init(test:)) ?? HangLimitOwner(fileID: fileID, filePath: filePath, function: function)
    let (result, outcome) = try await HangLimitScope.run(limit: limit, targets: targets, owner: owner, logger: logger, body)
    let value = try result.get()
    for warning in outcome.warnings {
        if Test.current != nil {
            Issue.record(Comment(rawValue: warning), severity: .warning,
                         sourceLocation: SourceLocation(fileID: fileID, filePath: filePath, line: line, column: 1))
        } else {
            let text = Array("hang limit at \(fileID):\(line): \(warning)\n".utf8)
            _ = text.withUnsafeBytes { write(STDERR_FILENO, $0.baseAddress, $0.count) }
        }
    }
    if !outcome.exceeded.isEmpty { throw HangLimitExceeded(hangs: outcome.exceeded) }
    return value
}

/// The code under a hang limit blocked a target for longer than the limit.
public struct HangLimitExceeded: Error, CustomStringConvertible, Sendable {
    /// One target blocked past the limit.
    public struct Hang: Sendable {
        /// `main-queue`, `cooperative-pool`, `queue:<label>`, or a custom target's name.
        public var target: String
        /// How long it was blocked (at least this long when it had not recovered).
        public var durationSeconds: Double
        /// The limit it went over.
        public var limitSeconds: Double
        /// false: the target was still blocked when the limit's scope ended.
        public var recovered: Bool
        /// The hung thread's symbolicated stack, one frame per line; the first frame of the
        /// test's own module is marked `→`.
        public var stack: String
        var location: SourceLine?
    }

    /// Every hang of the scope, in the order they were detected.
    public var hangs: [Hang]

    /// Each hang: its target, how long, the limit, and its stack.
    public var description: String { hangs.map(Self.describe).joined(separator: "\n\n") }

    static func describe(_ hang: Hang) -> String {
        let duration = hang.recovered ? "for \(milliseconds(hang.durationSeconds))" : "for at least \(milliseconds(hang.durationSeconds))"
        return "\(hang.target) blocked \(duration) (hang limit \(milliseconds(hang.limitSeconds))):\n\(hang.stack)"
    }

    private static func milliseconds(_ seconds: Double) -> String { "\(Int((seconds * 1000).rounded())) ms" }
}

/// `@Test(.hangLimit(.milliseconds(200)))`, also on a `@Suite` (every test in it): a test whose
/// code blocks a watched target for longer than the limit fails with an issue that names the
/// target, the duration and the blocking stack, at the test's line that blocked.
public struct HangLimitTrait: TestTrait, SuiteTrait, TestScoping {
    /// How long a target may stay blocked.
    public var limit: Duration
    /// What is watched (the main queue unless specified otherwise).
    public var targets: [WatchTarget]
    /// Where the limit's monitor logs (nothing when nil).
    public var logger: Logger?
    /// On a suite, the limit applies to every test in it, however deeply nested.
    public var isRecursive: Bool { true }

    /// Runs the test under a monitor with this limit; hangs past it are recorded as issues of the test.
    public func provideScope(for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void) async throws {
        guard testCase != nil else { return try await function() }   // a suite: each of its tests gets its own limit
        let owner = HangLimitOwner(test: test)
        let (result, outcome) = try await HangLimitScope.run(limit: limit, targets: targets, owner: owner, logger: logger) {
            try await function()
        }
        for warning in outcome.warnings {
            Issue.record(Comment(rawValue: warning), severity: .warning, sourceLocation: test.sourceLocation)
        }
        for hang in outcome.exceeded {
            let location = hang.location.map {
                SourceLocation(fileID: test.sourceLocation.fileID, filePath: $0.filePath, line: $0.line, column: 1)
            } ?? test.sourceLocation
            Issue.record(Comment(rawValue: HangLimitExceeded.describe(hang)), sourceLocation: location)
        }
        try result.get()
    }
}

extension Trait where Self == HangLimitTrait {
    /// Fails the test if its code blocks one of `targets` (the main queue by default) for
    /// longer than `limit`. `logger`: the monitor's logs (silent when nil).
    public static func hangLimit(_ limit: Duration, watching targets: [WatchTarget] = [.mainQueue], logger: Logger? = nil) -> Self {
        HangLimitTrait(limit: limit, targets: targets, logger: logger)
    }
}
