// Hang limits on a library's tests. `rendersOnTheMainActor` and `aBatchStarvesThePool` fail
// on purpose (scripts/example-hang-limit expects them to); the other two pass.
import Foundation
import HangMonitor
import HangMonitorTesting
import Testing
import Thumbnails

@Suite(.serialized) struct ThumbnailerTests {
    @Test(.hangLimit(.milliseconds(200))) @MainActor func rendersOnTheMainActor() {
        #expect(Thumbnailer().renderSynchronously(milliseconds: 400) == 400)
    }

    @Test(.hangLimit(.milliseconds(200))) @MainActor func aQuickRenderStaysUnderTheLimit() {
        #expect(Thumbnailer().renderSynchronously(milliseconds: 20) == 20)
    }

    /// The test's own child tasks block every pool thread. (Had it called renderBatch, the
    /// blocking tasks would be the library's, not the test's: see docs/hang-monitor.md.)
    @Test(.hangLimit(.milliseconds(300), watching: [.cooperativePool])) func aBatchStarvesThePool() async {
        let threads = ProcessInfo.processInfo.activeProcessorCount
        let rendered = await withTaskGroup(of: Int.self) { group in
            for _ in 0..<threads { group.addTask { Thumbnailer().renderSynchronously(milliseconds: 900) } }
            return await group.reduce(0, +)
        }
        #expect(rendered == threads * 900)
    }

    @Test func aRenderInTheBackgroundPasses() async throws {
        try await withHangLimit(.milliseconds(200)) {
            let value = await Task.detached { Thumbnailer().renderSynchronously(milliseconds: 300) }.value
            #expect(value == 300)
        }
    }
}
