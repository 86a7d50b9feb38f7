// The database's state lives in file names, so that every transition is one rename(2):
//   intermediate/<bundle>@<uuid>.locked                    being written (pre-opened)
//   intermediate/<bundle>@<uuid>.hwdump                    finished, never claimed
//   intermediate/<bundle>@<uuid>~<kind>~<tries>.hwdump      released after a failed attempt
//   processing/<bundle>@<uuid>~<kind>~<tries>~<claimer>.claim
//   failed/<bundle>@<uuid>~<kind>~<tries>.hwdump            gave up after too many attempts
// `@` cannot occur in a bundle id, so the first `@` splits the name (RecordName in LeasedRecord.swift
// is the only codec of `<bundle>@<uuid>…`). Only this file writes the fields after the uuid.
import HangwatchSnapshot
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

package enum DatabaseNames {
    static let lockedSuffix = ".locked"
    static let dumpSuffix = ".hwdump"
    static let claimSuffix = ".claim"
    static let temporaryPrefix = ".tmp-"
    /// NAME_MAX (255) minus the longest suffix a claim name adds after the bundle id (~110 bytes).
    static let maxBundleIDBytes = 128
    static let maxReportIDBytes = 64

    package static func validateBundleID(_ id: String) throws {
        func refuse(_ reason: String) -> DatabaseError { .invalidBundleID(id, reason: reason) }
        if id.isEmpty { throw refuse("it is empty") }
        if id.utf8.count > maxBundleIDBytes {
            throw refuse("it is \(id.utf8.count) bytes long, more than \(maxBundleIDBytes) (file names are limited to 255 bytes)")
        }
        if id == "." || id == ".." { throw refuse("it is a directory reference") }
        if id.hasPrefix(".") { throw refuse("it starts with '.' (hidden and temporary files start with '.')") }
        if id.contains("..") { throw refuse("it contains '..'") }
        for scalar in id.unicodeScalars {
            switch scalar {
            case "/": throw refuse("it contains '/'")
            case "@": throw refuse("it contains '@', which separates the bundle id from the dump id")
            case "\0": throw refuse("it contains a NUL byte")
            default:
                if scalar.value < 0x20 || scalar.value == 0x7f || (0x80...0x9f).contains(scalar.value) {
                    throw refuse("it contains the control character U+\(String(scalar.value, radix: 16, uppercase: true))")
                }
            }
        }
    }

    /// Report ids are UUID-like: letters, digits, '-' and '_' only, so they can never name a path.
    package static func validateReportID(_ id: String) throws {
        func refuse(_ reason: String) -> DatabaseError { .invalidReportID(id, reason: reason) }
        if id.isEmpty { throw refuse("it is empty") }
        if id.utf8.count > maxReportIDBytes { throw refuse("it is longer than \(maxReportIDBytes) bytes") }
        if id.hasPrefix("-") { throw refuse("it starts with '-'") }
        for byte in id.utf8 {
            let ok = (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5a) || (byte >= 0x61 && byte <= 0x7a)
                || byte == 0x2d || byte == 0x5f
            if !ok { throw refuse("only letters, digits, '-' and '_' are allowed") }
        }
    }

    /// `.tmp-<final>-<pid>-<random>`: hidden (listings skip it), unique across processes.
    static func temporaryName(for finalName: String) -> String {
        "\(temporaryPrefix)\(finalName)-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
    }

    /// The final name a `.tmp-<final>-<pid>-<random>` temporary was being written for.
    package static func finalName(ofTemporary name: String) -> String? {
        guard name.hasPrefix(DatabaseNames.temporaryPrefix) else { return nil }
        let parts = name.dropFirst(DatabaseNames.temporaryPrefix.count).split(separator: "-", omittingEmptySubsequences: false)
        guard parts.count >= 3, UInt32(parts[parts.count - 1]) != nil, Int32(parts[parts.count - 2]) != nil else { return nil }
        let final = parts.dropLast(2).joined(separator: "-")
        return final.isEmpty ? nil : final
    }
}

/// Identifies a dump, whatever its file is currently called: its bundle id and uuid (a staged
/// hang's dump retains the hang's bundle id and uuid; see HangPromotion). The uuid is compared as
/// a UUID, so how a name spells it (a staged hang's lowercase id, a promoted dump's uppercase one)
/// does not matter.
package struct DumpKey: Sendable, Hashable {
    package let bundleID: String
    package let uuid: UUID

    package init(bundleID: String, uuid: UUID) {
        self.bundleID = bundleID
        self.uuid = uuid
    }
}

/// The information that a dump's name encodes (everything except its location).
package struct DumpName: Sendable, Equatable {
    enum State: Sendable, Equatable { case locked, finished }
    /// Its bundle id and uuid, the uuid as spelled in the file name (kept verbatim so names round-trip exactly).
    var record: RecordName
    var abandoned: Bool
    /// How many times a processor has claimed this dump so far.
    var attempts: Int

    var bundleID: String { record.bundleID }
    var uuidText: String { record.id }
    /// A parsed name's id is a UUID (RecordName.parse checks it).
    var key: DumpKey { DumpKey(bundleID: bundleID, uuid: UUID(uuidString: uuidText)!) }

    /// `<bundle>@<uuid>.locked`, `<bundle>@<uuid>.hwdump` or `<bundle>@<uuid>~<a|f>~<n>.hwdump`.
    static func parseIntermediate(_ name: String) -> (DumpName, State)? {
        guard let (record, tail) = RecordName.parse(name) else { return nil }
        if tail == DatabaseNames.lockedSuffix {
            return (DumpName(record: record, abandoned: false, attempts: 0), .locked)
        }
        guard let fields = RecordName.fields(of: tail, suffix: DatabaseNames.dumpSuffix) else { return nil }
        if fields.isEmpty { return (DumpName(record: record, abandoned: false, attempts: 0), .finished) }
        guard fields.count == 2, let kind = parseKind(fields[0]), let attempts = Int(fields[1]), attempts >= 0 else { return nil }
        return (DumpName(record: record, abandoned: kind, attempts: attempts), .finished)
    }

    /// `<bundle>@<uuid>~<kind>~<tries>~<claimer fields>~<time>.claim`
    static func parseClaim(_ name: String) -> (DumpName, RecordOwner, claimedAt: Date)? {
        guard let (record, tail) = RecordName.parse(name),
              let fields = RecordName.fields(of: tail, suffix: DatabaseNames.claimSuffix),
              fields.count == 7, let kind = parseKind(fields[0]), let attempts = Int(fields[1]),
              let claimer = RecordOwner(fields: Array(fields[2...5])),
              let seconds = Int64(fields[6]) else { return nil }
        return (DumpName(record: record, abandoned: kind, attempts: attempts), claimer, Date(timeIntervalSince1970: Double(seconds)))
    }

    var lockedName: String { record.fileName(DatabaseNames.lockedSuffix) }
    package var finishedName: String { record.fileName(DatabaseNames.dumpSuffix) }
    /// The name used once a processor has tried the dump. It retains the attempt count and the abandoned flag.
    var triedName: String { record.fileName("~\(abandoned ? "a" : "f")~\(attempts)\(DatabaseNames.dumpSuffix)") }

    func claimName(by claimer: RecordOwner, at date: Date) -> String {
        let seconds = Int64(date.timeIntervalSince1970.rounded(.down))
        return record.fileName("~\(abandoned ? "a" : "f")~\(attempts)~\(claimer.fields)~\(seconds)\(DatabaseNames.claimSuffix)")
    }

    private static func parseKind(_ field: Substring) -> Bool? {
        switch field {
        case "a": return true
        case "f": return false
        default: return nil
        }
    }
}

extension CrashReportDatabase {
    /// Throws `DatabaseError.invalidBundleID` (with the reason) for an id that cannot name dumps:
    /// empty, longer than 128 bytes, with '/', '@', '..', a leading '.', NUL or control characters.
    public static func validateBundleID(_ id: String) throws {
        try DatabaseNames.validateBundleID(id)
    }
}
