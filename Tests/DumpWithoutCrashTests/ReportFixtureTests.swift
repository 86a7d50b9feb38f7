// Reports written by earlier builds (Fixtures/reports, see its README) must keep decoding, and
// decode → JSON must give back the same bytes: the schema's spelling is fixed within a version.
import DumpWithoutCrash
import Foundation
import Testing

enum ReportFixtures {
    static var directory: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Fixtures/reports")
    }

    static let names = ["crash-superseded-hang.json", "fatal-hang-timeout.json", "dump-profile.json"]

    static func data(_ name: String) throws -> Data {
        try Data(contentsOf: directory.appendingPathComponent(name))
    }
}

@Suite struct ReportFixtureTests {
    @Test(arguments: ReportFixtures.names)
    func storedReportRoundTripsByteForByte(_ name: String) throws {
        let stored = try ReportFixtures.data(name)
        let report = try Report.decode(from: stored)
        let rendered = ReportRenderer.json(report)
        #expect(rendered == stored, "\(name) re-rendered differently:\n\(String(decoding: rendered, as: UTF8.self))")
        #expect(try Report.decode(from: rendered) == report)
    }
}
