// Names after a redeploy from debuginfod (HANGWATCH_DEBUGINFOD_URLS, or DEBUGINFOD_URLS with
// --debuginfod): a real `debuginfod` server (Debian's debuginfod) on loopback indexing the old
// build; and servers that stall or send without end, which cost at most the time limit and a
// few MiB.
import HangwatchDatabase
import HangwatchReport
import Foundation
import HangwatchTestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

@Suite("hangwatch debuginfod", .ownThread)
struct DebuginfodTests {
    @Test func aReplacedBinarysFramesAreNamedFromARealDebuginfodServer() throws {
        let directory = try makeTemporaryDirectory("hangwatch-debuginfod")
        defer { removeTemporaryDirectory(directory) }
        let database = try TemporaryDatabase()
        let served = directory + "/served"
        try FileManager.default.createDirectory(atPath: served, withIntermediateDirectories: true)
        let program = try RedeployedProgram(in: directory, database: database) { path in
            try FileManager.default.copyItem(atPath: path, toPath: served + "/server")
        }
        let buildID = try #require(program.before.modules.first { $0.path == program.path }?.buildID)
        let port = try freePort()
        let server = try ChildProcess("/usr/bin/debuginfod", ["-F", served, "-p", "\(port)", "-d", directory + "/index.sqlite"])
        defer { server.signal(SIGKILL); _ = try? server.waitForExit() }
        try waitUntilServed("http://127.0.0.1:\(port)/buildid/\(buildID)/debuginfo")

        let cache = directory + "/cache"
        let environment = ["HANGWATCH_SYMBOL_CACHE": cache, "HANGWATCH_DEBUGINFOD_URLS": "http://127.0.0.1:\(port)"]
        let restored = try showJSON(program.dump, database: database, environment: environment)
        let module = try #require(restored.modules.first { $0.path == program.path })
        #expect(module.symbols == "debuginfod")
        #expect(module.symbolFile?.hasPrefix(cache + "/debuginfod/") == true, "\(module.symbolFile ?? "-")")
        #expect(!program.frames(program.before).isEmpty)
        #expect(program.frames(restored) == program.frames(program.before))
        var info = stat()
        #expect(stat(cache + "/debuginfod", &info) == 0 && info.st_mode & 0o777 == 0o700)

        // Only when asked: DEBUGINFOD_URLS alone (a login shell's) is not.
        let unasked = try showJSON(program.dump, database: database, environment: [
            "HANGWATCH_SYMBOL_CACHE": directory + "/other-cache", "DEBUGINFOD_URLS": "http://127.0.0.1:\(port)",
        ])
        #expect(unasked.modules.first { $0.path == program.path }?.symbols == "mismatched")
        let hinted = try hangwatch(["show", program.dump], database: database, environment: [
            "HANGWATCH_SYMBOL_CACHE": directory + "/other-cache", "DEBUGINFOD_URLS": "http://127.0.0.1:\(port)",
        ])
        #expect(try hinted.waitForExit(timeout: 60) == 0)
        #expect(hinted.stderr.contains("DEBUGINFOD_URLS is set: add --debuginfod to ask its servers"), "\(hinted.stderr)")

        // --debuginfod: the servers of DEBUGINFOD_URLS, as elfutils' tools ask them.
        let asked = try hangwatch(["show", program.dump, "--format", "json", "--debuginfod"], database: database, environment: [
            "HANGWATCH_SYMBOL_CACHE": directory + "/third-cache", "DEBUGINFOD_URLS": "http://127.0.0.1:\(port)",
        ])
        #expect(try asked.waitForExit(timeout: 60) == 0, "\(asked.stderr)")
        let named = try Report.decode(from: Data(asked.stdout.utf8))
        #expect(named.modules.first { $0.path == program.path }?.symbols == "debuginfod")
        #expect(program.frames(named) == program.frames(program.before))
        #expect(!asked.stderr.contains("--debuginfod"), "\(asked.stderr)")
    }

    /// A server that never answers costs the time limit; one that sends without end is cut at the
    /// size limit: neither costs more than a few MiB of memory, nor leaves more than the limit on disk.
    @Test(arguments: ["stall", "flood"])
    func aHostileServerCostsAtMostItsLimits(mode: String) throws {
        let directory = try makeTemporaryDirectory("hangwatch-debuginfod")
        defer { removeTemporaryDirectory(directory) }
        let database = try TemporaryDatabase()
        let program = try RedeployedProgram(in: directory, database: database)
        let port = try freePort()
        let server = try ChildProcess("/usr/bin/python3", ["-c", Self.hostileServer, "\(port)", mode])
        defer { server.signal(SIGKILL); _ = try? server.waitForExit() }
        try server.waitForOutput("READY")

        let hangwatchPath = try productPath("hangwatch")
        let plain = try runMeasured(hangwatchPath, ["show", program.dump, "--database", database.path],
                                    environment: ["HANGWATCH_SYMBOL_CACHE": directory + "/plain-cache"])
        let limit = 2.0
        let cache = directory + "/cache"
        let asked = try runMeasured(hangwatchPath, ["show", program.dump, "--database", database.path], environment: [
            "HANGWATCH_SYMBOL_CACHE": cache, "HANGWATCH_DEBUGINFOD_URLS": "http://127.0.0.1:\(port)",
            "HANGWATCH_DEBUGINFOD_TIMEOUT": "\(limit)", "HANGWATCH_DEBUGINFOD_MAX_MB": "4",
        ])
        #expect(asked.status == 0, "\(asked.stderr)")
        #expect(asked.stdout.contains("[mismatched]"), "nothing the server sent was used")
        #expect(asked.seconds < plain.seconds + limit + 1.5, "\(asked.seconds) s, \(plain.seconds) s without debuginfod")
        // libdebuginfod and libcurl loaded, and the transfer's buffers: a few MiB.
        #expect(asked.peakKiB < plain.peakKiB + 16 * 1024, "\(asked.peakKiB) KiB, \(plain.peakKiB) KiB without debuginfod")
        let kept = try FileManager.default.subpathsOfDirectory(atPath: cache).reduce(0) { total, name in
            total + ((try? FileManager.default.attributesOfItem(atPath: cache + "/" + name)[.size] as? Int) ?? 0)
        }
        #expect(kept < 6 << 20, "\(kept) bytes left in the cache")
    }

    /// Answers every GET by stalling for an hour, or with an endless body.
    static let hostileServer = """
        import http.server, sys, time
        mode = sys.argv[2]
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                if mode == "stall":
                    time.sleep(3600)
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.end_headers()
                chunk = b"\\x7fELF" + b"\\0" * (1 << 20)
                try:
                    while True:
                        self.wfile.write(chunk)
                except Exception:
                    pass
            def log_message(self, *arguments):
                pass
        server = http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
        print("READY", flush=True)
        server.serve_forever()
        """

    /// A loopback port nothing listens on now.
    private func freePort() throws -> UInt16 {
        let (fd, port) = try #require(loopbackListener())
        close(fd)
        return port
    }

    /// Polls `url` until it answers 200 (the server has indexed its directory), 60 s at most.
    private func waitUntilServed(_ url: String) throws {
        let script = """
            import sys, time, urllib.request
            for _ in range(600):
                try:
                    if urllib.request.urlopen(sys.argv[1], timeout=5).status == 200:
                        sys.exit(0)
                except Exception:
                    pass
                time.sleep(0.1)
            sys.exit(1)
            """
        try runTool("/usr/bin/python3", ["-c", script, url], timeout: 90)
    }
}
