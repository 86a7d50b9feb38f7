// Self-contained flame graphs (SVG, or HTML wrapping the SVG) of a report's samples: no
// external scripts, fonts or styles, so the file opens anywhere and can be attached to a
// ticket. Widths are proportional to sample counts; the culprit stack (the hung thread's most
// frequent stack, or the crashed/hung thread's stack) is drawn in red and named at the top.
import HangwatchPlatform
import HangwatchSymbolication
import HangwatchSnapshot
import FoundationEssentials

package struct FlameGraph: Sendable {
    package final class Node: @unchecked Sendable {
        package let name: String
        package internal(set) var count: Int = 0
        package internal(set) var children: [Node] = []
        /// On the culprit stack (root → leaf).
        package internal(set) var culprit = false
        init(name: String) { self.name = name }

        // Released one level at a time: a chain thousands of frames deep would otherwise be
        // released recursively, as deep as the chain.
        deinit {
            var pending = children
            children = []
            while let node = pending.popLast() {
                pending += node.children
                node.children = []
            }
        }

        func child(_ name: String) -> Node {
            if let existing = children.first(where: { $0.name == name }) { return existing }
            let node = Node(name: name)
            children.append(node)
            return node
        }
    }

    package let title: String
    package let subtitle: String
    /// "all": its count is the total number of samples.
    package let root: Node
    /// Root-first frame names of the culprit stack; empty when there is none.
    package let culprit: [String]
    package let culpritCount: Int
    /// How the culprit is named: "culprit" (hangs, crashes) or "hottest stack" (profiles).
    package let culpritLabel: String

    /// A graph of `stacks`; `culprit` is one of their stacks' frames, root first.
    package init(stacks: [Report.SampledStack], title: String, subtitle: String = "", culprit: [String] = [],
                 culpritLabel: String = "culprit") {
        let root = Node(name: "all")
        var culpritCount = 0
        for stack in stacks where stack.count > 0 {
            let (frames, count) = (stack.frames, stack.count)
            root.count += count
            var node = root
            for frame in frames {
                node = node.child(frame)
                node.count += count
            }
            if frames == culprit { culpritCount += count }
        }
        Self.sortChildren(root)
        var node: Node? = root
        for name in culprit {
            node = node?.children.first { $0.name == name }
            node?.culprit = true
        }
        self.title = title
        self.subtitle = subtitle
        self.root = root
        self.culprit = culpritCount > 0 ? culprit : []
        self.culpritCount = culpritCount
        self.culpritLabel = culpritLabel
    }

    /// A hang's samples (or a dump's profile) when it has them; otherwise one sample per
    /// thread, each under a "thread TID name" root frame.
    package init(report: Report) {
        let title = "\(ReportRenderer.title(report.kind)): \(report.process.name) [\(report.process.pid)]"
        if let hang = report.hang, !hang.stacks.isEmpty {
            let threads = hang.sampledThreads.map(String.init).joined(separator: ", ")
            self.init(stacks: hang.stacks, title: title,
                      subtitle: "\(ReportRenderer.reason(report)) — \(hang.samples) samples of hung thread \(threads)",
                      culprit: hang.stacks.first?.frames ?? [])
        } else if let profile = report.profile, !profile.stacks.isEmpty {
            self.init(stacks: profile.stacks, title: title,
                      subtitle: "\(profile.samples) samples every \(ReportFormatting.seconds(profile.intervalSeconds))",
                      culprit: profile.stacks.first?.frames ?? [], culpritLabel: "hottest stack")
        } else {
            var stacks: [Report.SampledStack] = []
            var culprit: [String] = []
            let interesting = ReportRenderer.interestingFirst(report.threads).first(where: ReportRenderer.isInteresting)
            for thread in report.threads where !thread.frames.isEmpty {
                var label = "thread \(thread.tid) \(thread.name)"
                if !thread.roles.isEmpty { label += " (\(thread.roles.names.joined(separator: ", ")))" }
                let frames = [ReportRenderer.foldedName(label)] + thread.frames.reversed().map(ReportRenderer.foldedName)
                stacks.append(Report.SampledStack(frames: frames, count: 1))
                if thread.tid == interesting?.tid { culprit = frames }
            }
            self.init(stacks: stacks, title: title, subtitle: ReportRenderer.reason(report) + " — one sample per thread",
                      culprit: culprit)
        }
    }

    // Every walk of the tree is a loop over an explicit stack, not a recursion: a thread with
    // thousands of frames makes a tree as deep, which recursion would overflow the stack with.

    private static func sortChildren(_ node: Node) {
        var pending = [node]
        while let next = pending.popLast() {
            next.children.sort { $0.name < $1.name }    // flamegraph.pl's order: alphabetical, not by time
            pending += next.children
        }
    }

    package var depth: Int {
        var deepest = 0
        var pending = [(root, 1)]
        while let (node, level) = pending.popLast() {
            deepest = max(deepest, level)
            pending += node.children.map { ($0, level + 1) }
        }
        return deepest
    }

    // MARK: - SVG

    static let rowHeight = 18.0
    static let margin = 10.0
    static let headerHeight = 66.0
    static let charWidth = 7.6   // Verdana-ish 12 px, bold included: a conservative estimate so labels never overflow

    /// A standalone SVG document; `width` in pixels. Frames narrower than 0.1 px are left out.
    package func svg(width: Int = 1200) -> String {
        let plotWidth = Double(width) - 2 * Self.margin
        let height = Self.headerHeight + Double(depth) * Self.rowHeight + Self.margin
        var out = """
            <?xml version="1.0" encoding="UTF-8"?>
            <svg xmlns="http://www.w3.org/2000/svg" width="\(width)" height="\(Int(height))" \
            viewBox="0 0 \(width) \(Int(height))" font-family="Verdana, DejaVu Sans, sans-serif" font-size="12" \
            data-total-samples="\(root.count)">
            <rect x="0" y="0" width="\(width)" height="\(Int(height))" fill="#fbfaf6"/>
            <text x="\(Self.margin)" y="20" font-size="17" font-weight="bold">\(Self.escape(title))</text>
            <text x="\(Self.margin)" y="38" fill="#444">\(Self.escape(subtitle))</text>

            """
        if let leaf = culprit.last, root.count > 0 {
            let percent = Text.fixed(Double(culpritCount) * 100 / Double(root.count), decimals: 0)
            out += "<rect x=\"\(Self.margin)\" y=\"46\" width=\"12\" height=\"12\" fill=\"#d62728\"/>"
            out += "<text x=\"\(Self.margin + 18)\" y=\"57\" fill=\"#b00\" font-weight=\"bold\">\(culpritLabel): "
                + "\(Self.escape(leaf)) — \(culpritCount) of \(root.count) samples (\(percent)%)</text>\n"
        } else if root.count == 0 {
            out += "<text x=\"\(Self.margin)\" y=\"57\">no samples</text>\n"
        }
        if root.count > 0 {
            var pending = [(node: root, x: Self.margin, level: 0)]
            while let (node, x, level) = pending.popLast() {
                guard draw(node, x: x, level: level, plotWidth: plotWidth, height: height, into: &out) else { continue }
                var childX = x
                var children: [(node: Node, x: Double, level: Int)] = []
                for child in node.children {
                    children.append((child, childX, level + 1))
                    childX += Double(child.count) / Double(root.count) * plotWidth
                }
                pending += children.reversed()   // drawn in order, as before
            }
        }
        out += "</svg>\n"
        return out
    }

    /// One frame's box; false when it is too narrow to draw (and so are its children).
    private func draw(_ node: Node, x: Double, level: Int, plotWidth: Double, height: Double, into out: inout String) -> Bool {
        let width = Double(node.count) / Double(root.count) * plotWidth
        guard width >= 0.1 else { return false }
        // Flame layout: the root at the bottom, callees above their callers.
        let y = height - Self.margin - Double(level + 1) * Self.rowHeight
        let percent = Text.fixed(Double(node.count) * 100 / Double(root.count), decimals: 1)
        let fill = node.culprit ? Self.culpritColor(level) : (level == 0 ? "#c8c8c8" : Self.color(for: node.name))
        out += "<g class=\"frame\(node.culprit ? " culprit" : "")\" data-name=\"\(Self.escape(node.name))\" data-samples=\"\(node.count)\">"
        out += "<title>\(Self.escape(node.name)) — \(node.count) samples (\(percent)%)</title>"
        out += "<rect x=\"\(Self.format(x))\" y=\"\(Self.format(y))\" width=\"\(Self.format(width))\" height=\"\(Self.format(Self.rowHeight - 1))\" "
            + "rx=\"2\" fill=\"\(fill)\"\(node.culprit ? " stroke=\"#7a0000\" stroke-width=\"1\"" : "")/>"
        let fits = Int((width - 6) / Self.charWidth)
        if fits >= 3 {
            let label = node.name.count <= fits ? node.name : String(node.name.prefix(fits - 2)) + ".."
            out += "<text x=\"\(Self.format(x + 3))\" y=\"\(Self.format(y + Self.rowHeight - 5))\""
                + "\(node.culprit ? " fill=\"#fff\" font-weight=\"bold\"" : " fill=\"#111\"")>\(Self.escape(label))</text>"
        }
        out += "</g>\n"
        return true
    }

    /// Warm colours, stable per name (FNV-1a), like flamegraph.pl's "hot" palette.
    static func color(for name: String) -> String {
        var hash: UInt32 = 2_166_136_261
        for byte in name.utf8 { hash = (hash ^ UInt32(byte)) &* 16_777_619 }
        let red = 225 + Int(hash % 30)
        let green = 140 + Int((hash >> 8) % 90)
        let blue = 40 + Int((hash >> 16) % 50)
        return "rgb(\(red),\(green),\(blue))"
    }

    static func culpritColor(_ level: Int) -> String { level % 2 == 0 ? "#d62728" : "#c01f20" }

    static func format(_ value: Double) -> String { Text.fixed(value, decimals: 2) }

    static func escape(_ text: String) -> String {
        var out = ""
        for c in text {
            switch c {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            case "'": out += "&apos;"
            default:
                // Control characters are not allowed in XML 1.0.
                if let ascii = c.asciiValue, ascii < 0x20, c != "\t" { out += " " } else { out.append(c) }
            }
        }
        return out
    }

    // MARK: - HTML

    /// One HTML file: the SVG inline, the culprit stack leaf-first, and the heaviest stacks.
    package func html() -> String {
        var culpritList = ""
        if !culprit.isEmpty {
            culpritList = "<h2>\(culpritLabel.prefix(1).uppercased() + culpritLabel.dropFirst())\(culpritLabel == "culprit" ? " stack" : "") (leaf first, \(culpritCount) of \(root.count) samples)</h2>\n<ol class=\"stack\">"
                + culprit.reversed().map { "<li>\(Self.escape($0))</li>" }.joined() + "</ol>\n"
        }
        return """
            <!DOCTYPE html>
            <html lang="en"><head><meta charset="utf-8"><title>\(Self.escape(title))</title>
            <style>
            body { font-family: Verdana, "DejaVu Sans", sans-serif; margin: 16px; background: #fbfaf6; color: #111; }
            h2 { font-size: 15px; margin: 18px 0 6px; }
            #details { font-family: monospace; min-height: 1.3em; margin: 6px 0; color: #333; }
            svg .frame:hover rect { stroke: #000; stroke-width: 1.5; }
            ol.stack { font-family: monospace; font-size: 13px; }
            ol.stack li:first-child { color: #b00; font-weight: bold; }
            </style></head><body>
            \(svg())<div id="details">hover a frame for its name and samples</div>
            \(culpritList)<script>
            for (const frame of document.querySelectorAll('svg .frame')) {
              frame.addEventListener('mouseover', () => {
                document.getElementById('details').textContent =
                  frame.dataset.name + ' \\u2014 ' + frame.dataset.samples + ' samples';
              });
            }
            </script>
            </body></html>

            """
    }
}

extension ReportRenderer {
    static func foldedName(_ label: String) -> String {
        String(label.map { $0 == ";" ? "," : ($0.isNewline ? " " : $0) })
    }
}
