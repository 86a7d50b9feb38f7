// What a reader reports instead of trapping, and the bounds it enforces.
import CHangwatchDump

public struct IntermediateDumpError: Error, Equatable, Sendable, CustomStringConvertible {
    public enum Reason: Equatable, Sendable {
        case io(errno: Int32)
        case notARegularFile
        case fileTooLarge(limit: Int)
        case truncatedHeader
        case badMagic
        case unsupportedFormatVersion(UInt32)
        case unsupportedSchemaVersion(UInt64)
        case versionNotFirst
        case unknownElementType(UInt8)
        case propertyTooLarge(key: UInt16, length: UInt64, limit: Int)
        case wrongValueSize(key: UInt16, length: UInt64)
        case wrongElementKind(key: UInt16)
        case onlyMapsInArrays
        case depthExceeded(limit: Int)
        case tooManyNodes(limit: Int)
        case tooManyArrayItems(limit: Int)
        case mismatchedEnd
        case endOfDocumentInsideContainer
        case trailingBytes(count: Int)
        case valueOutOfRange(key: UInt16, value: UInt64)
        case missingValue(key: UInt16)
    }

    /// Byte offset in the file of the element (or value) at fault.
    public var offset: Int
    public var reason: Reason

    public init(offset: Int, reason: Reason) {
        self.offset = offset
        self.reason = reason
    }

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
