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

    /// A server that never answers costs the time limit; one that sends without end is cut at
    /// the size limit; a compression bomb (gzip, brotli, zstd: a few hundred KiB that decode to
    /// 128 MiB) is never decoded (no encoding is asked for, and its bytes are no ELF file). None
    /// costs more than a few MiB of memory, and nothing it sent stays on disk.
    @Test(arguments: ["stall", "flood", "gzip", "br", "zstd"])
    func aHostileServerCostsAtMostItsLimits(mode: String) throws {
        let directory = try makeTemporaryDirectory("hangwatch-debuginfod")
        defer { removeTemporaryDirectory(directory) }
        let database = try TemporaryDatabase()
        let program = try RedeployedProgram(in: directory, database: database)
        var arguments = [mode]
        if ["gzip", "br", "zstd"].contains(mode) {
            let bomb = directory + "/bomb." + mode
            let compressor = ["gzip": "gzip -9 -c", "br": "brotli -q 1 -c", "zstd": "zstd -1 -q -c"][mode]!
            _ = try runTool("/bin/bash", ["-c", "(printf '\\177ELF'; head -c 134217728 /dev/zero) | \(compressor) > '\(bomb)'"])
            arguments = ["encoded", mode, bomb]
        }
        let server = try HostileServer(arguments)
        defer { server.stop() }

        let hangwatchPath = try productPath("hangwatch")
        let plain = try runMeasured(hangwatchPath, ["show", program.dump, "--database", database.path],
                                    environment: ["HANGWATCH_SYMBOL_CACHE": directory + "/plain-cache"])
        let limit = 2.0
        let cache = directory + "/cache"
        let asked = try runMeasured(hangwatchPath, ["show", program.dump, "--database", database.path], environment: [
            "HANGWATCH_SYMBOL_CACHE": cache, "HANGWATCH_DEBUGINFOD_URLS": server.url,
            "HANGWATCH_DEBUGINFOD_TIMEOUT": "\(limit)", "HANGWATCH_DEBUGINFOD_MAX_MB": "4",
        ])
        #expect(asked.status == 0, "\(asked.stderr)")
        #expect(asked.stdout.contains("[mismatched]"), "nothing the server sent was used")
        #expect(asked.seconds < plain.seconds + limit + 1.5, "\(asked.seconds) s, \(plain.seconds) s without debuginfod")
        // libcurl loaded, and the transfer's buffers: a few MiB.
        #expect(asked.peakKiB < plain.peakKiB + 16 * 1024, "\(asked.peakKiB) KiB, \(plain.peakKiB) KiB without debuginfod")
        #expect(Self.bytesKept(in: cache) < 1 << 20, "what the server sent was kept")
        // Said once, with the reason. An encoded answer is not decoded (nothing is asked for):
        // its bytes are not an ELF file.
        let said = ["stall": "no answer within the time limit", "flood": "larger than 4 MiB"][mode] ?? "is not the ELF file of that build-id"
        #expect(asked.stderr.contains(said), "\(asked.stderr)")
    }

    /// A redirect to another host or port is not followed (a server must not send the client
    /// to an address of its choosing); one to the same server is.
    @Test(arguments: [false, true])
    func onlyARedirectToTheSameServerIsFollowed(sameServer: Bool) throws {
        let directory = try makeTemporaryDirectory("hangwatch-debuginfod")
        defer { removeTemporaryDirectory(directory) }
        let database = try TemporaryDatabase()
        let original = try productPath("hangwatch-fixture-remote")
        let program = try RedeployedProgram(in: directory, database: database)
        let elsewhere = try HostileServer(["file", original])
        defer { elsewhere.stop() }
        let server = try HostileServer(sameServer ? ["redirect-here", original] : ["redirect", elsewhere.url])
        defer { server.stop() }

        let shown = try hangwatch(["show", program.dump, "--format", "json"], database: database, environment: [
            "HANGWATCH_SYMBOL_CACHE": directory + "/cache", "HANGWATCH_DEBUGINFOD_URLS": server.url,
        ])
        #expect(try shown.waitForExit(timeout: 60) == 0, "\(shown.stderr)")
        let report = try Report.decode(from: Data(shown.stdout.utf8))
        let module = try #require(report.modules.first { $0.path == program.path })
        if sameServer {
            #expect(module.symbols == "debuginfod", "\(shown.stderr)")
            #expect(program.frames(report) == program.frames(program.before))
        } else {
            #expect(module.symbols == "mismatched")
            #expect(shown.stderr.contains("a redirect to another server (\(elsewhere.url)/buildid/"), "\(shown.stderr)")
            #expect(shown.stderr.contains("is not followed"), "\(shown.stderr)")
        }
    }

    /// A server that sends another build's file: the file is neither used nor kept, and the next
    /// server is asked (and its file kept, alone).
    @Test func aFileOfAnotherBuildIsDroppedAndTheNextServerAsked() throws {
        let directory = try makeTemporaryDirectory("hangwatch-debuginfod")
        defer { removeTemporaryDirectory(directory) }
        let database = try TemporaryDatabase()
        let program = try RedeployedProgram(in: directory, database: database)
        let buildID = try #require(program.before.modules.first { $0.path == program.path }?.buildID)
        let wrong = try HostileServer(["file", try productPath("hangwatch-fixture-crash")])
        defer { wrong.stop() }
        let right = try HostileServer(["file", try productPath("hangwatch-fixture-remote")])
        defer { right.stop() }

        let cache = directory + "/cache"
        let restored = try showJSON(program.dump, database: database, environment: [
            "HANGWATCH_SYMBOL_CACHE": cache, "HANGWATCH_DEBUGINFOD_URLS": "\(wrong.url) \(right.url)",
        ])
        #expect(restored.modules.first { $0.path == program.path }?.symbols == "debuginfod")
        #expect(program.frames(restored) == program.frames(program.before))
        let kept = try FileManager.default.contentsOfDirectory(atPath: cache + "/debuginfod")
        #expect(kept == [buildID.lowercased() + ".debug"], "\(kept)")
        #expect(wrong.requests >= 1 && right.requests >= 1)

        // Kept: the next show asks no server.
        let again = try showJSON(program.dump, database: database, environment: [
            "HANGWATCH_SYMBOL_CACHE": cache, "HANGWATCH_DEBUGINFOD_URLS": "\(wrong.url) \(right.url)",
        ])
        #expect(again.modules.first { $0.path == program.path }?.symbols == "debuginfod")
        #expect(right.requests == 1, "the kept file was fetched again")
    }

    /// `hangwatch prune` bounds the debuginfod files as every download does: a file unused for
    /// more than 7 days and a miss mark older than 10 minutes go; a file not ours by name,
    /// owner or first bytes stays, whatever its age.
    @Test func pruneBoundsTheDebuginfodFiles() throws {
        let directory = try makeTemporaryDirectory("hangwatch-debuginfod")
        defer { removeTemporaryDirectory(directory) }
        let database = try TemporaryDatabase()
        let program = try RedeployedProgram(in: directory, database: database)
        let buildID = try #require(program.before.modules.first { $0.path == program.path }?.buildID).lowercased()
        let server = try HostileServer(["file", try productPath("hangwatch-fixture-remote")])
        defer { server.stop() }
        let cache = directory + "/cache"
        let fetched = try showJSON(program.dump, database: database, environment: [
            "HANGWATCH_SYMBOL_CACHE": cache, "HANGWATCH_DEBUGINFOD_URLS": server.url,
        ])
        #expect(fetched.modules.first { $0.path == program.path }?.symbols == "debuginfod")
        let files = cache + "/debuginfod/"
        // Not ours: another name, another owner, another header; and a stale miss mark of ours.
        let foreign = ["notes.debug", "0123456789abcdef.debug", "fedcba9876543210.debug"]
        try Data("\u{7f}ELF not ours by name".utf8).write(to: URL(fileURLWithPath: files + foreign[0]))
        try Data("\u{7f}ELF another user's".utf8).write(to: URL(fileURLWithPath: files + foreign[1]))
        #expect(chown(files + foreign[1], 65534, 65534) == 0)
        try Data("not an ELF file".utf8).write(to: URL(fileURLWithPath: files + foreign[2]))
        try Data("HWDMISS1\n".utf8).write(to: URL(fileURLWithPath: files + "abcdef0123456789.miss"))
        for name in foreign + ["abcdef0123456789.miss", buildID + ".debug"] {
            #expect(chmod(files + name, 0o600) == 0)
            var times = [timespec(tv_sec: time(nil) - 8 * 86_400, tv_nsec: 0), timespec(tv_sec: time(nil) - 8 * 86_400, tv_nsec: 0)]
            #expect(utimensat(AT_FDCWD, files + name, &times, 0) == 0)
        }
        let pruned = try hangwatch(["prune"], database: database, environment: ["HANGWATCH_SYMBOL_CACHE": cache])
        #expect(try pruned.waitForExit(timeout: 60) == 0, "\(pruned.stderr)")
        let left = try FileManager.default.contentsOfDirectory(atPath: files).sorted()
        #expect(left == foreign.sorted(), "\(left)")
    }

    /// A symbol cache directory that is not the user's own (planted by another user) is not
    /// used, and `show` says so once, with why.
    @Test func aRefusedSymbolCacheIsSaidOnce() throws {
        let directory = try makeTemporaryDirectory("hangwatch-debuginfod")
        defer { removeTemporaryDirectory(directory) }
        let database = try TemporaryDatabase()
        let program = try RedeployedProgram(in: directory, database: database)
        let planted = directory + "/planted"
        #expect(mkdir(planted, 0o755) == 0 && chown(planted, 65534, 65534) == 0)
        let shown = try hangwatch(["show", program.dump], database: database, environment: [
            "HANGWATCH_SYMBOL_CACHE": planted, "HANGWATCH_DEBUGINFOD_URLS": "http://127.0.0.1:9",
        ])
        #expect(try shown.waitForExit(timeout: 60) == 0, "\(shown.stderr)")
        let lines = shown.stderr.split(separator: "\n").filter { $0.contains("symbol cache not used") }
        #expect(lines.count == 1, "\(shown.stderr)")
        #expect(lines.first?.contains("refusing \(planted): it is owned by uid 65534") == true, "\(shown.stderr)")
        #expect(shown.stderr.contains("debuginfod servers not asked: the symbol cache that keeps their files is not used"), "\(shown.stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: planted).isEmpty, "nothing written into another user's directory")
    }

    /// Bytes of the regular files under `directory`.
    static func bytesKept(in directory: String) -> Int {
        ((try? FileManager.default.subpathsOfDirectory(atPath: directory)) ?? []).reduce(0) { total, name in
            total + ((try? FileManager.default.attributesOfItem(atPath: directory + "/" + name)[.size] as? Int) ?? 0)
        }
    }

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

/// A debuginfod server as an attacker runs it, on loopback (python3's http.server): it answers
/// every GET as its mode says —
/// - `stall`: never;
/// - `flood`: an endless body that starts as an ELF file;
/// - `encoded ENCODING FILE`: FILE's bytes as they are, declared `Content-Encoding: ENCODING`;
/// - `file FILE`: FILE, as a real server sends a debug file;
/// - `redirect URL`: a 302 to URL plus the path asked for;
/// - `redirect-here FILE`: a 302 to `/moved` plus the path, where FILE is served.
/// Each request is printed ("GET PATH") as it comes.
struct HostileServer {
    let process: ChildProcess
    let url: String

    init(_ mode: [String]) throws {
        let (fd, port) = try #require(loopbackListener())
        close(fd)
        process = try ChildProcess("/usr/bin/python3", ["-c", Self.script, "\(port)"] + mode)
        try process.waitForOutput("READY")
        url = "http://127.0.0.1:\(port)"
    }

    /// Requests answered so far.
    var requests: Int { process.stdout.split(separator: "\n").filter { $0.hasPrefix("GET ") }.count }

    func stop() {
        process.signal(SIGKILL)
        _ = try? process.waitForExit()
    }

    static let script = """
        import http.server, sys, time
        mode, rest = sys.argv[2], sys.argv[3:]
        class Handler(http.server.BaseHTTPRequestHandler):
            def send_file(self, path, encoding=None):
                body = open(path, "rb").read()
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                if encoding:
                    self.send_header("Content-Encoding", encoding)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            def redirect(self, location):
                self.send_response(302)
                self.send_header("Location", location)
                self.send_header("Content-Length", "0")
                self.end_headers()
            def do_GET(self):
                print("GET " + self.path, flush=True)
                try:
                    if mode == "stall":
                        time.sleep(3600)
                    elif mode == "flood":
                        self.send_response(200)
                        self.send_header("Content-Type", "application/octet-stream")
                        self.end_headers()
                        chunk = b"\\x7fELF" + b"\\0" * (1 << 20)
                        while True:
                            self.wfile.write(chunk)
                    elif mode == "encoded":
                        self.send_file(rest[1], encoding=rest[0])
                    elif mode == "file":
                        self.send_file(rest[0])
                    elif mode == "redirect":
                        self.redirect(rest[0] + self.path)
                    elif mode == "redirect-here":
                        if self.path.startswith("/moved/"):
                            self.send_file(rest[0])
                        else:
                            self.redirect("/moved" + self.path)
                except Exception:
                    pass
            def log_message(self, *arguments):
                pass
        server = http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
        server.daemon_threads = True
        print("READY", flush=True)
        server.serve_forever()
        """
}
