// Swift programs whose requests hang with no thread blocked, for the task-capture tests
// (docs/tasks.md): every thread is idle, the tasks wait forever.
//
//   hangwatch-fixture-tasks SCENARIO [COUNT]
//   leak       COUNT (default 3) tasks, each awaiting a continuation nobody resumes, three calls deep
//   mutual     two tasks, each awaiting the other's value (a deadlock)
//   pool       a pool with one connection: one request holds it forever, COUNT (default 2) wait for a lease
//   named      one task named "GET /users/:id" awaiting a continuation nobody resumes
//   actor      an actor's load() awaits a task that waits for the actor to be loaded: neither ends
//   churn      COUNT (default 3) leaked tasks, while tasks are created and finish without pause
//   inprocess  COUNT leaked tasks, then the tasks read by the process itself (printed as JSON), exit 0
//   selfread   COUNT leaked tasks beside 64 GiB reserved untouched and 256 MiB written, read by the
//              process itself: selfread COUNT PAGES MAXBYTES SECONDS (PAGES scan, entries or smaps;
//              0: no bound); prints what was read and its own VmPTE and VmRSS before and after, exit 0
//   serial     COUNT (default 3) tasks, each awaiting the one before (a serial queue); the first
//              awaits a continuation nobody resumes
//   reserve    64 GiB reserved (PROT_READ|PROT_WRITE, MAP_NORESERVE) and never touched, beside COUNT
//              leaked tasks
// Prints {"event":"ready","pid":N} once the tasks are waiting; then waits to be killed.
import Foundation
import HangwatchTaskCapture
import HangwatchSnapshot

func emit(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

/// How many tasks have reached their wait (the fixture says "ready" once all have).
/// The continuations are kept (as a pool keeps its waiters), never resumed: no misuse warning.
final class Arrivals: @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0
    private var kept: [CheckedContinuation<Void, Never>] = []
    func arrive(keeping continuation: CheckedContinuation<Void, Never>? = nil) {
        lock.lock()
        count += 1
        if let continuation { kept.append(continuation) }
        lock.unlock()
    }
    var value: Int { lock.lock(); defer { lock.unlock() }; return count }
}
let arrivals = Arrivals()

@inline(never) func leafWait() async {
    await withCheckedContinuation { arrivals.arrive(keeping: $0) }  // nobody resumes it
}

@inline(never) func middle(_ depth: Int) async {
    await leafWait()
}

@inline(never) func handlerLeak() async {
    await middle(1)
}

/// Awaits the task before it: a serial queue of requests, each behind the one before.
@inline(never) func awaitPrevious(_ previous: Task<Void, Never>) async {
    arrivals.arrive()
    await previous.value
}

final class Box<T>: @unchecked Sendable {
    var value: T?
}

@inline(never) func awaitOther(_ other: Box<Task<Int, Never>>) async -> Int {
    while other.value == nil { try? await Task.sleep(for: .milliseconds(5)) }
    arrivals.arrive()
    return await other.value!.value + 1
}

actor ConnectionPool {
    private var free = 1
    private var waiters: [CheckedContinuation<Void, Never>] = []

    @inline(never) func lease() async {
        if free > 0 {
            free -= 1
            return
        }
        await withCheckedContinuation {
            waiters.append($0)
            arrivals.arrive()
        }  // the one lease is never given back
    }
}

/// load() waits for a task that waits until load() is done.
actor Registry {
    private var loaded = false
    private var waiting: [CheckedContinuation<Void, Never>] = []

    @inline(never) func load() async {
        let warmUp = Task { await self.waitUntilLoaded() }
        await warmUp.value
        loaded = true
        for continuation in waiting { continuation.resume() }
    }

    @inline(never) func waitUntilLoaded() async {
        guard !loaded else { return }
        await withCheckedContinuation {
            waiting.append($0)
            arrivals.arrive()
        }
    }
}

@inline(never) func handleRequest(_ pool: ConnectionPool) async {
    await pool.lease()
    if Int.random(in: 0..<2) < 5 {  // the holder keeps its connection forever
        await leafWait()
    }
}

/// 64 GiB readable and writable, never touched: not one page of it is present. A reader that
/// faults it in grows the process's page tables by 128 MiB. A page of no access on each side
/// keeps it a mapping of its own: the kernel would merge it with a neighbour of the same flags
/// (a malloc arena placed above it, in about 1 start of 5), which smaps counts as one mapping in
/// use (docs/tasks.md, "Bounds").
func reserveUntouched() -> UnsafeMutableRawPointer {
    let size = 64 << 30, page = Int(sysconf(Int32(_SC_PAGESIZE)))
    guard let region = mmap(nil, size + 2 * page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0),
          region != MAP_FAILED,
          mprotect(region + page, size, PROT_READ | PROT_WRITE) == 0 else {
        emit("{\"event\":\"mmap-failed\",\"errno\":\(errno)}")
        exit(70)
    }
    return region + page
}

/// VmPTE and VmRSS of this process, kB.
func ownMemory() -> (pageTables: Int, resident: Int) {
    let status = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? ""
    func field(_ name: String) -> Int {
        let line = status.split(separator: "\n").first { $0.hasPrefix(name + ":") } ?? ""
        return Int(line.split(separator: " ").dropFirst().first ?? "") ?? -1
    }
    return (field("VmPTE"), field("VmRSS"))
}

/// selfread's reading: PAGES MAXBYTES SECONDS, then the JSON line, then exit.
func readOwnTasksWithinBounds(_ settings: [String]) -> Never {
    let pages: TaskScanOptions.Pages = settings.first == "entries" ? .pagemapEntries : settings.first == "smaps" ? .smaps : .pagemapScan
    let options = TaskScanOptions(maxBytes: settings.count > 1 ? UInt64(settings[1]) ?? 0 : 0,
                                  seconds: settings.count > 2 ? Double(settings[2]) ?? 0 : 0, pages: pages)
    let before = ownMemory()
    let capture = SwiftTaskCapture.capture(pid: getpid(), options: options)
    let after = ownMemory()
    emit("{\"event\":\"tasks\",\"count\":\(capture.tasks.count),\"error\":\"\(capture.error ?? "")\",\"seconds\":\(capture.durationSeconds),"
         + "\"scannedBytes\":\(capture.scannedBytes),\"untouchedBytes\":\(capture.untouchedBytes),\"unreadBytes\":\(capture.unreadBytes),"
         + "\"unread\":\"\(capture.unread ?? "")\",\"pteBefore\":\(before.pageTables),\"pteAfter\":\(after.pageTables),"
         + "\"rssBefore\":\(before.resident),\"rssAfter\":\(after.resident)}")
    exit(0)
}

let arguments = CommandLine.arguments
let scenario = arguments.count > 1 ? arguments[1] : ""
let count = arguments.count > 2 ? Int(arguments[2]) ?? 3 : 3
// A killed test run must not leave fixtures behind (Tests/Support/ChildProcess.swift).
if let runner = ProcessInfo.processInfo.environment["HANGWATCH_TEST_RUNNER_PID"].flatMap({ Int32($0) }), runner > 1 {
    Thread.detachNewThread {
        while kill(runner, 0) == 0 || errno != ESRCH { sleep(1) }
        kill(getpid(), SIGKILL)
    }
}

// Thousands of tasks are a burst of work on both CPUs: niced, so the test processes running
// beside this one keep theirs.
if count >= 1_000 || scenario == "churn" { setpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0, 10) }
var keep: [Any] = []
switch scenario {
case "serial":
    var previous = Task.detached { await handlerLeak() }
    keep.append(previous)
    for _ in 1..<max(1, count) {
        let before = previous
        previous = Task.detached { await awaitPrevious(before) }
        keep.append(previous)
    }
case "reserve":
    keep.append(reserveUntouched())
    for _ in 0..<count { keep.append(Task.detached { await handlerLeak() }) }
case "selfread":
    keep.append(reserveUntouched())
    // Memory in use beside the tasks, more than a small bound lets be read.
    let ballast = UnsafeMutableRawPointer.allocate(byteCount: 256 << 20, alignment: 4096)
    ballast.initializeMemory(as: UInt8.self, repeating: 1, count: 256 << 20)
    keep.append(ballast)
    for _ in 0..<count { keep.append(Task.detached { await handlerLeak() }) }
case "leak", "inprocess", "churn":
    for _ in 0..<count { keep.append(Task.detached { await handlerLeak() }) }
    if scenario == "churn" {
        // A pause between batches: tasks come and go all the time without taking the CPUs from
        // the test processes running beside this one (the fixture is niced, above).
        Thread.detachNewThread {
            while true {
                let group = DispatchGroup()
                for _ in 0..<64 {
                    group.enter()
                    Task.detached {
                        await Task.yield()
                        group.leave()
                    }
                }
                group.wait()
                usleep(1_000)
            }
        }
    }
case "mutual":
    let first = Box<Task<Int, Never>>(), second = Box<Task<Int, Never>>()
    first.value = Task.detached { await awaitOther(second) }
    second.value = Task.detached { await awaitOther(first) }
    keep += [first, second]
case "pool":
    let pool = ConnectionPool()
    for _ in 0...count { keep.append(Task.detached { await handleRequest(pool) }) }
case "named":
    keep.append(Task.detached(name: "GET /users/:id") { await handlerLeak() })
case "actor":
    let registry = Registry()
    keep.append(registry)
    keep.append(Task.detached { await registry.load() })
default:
    emit("{\"event\":\"unknown-scenario\"}")
    exit(64)
}
// Every task at its wait (the pool: its holder and every waiter), then a moment for the last
// arrivals' awaits to suspend.
let expected = scenario == "mutual" ? 2 : scenario == "serial" ? max(1, count)
    : scenario == "named" || scenario == "actor" ? 1 : scenario == "pool" ? count + 1 : count
let deadline = Date().addingTimeInterval(120)
while arrivals.value < expected && Date() < deadline { usleep(10_000) }
Thread.sleep(forTimeInterval: 0.3)
if scenario == "inprocess" {
    let capture = SwiftTaskCapture.capture(pid: getpid())
    let chains = capture.tasks.map { "\($0.frames.count)" }.joined(separator: ",")
    emit("{\"event\":\"tasks\",\"count\":\(capture.tasks.count),\"error\":\"\(capture.error ?? "")\",\"seconds\":\(capture.durationSeconds),"
         + "\"scannedBytes\":\(capture.scannedBytes),\"chains\":[\(chains)]}")
    exit(0)
}
if scenario == "selfread" { readOwnTasksWithinBounds(Array(arguments.dropFirst(3))) }
emit("{\"event\":\"ready\",\"pid\":\(getpid())}")
while true { sleep(60) }
