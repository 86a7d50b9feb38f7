// Little-endian byte assembly for minidumps: append fixed-layout records, patch RVAs later.
// Every layout here is Microsoft's MINIDUMP_* (pack 4) or Breakpad/Crashpad's extension.
import HangwatchSnapshot
import HangwatchDatabase
import HangwatchReport

/// Where a blob lives in the file (MINIDUMP_LOCATION_DESCRIPTOR).
struct MinidumpLocation: Equatable {
    var size: UInt32
    var rva: UInt32
    static let none = MinidumpLocation(size: 0, rva: 0)
}

struct MinidumpBuffer {
    private(set) var bytes: [UInt8] = []

    var offset: UInt32 { UInt32(bytes.count) }

    mutating func u8(_ value: UInt8) { bytes.append(value) }
    mutating func u16(_ value: UInt16) { withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) } }
    mutating func u32(_ value: UInt32) { withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) } }
    mutating func u64(_ value: UInt64) { withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) } }
    mutating func zeros(_ count: Int) { bytes.append(contentsOf: repeatElement(0, count: count)) }
    mutating func raw(_ data: [UInt8]) { bytes.append(contentsOf: data) }
    mutating func location(_ location: MinidumpLocation) {
        u32(location.size)
        u32(location.rva)
    }

    mutating func align(_ boundary: Int) {
        let remainder = bytes.count % boundary
        if remainder != 0 { zeros(boundary - remainder) }
    }

    mutating func patch32(at position: UInt32, _ value: UInt32) {
        withUnsafeBytes(of: value.littleEndian) { source in
            for (index, byte) in source.enumerated() { bytes[Int(position) + index] = byte }
        }
    }

    /// Appends `data` (8-aligned) and returns where it was placed.
    mutating func blob(_ data: [UInt8]) -> MinidumpLocation {
        align(8)
        let rva = offset
        raw(data)
        return MinidumpLocation(size: UInt32(data.count), rva: rva)
    }

    /// MINIDUMP_STRING: byte length, UTF-16LE, a 16-bit NUL not counted in the length.
    mutating func minidumpString(_ text: String) -> UInt32 {
        align(4)
        let rva = offset
        let units = Array(text.utf16)
        u32(UInt32(units.count * 2))
        for unit in units { u16(unit) }
        u16(0)
        return rva
    }

    /// Crashpad's MinidumpUTF8String: byte length, UTF-8, a NUL not counted in the length.
    mutating func utf8String(_ text: String) -> UInt32 {
        align(4)
        let rva = offset
        let utf8 = Array(text.utf8)
        u32(UInt32(utf8.count))
        raw(utf8)
        u8(0)
        return rva
    }
}

/// Stream types used here (MINIDUMP_STREAM_TYPE, Breakpad's 0x4767…, Crashpad's 0x4350…).
enum MinidumpStreamType: UInt32 {
    case threadList = 3
    case moduleList = 4
    case memoryList = 5
    case exception = 6
    case systemInfo = 7
    case threadNameList = 24
    case linuxCPUInfo = 0x4767_0003
    case linuxProcStatus = 0x4767_0004
    case linuxCmdLine = 0x4767_0006
    case linuxMaps = 0x4767_0009
    case crashpadInfo = 0x4350_0001
}

enum MinidumpConstants {
    static let signature: UInt32 = 0x504d_444d          // "MDMP"
    static let version: UInt32 = 0xa793                 // MINIDUMP_VERSION
    static let platformLinux: UInt32 = 0x8201           // Breakpad's MD_OS_LINUX
    #if arch(x86_64)
    static let processorArchitecture: UInt16 = 9        // PROCESSOR_ARCHITECTURE_AMD64
    static let processorLevel: UInt16 = 6               // the family, as Breakpad reports x86-64
    static let contextArchitecture: UInt32 = 0x0010_0000  // CONTEXT_AMD64
    static let contextSize = 1232                       // sizeof(CONTEXT) on x86-64
    #elseif arch(arm64)
    static let processorArchitecture: UInt16 = 12       // PROCESSOR_ARCHITECTURE_ARM64
    static let processorLevel: UInt16 = 0
    static let contextArchitecture: UInt32 = 0x0040_0000  // CONTEXT_ARM64
    static let contextSize = 0x390                      // sizeof(CONTEXT) on ARM64
    #else
    #error("hangwatch: unsupported architecture: add its minidump context (MinidumpWriter.context)")
    #endif
    static let contextControl: UInt32 = contextArchitecture | 0x1
    static let contextInteger: UInt32 = contextArchitecture | 0x2
    static let codeViewBuildID: UInt32 = 0x4270_454c    // "BpEL": CodeView record holding an ELF build-id
    static let threadRecordSize = 48
    static let moduleRecordSize = 108
    static let crashpadInfoVersion: UInt32 = 1
}
