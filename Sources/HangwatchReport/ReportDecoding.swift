import HangwatchSymbolication
import HangwatchDatabase
import HangwatchSnapshot
import Foundation

public enum ReportDecodingError: Error, Equatable, CustomStringConvertible {
    /// Not JSON at all (truncated, binary, empty).
    case notJSON(String)
    /// JSON, but not a hangwatch report (no integer `schemaVersion` at the top level).
    case notAReport
    /// A report of a schema this build does not read.
    case unsupportedSchemaVersion(Int)
    /// The right schema version, but keys are missing or have the wrong type.
    case malformed(String)

    public var description: String {
        switch self {
        case .notJSON(let detail): return "not a report: the data is not valid JSON (\(detail))"
        case .notAReport: return "not a report: no integer \"schemaVersion\" key at the top level"
        case .unsupportedSchemaVersion(let version):
            return "unsupported report schemaVersion \(version) (this build reads \(Report.currentSchemaVersion))"
        case .malformed(let detail): return "malformed report: \(detail)"
        }
    }
}

extension Report {
    /// Decodes a report produced by `ReportRenderer.json`. Unknown keys are ignored (later
    /// additive schema changes); a wrong schemaVersion or broken document is a clear error.
    public static func decode(from data: Data) throws -> Report {
        let object: Any
        do {
            object = try JSONSerialization.jsonObject(with: data, options: [])
        } catch {
            throw ReportDecodingError.notJSON(Self.shortDescription(of: error))
        }
        guard let top = object as? [String: Any], let versionNumber = top["schemaVersion"] as? NSNumber,
              let version = Int(exactly: versionNumber.doubleValue) else {
            throw ReportDecodingError.notAReport
        }
        guard version == currentSchemaVersion else { throw ReportDecodingError.unsupportedSchemaVersion(version) }
        do {
            return try JSONDecoder().decode(Report.self, from: data)
        } catch let error as DecodingError {
            throw ReportDecodingError.malformed(Self.describe(error))
        }
    }

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

    private static func shortDescription(of error: Error) -> String {
        let text = (error as NSError).userInfo[NSDebugDescriptionErrorKey] as? String ?? error.localizedDescription
        return String(text.prefix(200))
    }
}
