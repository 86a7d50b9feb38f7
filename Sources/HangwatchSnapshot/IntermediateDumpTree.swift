// Bytes → a generic tree of properties, maps and arrays. Bounded in depth, node count,
// array length and value size; never recursive beyond `maxDepth`. A file that simply stops
// (the writer was killed) parses as an incomplete tree; anything else odd is an error.
import CHangwatchDump

package struct IntermediateDumpNode: Sendable, Equatable {
    package enum Kind: Sendable, Equatable { case property, map, array }

    package var kind: Kind
    package var key: UInt16
    /// Offset of the element's first byte in the file.
    package var offset: Int
    /// A property's value (a slice of the file's bytes); empty for containers.
    package var value: ArraySlice<UInt8>
    /// A map's properties and containers, or an array's maps.
    package var children: [IntermediateDumpNode]
    /// False for a container whose end marker was never written (the file was cut inside it).
    package var complete: Bool

    init(kind: Kind, key: UInt16, offset: Int, value: ArraySlice<UInt8> = [], complete: Bool = true) {
        self.kind = kind
        self.key = key
        self.offset = offset
        self.value = value
        self.children = []
        self.complete = complete
    }
}

package struct IntermediateDumpTree: Sendable, Equatable {
    /// The header's framing version (HWD_FORMAT_VERSION).
    package var formatVersion: UInt32
    /// Top-level elements, the version property first.
    package var root: [IntermediateDumpNode]
    /// True when the EndDocument marker was read: nothing was cut.
    package var complete: Bool
}

enum IntermediateDumpParser {
    static func parse(_ bytes: [UInt8], limits: IntermediateDumpLimits) throws(IntermediateDumpError) -> IntermediateDumpTree {
        let headerSize = Int(HWD_HEADER_SIZE)
        guard bytes.count >= headerSize else { throw IntermediateDumpError(offset: 0, reason: .truncatedHeader) }
        let magic = Array(HWD_MAGIC.utf8) + [0]
        guard bytes[0..<magic.count].elementsEqual(magic) else { throw IntermediateDumpError(offset: 0, reason: .badMagic) }
        let formatVersion = readU32(bytes, at: magic.count)
        guard formatVersion == HWD_FORMAT_VERSION else {
            throw IntermediateDumpError(offset: magic.count, reason: .unsupportedFormatVersion(formatVersion))
        }

        // stack[0] is the document itself, an implicit map.
        var stack = [IntermediateDumpNode(kind: .map, key: 0, offset: headerSize)]
        var position = headerSize
        var nodeCount = 0
        var complete = false
        var sawFirstElement = false

        func fail(_ reason: IntermediateDumpError.Reason, at offset: Int) -> IntermediateDumpError {
            IntermediateDumpError(offset: offset, reason: reason)
        }
        func countNode(at offset: Int) throws(IntermediateDumpError) {
            nodeCount += 1
            if nodeCount > limits.maxNodes { throw fail(.tooManyNodes(limit: limits.maxNodes), at: offset) }
        }

        parsing: while position < bytes.count {
            let start = position
            let type = bytes[position]
            let parentIsArray = stack[stack.count - 1].kind == .array
            if !sawFirstElement, type != UInt8(HWD_ELEMENT_PROPERTY.rawValue) {
                throw fail(.versionNotFirst, at: start)
            }

            switch UInt32(type) {
            case HWD_ELEMENT_PROPERTY.rawValue:
                guard bytes.count - position >= Int(HWD_PROPERTY_HEADER_SIZE) else { break parsing }
                let key = readU16(bytes, at: position + 1)
                let length = UInt64(readU32(bytes, at: position + 3))
                if !sawFirstElement {
                    guard key == HWD_KEY_VERSION.wire else { throw fail(.versionNotFirst, at: start) }
                    sawFirstElement = true
                }
                if parentIsArray { throw fail(.onlyMapsInArrays, at: start) }
                if length > UInt64(limits.maxPropertySize) {
                    throw fail(.propertyTooLarge(key: key, length: length, limit: limits.maxPropertySize), at: start)
                }
                if let kind = IntermediateDumpSchema.kind(of: key) {
                    if kind.isContainer { throw fail(.wrongElementKind(key: key), at: start) }
                    if let size = kind.fixedSize, length != UInt64(size) {
                        throw fail(.wrongValueSize(key: key, length: length), at: start)
                    }
                    if kind == .u64Array, length % 8 != 0 { throw fail(.wrongValueSize(key: key, length: length), at: start) }
                }
                let valueStart = position + Int(HWD_PROPERTY_HEADER_SIZE)
                // A value running past the end is a cut file, not corruption: a hostile length
                // is already bounded by maxPropertySize and the key's expected size.
                guard bytes.count - valueStart >= Int(length) else { break parsing }
                try countNode(at: start)
                let end = valueStart + Int(length)
                stack[stack.count - 1].children.append(
                    IntermediateDumpNode(kind: .property, key: key, offset: start, value: bytes[valueStart..<end]))
                position = end

            case HWD_ELEMENT_START_MAP.rawValue, HWD_ELEMENT_START_ARRAY.rawValue:
                guard bytes.count - position >= Int(HWD_CONTAINER_HEADER_SIZE) else { break parsing }
                let key = readU16(bytes, at: position + 1)
                let kind: IntermediateDumpNode.Kind = UInt32(type) == HWD_ELEMENT_START_MAP.rawValue ? .map : .array
                if parentIsArray {
                    guard kind == .map else { throw fail(.onlyMapsInArrays, at: start) }
                    if stack[stack.count - 1].children.count >= limits.maxArrayItems {
                        throw fail(.tooManyArrayItems(limit: limits.maxArrayItems), at: start)
                    }
                } else if let expected = IntermediateDumpSchema.kind(of: key),
                          expected != (kind == .map ? .map : .array) {
                    throw fail(.wrongElementKind(key: key), at: start)
                }
                if stack.count > limits.maxDepth { throw fail(.depthExceeded(limit: limits.maxDepth), at: start) }
                try countNode(at: start)
                stack.append(IntermediateDumpNode(kind: kind, key: key, offset: start, complete: false))
                position += Int(HWD_CONTAINER_HEADER_SIZE)

            case HWD_ELEMENT_END_MAP.rawValue, HWD_ELEMENT_END_ARRAY.rawValue:
                let kind: IntermediateDumpNode.Kind = UInt32(type) == HWD_ELEMENT_END_MAP.rawValue ? .map : .array
                guard stack.count > 1, stack[stack.count - 1].kind == kind else { throw fail(.mismatchedEnd, at: start) }
                var finished = stack.removeLast()
                finished.complete = true
                stack[stack.count - 1].children.append(finished)
                position += 1

            case HWD_ELEMENT_END_DOCUMENT.rawValue:
                guard stack.count == 1 else { throw fail(.endOfDocumentInsideContainer, at: start) }
                position += 1
                if position != bytes.count { throw fail(.trailingBytes(count: bytes.count - position), at: position) }
                complete = true
                break parsing

            default:
                throw fail(.unknownElementType(type), at: start)
            }
        }

        // Cut file: close what was open, marked incomplete; a partly written element is dropped.
        while stack.count > 1 {
            let open = stack.removeLast()
            stack[stack.count - 1].children.append(open)
        }
        return IntermediateDumpTree(formatVersion: formatVersion, root: stack[0].children, complete: complete)
    }

    static func readU16(_ bytes: [UInt8], at offset: Int) -> UInt16 {
        UInt16(bytes[offset]) | UInt16(bytes[offset + 1]) << 8
    }

    static func readU32(_ bytes: [UInt8], at offset: Int) -> UInt32 {
        (0..<4).reduce(UInt32(0)) { $0 | UInt32(bytes[offset + $1]) << (8 * UInt32($1)) }
    }
}
