// Another suite, running in parallel with ThumbnailerTests (Swift Testing's default): it
// blocks the main actor for 600 ms and has no limit. Its block is not charged to the tests
// of the other suite that are under a limit at the same time.
import Testing
import Thumbnails

@Suite struct ExportTests {
    @Test @MainActor func exportsOnTheMainActorWithoutALimit() {
        #expect(Thumbnailer().renderSynchronously(milliseconds: 600) == 600)
    }
}
