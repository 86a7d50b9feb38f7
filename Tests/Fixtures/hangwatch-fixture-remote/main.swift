// Child program for the out-of-process capture tests. Modes (argv[1]):
//   deadlock      two threads deadlock on two mutexes (A then B / B then A); main joins them.
//   threads N     N-1 extra threads parked ~30 frames deep; main answers SIGUSR1 with "PONG k".
//   counter       a background thread prints an ever-increasing "count k"; SIGTERM exits 0.
//   churn         threads are created and exit continuously; "count k" keeps advancing.
//   unstoppable F one thread is stuck in posix_spawn's vfork wait (state D) until the FIFO F
//                 is opened for writing; then it prints SPAWNED.
//   crash         a thread named "crasher" writes through a null pointer (address 8) in
//                 crashByNullWriteOnNamedThread; no handler of ours is installed.
//   handled-usr1  handles SIGUSR1 itself: prints "handled SIGUSR1" and exits 0.
//   tracer PID    PTRACE_SEIZEs PID (without stopping it) and holds it until SIGTERM, to play
//                 "another debugger already attached".
//   own-helper    a thread ("held") sleeps; another makes a process as the program's own
//                 quiet-capture helper is made (hwf_run_helper_clone), which holds it for 1 s;
//                 READY own-helper TID while it is held, RELEASED after (both threads then sleep).
//   helper-clones three processes that share this one's memory, for 30 s: a vfork child (exit
//                 signal SIGCHLD), and two clones made as the quiet-capture helper is (exit signal
//                 0), one named hangwatch-quiet, one with its maker's name (a helper before it has
//                 named itself). READY once all three are there.
// Every mode prints READY once it is in the state the test wants. SIGTERM exits 0 in all but
// deadlock (whose threads can never finish).
#if canImport(Glibc)
import Glibc
#endif
import CHangwatchPtrace
import CHangwatchFixtureCrashSupport
import Dispatch

/// One write(2) per line: lines from several threads never interleave, nothing is buffered.
func say(_ text: String, to fd: Int32 = STDOUT_FILENO) {
    let line = Array((text + "\n").utf8)
    _ = line.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
}

func fail(_ text: String) -> Never {
    say("remote-fixture: \(text)", to: STDERR_FILENO)
    exit(2)
}

/// The calling thread's kernel id, from /proc/thread-self -> "PID/task/TID".
func currentTID() -> Int32 {
    var buffer = [CChar](repeating: 0, count: 64)
    let length = readlink("/proc/thread-self", &buffer, buffer.count - 1)
    guard length > 0 else { return 0 }
    let text = String(decoding: buffer[..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    return Int32(text.split(separator: "/").last ?? "") ?? 0
}

func startThread(_ body: @convention(c) (UnsafeMutableRawPointer?) -> UnsafeMutableRawPointer?,
                 _ argument: UnsafeMutableRawPointer? = nil) -> pthread_t {
    var thread = pthread_t()
    let result = pthread_create(&thread, nil, body, argument)
    if result != 0 { fail("pthread_create: \(result)") }
    return thread
}

/// Blocks SIGUSR1 and SIGTERM in the calling thread (and every thread it creates later), so
/// `sigwait` on the main thread is the only place they arrive.
func blockControlSignals() -> sigset_t {
    var set = sigset_t()
    sigemptyset(&set)
    sigaddset(&set, SIGUSR1)
    sigaddset(&set, SIGTERM)
    pthread_sigmask(SIG_BLOCK, &set, nil)
    return set
}

// MARK: deadlock

nonisolated(unsafe) let mutexA: UnsafeMutablePointer<pthread_mutex_t> = {
    let m = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1); pthread_mutex_init(m, nil); return m
}()
nonisolated(unsafe) let mutexB: UnsafeMutablePointer<pthread_mutex_t> = {
    let m = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1); pthread_mutex_init(m, nil); return m
}()
nonisolated(unsafe) let bothHoldFirstLock: UnsafeMutablePointer<pthread_barrier_t> = {
    let b = UnsafeMutablePointer<pthread_barrier_t>.allocate(capacity: 1); pthread_barrier_init(b, nil, 2); return b
}()
nonisolated(unsafe) var deadlockTIDs: [Int32] = [0, 0]

@inline(never) func deadlockTakeAThenB() {
    deadlockTIDs[0] = currentTID()
    pthread_mutex_lock(mutexA)
    pthread_barrier_wait(bothHoldFirstLock)
    pthread_mutex_lock(mutexB)  // never returns: the other thread holds B and wants A
    fail("deadlock broke")
}

@inline(never) func deadlockTakeBThenA() {
    pthread_mutex_lock(mutexB)
    pthread_barrier_wait(bothHoldFirstLock)
    pthread_mutex_lock(mutexA)  // never returns
    fail("deadlock broke")
}

func runDeadlock() {
    let first = startThread { _ in deadlockTakeAThenB(); return nil }
    let second = startThread { _ in deadlockTIDs[1] = currentTID(); deadlockTakeBThenA(); return nil }
    // READY only once both threads are blocked in the futex syscall (202) inside the lock.
    for _ in 0..<2000 {
        let blocked = (0..<2).allSatisfy { index in
            let tid = deadlockTIDs[index]
            guard tid != 0 else { return false }
            let fd = open("/proc/self/task/\(tid)/syscall", O_RDONLY)
            guard fd >= 0 else { return false }
            defer { close(fd) }
            var line = [UInt8](repeating: 0, count: 256)
            let got = read(fd, &line, line.count)
            return got > 0 && String(decoding: line[..<got], as: UTF8.self).hasPrefix("202 ")
        }
        if blocked { break }
        usleep(5_000)
    }
    say("READY deadlock \(deadlockTIDs[0]) \(deadlockTIDs[1])")
    pthread_join(first, nil)
    pthread_join(second, nil)
}

// MARK: threads N

nonisolated(unsafe) let parkLock: UnsafeMutablePointer<pthread_mutex_t> = {
    let m = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1); pthread_mutex_init(m, nil); return m
}()
nonisolated(unsafe) let parkCondition: UnsafeMutablePointer<pthread_cond_t> = {
    let c = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1); pthread_cond_init(c, nil); return c
}()
nonisolated(unsafe) var parkedCount = 0
/// What parked threads wait on, which nothing signals: a thread that parks wakes only the main
/// thread (`parkCondition`), not those parked before it, which would otherwise still be waking
/// and queueing for `parkLock` — somewhere else on their stacks — when READY is said.
nonisolated(unsafe) let parkedForever: UnsafeMutablePointer<pthread_cond_t> = {
    let c = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1); pthread_cond_init(c, nil); return c
}()

/// Recurses `depth` times, then parks forever; the arithmetic on the result keeps each level
/// a real frame (no tail call).
@inline(never) func parkedRecursion(_ depth: Int) -> Int {
    if depth == 0 { return parkForever() }
    return parkedRecursion(depth - 1) &+ depth
}

@inline(never) func parkForever() -> Int {
    pthread_mutex_lock(parkLock)
    parkedCount += 1
    pthread_cond_broadcast(parkCondition)
    while true { pthread_cond_wait(parkedForever, parkLock) }
}

func runThreads(_ total: Int) {
    let signals = blockControlSignals()
    for _ in 1..<max(total, 1) {
        _ = startThread { _ in _ = parkedRecursion(30); return nil }
    }
    pthread_mutex_lock(parkLock)
    while parkedCount < total - 1 { pthread_cond_wait(parkCondition, parkLock) }
    pthread_mutex_unlock(parkLock)
    say("READY threads \(total)")
    // The main thread answers from 30 frames deep as well, so every thread is deep.
    _ = servingRecursion(30, signals)
}

@inline(never) func servingRecursion(_ depth: Int, _ signals: sigset_t) -> Int {
    if depth == 0 {
        var pongs = 0
        serve(signals) { pongs += 1; say("PONG \(pongs)") }
    }
    return servingRecursion(depth - 1, signals) &+ depth
}

/// Main thread loop: SIGUSR1 runs `onRequest`, SIGTERM exits 0.
func serve(_ signals: sigset_t, onRequest: () -> Void) -> Never {
    var set = signals
    while true {
        var received: Int32 = 0
        guard sigwait(&set, &received) == 0 else { continue }
        if received == SIGTERM { say("BYE"); exit(0) }
        onRequest()
    }
}

// MARK: counter

nonisolated(unsafe) var counter = 0

func runCounter() {
    let signals = blockControlSignals()
    _ = startThread { _ in
        while true {
            counter += 1
            say("count \(counter)")
            usleep(2_000)
        }
    }
    say("READY counter")
    serve(signals) { say("PONG") }
}

// MARK: churn

/// Threads are born and die all the time: a creator thread starts short-lived threads and
/// prints "count k" after every 20 of them, so captures race with thread creation and exit.
func runChurn() {
    let signals = blockControlSignals()
    _ = startThread { _ in
        var created = 0
        while true {
            var attributes = pthread_attr_t()
            pthread_attr_init(&attributes)
            pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED))
            var thread = pthread_t()
            if pthread_create(&thread, &attributes, { _ in usleep(UInt32.random(in: 0...500)); return nil }, nil) == 0 {
                created += 1
                if created % 20 == 0 { say("count \(created / 20)") }
            }
            pthread_attr_destroy(&attributes)
            usleep(200)
        }
    }
    say("READY churn")
    serve(signals) { say("PONG") }
}

// MARK: unstoppable

nonisolated(unsafe) var spawnerTID: Int32 = 0
nonisolated(unsafe) var fifoPath = ""

/// A thread that ptrace cannot stop for now: posix_spawn clones with CLONE_VFORK, and the
/// parent thread waits (uninterruptibly, only fatal signals wake it) until the child execs.
/// The child first opens `fifo` for reading, which blocks until someone opens it to write.
func runUnstoppable(_ fifo: String) {
    let signals = blockControlSignals()
    fifoPath = fifo
    _ = startThread { _ in
        spawnerTID = currentTID()
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        posix_spawn_file_actions_addopen(&actions, 3, fifoPath, O_RDONLY, 0)
        var child: pid_t = 0
        let argv: [UnsafeMutablePointer<CChar>?] = [strdup("/bin/true"), nil]
        let result = posix_spawn(&child, "/bin/true", &actions, nil, argv, nil)
        if result != 0 { fail("posix_spawn: \(result)") }
        var status: Int32 = 0
        waitpid(child, &status, 0)
        say("SPAWNED")
        return nil
    }
    for _ in 0..<2000 {
        if spawnerTID != 0, let state = threadState(spawnerTID), state == "D" { break }
        usleep(5_000)
    }
    say("READY unstoppable \(spawnerTID)")
    serve(signals) { say("PONG") }
}

func threadState(_ tid: Int32) -> String? {
    let fd = open("/proc/self/task/\(tid)/stat", O_RDONLY)
    guard fd >= 0 else { return nil }
    defer { close(fd) }
    var bytes = [UInt8](repeating: 0, count: 512)
    let got = read(fd, &bytes, bytes.count)
    guard got > 0 else { return nil }
    let text = String(decoding: bytes[..<got], as: UTF8.self)
    guard let paren = text.lastIndex(of: ")") else { return nil }
    return text[text.index(after: paren)...].split(separator: " ").first.map(String.init)
}

// MARK: crash, handled-usr1

@inline(never) func crashByNullWriteOnNamedThread() {
    UnsafeMutablePointer<Int>(bitPattern: 8)!.pointee = 42
}

func runCrash() {
    let crasher = startThread { _ in
        // pthread_setname_np is not in Glibc's Swift module; this is what it does.
        let comm = open("/proc/thread-self/comm", O_WRONLY)
        if comm >= 0 { _ = write(comm, "crasher", 7); close(comm) }
        say("crashing")
        usleep(200_000)  // lets main settle in pthread_join, for a readable main-thread stack
        crashByNullWriteOnNamedThread()
        return nil
    }
    pthread_join(crasher, nil)
    fail("the crash did not happen")
}

nonisolated(unsafe) var usr1Arrived: sig_atomic_t = 0

func runHandledUSR1() {
    var action = sigaction()
    action.__sigaction_handler.sa_handler = { _ in usr1Arrived = 1 }
    sigemptyset(&action.sa_mask)
    sigaction(SIGUSR1, &action, nil)
    say("READY handled-usr1")
    while usr1Arrived == 0 { usleep(10_000) }
    say("handled SIGUSR1")
    exit(0)
}

// MARK: tracer

func runTracer(_ target: Int32) {
    let signals = blockControlSignals()
    let result = hwp_seize(target)
    if result != 0 { fail("PTRACE_SEIZE \(target) failed: errno \(result)") }
    say("READY tracing \(target)")
    // Exiting releases the tracee (the kernel detaches a dying tracer's tracees).
    serve(signals) { say("PONG") }
}

// MARK: own-helper

nonisolated(unsafe) var heldTID: Int32 = 0

func runOwnHelper() {
    let signals = blockControlSignals()
    _ = startThread { _ in
        heldTID = currentTID()
        while true { pause() }
    }
    while heldTID == 0 { usleep(1_000) }
    _ = startThread { _ in
        let line = "READY own-helper \(heldTID)\n".utf8CString
        let result = line.withUnsafeBufferPointer {
            hwf_run_helper_clone("hangwatch-quiet", heldTID, 1000, STDOUT_FILENO, $0.baseAddress, $0.count - 1)
        }
        if result != 0 { fail("the helper's PTRACE_SEIZE of \(heldTID) failed: errno \(result)") }
        say("RELEASED")
        while true { pause() }
    }
    serve(signals) { say("PONG") }
}

// MARK: helper-clones

func runHelperClones() {
    let signals = blockControlSignals()
    _ = startThread { _ in hwf_stall_in_vfork(30); return nil }
    _ = startThread { _ in _ = hwf_run_helper_clone("hangwatch-quiet", 0, 30_000, -1, nil, 0); return nil }
    _ = startThread { _ in _ = hwf_run_helper_clone(nil, 0, 30_000, -1, nil, 0); return nil }
    let me = getpid()
    for _ in 0..<2000 {
        if childrenExitSignals(of: me).count == 3 { break }
        usleep(5_000)
    }
    say("READY helper-clones")
    serve(signals) { say("PONG") }
}

/// Exit signals (field 38 of /proc/PID/stat) of the live children of `parent`.
func childrenExitSignals(of parent: Int32) -> [Int32] {
    guard let directory = opendir("/proc") else { return [] }
    defer { closedir(directory) }
    var signals: [Int32] = []
    while let entry = readdir(directory) {
        let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        guard Int32(name) != nil, let file = fopen("/proc/\(name)/stat", "r") else { continue }
        var buffer = [CChar](repeating: 0, count: 1024)
        let read = fread(&buffer, 1, buffer.count - 1, file)
        fclose(file)
        let text = String(decoding: buffer[..<read].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        guard let close = text.lastIndex(of: ")") else { continue }
        let fields = text[text.index(after: close)...].split(separator: " ")  // fields[0] is field 3
        guard fields.count > 35, fields[0] != "Z", Int32(fields[1]) == parent, let signal = Int32(fields[35]) else { continue }
        signals.append(signal)
    }
    return signals
}

// MARK: dispatch

/// Work parked on libdispatch's root queues (default and utility QoS) and on a serial queue
/// (an overcommit root queue's worker): threads libdispatch named after those queues.
func runDispatch() {
    let signals = blockControlSignals()
    let parked = DispatchSemaphore(value: 0)
    let queues = [DispatchQueue.global(qos: .default), DispatchQueue.global(qos: .utility), DispatchQueue(label: "fixture.serial")]
    for queue in queues {
        queue.async {
            parked.signal()
            _ = parkedRecursion(30)
        }
    }
    for _ in queues { parked.wait() }
    say("READY dispatch")
    serve(signals) { say("PONG") }
}

let arguments = CommandLine.arguments
switch arguments.count > 1 ? arguments[1] : "" {
case "deadlock": runDeadlock()
case "dispatch": runDispatch()
case "threads": runThreads(arguments.count > 2 ? Int(arguments[2]) ?? 65 : 65)
case "counter": runCounter()
case "churn": runChurn()
case "unstoppable":
    guard arguments.count > 2 else { fail("usage: remote-fixture unstoppable FIFO") }
    runUnstoppable(arguments[2])
case "crash": runCrash()
case "handled-usr1": runHandledUSR1()
case "own-helper": runOwnHelper()
case "helper-clones": runHelperClones()
case "tracer":
    guard arguments.count > 2, let pid = Int32(arguments[2]) else { fail("usage: remote-fixture tracer PID") }
    runTracer(pid)
default:
    fail("usage: remote-fixture deadlock | dispatch | threads N | counter | churn | unstoppable FIFO | crash | handled-usr1 | tracer PID | own-helper | helper-clones")
}
