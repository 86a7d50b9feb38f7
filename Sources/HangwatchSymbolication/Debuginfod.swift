// Debug files fetched by build-id from debuginfod servers, through elfutils' libdebuginfod
// (dlopen'ed by CHangwatchSymbols only when asked: hws_debuginfod_find). Opt-in: the servers of
// HANGWATCH_DEBUGINFOD_URLS, or those of DEBUGINFOD_URLS when a command is given --debuginfod;
// the DEBUGINFOD_URLS a login shell sets is not enough alone, since a crash tool must not reach
// the network unasked (ReportCommandsTests, symbolicationNeverAsksADebuginfodServer). What a server sends is bounded: one time limit for
// all of a process's queries together, a size limit per file, and the file is used only if it
// carries the build-id asked for. Files are kept in the symbol cache's directory
// (`debuginfod/`), by its rules. docs/symbol-cache.md, "debuginfod".
import CHangwatchSymbols
import HangwatchSnapshot
import HangwatchPlatform
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

package final class Debuginfod: @unchecked Sendable {
    /// The servers, space-separated as DEBUGINFOD_URLS spells them.
    package let urls: String
    /// Seconds all queries of this process may take together.
    package let timeLimit: Double
    /// Largest file accepted, bytes.
    package let maximumBytes: Int
    /// Where libdebuginfod keeps what it fetched.
    package let cacheDirectory: String
    // The time all queries share, set by the first one.
    private var deadline: Double?

    package init(urls: String, timeLimit: Double, maximumBytes: Int, cacheDirectory: String) {
        self.urls = urls
        self.timeLimit = timeLimit
        self.maximumBytes = maximumBytes
        self.cacheDirectory = cacheDirectory
    }

    /// `HANGWATCH_DEBUGINFOD_URLS` (http/https URLs) — or, when the user asked for it
    /// (`askingDebuginfodURLs`: --debuginfod) and that is unset, `DEBUGINFOD_URLS`, the variable
    /// elfutils' tools read —, `HANGWATCH_DEBUGINFOD_TIMEOUT` (seconds, default 10) and
    /// `HANGWATCH_DEBUGINFOD_MAX_MB` (default 512); nil when no URL is given or there is no
    /// usable symbol cache to keep the files in.
    package static func standard(environment: [String: String], cache: SymbolCache?,
                                 askingDebuginfodURLs: Bool = false) -> Debuginfod? {
        let given = environment["HANGWATCH_DEBUGINFOD_URLS"] ?? (askingDebuginfodURLs ? environment["DEBUGINFOD_URLS"] : nil)
        let urls = (given ?? "").split(separator: " ")
            .filter { $0.hasPrefix("http://") || $0.hasPrefix("https://") }.joined(separator: " ")
        guard !urls.isEmpty, let cache, cache.isUsable else { return nil }
        let seconds = environment["HANGWATCH_DEBUGINFOD_TIMEOUT"].flatMap(Double.init).flatMap { $0 > 0 && $0 <= 3600 ? $0 : nil } ?? 10
        let megabytes = environment["HANGWATCH_DEBUGINFOD_MAX_MB"].flatMap(Int.init).flatMap { $0 > 0 && $0 <= 1 << 20 ? $0 : nil } ?? 512
        return Debuginfod(urls: urls, timeLimit: seconds, maximumBytes: megabytes << 20, cacheDirectory: cache.path + "/debuginfod")
    }

    /// The debug file of `buildID` (lowercase hex), or why there is none. Call under
    /// Symbolicator's lock (it sets libdebuginfod's environment).
    func fetch(buildID: String) -> Result<String, Failure> {
        guard buildID.count >= 4, buildID.count <= 128, buildID.count.isMultiple(of: 2), BuildID.isPlainHex(buildID) else {
            return .failure(Failure(description: "no usable build-id"))
        }
        let now = Self.monotonicSeconds()
        let deadline = self.deadline ?? now + timeLimit
        self.deadline = deadline
        let seconds = Int((deadline - now).rounded(.up))
        guard seconds > 0 else { return .failure(Failure(description: "debuginfod: the time limit of \(timeLimit) s is spent")) }
        for (name, value) in [("DEBUGINFOD_URLS", urls), ("DEBUGINFOD_CACHE_PATH", cacheDirectory), ("DEBUGINFOD_TIMEOUT", String(seconds)),
                              ("DEBUGINFOD_MAXTIME", String(seconds)), ("DEBUGINFOD_MAXSIZE", String(maximumBytes)),
                              ("DEBUGINFOD_RETRY_LIMIT", "1")] {
            setenv(name, value, 1)
        }
        for name in ["DEBUGINFOD_PROGRESS", "DEBUGINFOD_VERBOSE", "DEBUGINFOD_HEADERS_FILE"] { unsetenv(name) }
        // Inside the symbol cache's own directory (the user's, 0700: TrustedPath), private too.
        if mkdir(cacheDirectory, 0o700) != 0 && errno != EEXIST {
            return .failure(Failure(description: "debuginfod: cannot make \(cacheDirectory): \(String(cString: strerror(errno)))"))
        }
        let bytes = stride(from: 0, to: buildID.count, by: 2).map { offset -> UInt8 in
            let start = buildID.index(buildID.startIndex, offsetBy: offset)
            return UInt8(buildID[start..<buildID.index(start, offsetBy: 2)], radix: 16) ?? 0
        }
        var path: UnsafeMutablePointer<CChar>?
        var reason: UnsafePointer<CChar>?
        var error: Int32 = 0
        let status = hws_debuginfod_find(bytes, bytes.count, deadline, maximumBytes, &path, &reason, &error)
        defer { free(path) }
        guard status == 0, let path else {
            let why = reason.map { String(cString: $0) } ?? "failed"
            return .failure(Failure(description: "debuginfod: " + why + (error != 0 ? ": " + String(cString: strerror(error)) : "")))
        }
        let file = String(cString: path)
        // What a server sent is not trusted: the file must be the one asked for.
        guard ELFBuildID.read(path: file) == buildID else { return .failure(Failure(description: "debuginfod sent a file of another build-id")) }
        return .success(file)
    }

    package struct Failure: Error, CustomStringConvertible {
        package var description: String
    }

    private static func monotonicSeconds() -> Double {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
    }
}
