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
}

/// The Swift concurrency runtime a process runs: where it is, its task metadata, its layout.
struct Runtime {
    var path: String
    var metadata: UInt64
    var known: KnownLayout
    var layoutVersion: UInt64?

    var description: String {
        "Swift concurrency runtime \(path)" + (layoutVersion.map { ", layout version \($0)" } ?? "")
            + ", task size \(known.layout.task_size)"
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
        var problems: [String] = []
        for region in candidates {
            switch runtime(in: region, pid: pid, regions: regions) {
            case .success(let runtime): return .success(runtime)
            case .failure(let error): problems.append(error.description)
            }
        }
        guard library != nil else {
            return .failure(TaskCaptureError(description: "process \(pid) has no Swift concurrency runtime (libswift_Concurrency.so is not loaded and the executable does not contain it): not a Swift program using tasks"))
        }
        return .failure(TaskCaptureError(description: problems.joined(separator: "; ")))
    }

    private static func runtime(in region: ProcFS.MemoryRegion, pid: Int32,
                                regions: [ProcFS.MemoryRegion]) -> Result<Runtime, TaskCaptureError> {
        // Another process's paths are read through its root (a container's files are not ours).
        let file = pid == getpid() ? region.path : "/proc/\(pid)/root" + region.path
        func symbol(_ name: String) -> (value: UInt64, lowest: UInt64)? {
            var value: UInt64 = 0, lowest: UInt64 = 0
            return hwt_elf_symbol(file, name, &value, &lowest) == 0 ? (value, lowest) : nil
        }
        guard let found = symbol(metadataSymbol) else {
            return .failure(TaskCaptureError(description: "\(region.path) does not export \(metadataSymbol) (a Swift runtime before 5.9, or stripped)"))
        }
        let bias = region.start &- (found.lowest & ~0xfff)
        func word(_ name: String) -> UInt64? {
            guard let found = symbol(name) else { return nil }
            var value: UInt64 = 0
            return hwt_read(pid, bias &+ found.value, &value, 8) == 0 ? value : nil
        }
        guard let metadata = word(metadataSymbol), metadata != 0 else {
            return .failure(TaskCaptureError(description: "cannot read \(metadataSymbol) in process \(pid): \(String(cString: strerror(errno)))"))
        }
        let taskSize = word(taskSizeSymbol)
        // A u32 in the runtimes that have it: the low half of the word read.
        let version = word(layoutVersionSymbol).map { $0 & 0xffff_ffff }
        guard let taskSize, let known = KnownLayout.find(version: version, taskSize: taskSize) else {
            return .failure(TaskCaptureError(description: "the task layout of \(region.path) (layout version "
                + (version.map(String.init) ?? "none") + ", task size " + (taskSize.map(String.init) ?? "unknown")
                + ") is not one hangwatch knows: tasks are not read (docs/tasks.md lists the runtimes verified)"))
        }
        return .success(Runtime(path: region.path, metadata: metadata, known: known, layoutVersion: version))
    }
}
