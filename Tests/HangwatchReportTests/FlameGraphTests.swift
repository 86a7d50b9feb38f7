// Flame graphs checked structurally (the picture itself: scripts/render-flamegraph-screenshot):
// every frame named, widths proportional to samples, children inside their parents, the
// culprit stack marked, no external assets.
import Foundation
#if canImport(FoundationXML)
import FoundationXML
#endif
import Testing
@testable import HangwatchRemoteCapture
@testable import HangwatchReport
@testable import HangwatchSnapshot
@testable import HangwatchSymbolication
import HangwatchTestSupport
import HangwatchStageTestSupport

struct DrawnFrame {
    var name: String
    var samples: Int
    var culprit: Bool
    var x: Double
    var y: Double
    var width: Double
}

/// The frames of an SVG produced by FlameGraph, read back with a regular expression.
func drawnFrames(_ svg: String) throws -> [DrawnFrame] {
    let pattern = try NSRegularExpression(pattern:
        #"<g class="frame( culprit)?" data-name="([^"]*)" data-samples="(\d+)"><title>[^<]*</title><rect x="([\d.]+)" y="([\d.]+)" width="([\d.]+)""#)
    let text = svg as NSString
    return pattern.matches(in: svg, range: NSRange(location: 0, length: text.length)).map { match in
        func group(_ index: Int) -> String { match.range(at: index).location == NSNotFound ? "" : text.substring(with: match.range(at: index)) }
        return DrawnFrame(name: group(2), samples: Int(group(3)) ?? -1, culprit: !group(1).isEmpty,
                          x: Double(group(4)) ?? -1, y: Double(group(5)) ?? -1, width: Double(group(6)) ?? -1)
    }
}

@Suite("FlameGraph", .ownThread)
struct FlameGraphTests {
    let stacks = [
        Report.SampledStack(frames: ["main", "serve", "handle", "lock_wait"], count: 60),
        Report.SampledStack(frames: ["main", "serve", "handle", "parse"], count: 25),
        Report.SampledStack(frames: ["main", "serve", "log"], count: 10),
        Report.SampledStack(frames: ["main", "idle"], count: 5),
    ]

    @Test func widthsAreProportionalToSamplesAndChildrenNestInsideParents() throws {
        let graph = FlameGraph(stacks: stacks, title: "t", culprit: ["main", "serve", "handle", "lock_wait"])
        let svg = graph.svg(width: 1020)
        let frames = try drawnFrames(svg)
        #expect(frames.count == 8, "all, main, serve, handle, lock_wait, parse, log, idle")
        let total = try #require(frames.first { $0.name == "all" })
        #expect(total.samples == 100)
        let pixelsPerSample = total.width / 100
        #expect(abs(pixelsPerSample - 10) < 0.001, "1000 px of plot for 100 samples")
        for frame in frames {
            #expect(abs(frame.width - Double(frame.samples) * pixelsPerSample) < 0.02, "\(frame.name)")
        }
        let byName = Dictionary(uniqueKeysWithValues: frames.map { ($0.name, $0) })
        #expect(byName["handle"]?.samples == 85)
        #expect(byName["serve"]?.samples == 95)
        // Callees sit above their callers, inside the caller's span.
        for (child, parent) in [("serve", "main"), ("handle", "serve"), ("lock_wait", "handle"), ("parse", "handle"), ("idle", "main")] {
            let c = try #require(byName[child]), p = try #require(byName[parent])
            #expect(c.y < p.y)
            #expect(c.x >= p.x - 0.01 && c.x + c.width <= p.x + p.width + 0.02)
        }
        // Siblings do not overlap.
        let lock = try #require(byName["lock_wait"]), parse = try #require(byName["parse"])
        #expect(lock.x + lock.width <= parse.x + 0.02 || parse.x + parse.width <= lock.x + 0.02)
        #expect(frames.filter(\.culprit).map(\.name) == ["main", "serve", "handle", "lock_wait"])
        #expect(svg.contains("culprit: lock_wait — 60 of 100 samples (60%)"))
    }

    /// A stack thousands of frames deep (a runaway recursion) makes the tree as deep: drawing,
    /// measuring and releasing it must not recurse (that overflowed the stack before).
    @Test func deepStacksDoNotOverflowTheStack() throws {
        var snapshot = DumpSamples.hang(threadCount: 1)
        snapshot.reason = .dumpRequested   // no hang profile: one sample of the thread's stack
        snapshot.threads[0].frames = (0..<20_000).map { 0x7000_0000 + UInt64($0) * 16 }
        let report = ReportBuilder.makeReport(from: snapshot, id: "deep", kind: .dump, symbolicator: Symbolicator())
        let graph = FlameGraph(report: report)
        #expect(graph.depth >= 20_000)
        let svg = graph.svg()
        #expect(svg.hasSuffix("</svg>\n"))
        #expect(try drawnFrames(svg).count >= 20_000)
        #expect(graph.html().contains("<svg"))
    }

    /// A thread with more frames than any writer produces is a clear error, not gigabytes.
    @Test func moreFramesThanAWriterProducesIsRefused() throws {
        var snapshot = DumpSamples.hang(threadCount: 1)
        snapshot.threads[0].frames = Array(repeating: 0x7000_0000, count: IntermediateDumpReader.maxFrames + 1)
        let bytes = IntermediateDumpWriter.encode(snapshot)
        #expect(throws: IntermediateDumpError.self) { try IntermediateDumpReader.read(bytes: bytes) }
        snapshot.threads[0].frames.removeLast()
        #expect(try IntermediateDumpReader.read(bytes: IntermediateDumpWriter.encode(snapshot)).threads[0].frames.count
                == IntermediateDumpReader.maxFrames)
    }

    @Test func namesAreEscapedAndTheFilesAreSelfContained() throws {
        let graph = FlameGraph(stacks: [Report.SampledStack(frames: ["a<b>", "Swift.Array<\"x\"> & co"], count: 3)], title: "<title>")
        let svg = graph.svg()
        #expect(try drawnFrames(svg).map(\.name) == ["all", "a&lt;b&gt;", "Swift.Array&lt;&quot;x&quot;&gt; &amp; co"])
        #expect(!svg.contains("<b>"))
        let html = graph.html()
        for external in ["src=", "href=", "@import", "url("] {
            #expect(!html.contains(external), "no external asset: \(external)")
        }
        #expect(html.contains("<svg xmlns=\"http://www.w3.org/2000/svg\""))
        // Well-formed XML: Foundation's parser accepts the SVG.
        let parser = XMLParser(data: Data(svg.utf8))
        #expect(parser.parse(), "\(String(describing: parser.parserError))")
    }

    @Test func aHangSampledFromARealProcessNamesTheHungThreadsCulprit() throws {
        let child = try ChildProcess(product: "hangwatch-fixture-remote", ["deadlock"])
        try child.waitForOutput("READY")
        defer { child.signal(SIGKILL) }
        let sampled = try RemoteCapture.captureSamples(pid: child.pid, count: 8, interval: 0.005)
        var snapshot = sampled.snapshot
        let hung = try #require(snapshot.threads.first { $0.tid != child.pid })
        snapshot.reason = .hang(HangInfo(target: .mainQueue, thresholdSeconds: 1, durationSeconds: 3, outcome: .ongoing, startTime: 0,
                                         samples: sampled.samples.filter { $0.tid == hung.tid }))
        let report = ReportBuilder.makeReport(from: snapshot, id: "r", kind: .fatalHang, symbolicator: Symbolicator())
        let graph = FlameGraph(report: report)
        #expect(graph.root.count == sampled.sampleCount)
        #expect(graph.culprit.suffix(3).contains { $0.contains("lll_lock_wait") }, "\(graph.culprit)")
        #expect(graph.culprit.contains { $0.contains("deadlockTake") })
        let frames = try drawnFrames(graph.svg())
        let culprit = frames.filter(\.culprit)
        #expect(culprit.count == graph.culprit.count)
        #expect(culprit.allSatisfy { $0.samples == sampled.sampleCount }, "every sample had the deadlocked stack")
        #expect(graph.html().contains("Culprit stack (leaf first, \(sampled.sampleCount) of \(sampled.sampleCount) samples)"))
    }

    @Test func aReportWithoutSamplesShowsEachThreadWithTheInterestingOneAsCulprit() throws {
        let frame = { (name: String) in Report.Frame(index: 0, address: 0x1, function: name) }
        let report = Report(id: "x", kind: .crash, timestamp: 1_704_067_200,
                            process: .init(pid: 1, name: "p", executable: "/p", arguments: [], bundleID: "b"),
                            threads: [
                                .init(info: .init(tid: 1, name: "main", state: "S", cpuSeconds: .init(user: 0, system: 0),
                                                  roles: [.mainThread], status: .captured), frames: [frame("wait"), frame("main")]),
                                .init(info: .init(tid: 2, name: "worker", state: "R", cpuSeconds: .init(user: 0, system: 0),
                                                  roles: [.crashed], status: .captured), frames: [frame("boom"), frame("work")]),
                            ], modules: [])
        let graph = FlameGraph(report: report)
        #expect(graph.root.count == 2)
        #expect(graph.culprit == ["thread 2 worker (crashed)", "work", "boom"])
    }
}
