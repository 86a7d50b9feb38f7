// ProcessSnapshot → minidump (MDMP), the format lldb, rust-minidump, Breakpad and Crashpad
// servers read. Streams and codes: docs/minidump.md.
import HangwatchPlatform
import HangwatchReport
import HangwatchDatabase
import HangwatchSnapshot
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// Facts a minidump carries that the snapshot does not.
package struct MinidumpMetadata: Sendable, Equatable {
    /// Written as Crashpad's report_id.
    package var reportID: UUID?
    /// Written as Crashpad's client_id (the database's `clientID`).
    package var clientID: UUID?

    package init(reportID: UUID? = nil, clientID: UUID? = nil) {
        self.reportID = reportID
        self.clientID = clientID
    }
}

package enum MinidumpWriter {
    /// Exception code of a report that is not a crash (a requested dump, a hang): Breakpad's
    /// MD_EXCEPTION_CODE_LIN_DUMP_REQUESTED. Readers show no stop reason for it; any code that
    /// is not a signal number makes lldb 15 wait forever for the "process" to stop.
    package static let dumpRequestedExceptionCode: UInt32 = 0xffff_ffff
    /// For hangs, the first exception parameter (ExceptionInformation[0]) marks it as a hang: Apple's
    /// watchdog code; the second is the hang's duration in milliseconds.
    package static let hangMarker: UInt64 = 0x8bad_f00d
    /// For a process killed from outside, the first exception parameter is this marker ("KILL"
    /// in ASCII), the second the cause (1 an OOM killer, 2 a signal from outside, 0 unknown), the
    /// third the signal (0: not known). The code stays `dumpRequestedExceptionCode`: a killed
    /// report has no thread, and lldb 15 crashes on a signal code whose thread is not in the list.
    package static let killedMarker: UInt64 = 0x4b49_4c4c

    /// The thread the Exception stream names: the crashed thread, the hung one (else the
    /// main-queue or main thread), or for a requested dump the requester (else the main thread).
    package static func exceptionThread(of snapshot: ProcessSnapshot) -> ThreadSnapshot? {
        let preferred: [ThreadRoles]
        switch snapshot.reason {
        case .crash(let signal):
            if let thread = snapshot.threads.first(where: { $0.tid == signal.tid }) { return thread }
            preferred = [.crashed]
        case .hang: preferred = [.hung, .mainQueue, .mainThread]
        case .dumpRequested, .killed: preferred = [.requester, .mainThread]
        }
        for role in preferred {
            if let thread = snapshot.threads.first(where: { $0.roles.contains(role) }) { return thread }
        }
        return snapshot.threads.first
    }

    /// A time as the header's 32-bit seconds: whatever value a dump contains (NaN, negative, 1e300)
    /// becomes a value in range, never a trap (found by scripts/fuzz minidump).
    static func seconds32(_ time: Double) -> UInt32 {
        guard time.isFinite, time > 0 else { return 0 }
        return time >= Double(UInt32.max) ? UInt32.max : UInt32(time)
    }

    /// A duration in whole milliseconds, clamped the same way.
    static func milliseconds64(_ seconds: Double) -> UInt64 {
        let milliseconds = seconds * 1000
        guard milliseconds.isFinite, milliseconds > 0 else { return 0 }
        return milliseconds >= Double(UInt64.max) ? UInt64.max : UInt64(milliseconds)
    }

    /// The whole minidump. Threads without stack bytes get an empty stack range; threads
    /// without registers get a context with only rip (their first frame, if any).
    package static func minidump(from snapshot: ProcessSnapshot, metadata: MinidumpMetadata = MinidumpMetadata()) -> [UInt8] {
        // The exception thread goes first: readers select thread #1 when the exception code
        // gives no stop reason (requested dumps, hangs), so the hung thread is the one shown.
        var snapshot = snapshot
        if let first = exceptionThread(of: snapshot), let index = snapshot.threads.firstIndex(where: { $0.tid == first.tid }) {
            snapshot.threads.insert(snapshot.threads.remove(at: index), at: 0)
        }
        var out = MinidumpBuffer()
        var directory: [(MinidumpStreamType, MinidumpLocation)] = []
        let streamCount = 11
        // Header; the directory follows at once and is filled in at the end.
        out.u32(MinidumpConstants.signature)
        out.u32(MinidumpConstants.version)
        out.u32(UInt32(streamCount))
        out.u32(32)
        out.u32(0)
        out.u32(Self.seconds32(snapshot.timestamp))
        out.u64(0)
        out.zeros(streamCount * 12)

        // Contexts and stacks first: the thread, memory and exception streams point at them.
        var contexts: [MinidumpLocation] = []
        var stacks: [(start: UInt64, location: MinidumpLocation)] = []
        for thread in snapshot.threads {
            contexts.append(out.blob(context(for: thread)))
            let start = thread.registers?.sp ?? 0
            stacks.append((start, thread.stackMemory.isEmpty ? .none : out.blob(thread.stackMemory)))
        }

        directory.append((.threadList, stream(&out) { out in
            out.u32(UInt32(snapshot.threads.count))
            for (index, thread) in snapshot.threads.enumerated() {
                out.u32(UInt32(bitPattern: thread.tid))
                out.u32(0)                        // suspend count
                out.u32(0)                        // priority class
                out.u32(0)                        // priority
                out.u64(0)                        // TEB: none on Linux
                out.u64(stacks[index].start)
                out.location(stacks[index].location)
                out.location(contexts[index])
            }
        }))

        let ranges = stacks.filter { $0.location.size > 0 }
        directory.append((.memoryList, stream(&out) { out in
            out.u32(UInt32(ranges.count))
            for range in ranges {
                out.u64(range.start)
                out.location(range.location)
            }
        }))

        directory.append((.moduleList, moduleList(snapshot.modules, into: &out)))
        directory.append((.systemInfo, systemInfo(into: &out)))

        let exceptionThread = exceptionThread(of: snapshot)
        let exceptionContext = exceptionThread.flatMap { thread in
            snapshot.threads.firstIndex(where: { $0.tid == thread.tid }).map { contexts[$0] }
        } ?? .none
        directory.append((.exception, stream(&out) { out in
            exceptionStream(snapshot, thread: exceptionThread, context: exceptionContext, into: &out)
        }))

        let nameRVAs = snapshot.threads.map { out.minidumpString($0.name) }
        directory.append((.threadNameList, stream(&out) { out in
            out.u32(UInt32(snapshot.threads.count))
            for (thread, rva) in zip(snapshot.threads, nameRVAs) {
                out.u32(UInt32(bitPattern: thread.tid))
                out.u64(UInt64(rva))
            }
        }))

        directory.append((.linuxProcStatus, out.blob(Array(procStatus(snapshot).utf8))))
        directory.append((.linuxCmdLine, out.blob(cmdline(snapshot.process))))
        directory.append((.linuxMaps, out.blob(Array(maps(snapshot, stacks: stacks).utf8))))
        directory.append((.linuxCPUInfo, out.blob(cpuInfo())))
        directory.append((.crashpadInfo, crashpadInfo(snapshot.reportedAnnotations, metadata: metadata, into: &out)))
        precondition(directory.count == streamCount)
        for (index, entry) in directory.enumerated() {
            let position = UInt32(32 + index * 12)
            out.patch32(at: position, entry.0.rawValue)
            out.patch32(at: position + 4, entry.1.size)
            out.patch32(at: position + 8, entry.1.rva)
        }
        return out.bytes
    }

    // MARK: - Streams

    private static func stream(_ out: inout MinidumpBuffer, _ body: (inout MinidumpBuffer) -> Void) -> MinidumpLocation {
        out.align(8)
        let start = out.offset
        body(&out)
        return MinidumpLocation(size: out.offset - start, rva: start)
    }

    /// The thread's CONTEXT, one layout per architecture (hw_registers.h's): control and
    /// integer registers; without registers, only the pc (its first frame).
    static func context(for thread: ThreadSnapshot) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: MinidumpConstants.contextSize)
        func put32(_ offset: Int, _ value: UInt32) {
            withUnsafeBytes(of: value.littleEndian) { for (i, b) in $0.enumerated() { bytes[offset + i] = b } }
        }
        func put64(_ offset: Int, _ value: UInt64) {
            withUnsafeBytes(of: value.littleEndian) { for (i, b) in $0.enumerated() { bytes[offset + i] = b } }
        }
        #if arch(x86_64)
        // CONTEXT_AMD64: flags at 0x30, cs 0x38, ss 0x42, eflags 0x44, rax… at 0x78, rip 0xf8.
        put32(0x30, MinidumpConstants.contextControl | MinidumpConstants.contextInteger)
        guard let registers = thread.registers else {
            put64(0xf8, thread.frames.first ?? 0)
            return bytes
        }
        bytes[0x38] = 0x33                                  // user code segment, as the kernel reports it
        bytes[0x42] = 0x2b                                  // user stack segment
        put32(0x44, UInt32(truncatingIfNeeded: registers["rflags"] ?? 0))
        let offsets: [(String, Int)] = [
            ("rax", 0x78), ("rcx", 0x80), ("rdx", 0x88), ("rbx", 0x90), ("rsp", 0x98), ("rbp", 0xa0),
            ("rsi", 0xa8), ("rdi", 0xb0), ("r8", 0xb8), ("r9", 0xc0), ("r10", 0xc8), ("r11", 0xd0),
            ("r12", 0xd8), ("r13", 0xe0), ("r14", 0xe8), ("r15", 0xf0), ("rip", 0xf8),
        ]
        for (name, offset) in offsets { put64(offset, registers[name] ?? 0) }
        #elseif arch(arm64)
        // CONTEXT_ARM64: flags at 0, cpsr 4, x0…x28 from 8, fp 0xf0, lr 0xf8, sp 0x100, pc 0x108.
        put32(0, MinidumpConstants.contextControl | MinidumpConstants.contextInteger)
        guard let registers = thread.registers else {
            put64(0x108, thread.frames.first ?? 0)
            return bytes
        }
        put32(4, UInt32(truncatingIfNeeded: registers["pstate"] ?? 0))
        for index in 0...30 { put64(8 + 8 * index, registers["x\(index)"] ?? 0) }
        put64(0x100, registers["sp"] ?? 0)
        put64(0x108, registers["pc"] ?? 0)
        #else
        #error("hangwatch: unsupported architecture: add its minidump context")
        #endif
        return bytes
    }

    private static func moduleList(_ modules: [ModuleSnapshot], into out: inout MinidumpBuffer) -> MinidumpLocation {
        var names: [UInt32] = []
        var records: [MinidumpLocation] = []
        for module in modules {
            names.append(out.minidumpString(module.path))
            let buildID = bytes(fromHex: module.buildID)
            if buildID.isEmpty {
                records.append(.none)
            } else {
                var record = MinidumpBuffer()
                record.u32(MinidumpConstants.codeViewBuildID)
                record.raw(buildID)
                records.append(out.blob(record.bytes))
            }
        }
        return stream(&out) { out in
            out.u32(UInt32(modules.count))
            for (index, module) in modules.enumerated() {
                out.u64(module.start)
                out.u32(UInt32(clamping: module.end >= module.start ? module.end - module.start : 0))
                out.u32(0)                        // checksum
                out.u32(0)                        // time stamp
                out.u32(names[index])
                out.zeros(52)                     // VS_FIXEDFILEINFO: ELF objects have none
                out.location(records[index])
                out.location(.none)               // misc record
                out.u64(0)
                out.u64(0)
            }
        }
    }

    private static func systemInfo(into out: inout MinidumpBuffer) -> MinidumpLocation {
        var name = utsname()
        uname(&name)
        func field<T>(_ value: T) -> String {
            withUnsafeBytes(of: value) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
        }
        let version = field(name.release).split(separator: ".").compactMap { UInt32($0.prefix { $0.isNumber }) }
        let csd = out.minidumpString("\(field(name.sysname)) \(field(name.release)) \(field(name.version)) \(field(name.machine))")
        return stream(&out) { out in
            out.u16(MinidumpConstants.processorArchitecture)
            out.u16(MinidumpConstants.processorLevel)
            out.u16(0)
            out.u8(UInt8(clamping: sysconf(Int32(_SC_NPROCESSORS_ONLN))))
            out.u8(0)                             // product type
            out.u32(version.count > 0 ? version[0] : 0)
            out.u32(version.count > 1 ? version[1] : 0)
            out.u32(version.count > 2 ? version[2] : 0)
            out.u32(MinidumpConstants.platformLinux)
            out.u32(csd)
            out.u16(0)
            out.u16(0)
            out.raw(cpuVendor())
            out.zeros(12)                         // version, feature, AMD extended feature information
        }
    }

    /// Exception code, flags and address: signal number, si_code and fault address for a
    /// crash (as Breakpad writes them on Linux); documented constants otherwise.
    private static func exceptionStream(_ snapshot: ProcessSnapshot, thread: ThreadSnapshot?, context: MinidumpLocation,
                                        into out: inout MinidumpBuffer) {
        var code = dumpRequestedExceptionCode
        var flags: UInt32 = 0
        var address: UInt64 = thread?.registers?.pc ?? thread?.frames.first ?? 0
        var parameters: [UInt64] = []
        switch snapshot.reason {
        case .crash(let signal):
            code = UInt32(bitPattern: signal.number)
            flags = UInt32(bitPattern: signal.code)
            address = signal.address
        case .hang(let info):
            let milliseconds = Self.milliseconds64(info.durationSeconds)
            parameters = [hangMarker, milliseconds]
        case .killed(let kill):
            let causes: [KillCause: UInt64] = [.unknown: 0, .oom: 1, .signal: 2]
            parameters = [killedMarker, causes[kill.cause] ?? 0, UInt64(max(0, kill.signal ?? 0))]
        case .dumpRequested: break
        }
        out.u32(UInt32(bitPattern: thread?.tid ?? 0))
        out.u32(0)
        out.u32(code)
        out.u32(flags)
        out.u64(0)                                // nested exception record
        out.u64(address)
        out.u32(UInt32(parameters.count))
        out.u32(0)
        for parameter in parameters { out.u64(parameter) }
        out.zeros((15 - parameters.count) * 8)
        out.location(context)
    }

    private static func procStatus(_ snapshot: ProcessSnapshot) -> String {
        let pid = snapshot.process.pid
        return "Name:\t\(snapshot.process.name)\nState:\tS (sleeping)\nTgid:\t\(pid)\nPid:\t\(pid)\nThreads:\t\(snapshot.threads.count)\n"
    }

    private static func cmdline(_ process: ProcessIdentity) -> [UInt8] {
        let arguments = process.arguments.isEmpty ? [process.executable] : process.arguments
        return arguments.flatMap { Array($0.utf8) + [0] }
    }

    /// A /proc/PID/maps built from what capture kept (modules and stack windows), not the
    /// process's full map: enough for readers to place modules and stacks.
    private static func maps(_ snapshot: ProcessSnapshot, stacks: [(start: UInt64, location: MinidumpLocation)]) -> String {
        var lines: [(UInt64, String)] = []
        for module in snapshot.modules where module.end > module.start {
            lines.append((module.start, "\(hex(module.start))-\(hex(module.end)) r-xp 00000000 00:00 0 \(module.path)"))
        }
        for (thread, stack) in zip(snapshot.threads, stacks) where stack.location.size > 0 {
            let end = stack.start &+ UInt64(stack.location.size)
            lines.append((stack.start, "\(hex(stack.start))-\(hex(end)) rw-p 00000000 00:00 0 [stack:\(thread.tid)]"))
        }
        return lines.sorted { $0.0 < $1.0 }.map { $0.1 + "\n" }.joined()
    }

    private static func cpuInfo() -> [UInt8] { ProcFS.readBytes("/proc/cpuinfo", limit: 64 << 10) ?? [] }

    private static func cpuVendor() -> [UInt8] {
        let text = String(decoding: cpuInfo().prefix(4096), as: UTF8.self)
        let line = text.split(separator: "\n").first { $0.hasPrefix("vendor_id") }
        let vendor = line.flatMap { $0.split(separator: ":").last }.map { Text.trimmed($0) } ?? ""
        var bytes = Array(vendor.utf8.prefix(12))
        bytes += [UInt8](repeating: 0, count: 12 - bytes.count)
        return bytes
    }

    /// Crashpad's MinidumpCrashpadInfo with the annotations as its simple string dictionary.
    private static func crashpadInfo(_ annotations: [String: String], metadata: MinidumpMetadata,
                                     into out: inout MinidumpBuffer) -> MinidumpLocation {
        let keys = annotations.keys.sorted()
        let strings = keys.map { (out.utf8String($0), out.utf8String(annotations[$0] ?? "")) }
        let dictionary = stream(&out) { out in
            out.u32(UInt32(strings.count))
            for (key, value) in strings {
                out.u32(key)
                out.u32(value)
            }
        }
        return stream(&out) { out in
            out.u32(MinidumpConstants.crashpadInfoVersion)
            out.raw(crashpadUUID(metadata.reportID))
            out.raw(crashpadUUID(metadata.clientID))
            out.location(dictionary)
            out.location(.none)                   // module list: no per-module annotations
        }
    }

    /// Crashpad's UUID layout: data1 (32), data2 and data3 (16) little-endian, then 8 bytes as is.
    static func crashpadUUID(_ uuid: UUID?) -> [UInt8] {
        guard let uuid else { return [UInt8](repeating: 0, count: 16) }
        let u = uuid.uuid
        return [u.3, u.2, u.1, u.0, u.5, u.4, u.7, u.6, u.8, u.9, u.10, u.11, u.12, u.13, u.14, u.15]
    }

    static func bytes(fromHex text: String) -> [UInt8] {
        var result: [UInt8] = []
        var iterator = text.utf8.makeIterator()
        while let high = iterator.next(), let low = iterator.next() {
            guard let h = Text.hexDigit(high), let l = Text.hexDigit(low) else { return [] }
            result.append(h << 4 | l)
        }
        return result
    }

    private static func hex(_ value: UInt64) -> String {
        let digits = String(value, radix: 16)
        return String(repeating: "0", count: max(0, 8 - digits.count)) + digits
    }
}
