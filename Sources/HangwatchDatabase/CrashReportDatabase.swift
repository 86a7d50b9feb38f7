// The crash-report database: a directory shared by every process of an application (and its
// helpers) that write, claim, process and upload reports, coordinated only by rename(2) and
// exclusive creation — no POSIX locks (the Crashpad iOS design). The layout and rules are
// described in docs/database.md.
import HangwatchSnapshot
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// Limits and grace periods of a database's readers and processors.
public struct DatabaseOptions: Sendable {
    /// A `.locked` dump whose writer holds no lease (it died) is processed once it is this old
    /// (seconds). This is a grace period for writers of earlier versions, which took the lock just
    /// after creating the file.
    public var deadWriterGrace: TimeInterval = 2
    /// A claim older than this is taken over even when its claimer's liveness cannot be checked
    /// (another pid namespace); a claim whose claimer is known dead is taken over at once.
    public var staleClaimAge: TimeInterval = 10 * 60
    /// After this many claims that ended without `completeClaim`, a dump goes to failed/.
    public var maxProcessingAttempts: Int = 3
    /// Reports and claimed dumps larger than this are refused when read.
    public var maxReadBytes: Int64 = 64 << 20

    /// The defaults.
    public init() {}
}

/// A crash-report database: intermediate dumps waiting to be processed, claims, failed dumps,
/// staged hangs and reports, in one private directory several processes can share
/// (docs/database.md).
public final class CrashReportDatabase: Sendable {
    /// The directory, as it was given.
    public let path: String
    /// Its options.
    public let options: DatabaseOptions
    /// Stable across processes and restarts (sent as `guid` with uploads).
    public let clientID: UUID
    /// When the database was created (its settings file's time).
    public let createdAt: Date

    package let root: DatabaseDirectory
    package let intermediate: DatabaseDirectory
    let processing: DatabaseDirectory
    let failed: DatabaseDirectory
    let staging: DatabaseDirectory
    let runs: DatabaseDirectory
    let reports: DatabaseDirectory
    package let pending: DatabaseDirectory
    let completed: DatabaseDirectory

    /// Intermediate dumps waiting to be processed.
    public var intermediatePath: String { intermediate.path }
    /// Dumps claimed by a processor.
    public var processingPath: String { processing.path }
    /// Dumps that could not be processed, each with its reason.
    public var failedPath: String { failed.path }
    /// Staged hangs (`StagingArea`, docs/database.md "Staging"): never pruned.
    public var stagingPath: String { staging.path }
    /// Reports not yet uploaded (or kept when uploading is off).
    public var pendingReportsPath: String { pending.path }
    /// Reports uploaded or marked done.
    public var completedReportsPath: String { completed.path }

    static let settingsName = "settings.json"
    /// A database directory is one that contains our settings.json, or an empty one that we turn into one.
    static let leaf = TrustedPath.Leaf(markerName: settingsName, markerContents: nil, kind: "database",
                                       layout: ["intermediate", "processing", "failed", "staging", "reports", "runs"])
    static let maxSettingsBytes: Int64 = 64 << 10

    /// Opens the database at `path`, creating what is missing (directories 0700).
    public init(path: String, options: DatabaseOptions = DatabaseOptions()) throws {
        let normalized = path.count > 1 && path.hasSuffix("/") ? String(path.dropLast()) : path
        self.path = normalized
        self.options = options
        var opened: [DatabaseDirectory] = []
        do {
            let root = try TrustedPath.openDirectory(normalized, leaf: Self.leaf)
            opened.append(root)
            func sub(_ parent: DatabaseDirectory, _ name: String) throws -> DatabaseDirectory {
                let directory = try parent.openSubdirectory(name)
                opened.append(directory)
                return directory
            }
            let intermediate = try sub(root, "intermediate")
            let processing = try sub(root, "processing")
            let failed = try sub(root, "failed")
            let staging = try sub(root, "staging")
            let runs = try sub(root, "runs")
            let reports = try sub(root, "reports")
            let pending = try sub(reports, "pending")
            let completed = try sub(reports, "completed")
            let settings = try Self.loadOrCreateSettings(in: root)
            self.root = root
            self.intermediate = intermediate
            self.processing = processing
            self.failed = failed
            self.staging = staging
            self.runs = runs
            self.reports = reports
            self.pending = pending
            self.completed = completed
            self.clientID = settings.guid
            self.createdAt = settings.createdAt
        } catch {
            for directory in opened { close(directory.fd) }
            throw error
        }
    }

    deinit {
        for directory in [root, intermediate, processing, failed, staging, runs, reports, pending, completed] {
            close(directory.fd)
        }
    }

    struct Settings: Codable, Equatable {
        var guid: UUID
        var createdAt: Date
    }

    /// Two processes starting at once must agree on one client id: each writes a complete
    /// candidate to a private temporary file and link(2)s it to settings.json, which fails
    /// with EEXIST for every process but the first; the losers read the winner's file.
    private static func loadOrCreateSettings(in root: DatabaseDirectory) throws -> Settings {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        if try root.entry(settingsName) == nil {
            let now = Date(timeIntervalSince1970: Date().timeIntervalSince1970.rounded(.down))
            let candidate = Settings(guid: UUID(), createdAt: now)
            let bytes = try encoder.encode(candidate) + Data("\n".utf8)
            let temporary = try root.writeTemporary(for: settingsName) { file in try root.writeAll(file, bytes, name: settingsName) }
            let linked = linkat(root.fd, temporary, root.fd, settingsName, 0)
            let code = errno
            unlinkat(root.fd, temporary, 0)
            if linked == 0 {
                root.sync()
                return candidate
            }
            if code != EEXIST { throw root.fail("create", settingsName, code) }
        }
        let data = try root.readFile(settingsName, limit: maxSettingsBytes)
        if let settings = Settings(written: data) { return settings }
        do {
            return try decoder.decode(Settings.self, from: data)
        } catch {
            throw DatabaseError.corruptSettings(path: root.pathOf(settingsName), reason: "not valid settings JSON")
        }
    }
}

extension CrashReportDatabase.Settings {
    /// settings.json exactly as `loadOrCreateSettings` writes it (JSONEncoder, pretty-printed,
    /// sorted keys, whole seconds, a final newline), read without JSONDecoder, because JSONDecoder's
    /// first use in a process costs more than the rest of opening the database (2.3 M instructions of
    /// `hangwatch list`, docs/performance.md "7. CLI start-up"). Returns nil for any other bytes
    /// (another layout or spacing, fractional seconds, an offset, a year before 2000, a date that
    /// does not exist). Those are decoded by JSONDecoder as before, so what is accepted and how it
    /// is read are unchanged.
    init?(written data: Data) {
        let prefix = Array("{\n  \"createdAt\" : \"".utf8), middle = Array("\",\n  \"guid\" : \"".utf8)
        let suffix = Array("\"\n}\n".utf8)
        let dateLength = 20, uuidLength = 36  // 2026-11-23T06:22:19Z, DC891ABE-3253-459E-9577-F7C0C1D79704
        let bytes = [UInt8](data)
        guard bytes.count == prefix.count + dateLength + middle.count + uuidLength + suffix.count,
              bytes.starts(with: prefix), bytes[(bytes.count - suffix.count)...].elementsEqual(suffix) else { return nil }
        let dateStart = prefix.count, middleStart = dateStart + dateLength, uuidStart = middleStart + middle.count
        guard bytes[middleStart..<uuidStart].elementsEqual(middle),
              let createdAt = Self.date(bytes[dateStart..<middleStart]),
              let guid = UUID(uuidString: String(decoding: bytes[uuidStart..<(uuidStart + uuidLength)], as: UTF8.self))
        else { return nil }
        self.init(guid: guid, createdAt: createdAt)
    }

    /// YYYY-MM-DDTHH:MM:SSZ of a day that exists (2000…9999), as seconds since 1970.
    private static func date(_ text: ArraySlice<UInt8>) -> Date? {
        let text = Array(text)
        func number(_ start: Int, _ count: Int) -> Int? {
            var value = 0
            for byte in text[start..<(start + count)] {
                guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
                value = value * 10 + Int(byte - UInt8(ascii: "0"))
            }
            return value
        }
        guard text.count == 20, zip([4, 7, 10, 13, 16, 19], "--T::Z".utf8).allSatisfy({ text[$0] == $1 }),
              let year = number(0, 4), let month = number(5, 2), let day = number(8, 2),
              let hour = number(11, 2), let minute = number(14, 2), let second = number(17, 2),
              year >= 2000, (1...12).contains(month), hour < 24, minute < 60, second < 60
        else { return nil }
        let isLeap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
        let monthDays = [31, isLeap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
        guard (1...monthDays[month - 1]).contains(day) else { return nil }
        // Days from 1970-01-01 to the first of the year (2000 and later), then of the month.
        let yearsBefore = year - 1
        let days = 365 * (year - 1970) + (yearsBefore / 4 - yearsBefore / 100 + yearsBefore / 400) - 477
            + monthDays[..<(month - 1)].reduce(0, +) + day - 1
        return Date(timeIntervalSince1970: Double(((days * 24 + hour) * 60 + minute) * 60 + second))
    }
}
