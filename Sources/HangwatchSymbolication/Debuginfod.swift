// Debug files fetched by build-id from debuginfod servers (`GET <server>/buildid/<id>/debuginfo`,
// the protocol elfutils' debuginfod serves), through hangwatch's own HTTP client
// (CHangwatchCurl, libcurl dlopen'ed on the first request). Opt-in: the servers of
// HANGWATCH_DEBUGINFOD_URLS, or those of DEBUGINFOD_URLS when a command is given --debuginfod;
// the DEBUGINFOD_URLS a login shell sets is not enough alone, since a crash tool must not reach
// the network unasked (ReportCommandsTests, symbolicationNeverAsksADebuginfodServer).
//
// Nothing a server sends is trusted (docs/symbol-cache.md, "debuginfod"):
// - one time limit for all of a process's queries together;
// - a size limit per file that counts the bytes as they are written; no content encoding is
//   asked for and none is decoded (a gzip, brotli or zstd bomb stays the few KiB it was sent
//   as, and is no ELF file);
// - a redirect is followed only to the same scheme, host and port;
// - a file is kept only if it is an ELF file with the build-id asked for; anything else is
//   removed at once and the next server is asked.
// Files are kept in the symbol cache's `debuginfod/` directory, by the cache's rules, within a
// total size that every store and `hangwatch prune` enforce (DebuginfodStore).
import CHangwatchCurl
import HangwatchDatabase
import HangwatchSnapshot
import HangwatchPlatform
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

package final class Debuginfod: @unchecked Sendable {
    /// The symbol cache's subdirectory for debuginfod's files.
    package static let directoryName = "debuginfod"
    /// Redirects followed for one query at most (each to the same server).
    static let maxRedirects = 4

    /// The servers, in the order they are asked.
    package let servers: [String]
    /// Seconds all queries of this process may take together.
    package let timeLimit: Double
    /// Largest file accepted, bytes, counted as written.
    package let maximumBytes: Int
    /// Where the files are kept.
    package let store: DebuginfodStore
    // The time all queries share, set by the first one.
    private var deadline: Double?

    package init(urls: String, timeLimit: Double, maximumBytes: Int, store: DebuginfodStore) {
        servers = urls.split(separator: " ").map { String($0.hasSuffix("/") ? $0.dropLast() : $0) }
        self.timeLimit = timeLimit
        self.maximumBytes = maximumBytes
        self.store = store
    }

    /// `HANGWATCH_DEBUGINFOD_URLS` (http/https URLs) — or, when the user asked for it
    /// (`askingDebuginfodURLs`: --debuginfod) and that is unset, `DEBUGINFOD_URLS`, the variable
    /// elfutils' tools read —, `HANGWATCH_DEBUGINFOD_TIMEOUT` (seconds, default 10),
    /// `HANGWATCH_DEBUGINFOD_MAX_MB` (one file, default 512) and `HANGWATCH_DEBUGINFOD_CACHE_MB`
    /// (all files kept, default 1024, at least one file's limit); nil when no URL is given or
    /// there is no symbol cache to keep the files in.
    package static func standard(environment: [String: String], cache: SymbolCache?,
                                 askingDebuginfodURLs: Bool = false) -> Debuginfod? {
        let given = environment["HANGWATCH_DEBUGINFOD_URLS"] ?? (askingDebuginfodURLs ? environment["DEBUGINFOD_URLS"] : nil)
        let urls = (given ?? "").split(separator: " ")
            .filter { $0.hasPrefix("http://") || $0.hasPrefix("https://") }.joined(separator: " ")
        guard !urls.isEmpty, let cache else { return nil }
        let seconds = setting(environment, "HANGWATCH_DEBUGINFOD_TIMEOUT", default: 10, within: 0...3600)
        let fileBytes = Int(fileMegabytes(environment) * 1_048_576)
        return Debuginfod(urls: urls, timeLimit: seconds, maximumBytes: fileBytes,
                          store: .standard(environment: environment, cache: cache))
    }

    /// `HANGWATCH_DEBUGINFOD_MAX_MB`: the largest file accepted, MiB.
    static func fileMegabytes(_ environment: [String: String]) -> Double {
        setting(environment, "HANGWATCH_DEBUGINFOD_MAX_MB", default: 512, within: 0...1_048_576)
    }

    /// A positive number of the environment within `range`, else `fallback`.
    static func setting(_ environment: [String: String], _ name: String, default fallback: Double,
                                within range: ClosedRange<Double>) -> Double {
        environment[name].flatMap(Double.init).flatMap { $0 > range.lowerBound && $0 <= range.upperBound ? $0 : nil } ?? fallback
    }

    /// The debug file of `buildID` (lowercase hex): kept from before, or fetched now from the
    /// first server that sends the right one; or why there is none. Call under Symbolicator's lock.
    func fetch(buildID: String) -> Result<String, Failure> {
        guard BuildID.isPathSafe(buildID) else {
            return .failure(Failure(description: "no usable build-id"))
        }
        do {
            if let kept = try store.file(of: buildID) { return .success(kept) }
            if try store.recentlyMissed(buildID) {
                return .failure(Failure(description: "debuginfod: no server had \(buildID) \(DebuginfodStore.missSeconds / 60) minutes ago or less"))
            }
            let path = try store.keep(buildID) { file in try ask(for: buildID, into: file) }
            return .success(path)
        } catch let failure as Failure {
            return .failure(failure)
        } catch is SymbolCache.Refused {
            return .failure(Failure(description: "debuginfod servers not asked: the symbol cache that keeps their files is not used"))
        } catch {
            return .failure(Failure(description: "debuginfod: \(error)"))
        }
    }

    /// Each server in turn until one sends the file with `buildID`, written to `file`. Throws
    /// what each server did instead; when every one answered that it has no such file (or sent
    /// another), the build-id is marked missed for a while.
    private func ask(for buildID: String, into file: Int32) throws {
        var misses: [String] = []
        var definitive = true
        for server in servers {
            let now = Self.monotonicSeconds()
            let deadline = self.deadline ?? now + timeLimit
            self.deadline = deadline
            guard deadline > now else {
                misses.append("the time limit of \(Text.fixed(timeLimit, decimals: 1)) s is spent")
                definitive = false
                break
            }
            _ = ftruncate(file, 0)
            _ = lseek(file, 0, SEEK_SET)
            switch get(server + "/buildid/\(buildID)/debuginfo", into: file, until: deadline) {
            case .success:
                if ELFBuildID.read(fileDescriptor: file) == buildID { return }
                misses.append("\(Text.singleLine(server)) sent a file that is not the ELF file of that build-id")
            case .failure(let answer):
                misses.append("\(Text.singleLine(server)): \(answer.description)")
                if !answer.isDefinitive { definitive = false }
            }
        }
        if definitive { store.markMissed(buildID) }
        throw Failure(description: "debuginfod has no file for \(buildID): " + misses.joined(separator: "; "))
    }

    /// One query, following redirects to the same server only.
    private func get(_ url: String, into file: Int32, until deadline: Double) -> Result<Void, Answer> {
        var url = url
        for _ in 0...Self.maxRedirects {
            let milliseconds = Int((deadline - Self.monotonicSeconds()) * 1000)
            guard milliseconds > 0 else { return .failure(.timedOut) }
            var answer = hwu_answer()
            let code = hwu_get_to_file(url, file, milliseconds, UInt64(maximumBytes), &answer)
            let error = withUnsafeBytes(of: answer.error) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            switch Int(code) {
            case Int(HWU_OK): break
            case Int(HWU_TIMED_OUT): return .failure(.timedOut)
            default: return .failure(.transport(error))
            }
            if answer.cut != 0 { return .failure(.tooLarge(limit: maximumBytes)) }
            if (200..<300).contains(answer.status) { return .success(()) }
            let location = withUnsafeBytes(of: answer.redirect) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            guard (300..<400).contains(answer.status), !location.isEmpty else { return .failure(.status(answer.status)) }
            guard Self.sameServer(url, location) else { return .failure(.redirectRefused(location)) }
            url = location
        }
        return .failure(.tooManyRedirects)
    }

    /// Whether `location` (an absolute URL: libcurl resolves a relative Location against the
    /// URL asked) starts with `url`'s scheme, host and port, as `url` spells them, then "/".
    /// Compared as text, not parsed: a Location such as `http://host:80@elsewhere/` is read one
    /// way by one URL parser and another way by libcurl, and must not pass for the same server.
    package static func sameServer(_ url: String, _ location: String) -> Bool {
        let scheme = ["http://", "https://"].first { url.hasPrefix($0) } ?? ""
        let authority = url.dropFirst(scheme.count).prefix { $0 != "/" }
        return !scheme.isEmpty && !authority.isEmpty && location.hasPrefix(scheme + authority + "/")
    }

    /// What one server did instead of sending the file.
    enum Answer: Error, CustomStringConvertible {
        case status(Int)
        case tooLarge(limit: Int)
        case redirectRefused(String)
        case tooManyRedirects
        case timedOut
        case transport(String)

        var description: String {
            switch self {
            case .status(let status): return "HTTP \(status)"
            case .tooLarge(let limit): return "the file is larger than \(limit >> 20) MiB, the limit (HANGWATCH_DEBUGINFOD_MAX_MB)"
            case .redirectRefused(let location):
                return "a redirect to another server (\(Text.singleLine(String(location.prefix(200))))) is not followed"
            case .tooManyRedirects: return "more than \(Debuginfod.maxRedirects) redirects"
            case .timedOut: return "no answer within the time limit"
            case .transport(let why): return Text.singleLine(why)
            }
        }

        /// The server answered that it has no such file (or sent what is not one): asking
        /// again soon would get the same.
        var isDefinitive: Bool {
            switch self {
            case .status(let status): return status == 404
            case .tooLarge, .redirectRefused, .tooManyRedirects: return true
            case .timedOut, .transport: return false
            }
        }
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

/// The files debuginfod servers sent, in the symbol cache's `debuginfod/` directory (0700):
/// `<build-id>.debug`, an ELF file with that build-id (checked before it is kept, and again when
/// it is used); `<build-id>.miss`, a mark that every server reported having none, honoured for
/// `missSeconds`. Bounded: files unused for `unusedSeconds` are removed, then the least recently used
/// until all fit `maximumTotalBytes`; only files of ours (name, owner, mode and first bytes) are
/// counted or removed.
package struct DebuginfodStore: Sendable {
    package let cache: SymbolCache
    package let maximumTotalBytes: Int64

    static let fileExtension = ".debug"
    static let missExtension = ".miss"
    static let missMagic = Array("HWDMISS1\n".utf8)
    static let elfMagic: [UInt8] = [0x7F, 0x45, 0x4C, 0x46]
    /// A miss is remembered this long (seconds), as libdebuginfod's cache_miss_s.
    static let missSeconds = 600
    /// A file not used for this long (seconds) is removed, as libdebuginfod's max_unused_age_s.
    static let unusedSeconds: Double = 7 * 86_400
    /// Leftovers of a writer killed mid-download are removed after this (seconds).
    static let abandonedTemporaryAge: Double = 3600

    package init(cache: SymbolCache, maximumTotalBytes: Int64 = 1 << 30) {
        self.cache = cache
        self.maximumTotalBytes = maximumTotalBytes
    }

    /// The store in `cache`, bounded by `HANGWATCH_DEBUGINFOD_CACHE_MB` (default 1024, never
    /// less than one file's limit, `HANGWATCH_DEBUGINFOD_MAX_MB`).
    package static func standard(environment: [String: String], cache: SymbolCache) -> DebuginfodStore {
        let megabytes = Debuginfod.setting(environment, "HANGWATCH_DEBUGINFOD_CACHE_MB", default: 1024, within: 0...16_777_216)
        return DebuginfodStore(cache: cache, maximumTotalBytes: Int64(max(megabytes, Debuginfod.fileMegabytes(environment)) * 1_048_576))
    }

    /// The kept file of `buildID` when there is one of ours that checks out (marked used);
    /// one of ours that does not is removed.
    func file(of buildID: String) throws -> String? {
        try withDirectory { directory in
            let name = buildID + Self.fileExtension
            guard let entry = try directory.entry(name), entry.isRegularFile, entry.isOwnAndPrivate,
                  let opened = try directory.openOwnFile(name, limit: .max) else { return nil }
            defer { close(opened.file) }
            guard ELFBuildID.read(fileDescriptor: opened.file) == buildID else {
                if directory.startsWithOneOf([Self.elfMagic], name, emptyCounts: false) { _ = try? directory.remove(name) }
                return nil
            }
            directory.touch(name)
            return directory.pathOf(name)
        }
    }

    /// Whether every server reported having no file for `buildID` less than `missSeconds` ago.
    func recentlyMissed(_ buildID: String) throws -> Bool {
        try withDirectory { directory in
            let name = buildID + Self.missExtension
            guard let entry = try directory.entry(name), entry.isRegularFile, entry.isOwnAndPrivate,
                  directory.startsWithOneOf([Self.missMagic], name, emptyCounts: false) else { return false }
            return Date().timeIntervalSince(entry.modificationDate) < Double(Self.missSeconds)
        }
    }

    func markMissed(_ buildID: String) {
        _ = try? withDirectory { directory in
            try directory.writeAtomically(buildID + Self.missExtension, Data(Self.missMagic), durable: false)
        }
    }

    /// Keeps the file `fill` writes (a new temporary file, readable) as `buildID`'s, then prunes;
    /// nothing is kept when `fill` throws. Returns its path.
    func keep(_ buildID: String, fill: (Int32) throws -> Void) throws -> String {
        try withDirectory { directory in
            let name = buildID + Self.fileExtension
            try directory.writeAtomically(name, durable: false, readable: true, fill)
            _ = try? directory.remove(buildID + Self.missExtension)
            prune(directory, keeping: name)
            return directory.pathOf(name)
        }
    }

    /// Prunes the directory to its bounds now (`hangwatch prune`).
    package func prune() {
        _ = try? withDirectory { prune($0, keeping: "") }
    }

    private func withDirectory<Result>(_ body: (DatabaseDirectory) throws -> Result) throws -> Result {
        let directory = try cache.openSubdirectory(Debuginfod.directoryName)
        defer { directory.closeDirectory() }
        return try body(directory)
    }

    private func prune(_ directory: DatabaseDirectory, keeping kept: String) {
        guard let entries = try? directory.entries() else { return }
        let now = Date()
        let ours = entries.filter { $0.isRegularFile && $0.isOwnAndPrivate }
        func age(_ entry: DirectoryEntry) -> Double { now.timeIntervalSince(entry.modificationDate) }
        for entry in ours {
            let stale: Bool
            if let final = DatabaseNames.finalName(ofTemporary: entry.name) {
                stale = age(entry) > Self.abandonedTemporaryAge && Self.isOurName(final)
                    && directory.startsWithOneOf([Self.elfMagic, Self.missMagic], entry.name)
            } else if entry.name.hasSuffix(Self.missExtension) {
                stale = age(entry) > Double(Self.missSeconds) && Self.isOurName(entry.name)
                    && directory.startsWithOneOf([Self.missMagic], entry.name, emptyCounts: false)
            } else {
                stale = age(entry) > Self.unusedSeconds && entry.name != kept && Self.isOurName(entry.name)
                    && directory.startsWithOneOf([Self.elfMagic], entry.name, emptyCounts: false)
            }
            if stale { _ = try? directory.remove(entry.name) }
        }
        let files = ((try? directory.entries()) ?? []).filter {
            $0.isRegularFile && $0.isOwnAndPrivate && $0.name.hasSuffix(Self.fileExtension) && Self.isOurName($0.name)
        }
        directory.removeLeastRecentlyUsed(files, toFit: maximumTotalBytes, keeping: kept, header: Self.elfMagic)
    }

    /// `<build-id>.debug` or `<build-id>.miss`, the build-id plain lowercase hex.
    static func isOurName(_ name: String) -> Bool {
        for suffix in [fileExtension, missExtension] where name.hasSuffix(suffix) {
            return BuildID.isPathSafe(String(name.dropLast(suffix.count)))
        }
        return false
    }
}
