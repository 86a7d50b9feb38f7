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

/// How much of a process a task reading may read, for how long, and how it finds the pages the
/// process uses (docs/tasks.md).
package struct TaskScanOptions: Sendable, Equatable {
    /// How the pages a process uses are distinguished from those it never touched.
    package enum Pages: Sendable, Equatable {
        /// /proc/PID/pagemap's PAGEMAP_SCAN (Linux 6.7+), else its entries, else smaps: the best there is.
        case pagemapScan
        /// /proc/PID/pagemap's entries (what a kernel before 6.7 gives).
        case pagemapEntries
        /// /proc/PID/smaps: mappings with nothing resident or swapped are left out, the others read whole.
        case smaps
    }

    /// Bytes of the process's memory scanned at most (pages it uses; the tasks' own reads apart).
    package var maxBytes: UInt64
    /// Seconds the reading may take, from its start; memory not yet read when time runs out is skipped.
    package var seconds: Double
    /// The first way tried (each falls back to the next); tests choose the fallbacks.
    package var pages: Pages

    /// A limit of each; 0 (or less) means none.
    package init(maxBytes: UInt64, seconds: Double, pages: Pages = .pagemapScan) {
        self.maxBytes = maxBytes
        self.seconds = seconds
        self.pages = pages
    }

    /// 4 GiB and 10 s, the best way to the pages: a server's heap of a few GiB is read whole in
    /// about a second.
    package static let standard = TaskScanOptions(maxBytes: 4 << 30, seconds: 10)
}

package enum SwiftTaskCapture {
    /// The default maximum number of tasks kept; a reading that finds more reports that it is truncated.
    package static let defaultMaxTasks = 20_000

    /// Every task of process `pid` (getpid(): this one), read while it runs, within `options`' bounds.
    package static func capture(pid: Int32, maxTasks: Int = defaultMaxTasks, options: TaskScanOptions = .standard) -> TaskCapture {
        let started = monotonicSeconds()
        var capture = read(pid: pid, maxTasks: max(0, maxTasks), options: options, started: started)
        capture.durationSeconds = monotonicSeconds() - started
        return capture
    }

    private static func read(pid: Int32, maxTasks: Int, options: TaskScanOptions, started: Double) -> TaskCapture {
        let regions = ProcFS.memoryRegions(of: pid)
        guard !regions.isEmpty else { return TaskCapture(tasks: [], error: "cannot read /proc/\(pid)/maps") }
        switch Runtime.locate(pid: pid, regions: regions) {
        case .success(let runtime):
            return scan(pid: pid, runtime: runtime, regions: regions, maxTasks: maxTasks, options: options, started: started)
        case .failure(let error):
            return TaskCapture(tasks: [], error: error.description)
        }
    }

    /// The value each task of `capture` (read from process `pid`) binds to the task-local `key`
    /// (the address of a `TaskLocal<UInt64>` object), as task address → value. A child task with
    /// no binding of its own has its nearest ancestor's; a task started by `Task {}` has the
    /// copy it was given. Empty when the runtime's task-local layout is not known
    /// (`KnownLayout.taskLocalHead`). Each read is bounded and goes through hwt_read, so memory
    /// freed meanwhile is skipped, not misread.
    package static func taskLocalValues(key: UInt64, in capture: TaskCapture, pid: Int32) -> [UInt64: UInt64] {
        guard key != 0, !capture.tasks.isEmpty,
              case .success(let runtime) = Runtime.locate(pid: pid, regions: ProcFS.memoryRegions(of: pid)),
              let head = runtime.known.taskLocalHead else { return [:] }
        var values: [UInt64: UInt64] = [:]
        for task in capture.tasks {
            if let value = boundValue(key: key, task: task.address, head: head, pid: pid) { values[task.address] = value }
        }
        let parents = Dictionary(capture.tasks.map { ($0.address, $0.parent) }, uniquingKeysWith: { first, _ in first })
        for task in capture.tasks where values[task.address] == nil {
            var ancestor = task.parent
            for _ in 0..<16 {
                guard let address = ancestor else { break }
                if let value = values[address] { values[task.address] = value; break }
                ancestor = parents[address] ?? nil
            }
        }
        return values
    }

    /// The value of `key` in the task-local list of the task at `task`, nil when it binds none.
    private static func boundValue(key: UInt64, task: UInt64, head: UInt64, pid: Int32) -> UInt64? {
        typealias Item = KnownLayout.TaskLocalItem
        var item: UInt64 = 0
        guard hwt_read(pid, task &+ head, &item, 8) == 0 else { return nil }
        for _ in 0..<Item.maximumItems {
            item &= ~7
            guard item != 0 else { return nil }
            // One read per item: its words up to and with the value.
            var words = [UInt64](repeating: 0, count: Int(Item.value / 8) + 1)
            guard words.withUnsafeMutableBytes({ hwt_read(pid, item, $0.baseAddress, $0.count) }) == 0 else { return nil }
            if words[Int(Item.key / 8)] == key { return words[Int(Item.value / 8)] }
            item = words[Int(Item.next / 8)]
        }
        return nil
    }

    /// The scan itself (hwt_scan): the pages in use of the writable anonymous regions, within bounds.
    private static func scan(pid: Int32, runtime: Runtime, regions: [ProcFS.MemoryRegion], maxTasks: Int,
                             options: TaskScanOptions, started: Double) -> TaskCapture {
        // Sorted by address (maps lists them so): hw_tasks.c looks addresses up by bisection.
        let sorted = regions.sorted { $0.start < $1.start }
        let executable = sorted.filter { $0.executable && $0.readable }.map { hwt_range(start: $0.start, end: $0.end) }
        var memory = MemoryScan(pid: pid, writable: sorted.filter(\.isAnonymousWritable), pages: options.pages)
        defer { memory.close() }
        var layout = runtime.known.layout
        layout.metadata = runtime.metadata
        var found = [hwt_task](repeating: hwt_task(), count: maxTasks)
        var count = 0, stats = hwt_stats()
        var bounds = hwt_options(max_bytes: options.maxBytes, deadline_ns: deadline(started: started, seconds: options.seconds),
                                 pages: UInt32(options.pages == .pagemapEntries ? HWT_PAGES_READ : HWT_PAGES_SCAN))
        let result = found.withUnsafeMutableBufferPointer { tasks in
            hwt_scan(pid, &layout, memory.ranges, memory.ranges.count, executable, executable.count, memory.pagemap, &bounds,
                     tasks.baseAddress, maxTasks, &count, &stats)
        }
        guard result == 0 else {
            return TaskCapture(tasks: [], error: "cannot read the memory of process \(pid): \(String(cString: strerror(errno)))",
                               runtime: runtime.description)
        }
        var capture = TaskCapture(tasks: found.prefix(count).map { runtime.known.snapshot(of: $0) }, scannedBytes: stats.bytes_scanned,
                                  truncated: stats.truncated != 0, runtime: runtime.description)
        capture.untouchedBytes = stats.bytes_untouched &+ memory.untouchedBytes
        capture.unreadBytes = stats.bytes_unread &+ stats.bytes_unexamined
        capture.unread = unreadReason(stats, options: options)
        return capture
    }

    /// The CLOCK_MONOTONIC nanoseconds `seconds` after `started` (0: no deadline).
    static func deadline(started: Double, seconds: Double) -> UInt64 {
        guard seconds > 0, seconds < 1e6 else { return 0 }
        return UInt64((started + seconds) * 1e9)
    }

    /// Why memory was left unread, in words; nil when every page in use was read.
    static func unreadReason(_ stats: hwt_stats, options: TaskScanOptions) -> String? {
        var parts: [String] = []
        if stats.stopped & UInt32(HWT_STOPPED_BYTES) != 0 {
            parts.append("\(ByteText.amount(stats.bytes_unread)) in use past the \(ByteText.amount(options.maxBytes)) bound of bytes read")
        }
        if stats.stopped & UInt32(HWT_STOPPED_DEADLINE) != 0 {
            parts.append("up to \(ByteText.amount(stats.bytes_unexamined)) not looked at: the reading stopped at its "
                + "\(ByteText.seconds(options.seconds)) deadline")
        }
        return parts.isEmpty ? nil : parts.joined(separator: "; ")
    }

    static func monotonicSeconds() -> Double {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
    }
}

/// The memory a task reading scans: the process's writable anonymous regions, and how to distinguish
/// the pages it uses from those it never touched — its /proc/PID/pagemap (hw_tasks.c asks it
/// which pages are present or swapped), else smaps, whose mappings with nothing resident or
/// swapped are left out here.
struct MemoryScan {
    /// Sorted by address, as maps lists them.
    var ranges: [hwt_range]
    /// /proc/PID/pagemap, open; -1 when it could not be opened.
    var pagemap: Int32
    /// Bytes of the mappings that smaps reports as containing no page of the process (left out of `ranges`).
    var untouchedBytes: UInt64 = 0

    init(pid: Int32, writable: [ProcFS.MemoryRegion], pages: TaskScanOptions.Pages) {
        pagemap = pages == .smaps ? -1 : open("/proc/\(pid)/pagemap", O_RDONLY | O_CLOEXEC)
        var regions = writable
        if pagemap < 0, let used = ProcFS.usedBytesByMapping(of: pid) {
            let untouched = regions.filter { used[$0.start] == 0 }
            untouchedBytes = untouched.reduce(0) { $0 &+ ($1.end &- $1.start) }
            regions.removeAll { used[$0.start] == 0 }
        }
        ranges = regions.map { hwt_range(start: $0.start, end: $0.end) }
    }

    mutating func close() {
        if pagemap >= 0 { Glibc.close(pagemap) }
        pagemap = -1
    }
}

/// Amounts as the reading's own sentences say them ("64 GiB", "12.5 MiB", "10 s").
enum ByteText {
    static func amount(_ bytes: UInt64) -> String {
        let units: [(UInt64, String)] = [(1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")]
        for (size, name) in units where bytes >= size {
            let value = Double(bytes) / Double(size)
            return (value >= 10 || value == value.rounded() ? "\(Int(value.rounded()))" : "\((value * 10).rounded() / 10)") + " " + name
        }
        return "\(bytes) bytes"
    }

    static func seconds(_ value: Double) -> String {
        value == value.rounded() ? "\(Int(value)) s" : "\(value) s"
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
        let library = loadedImage(of: { $0.hasSuffix("/libswift_Concurrency.so") }, in: regions)
        let executablePath = ProcFS.readLink("/proc/\(pid)/exe")
        let candidates = [library, executablePath.flatMap { path in loadedImage(of: { $0 == path }, in: regions) }]
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

    /// The first mapping (file offset 0) of the loaded image of a file whose path `matches`:
    /// the nearest one below the image's executable segment. A reader that maps the whole file
    /// (libelf, while the process symbolicates that very library) adds another offset-0 mapping
    /// of the same path; taken for the image, it gave the runtime's symbols a wrong bias and
    /// garbage for its layout (seen in the test suite: "layout version 1852399949").
    static func loadedImage(of matches: (String) -> Bool, in regions: [ProcFS.MemoryRegion]) -> ProcFS.MemoryRegion? {
        let sorted = regions.sorted { $0.start < $1.start }
        for segment in sorted where segment.executable && matches(segment.path) {
            if let first = sorted.last(where: { $0.offset == 0 && $0.path == segment.path && $0.inode == segment.inode && $0.start <= segment.start }) {
                return first
            }
        }
        return nil
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
