import HangwatchSymbolication
import HangwatchSnapshot
import FoundationEssentials

/// Why a report's JSON could not be read.
public enum ReportDecodingError: Error, Equatable, CustomStringConvertible {
    /// Not JSON at all (truncated, binary, empty).
    case notJSON(String)
    /// JSON, but not a hangwatch report (no integer `schemaVersion` at the top level).
    case notAReport
    /// A report of a schema this build does not read.
    case unsupportedSchemaVersion(Int)
    /// The right schema version, but keys are missing or have the wrong type.
    case malformed(String)

    /// What went wrong, in a sentence.
    public var description: String {
        switch self {
        case .notJSON(let detail): return "not a report: the data is not valid JSON (\(detail))"
        case .notAReport: return "not a report: no integer \"schemaVersion\" key at the top level"
        case .unsupportedSchemaVersion(let version):
            let readable = Report.readableSchemaVersions
            return "unsupported report schemaVersion \(version) (this build reads \(readable.lowerBound) to \(readable.upperBound))"
        case .malformed(let detail): return "malformed report: \(detail)"
        }
    }
}

extension Report {
    /// Decodes a report produced by `ReportRenderer.json`. Unknown keys are ignored (later
    /// additive schema changes); a wrong schemaVersion or broken document is a clear error.
    public static func decode(from data: Data) throws -> Report {
        let header: Header
        do {
            header = try JSONDecoder().decode(Header.self, from: data)
        } catch DecodingError.dataCorrupted(let context) where context.codingPath.isEmpty {
            throw ReportDecodingError.notJSON(Self.shortDescription(of: context))
        } catch {
            throw ReportDecodingError.notAReport  // valid JSON, but not an object with a schemaVersion
        }
        guard let version = header.schemaVersion else { throw ReportDecodingError.notAReport }
        guard readableSchemaVersions.contains(version) else { throw ReportDecodingError.unsupportedSchemaVersion(version) }
        do {
            return try JSONDecoder().decode(Report.self, from: data)
        } catch let error as DecodingError {
            throw ReportDecodingError.malformed(Self.describe(error))
        }
    }

    /// Read first, so a report of another schema version is named as such, not as malformed.
    private struct Header: Decodable { var schemaVersion: Int? }

    private static func describe(_ error: DecodingError) -> String {
        func path(_ context: DecodingError.Context) -> String {
            let keys = context.codingPath.map { $0.intValue.map { "[\($0)]" } ?? ".\($0.stringValue)" }.joined()
            return keys.isEmpty ? "top level" : String(keys.drop { $0 == "." })
        }
        switch error {
        case .keyNotFound(let key, let context):
            let parent = path(context)
            return "missing key \"\(key.stringValue)\"" + (context.codingPath.isEmpty ? "" : " in \(parent)")
        case .typeMismatch(let type, let context): return "\(path(context)): expected \(type)"
        case .valueNotFound(let type, let context): return "\(path(context)): null where \(type) is required"
        case .dataCorrupted(let context): return "\(path(context)): \(context.debugDescription)"
        @unknown default: return String(describing: error)
        }
    }

    private static func shortDescription(of context: DecodingError.Context) -> String {
        var text = context.debugDescription
        if let underlying = context.underlyingError { text += " (\(underlying))" }
        return String(text.prefix(200))
    }
}
