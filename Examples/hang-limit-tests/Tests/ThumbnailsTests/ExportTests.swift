// Another suite, running in parallel with ThumbnailerTests (Swift Testing's default): once
// those are under way (1.5 s in: the batch and background tests), it blocks the main actor
// for 600 ms with no limit of its own. The block is not charged to the tests of the other
// suite whose limits watch the main queue meanwhile.
import Testing
import Thumbnails

@Suite struct ExportTests {
    @Test func exportsOnTheMainActorWithoutALimit() async throws {
        try await Task.sleep(for: .milliseconds(1_500))
        #expect(await MainActor.run { Thumbnailer().renderSynchronously(milliseconds: 600) } == 600)
    }
}
