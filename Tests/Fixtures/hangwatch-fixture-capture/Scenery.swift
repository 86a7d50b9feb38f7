// The threads a capture has to cope with: one that blocks every signal, one asleep in a
// blocking read, a Dispatch pool thread busy in a named function, a few plain threads.
import Dispatch
import Foundation
import Synchronization

let poolBusyStarted = Atomic<Bool>(false)
let mainQueueHangStarted = Atomic<Bool>(false)
let backgroundThreadsReady = Atomic<Int>(0)

func nameCurrentThread(_ name: String) {
    // pthread_setname_np is not exported to Swift here; the kernel takes the name (comm,
    // 15 bytes) written to the calling thread's own comm file.
    let fd = open("/proc/thread-self/comm", O_WRONLY)
    guard fd >= 0 else { return }
    let bytes = Array(name.utf8.prefix(15))
    _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
    close(fd)
}

/// Starts a thread with a name; `body` never returns for the fixture's purposes.
func startThread(_ name: String, _ body: @escaping @Sendable () -> Void) {
    let thread = Thread {
        nameCurrentThread(name)
        body()
    }
    thread.start()
}

@inline(never) func blockAllSignalsAndSleep() {
    var all = sigset_t()
    sigfillset(&all)
    pthread_sigmask(SIG_BLOCK, &all, nil)
    backgroundThreadsReady.add(1, ordering: .sequentiallyConsistent)
    while true { sleep(60) }
}

@inline(never) func readFromSilentPipe() {
    var fds: [Int32] = [0, 0]
    _ = pipe(&fds)
    var byte: UInt8 = 0
    backgroundThreadsReady.add(1, ordering: .sequentiallyConsistent)
    while true {
        // Nobody ever writes: this thread sits in read(2) (state S, syscall 0).
        if read(fds[0], &byte, 1) <= 0 && errno != EINTR { sleep(60) }
    }
}

@inline(never) func busyWorkInPool() {
    nameCurrentThread("hw-pool-busy")
    poolBusyStarted.store(true, ordering: .sequentiallyConsistent)
    var counter: UInt64 = 0
    while true {
        // Busy, but polite to the shared 2-core machine.
        for _ in 0..<100_000 { counter = counter &* 6364136223846793005 &+ 1 }
        if counter == 42 { print("unlikely") }
        usleep(1_000)
    }
}

@inline(never) func parkPlainWorker() {
    backgroundThreadsReady.add(1, ordering: .sequentiallyConsistent)
    while true { sleep(60) }
}

let plainWorkerCount = 3

func startScenery() {
    startThread("hw-sigblock") { blockAllSignalsAndSleep() }
    startThread("hw-pipe-read") { readFromSilentPipe() }
    for index in 1...plainWorkerCount { startThread("hw-worker-\(index)") { parkPlainWorker() } }
    DispatchQueue.global().async { busyWorkInPool() }
}

func waitUntil(_ what: String, timeout: Double = 10, _ condition: () -> Bool) {
    let deadline = Date().addingTimeInterval(timeout)
    while !condition() {
        if Date() > deadline {
            FileHandle.standardError.write("capture-fixture: gave up waiting for \(what)\n".data(using: .utf8)!)
            exit(3)
        }
        usleep(2_000)
    }
}

// MARK: - The functions that hang the main queue (the tests look for their names)

@inline(never) func hangUnderRunLoop() {
    mainQueueHangStarted.store(true, ordering: .sequentiallyConsistent)
    while true { sleep(1) }
}

@inline(never) func hangUnderDispatchMain() {
    mainQueueHangStarted.store(true, ordering: .sequentiallyConsistent)
    while true { sleep(1) }
}

@MainActor @inline(never) func hangUnderAsyncMain() {
    mainQueueHangStarted.store(true, ordering: .sequentiallyConsistent)
    while true { sleep(1) }
}
