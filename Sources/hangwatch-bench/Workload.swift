// What the bench's child processes run: threads parked ~30 frames deep, and the "hung" thread,
// which spins 30 frames deep and records the longest gap between two of its clock readings:
// that gap is how long something (a signal handler, a ptrace stop, the scheduler) kept it
// from running its own code, seen from the thread itself.
import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Frames every bench thread sits under (the issue asks for ~30).
let benchStackDepth = 30

/// Work after the recursive call that the optimiser cannot see through, so each level stays
/// a real frame instead of becoming a loop.
@inline(never) @_optimize(none) func keepFrame(_ value: inout Int) { value &+= 1 }

@inline(never) func descend(_ depth: Int, then leaf: () -> Void) -> Int {
    if depth > 0 {
        var result = descend(depth - 1, then: leaf)
        keepFrame(&result)
        return result
    }
    leaf()
    return 0
}

let parkedThreadCount = Atomic<Int>(0)

/// Starts `count` threads that park forever (blocked in a futex) `benchStackDepth` frames deep,
/// and returns once all of them are parked.
func startParkedThreads(_ count: Int) {
    let before = parkedThreadCount.load(ordering: .sequentiallyConsistent)
    for index in 0..<count {
        let thread = Thread {
            nameCurrentThread("bparked-\(index)")
            _ = descend(benchStackDepth) {
                parkedThreadCount.add(1, ordering: .sequentiallyConsistent)
                let lock = NSCondition()
                lock.lock()
                while true { lock.wait() }
            }
        }
        thread.stackSize = 256 * 1024
        thread.start()
    }
    while parkedThreadCount.load(ordering: .sequentiallyConsistent) < before + count { usleep(1_000) }
}

/// Words the spinning thread shares with whoever measures it: in this process, or in a file
/// mapped MAP_SHARED by the bench and its child. Aligned 8-byte loads and stores are atomic on
/// x86-64, and the clock call in between keeps the compiler from caching them.
struct GapBoard: @unchecked Sendable {
    static let size = 4096
    let words: UnsafeMutablePointer<UInt64>

    enum Word: Int { case maxGap = 0, resetRequest = 1, resetAck = 2, tid = 3, heartbeat = 4, maxCPUGap = 5 }

    subscript(_ word: Word) -> UInt64 {
        get { words[word.rawValue] }
        nonmutating set { words[word.rawValue] = newValue }
    }

    static func anonymous() -> GapBoard {
        let memory = UnsafeMutableRawPointer.allocate(byteCount: size, alignment: 64)
        memory.initializeMemory(as: UInt8.self, repeating: 0, count: size)
        return GapBoard(words: memory.bindMemory(to: UInt64.self, capacity: size / 8))
    }

    /// Maps `path` (created and sized if needed) shared between processes.
    static func shared(path: String) throws -> GapBoard {
        let fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw BenchFailure("open \(path): errno \(errno)") }
        defer { close(fd) }
        guard ftruncate(fd, off_t(size)) == 0 else { throw BenchFailure("ftruncate \(path): errno \(errno)") }
        guard let memory = mmap(nil, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0), memory != MAP_FAILED else {
            throw BenchFailure("mmap \(path): errno \(errno)")
        }
        return GapBoard(words: memory.bindMemory(to: UInt64.self, capacity: size / 8))
    }

    /// Asks the spinner to forget its longest gap, and waits until it has.
    func reset() {
        let request = self[.resetRequest] &+ 1
        self[.resetRequest] = request
        let deadline = Clock.nanos() + 2_000_000_000
        while self[.resetAck] != request && Clock.nanos() < deadline { sched_yield() }
    }

    /// Longest gap since the last reset, microseconds of wall time.
    var maxGapMicroseconds: Double { Double(self[.maxGap]) / 1000 }
    /// Most CPU time the thread spent in one loop step outside its own loop (kernel signal
    /// delivery, a handler, sigreturn), microseconds; time spent descheduled is not counted.
    var maxCPUGapMicroseconds: Double { Double(self[.maxCPUGap]) / 1000 }

    /// The spinning loop: never returns.
    func spin() -> Never {
        self[.tid] = UInt64(currentTID())
        var last = Clock.nanos()
        var lastCPU = Clock.threadCPUNanos()
        var seen = self[.resetRequest]
        var longest: UInt64 = 0
        var longestCPU: UInt64 = 0
        var beats: UInt64 = 0
        while true {
            let now = Clock.nanos()
            let cpu = Clock.threadCPUNanos()
            let gap = now &- last
            let cpuGap = cpu &- lastCPU
            last = now
            lastCPU = cpu
            let request = self[.resetRequest]
            if request != seen {
                seen = request
                longest = 0
                longestCPU = 0
                self[.maxGap] = 0
                self[.maxCPUGap] = 0
                self[.resetAck] = request
                continue
            }
            if gap > longest {
                longest = gap
                self[.maxGap] = gap
            }
            if cpuGap > longestCPU {
                longestCPU = cpuGap
                self[.maxCPUGap] = cpuGap
            }
            beats &+= 1
            if beats & 0xffff == 0 { self[.heartbeat] = beats }
        }
    }
}

/// Starts the spinning thread `benchStackDepth` frames deep and waits until it runs.
func startSpinner(_ board: GapBoard) {
    let thread = Thread {
        nameCurrentThread("bench-hung")
        _ = descend(benchStackDepth) { board.spin() }
    }
    thread.start()
    while board[.tid] == 0 { usleep(500) }
}

/// Sets the calling thread's comm (what /proc and the snapshot call its name; 15 bytes at most).
func nameCurrentThread(_ name: String) {
    let fd = open("/proc/thread-self/comm", O_WRONLY | O_CLOEXEC)
    guard fd >= 0 else { return }
    defer { close(fd) }
    let bytes = Array(name.utf8.prefix(15))
    _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
}
