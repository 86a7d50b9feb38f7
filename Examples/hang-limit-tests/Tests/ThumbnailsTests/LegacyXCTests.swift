// withHangLimit from XCTest: the test fails with the thrown HangLimitExceeded, whose text
// names the target, the duration and the blocking stack. Fails on purpose.
import HangMonitorTesting
import Thumbnails
import XCTest

final class LegacyXCTests: XCTestCase {
    func testRenderingOnTheMainActorStaysUnderTheLimit() async throws {
        try await withHangLimit(.milliseconds(200)) {
            _ = await MainActor.run { Thumbnailer().renderSynchronously(milliseconds: 350) }
        }
    }
}
