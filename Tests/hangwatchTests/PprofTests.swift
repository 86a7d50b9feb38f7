// `--format pprof` read by a real reader: Go's pprof (`go tool pprof`, Debian's golang-go,
// installed by scripts/install-deps). What it shows must be what the text report shows.
import HangwatchDatabase
import HangwatchReport
import Foundation
import HangwatchTestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

@Suite("hangwatch pprof", .ownThread)
struct PprofTests {
    /// A fatal hang's report (`hangwatch run` killed the hung fixture): its pprof profile, drawn
    /// from the kept dump's addresses, has the report's stacks with their counts, the hung
    /// function under every sample, the labels, and the program's mapping with its build id;
    /// the same report read from its JSON alone (names, no addresses) has the same stacks.
    @Test func hangReportReadByGoPprofHasTheReportsStacks() throws {
        let database = try TemporaryDatabase()
        let directory = try makeTemporaryDirectory("hangwatch-pprof")
        defer { removeTemporaryDirectory(directory) }
        let child = try hangwatch(["run", "--threshold", "1", "--kill-after", "1.5", "--",
                                   try productPath("hangwatch-fixture-hang"), "runloop", "forever"],
                                  database: database, environment: [
                                      "HANGWATCH_DATABASE_PATH": database.path, "HANGWATCH_THRESHOLD": "1",
                                      "HANGWATCH_BUNDLE_ID": "com.example.hang-fixture",
                                  ])
        #expect(try child.waitForExit(timeout: 60) == 124, "stderr: \(child.stderr)")
        let report = try #require(try database.reports().first)
        let hang = try #require(report.hang)
        try #require(hang.samples > 1)

        let profile = directory + "/hang.pb.gz"
        let refused = try runHangwatch(["show", report.id, "--format", "pprof"], database: database)
        #expect(refused.status != 0 && refused.stderr.contains("--output"), "\(refused.stderr)")
        let shown = try runHangwatch(["show", String(report.id.prefix(8)), "--format", "pprof", "--output", profile], database: database)
        #expect(shown.status == 0, "\(shown.stderr)")
        let bytes = try Data(contentsOf: URL(fileURLWithPath: profile))
        #expect(bytes.prefix(2) == Data([0x1f, 0x8b]), "gzipped")
        var info = stat()
        #expect(stat(profile, &info) == 0 && info.st_mode & 0o777 == 0o600)

        let traces = try GoPprof.traces(profile)
        #expect(traces.stacks == GoPprof.aggregated(hang.stacks), "pprof: \(traces.stacks)\nreport: \(hang.stacks)")
        #expect(traces.labels.contains("target:main-queue"), "\(traces.labels)")
        #expect(traces.labels.contains { $0.hasPrefix("role:") && $0.contains("hung") }, "\(traces.labels)")
        #expect(traces.labels.contains("thread_id:\(report.process.pid)"), "\(traces.labels)")

        // The leaf the samples sat in is on top, and the hung function holds every sample.
        let top = try GoPprof.top(profile)
        #expect(top.first?.name == hang.stacks.first?.frames.last, "\(top.prefix(3))")
        let hung = try #require(top.first { $0.name.contains("hangFixtureSleepOnMainQueue") }, "\(top)")
        #expect(hung.cumulative == hang.samples)

        // Addresses came with the kept dump: the program's mapping, with its build id, has functions and lines.
        let program = try #require(report.modules.first { $0.path == report.process.executable })
        let raw = try runTool("/usr/bin/go", ["tool", "pprof", "-raw", profile])
        #expect(raw.contains("\(program.path) \(program.buildID) [FN][FL][LN]"), "\(raw)")

        // The report's JSON alone: its names, no addresses, the same stacks.
        let json = directory + "/report.json"
        try ReportRenderer.json(report).write(to: URL(fileURLWithPath: json))
        let namesOnly = directory + "/names.pb.gz"
        #expect(try runHangwatch(["show", json, "--format", "pprof", "--output", namesOnly], database: database).status == 0)
        #expect(try GoPprof.traces(namesOnly).stacks == GoPprof.aggregated(hang.stacks))
    }

    /// `hangwatch dump --samples N --format pprof` of a deadlocked process: the same stacks and
    /// counts as `--format folded` gives of it, each thread labelled.
    @Test func sampledDumpReadByGoPprofHasTheFoldedStacks() throws {
        let database = try TemporaryDatabase()
        let directory = try makeTemporaryDirectory("hangwatch-pprof")
        defer { removeTemporaryDirectory(directory) }
        let target = try ChildProcess(product: "hangwatch-fixture-remote", ["deadlock"])
        defer { target.signal(SIGKILL) }
        try target.waitForOutput("READY")
        let profile = directory + "/now.pb.gz"
        let dumped = try runHangwatch(["dump", "--pid", "\(target.pid)", "--samples", "8", "--interval", "10", "--format", "pprof",
                                       "--output", profile], database: database)
        #expect(dumped.status == 0, "\(dumped.stderr)")
        let folded = try runHangwatch(["dump", "--pid", "\(target.pid)", "--samples", "8", "--interval", "10", "--format", "folded"],
                                      database: database)
        let stacks = folded.stdout.split(separator: "\n").map { line -> Report.SampledStack in
            let space = line.lastIndex(of: " ")!
            return Report.SampledStack(frames: line[..<space].split(separator: ";").map(String.init), count: Int(line[space...].dropFirst())!)
        }
        let traces = try GoPprof.traces(profile)
        #expect(traces.stacks == GoPprof.aggregated(stacks), "pprof: \(traces.stacks)\nfolded: \(folded.stdout)")
        #expect(traces.stacks.keys.contains { $0.contains { $0.contains("deadlockTakeAThenB") } })
        #expect(traces.labels.contains("role:main-thread"), "\(traces.labels)")
        #expect(!traces.labels.contains { $0.hasPrefix("target:") }, "a dump has no hang target")

        // One capture, no samples: each thread's stack once, as the flame graph draws it.
        let single = directory + "/single.pb.gz"
        #expect(try runHangwatch(["dump", "--pid", "\(target.pid)", "--format", "pprof", "--output", single], database: database).status == 0)
        let threads = try GoPprof.traces(single)
        #expect(threads.stacks.values.reduce(0, +) == 3 && threads.stacks.count == 3, "\(threads.stacks)")
        #expect(threads.labels.filter { $0.hasPrefix("thread_id:") }.count == 3)
    }

    /// A program's own profile through the library (DumpClient.pprofProfile): the thread that
    /// spins is on top with every one of its samples, the one that sleeps has its sleeping
    /// function under all of its own, each labelled with its thread; bad arguments are an error.
    @Test func aProgramsOwnProfileThroughTheLibrary() throws {
        let directory = try makeTemporaryDirectory("hangwatch-pprof")
        defer { removeTemporaryDirectory(directory) }
        let path = directory + "/own.pb.gz"
        let child = try ChildProcess(product: "hangwatch-fixture-capture", ["profile", directory + "/db", path])
        #expect(try child.waitForExit(timeout: 120) == 0, "\(child.stdout) \(child.stderr)")
        #expect(child.stdout.contains("INVALID invalid capture options: a profile takes 1…10000 samples"), "\(child.stdout)")
        let top = try GoPprof.top(path)
        let spin = try #require(top.first { $0.name.contains("fixtureProfileSpin") }, "\(top)")
        // 50 rounds; a sample a loaded machine lets time out is skipped, not made up.
        #expect((40...50).contains(spin.flat) && top.allSatisfy { $0.flat <= 50 }, "\(top)")
        #expect((40...50).contains(top.first { $0.name.contains("fixtureProfileSleep") }?.cumulative ?? 0), "\(top)")
        let traces = try GoPprof.traces(path)
        #expect(traces.labels.contains("thread:profile-spin") && traces.labels.contains("thread:profile-sleep"), "\(traces.labels)")
        #expect((80...100).contains(traces.stacks.values.reduce(0, +)), "\(traces.stacks)")
    }
}

/// What `go tool pprof` prints of a profile, parsed.
enum GoPprof {
    /// `-traces`: each distinct stack (leaf first) with its total count, and every label seen ("key:value").
    static func traces(_ path: String) throws -> (stacks: [[String]: Int], labels: Set<String>) {
        let output = try runTool("/usr/bin/go", ["tool", "pprof", "-traces", path])
        var stacks: [[String]: Int] = [:]
        var labels: Set<String> = []
        var current: (frames: [String], count: Int)?
        func flush() {
            if let done = current { stacks[done.frames, default: 0] += done.count }
            current = nil
        }
        var started = false
        for line in output.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("-----------+") {
                flush()
                started = true
                continue
            }
            let characters = Array(line)
            guard started, characters.count > 13 else { continue }
            // "%10s:  value" for a label, "%10s   function" for a frame (count on the first).
            if characters[10] == ":" {
                labels.insert(String(characters[..<10]).trimmingCharacters(in: .whitespaces) + ":" + String(characters[13...]))
            } else if let count = Int(String(characters[..<10]).trimmingCharacters(in: .whitespaces)) {
                flush()
                current = ([String(characters[13...])], count)
            } else {
                current?.frames.append(String(characters[13...]))
            }
        }
        flush()
        return (stacks, labels)
    }

    /// A report's sampled stacks as `traces` gives them: leaf first, counts summed.
    static func aggregated(_ stacks: [Report.SampledStack]) -> [[String]: Int] {
        var result: [[String]: Int] = [:]
        for stack in stacks { result[stack.frames.reversed(), default: 0] += stack.count }
        return result
    }

    /// `-top`: rows by flat count, each with its name and cumulative count.
    static func top(_ path: String) throws -> [(name: String, flat: Int, cumulative: Int)] {
        let output = try runTool("/usr/bin/go", ["tool", "pprof", "-top", "-nodecount=1000", path])
        var rows: [(name: String, flat: Int, cumulative: Int)] = []
        var started = false
        for line in output.split(separator: "\n") {
            if line.contains("flat%") && line.contains("cum%") { started = true; continue }
            guard started else { continue }
            let fields = line.split(separator: " ", maxSplits: 5, omittingEmptySubsequences: true)
            guard fields.count == 6, let flat = Int(fields[0]), let cumulative = Int(fields[3]) else { continue }
            rows.append((fields[5].trimmingCharacters(in: .whitespaces), flat, cumulative))
        }
        return rows
    }
}
