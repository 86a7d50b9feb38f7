// What a reader reports instead of trapping, and the bounds it enforces.
import CHangwatchDump

/// Why an intermediate dump could not be read, and where in the file.
public struct IntermediateDumpError: Error, Equatable, Sendable, CustomStringConvertible {
    /// What was wrong (docs/intermediate-dump-format.md describes what is valid).
    public enum Reason: Equatable, Sendable {
        /// Reading the file failed with `errno`.
        case io(errno: Int32)
        /// The path is not a regular file (or is a symbolic link).
        case notARegularFile
        /// The file is larger than the reader accepts.
        case fileTooLarge(limit: Int)
        /// The file ends inside its header.
        case truncatedHeader
        /// The file does not start with the format's magic bytes.
        case badMagic
        /// A format version this build cannot read.
        case unsupportedFormatVersion(UInt32)
        /// A schema version this build cannot read.
        case unsupportedSchemaVersion(UInt64)
        /// The document does not start with its schema version.
        case versionNotFirst
        /// An element type byte the format does not have.
        case unknownElementType(UInt8)
        /// A property longer than the reader's limit for it.
        case propertyTooLarge(key: UInt16, length: UInt64, limit: Int)
        /// A fixed-size value of the wrong length.
        case wrongValueSize(key: UInt16, length: UInt64)
        /// A key holding a different kind of element than the schema specifies.
        case wrongElementKind(key: UInt16)
        /// An array item that is not a map.
        case onlyMapsInArrays
        /// Containers nested deeper than the reader's limit.
        case depthExceeded(limit: Int)
        /// More elements than the reader's limit.
        case tooManyNodes(limit: Int)
        /// An array with more items than the reader's limit.
        case tooManyArrayItems(limit: Int)
        /// A container ended by the wrong end marker.
        case mismatchedEnd
        /// The document ends with a container still open.
        case endOfDocumentInsideContainer
        /// Bytes after the end of the document.
        case trailingBytes(count: Int)
        /// A value outside the range its key allows.
        case valueOutOfRange(key: UInt16, value: UInt64)
        /// A required key is absent.
        case missingValue(key: UInt16)
    }

    /// Byte offset in the file of the element (or value) at fault.
    public var offset: Int
    /// What was wrong there.
    public var reason: Reason

    /// An error at `offset`.
    public init(offset: Int, reason: Reason) {
        self.offset = offset
        self.reason = reason
    }

    /// `malformed intermediate dump at offset N: REASON`.
    public var description: String { "malformed intermediate dump at offset \(offset): \(reason)" }
}

/// Bounds that keep a hostile or corrupt file from costing unbounded memory or time.
package struct IntermediateDumpLimits: Sendable, Equatable {
    package var maxFileSize: Int = 256 << 20
    package var maxDepth: Int = Int(HWD_MAX_DEPTH)
    package var maxPropertySize: Int = Int(HWD_MAX_PROPERTY_SIZE)
    /// Maps, arrays and properties, all counted.
    package var maxNodes: Int = 2_000_000
    package var maxArrayItems: Int = 500_000

    package init() {}
    package static let standard = IntermediateDumpLimits()
}
