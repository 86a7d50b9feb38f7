// Every live Swift task of a process — this one or another — with its await chain
// (docs/tasks.md). The runtime keeps no list of tasks up to 6.3: they are found in the
// process's writable anonymous memory by their first word, the AsyncTask metadata pointer,
// which the runtime exports (`_swift_concurrency_debug_asyncTaskMetadata`), and each candidate
// is validated field by field (hw_tasks.c). The layout of a task is the runtime's private ABI:
// only runtimes in `KnownLayout.table` are read; any other is refused with a clear reason.
import CHangwatchTasks
import HangwatchPlatform
import HangwatchSnapshot
#if canImport(Glibc)
import Glibc
#endif

package enum SwiftTaskCapture {
    /// Tasks kept at most by default; a reading that finds more says it is truncated.
    package static let defaultMaxTasks = 20_000

    /// Every task of process `pid` (getpid(): this one), read while it runs.
    package static func capture(pid: Int32, maxTasks: Int = defaultMaxTasks) -> TaskCapture {
        let started = monotonicSeconds()
        var capture = read(pid: pid, maxTasks: max(0, maxTasks))
        capture.durationSeconds = monotonicSeconds() - started
        return capture
    }

    private static func read(pid: Int32, maxTasks: Int) -> TaskCapture {
        let regions = ProcFS.memoryRegions(of: pid)
        guard !regions.isEmpty else { return TaskCapture(tasks: [], error: "cannot read /proc/\(pid)/maps") }
        let runtime: Runtime
        switch Runtime.locate(pid: pid, regions: regions) {
        case .success(let found): runtime = found
        case .failure(let error): return TaskCapture(tasks: [], error: error.description)
        }
        // Sorted by address (maps lists them so): hw_tasks.c looks addresses up by bisection.
        let sorted = regions.sorted { $0.start < $1.start }
        let writable = sorted.filter(\.isAnonymousWritable).map { hwt_range(start: $0.start, end: $0.end) }
        let executable = sorted.filter { $0.executable && $0.readable }.map { hwt_range(start: $0.start, end: $0.end) }
        var layout = runtime.known.layout
        layout.metadata = runtime.metadata
        var found = [hwt_task](repeating: hwt_task(), count: maxTasks)
        var count = 0, stats = hwt_stats()
        let result = found.withUnsafeMutableBufferPointer { tasks in
            hwt_scan(pid, &layout, writable, writable.count, executable, executable.count, tasks.baseAddress, maxTasks,
                     &count, &stats)
        }
        guard result == 0 else {
            return TaskCapture(tasks: [], error: "cannot read the memory of process \(pid): \(String(cString: strerror(errno)))",
                               runtime: runtime.description)
        }
        let tasks = found.prefix(count).map { runtime.known.snapshot(of: $0) }
        return TaskCapture(tasks: tasks, scannedBytes: stats.bytes_scanned, truncated: stats.truncated != 0,
                           runtime: runtime.description)
    }

    static func monotonicSeconds() -> Double {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
    }
}

/// Why tasks cannot be read.
package struct TaskCaptureError: Error, CustomStringConvertible {
    package var description: String
    /// What a look-up left out of the file it read ("; 1023 of its 1025 symbol tables not read …"), or "".
    package var skipped = ""
}

/// The Swift concurrency runtime a process runs: where it is, its task metadata, its layout.
struct Runtime {
    var path: String
    var metadata: UInt64
    var known: KnownLayout
    var layoutVersion: UInt64?
    /// What its look-up left out ("; 3 of its 5 symbol tables not read …"), or "".
    var note = ""

    var description: String {
        "Swift concurrency runtime \(path)" + (layoutVersion.map { ", layout version \($0)" } ?? "")
            + ", task size \(known.layout.task_size)" + note
    }

    static let metadataSymbol = "_swift_concurrency_debug_asyncTaskMetadata"
    static let taskSizeSymbol = "_swift_concurrency_debug_asyncTaskSize"
    static let layoutVersionSymbol = "_swift_concurrency_debug_internal_layout_version"

    /// libswift_Concurrency.so, else the executable (a program linked with the static Swift stdlib).
    static func locate(pid: Int32, regions: [ProcFS.MemoryRegion]) -> Result<Runtime, TaskCaptureError> {
        let library = regions.first { $0.offset == 0 && $0.path.hasSuffix("/libswift_Concurrency.so") }
        let executablePath = ProcFS.readLink("/proc/\(pid)/exe")
        let candidates = [library, executablePath.flatMap { path in regions.first { $0.offset == 0 && $0.path == path } }]
            .compactMap { $0 }
        guard !candidates.isEmpty else {
            return .failure(TaskCaptureError(description: "process \(pid) has no Swift concurrency runtime mapped (not a Swift program using tasks)"))
        }
        var problems: [TaskCaptureError] = []
        for region in candidates {
            switch runtime(in: region, pid: pid, regions: regions) {
            case .success(let runtime): return .success(runtime)
            case .failure(let error): problems.append(error)
            }
        }
        guard library != nil else {
            return .failure(TaskCaptureError(description: "process \(pid) has no Swift concurrency runtime (libswift_Concurrency.so is not loaded and the executable does not contain it): not a Swift program using tasks"
                + problems.map(\.skipped).joined()))
        }
        return .failure(TaskCaptureError(description: problems.map(\.description).joined(separator: "; ")))
    }

    private static func runtime(in region: ProcFS.MemoryRegion, pid: Int32,
                                regions: [ProcFS.MemoryRegion]) -> Result<Runtime, TaskCaptureError> {
        // Another process's paths are read through its root (a container's files are not ours).
        let file = pid == getpid() ? region.path : "/proc/\(pid)/root" + region.path
        let symbols = ELFSymbols(file: file, names: [metadataSymbol, taskSizeSymbol, layoutVersionSymbol])
        guard let metadataAddress = symbols.values[0] else {
            return .failure(TaskCaptureError(description: "\(region.path) does not export \(metadataSymbol) (a Swift runtime before 5.9, or stripped)"
                + symbols.skippedNote, skipped: symbols.skippedNote))
        }
        let bias = region.start &- (symbols.lookup.lowest_load_address & ~0xfff)
        func word(_ address: UInt64?) -> UInt64? {
            guard let address else { return nil }
            var value: UInt64 = 0
            return hwt_read(pid, bias &+ address, &value, 8) == 0 ? value : nil
        }
        guard let metadata = word(metadataAddress), metadata != 0 else {
            return .failure(TaskCaptureError(description: "cannot read \(metadataSymbol) in process \(pid): \(String(cString: strerror(errno)))"))
        }
        let taskSize = word(symbols.values[1])
        // A u32 in the runtimes that have it: the low half of the word read.
        let version = word(symbols.values[2]).map { $0 & 0xffff_ffff }
        guard let taskSize, let known = KnownLayout.find(version: version, taskSize: taskSize) else {
            return .failure(TaskCaptureError(description: "the task layout of \(region.path) (layout version "
                + (version.map(String.init) ?? "none") + ", task size " + (taskSize.map(String.init) ?? "unknown")
                + ") is not one hangwatch knows: tasks are not read (docs/tasks.md lists the runtimes verified)"))
        }
        return .success(Runtime(path: region.path, metadata: metadata, known: known, layoutVersion: version,
                                note: symbols.skippedNote))
    }
}

/// Symbols of one ELF file, looked up together (hwt_elf_symbols: one pass over the file's first
/// .dynsym and first .symtab, whatever else it holds).
struct ELFSymbols {
    /// The value of each name, nil when not found (or when the file could not be read).
    var values: [UInt64?]
    /// What the look-up read and left out.
    var lookup: hwt_elf_lookup

    init(file: String, names: [String]) {
        var raw = [UInt64](repeating: 0, count: names.count)
        let copies = names.map { strdup($0) }
        defer { copies.forEach { free($0) } }
        var pointers = copies.map { UnsafePointer($0) }
        var lookup = hwt_elf_lookup()
        let result = pointers.withUnsafeMutableBufferPointer { names in
            hwt_elf_symbols(file, names.baseAddress, names.count, &raw, &lookup)
        }
        self.lookup = lookup
        let found = result == 0 ? lookup.found : 0
        values = raw.indices.map { found & (1 << UInt32($0)) != 0 ? raw[$0] : nil }
    }

    /// "; 1023 of its 1025 symbol tables not read (…)", or "" when every table was read.
    var skippedNote: String {
        guard lookup.tables_skipped > 0 else { return "" }
        return "; \(lookup.tables_skipped) of its \(lookup.symbol_tables) symbol tables not read "
            + "(only the first .dynsym and the first .symtab, of 64 MiB at most, are: a linker writes one of each)"
    }
}
