// Out-of-process capture against real child processes with real ptrace: the test process is
// the fixtures' parent, so it may trace them.
import Foundation
import Synchronization
import Testing
@testable import HangwatchRemoteCapture
@testable import HangwatchSnapshot
@testable import HangwatchPlatform
import HangwatchTestSupport

/// Runtime address ranges of the symbols of `module` whose names satisfy `matches`, from
/// `nm --defined-only -S` on the module's file (its .dynsym with `dynamic`, else .symtab).
func symbolRanges(in module: ModuleSnapshot, dynamic: Bool, matching matches: (String) -> Bool) throws -> [ClosedRange<UInt64>] {
    let text = try runTool("/usr/bin/nm", (dynamic ? ["-D"] : []) + ["--defined-only", "-S", module.path])
    var ranges: [ClosedRange<UInt64>] = []
    for line in text.split(separator: "\n") {
        let fields = line.split(separator: " ")
        guard fields.count == 4, let value = UInt64(fields[0], radix: 16), let size = UInt64(fields[1], radix: 16),
              size > 0, matches(String(fields[3])) else { continue }
        ranges.append((module.base + value)...(module.base + value + size - 1))
    }
    return ranges
}

/// Last "count N" line a counter fixture printed.
func lastCount(_ child: ChildProcess) -> Int {
    child.stdout.split(separator: "\n").reversed().lazy.compactMap { line -> Int? in
        line.hasPrefix("count ") ? Int(line.dropFirst(6)) : nil
    }.first ?? -1
}

func waitForCount(above value: Int, in child: ChildProcess, timeout: Double = 10) -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    while Date() < deadline {
        if lastCount(child) > value { return true }
        usleep(2_000)
    }
    return false
}

/// Waits (at most 10 s) until every thread of `pid` is in `state` per /proc: on a loaded machine
/// a thread that printed it is ready may still be on its way into its wait (or its group stop).
func waitUntilEveryThread(of pid: Int32, is state: ThreadState) {
    let deadline = Date().addingTimeInterval(10)
    let reader = TaskReader(pid: pid)
    while Date() < deadline {
        let tids = RemoteCapture.threadIDs(of: pid)
        if !tids.isEmpty && tids.allSatisfy({ RemoteCapture.threadInfo(pid: pid, tid: $0, reader: reader).state == state }) { return }
        usleep(2_000)
    }
}

@Suite("RemoteCapture", .ownThread, .serialized)
struct RemoteCaptureTests {
    /// A tracer gone by the time it is looked at traces nothing: the capture is tried again. A
    /// live process that is no helper of the target (this test process, a child of another
    /// name) is a real tracer: the refusal stands.
    @Test func aTracerThatIsGoneOrTheTargetsHelperIsWaitedFor() throws {
        let child = try ChildProcess("/bin/sleep", ["30"])
        defer { child.signal(SIGKILL); _ = try? child.waitForExit() }
        let gone = try ChildProcess("/bin/true")
        _ = try gone.waitForExit()
        #expect(RemoteCapture.isQuietCaptureHelper(gone.pid, name: "", of: child.pid))
        #expect(!RemoteCapture.isQuietCaptureHelper(getpid(), name: ProcFS.comm(of: getpid()), of: child.pid))
        #expect(!RemoteCapture.isQuietCaptureHelper(child.pid, name: "sleep", of: getpid()))
    }

    @Test func capturesAll65ThreadsDeepAndLeavesTargetRunningUntraced() throws {
        let child = try ChildProcess(product: "hangwatch-fixture-remote", ["threads", "65"])
        try child.waitForOutput("READY threads 65")
        waitUntilEveryThread(of: child.pid, is: "S")
        // What /proc shows before the stop; the capture takes the line from the stop's registers.
        let reader = try #require(TaskReader(pid: child.pid))
        let lines = Dictionary(uniqueKeysWithValues: (reader.threadIDs() ?? []).map { ($0, reader.syscallLine(tid: $0).map(Text.trimmed)) })

        let result = try RemoteCapture.capture(pid: child.pid, options: .init(stackMemoryBytes: 4096))
        let snapshot = result.snapshot
        print("remote capture of 65 threads: pause \(String(format: "%.2f", result.pauseSeconds * 1000)) ms, " +
              "capture \(String(format: "%.2f", snapshot.captureDurationSeconds * 1000)) ms (modules included)")
        let again = try RemoteCapture.capture(pid: child.pid)
        print("second capture of 65 threads: pause \(String(format: "%.2f", again.pauseSeconds * 1000)) ms, " +
              "capture \(String(format: "%.2f", again.snapshot.captureDurationSeconds * 1000)) ms")

        #expect(snapshot.threads.count == 65)
        #expect(Set(snapshot.threads.map(\.tid)).count == 65)
        #expect(snapshot.reason == .dumpRequested)
        #expect(snapshot.process.pid == child.pid)
        #expect(snapshot.process.name == "hangwatch-fixtu")  // comm: the first 15 bytes of the name
        #expect(snapshot.process.executable == (try productPath("hangwatch-fixture-remote")))
        #expect(snapshot.process.arguments.suffix(2) == ["threads", "65"])
        for thread in snapshot.threads {
            #expect(thread.status == .ptrace, "thread \(thread.tid)")
            #expect(thread.frames.count >= 30, "thread \(thread.tid) has \(thread.frames.count) frames")
            #expect(thread.roles == (thread.tid == child.pid ? .mainThread : []), "thread \(thread.tid)")
            let registers = try #require(thread.registers)
            #expect(registers.pc == thread.frames.first)
            // From the stack pointer up to 4096 bytes, short of the thread's own descriptor.
            #expect(thread.stackMemory.count > 0 && thread.stackMemory.count <= 4096, "thread \(thread.tid) stack bytes")
            #expect(thread.state == "S", "thread \(thread.tid) was \(thread.state) before the stop")
            // Parked threads wait in futex (202), the main thread in sigwait (rt_sigtimedwait, 128).
            #expect(thread.syscall?.hasPrefix(thread.tid == child.pid ? "128 " : "202 ") == true,
                    "parked thread \(thread.tid) should be in futex: \(thread.syscall ?? "nil")")
            #expect(thread.syscall == lines[thread.tid] ?? nil, "thread \(thread.tid): /proc showed \(lines[thread.tid] ?? nil ?? "nil")")
        }
        #expect(snapshot.threads.first?.tid == child.pid)
        #expect(again.snapshot.threads.count == 65)
        // The default 16 KiB windows stop short of each thread's own descriptor (hwd_stack_window_bytes).
        for thread in again.snapshot.threads {
            let sp = try #require(thread.registers?.sp)
            let offset = ownThreadDescriptorOffset(in: thread.stackMemory, copiedFrom: sp)
            #expect(offset == nil, "thread \(thread.tid): its descriptor at +\(offset ?? 0) of its window")
        }

        // Each parked thread's 30-deep recursion is in the executable's own code.
        let executable = try #require(snapshot.modules.first { $0.path == snapshot.process.executable })
        let parked = try symbolRanges(in: executable, dynamic: false) { $0.contains("parkedRecursion") }
        let serving = try symbolRanges(in: executable, dynamic: false) { $0.contains("servingRecursion") }
        #expect(!parked.isEmpty && !serving.isEmpty)
        for thread in snapshot.threads {
            let recursion = thread.tid == child.pid ? serving : parked
            let deep = thread.frames.filter { pc in recursion.contains { $0.contains(pc) } }.count
            #expect(deep >= 30, "thread \(thread.tid): \(deep) frames in its recursion")
        }

        // Not left traced, and still answering.
        #expect(tracerPIDs(of: child.pid).count == 65)
        #expect(tracerPIDs(of: child.pid).allSatisfy { $0 == 0 })
        child.signal(SIGUSR1)
        try child.waitForOutput("PONG 1", timeout: 10)
        child.signal(SIGTERM)
        #expect(try child.waitForExit(timeout: 10) == 0)
    }

    /// Frames come from what was copied during the stop; a stack deeper than the copied window
    /// is read live after the release. Parked threads do not move, so every window — the
    /// default, 256 bytes, none — gives the same frames, all 30 recursion levels deep.
    @Test func unwindingAfterTheReleaseGivesTheSameFramesWhateverTheWindow() throws {
        let child = try ChildProcess(product: "hangwatch-fixture-remote", ["threads", "16"])
        try child.waitForOutput("READY threads 16")
        var framesByWindow: [Int: [Int32: [UInt64]]] = [:]
        for window in [RemoteCaptureOptions.defaultUnwindWindowBytes, 256, 0] {
            let result = try RemoteCapture.capture(pid: child.pid, options: .init(includeModules: false, unwindWindowBytes: window))
            #expect(result.snapshot.threads.count == 16)
            framesByWindow[window] = Dictionary(uniqueKeysWithValues: result.snapshot.threads.map { ($0.tid, $0.frames) })
            for thread in result.snapshot.threads { #expect(thread.frames.count >= 32, "window \(window), thread \(thread.tid)") }
        }
        #expect(framesByWindow[256] == framesByWindow[RemoteCaptureOptions.defaultUnwindWindowBytes])
        #expect(framesByWindow[0] == framesByWindow[RemoteCaptureOptions.defaultUnwindWindowBytes])
        #expect(throws: RemoteCaptureError.self) { try RemoteCapture.capture(pid: child.pid, options: .init(unwindWindowBytes: 2 << 20)) }
        child.signal(SIGTERM)
        #expect(try child.waitForExit(timeout: 10) == 0)
    }

    /// The CFI stepper (Sources/CHangwatchCFI/hw_cfi.c) unwinds the copies as libunwind does:
    /// the same frames for every thread of the same parked process, with it and without it,
    /// and with it every thread is stepped (none falls back to libunwind).
    @Test func theCFIStepperAndLibunwindGiveTheSameFrames() throws {
        let child = try ChildProcess(product: "hangwatch-fixture-remote", ["threads", "16"])
        defer {
            child.signal(SIGKILL)
            _ = try? child.waitForExit(timeout: 10)
        }
        try child.waitForOutput("READY threads 16")
        defer { hwp_set_cfi_stepper(1) }
        var framesByUnwinder: [[Int32: [UInt64]]] = []
        for stepper: Int32 in [1, 0, 1] {
            hwp_set_cfi_stepper(stepper)
            let stepped = hwp_stepped_threads()
            let result = try RemoteCapture.capture(pid: child.pid, options: .init(includeModules: false))
            #expect(result.snapshot.threads.count == 16)
            framesByUnwinder.append(Dictionary(uniqueKeysWithValues: result.snapshot.threads.map { ($0.tid, $0.frames) }))
            for thread in result.snapshot.threads { #expect(thread.frames.count >= 32, "stepper \(stepper), thread \(thread.tid)") }
            if stepper == 1 { #expect(hwp_stepped_threads() &- stepped >= 16) }
        }
        #expect(framesByUnwinder[0] == framesByUnwinder[1], "stepper against libunwind")
        #expect(framesByUnwinder[2] == framesByUnwinder[1], "the stepper again against libunwind")
    }

    /// Two unwinders, one stack: in-process capture unwinds inside the signal handler with
    /// libgcc's unwinder, ptrace capture from outside with libunwind-ptrace. For parked threads
    /// they agree return address for return address (docs/platform-facts.md fact 4).
    @Test func inProcessAndPtraceCaptureAgreeFrameByFrame() throws {
        let child = try ChildProcess(product: "hangwatch-fixture-capture", ["threads-hold", "12"])
        defer {
            child.signal(SIGKILL)
            _ = try? child.waitForExit(timeout: 10)
        }
        let output = try child.waitForOutput("HOLD", timeout: 60)
        #expect(output.contains("UNWINDER libgcc\n"), "Debian 12's libgcc_s finds FDEs lock-free: \(output.prefix(200))")
        var inProcess: [Int32: [UInt64]] = [:]
        for line in output.split(separator: "\n") where line.hasPrefix("FRAMES ") {
            let fields = line.split(separator: " ")
            #expect(fields.count == 4 && fields[2] == "captured", "\(line)")
            guard fields.count == 4, let tid = Int32(fields[1]) else { continue }
            inProcess[tid] = fields[3].split(separator: ",").compactMap { UInt64($0, radix: 16) }
        }
        #expect(inProcess.count == 12)
        let outside = try RemoteCapture.capture(pid: child.pid, options: .init(includeModules: false)).snapshot
        func hex(_ frames: [UInt64]) -> String { frames.map { String($0, radix: 16) }.joined(separator: " ") }
        for (tid, frames) in inProcess {
            let traced = try #require(outside.threads.first { $0.tid == tid }).frames
            #expect(frames.count >= 22, "thread \(tid): \(hex(frames))")
            // frames[0] is the pc in nanosleep: where a signal or a ptrace stop left it, the
            // syscall instruction or the one after (2 bytes on); the callers must be the same.
            let pcs = (frames.first ?? 0, traced.first ?? 0)
            #expect(max(pcs.0, pcs.1) - min(pcs.0, pcs.1) <= 2, "thread \(tid): pc \(hex([pcs.0])) vs \(hex([pcs.1]))")
            #expect(Array(frames.dropFirst()) == Array(traced.dropFirst()), "thread \(tid): in-process \(hex(frames)) ptrace \(hex(traced))")
        }
    }

    @Test func deadlockedThreadsAreInLibcMutexLock() throws {
        let child = try ChildProcess(product: "hangwatch-fixture-remote", ["deadlock"])
        let ready = try child.waitForOutput("READY deadlock")
        let tids = try #require(ready.split(separator: "\n").first { $0.hasPrefix("READY deadlock") })
            .split(separator: " ").dropFirst(2).compactMap { Int32($0) }
        #expect(tids.count == 2)

        let snapshot = try RemoteCapture.captureProcess(pid: child.pid, options: .init(stackMemoryBytes: 8192))
        let libc = try #require(snapshot.modules.first { $0.path.hasSuffix("/libc.so.6") })
        #expect(libc.buildID.count == 40)
        let readelf = try runTool("/usr/bin/readelf", ["-n", libc.path])
        #expect(readelf.contains("Build ID: \(libc.buildID)"))
        #expect(libc.start <= libc.base + 0x1000 && libc.end > libc.start)

        let mutexLock = try symbolRanges(in: libc, dynamic: true) { $0.hasPrefix("pthread_mutex_lock@") }
        #expect(!mutexLock.isEmpty)
        let executable = try #require(snapshot.modules.first { $0.path == snapshot.process.executable })
        let lockOrder = try symbolRanges(in: executable, dynamic: false) {
            $0.contains("deadlockTakeAThenB") || $0.contains("deadlockTakeBThenA")
        }
        #expect(lockOrder.count == 2)
        for tid in tids {
            let thread = try #require(snapshot.threads.first { $0.tid == tid })
            #expect(thread.status == .ptrace)
            #expect(thread.syscall?.hasPrefix("202 ") == true, "deadlocked thread in futex: \(thread.syscall ?? "nil")")
            let inLock = thread.frames.firstIndex { pc in mutexLock.contains { $0.contains(pc) } }
            let inFixture = thread.frames.firstIndex { pc in lockOrder.contains { $0.contains(pc) } }
            #expect(inLock != nil, "thread \(tid) has no frame in pthread_mutex_lock: \(thread.frames.map { String($0, radix: 16) })")
            if let inLock, let inFixture { #expect(inLock < inFixture) }
            // The return address into pthread_mutex_lock is real data on the captured stack.
            if let inLock, inLock > 0 {
                let word = withUnsafeBytes(of: thread.frames[inLock].littleEndian) { Array($0) }
                let stack = thread.stackMemory
                let found = stride(from: 0, to: stack.count - 7, by: 8).contains { Array(stack[$0..<$0 + 8]) == word }
                #expect(found, "return address not found in the copied stack window")
            }
        }
        #expect(tracerPIDs(of: child.pid).allSatisfy { $0 == 0 })
    }

    @Test func samplingAFrozenProcessAggregatesIdenticalStacks() throws {
        let child = try ChildProcess(product: "hangwatch-fixture-remote", ["deadlock"])
        try child.waitForOutput("READY deadlock")
        let result = try RemoteCapture.captureSamples(pid: child.pid, count: 5, interval: 0.01)
        #expect(result.sampleCount == 5)
        #expect(result.pauseSeconds.count == 5)
        #expect(result.endedEarly == nil)
        #expect(result.snapshot.threads.count == 3)
        // Every thread of a deadlocked process is frozen: one stack per thread, seen 5 times.
        #expect(Set(result.samples.map(\.tid)) == Set(result.snapshot.threads.map(\.tid)))
        for sample in result.samples {
            #expect(sample.count == 5, "tid \(sample.tid) stack seen \(sample.count) times")
            let first = result.snapshot.threads.first { $0.tid == sample.tid }
            #expect(sample.frames == first?.frames)
        }
        #expect(tracerPIDs(of: child.pid).allSatisfy { $0 == 0 })
    }

    @Test func repeatedCapturesLeaveCounterRunning() throws {
        let child = try ChildProcess(product: "hangwatch-fixture-remote", ["counter"])
        try child.waitForOutput("READY counter")
        #expect(waitForCount(above: 0, in: child))
        for round in 0..<20 {
            let before = lastCount(child)
            let snapshot = try RemoteCapture.captureProcess(pid: child.pid, options: .init(includeModules: round == 0))
            #expect(snapshot.threads.count == 2)
            #expect(snapshot.threads.allSatisfy { $0.status == .ptrace && !$0.frames.isEmpty })
            #expect(waitForCount(above: before, in: child), "counter stuck at \(before) after capture \(round)")
        }
        #expect(tracerPIDs(of: child.pid).allSatisfy { $0 == 0 })
        child.signal(SIGTERM)
        #expect(try child.waitForExit(timeout: 10) == 0)
        #expect(!child.stderr.contains("remote-fixture:"))
    }

    @Test func threadsAppearingAndExitingDuringCaptureAreHandled() throws {
        let child = try ChildProcess(product: "hangwatch-fixture-remote", ["churn"])
        try child.waitForOutput("READY churn")
        #expect(waitForCount(above: 0, in: child))
        var sawExtraThreads = false
        for round in 0..<20 {
            let before = lastCount(child)
            let snapshot = try RemoteCapture.captureProcess(pid: child.pid, options: .init(includeModules: false))
            #expect(snapshot.threads.contains { $0.tid == child.pid && $0.status == .ptrace })
            for thread in snapshot.threads {
                #expect(thread.status == .ptrace || thread.status == .exited, "round \(round) thread \(thread.tid): \(thread.status)")
                #expect((thread.status == .ptrace) == !thread.frames.isEmpty)
            }
            if snapshot.threads.count > 2 { sawExtraThreads = true }
            #expect(waitForCount(above: before, in: child), "churn stuck at \(before) after capture \(round)")
        }
        #expect(sawExtraThreads, "no short-lived thread was ever caught")
        #expect(tracerPIDs(of: child.pid).allSatisfy { $0 == 0 })
        child.signal(SIGTERM)
        #expect(try child.waitForExit(timeout: 10) == 0)
    }

    @Test func aThreadThatCannotStopTimesOutAndIsReleased() throws {
        let directory = try makeTemporaryDirectory("hangwatch-remote")
        defer { removeTemporaryDirectory(directory) }
        let fifo = directory + "/gate"
        #expect(mkfifo(fifo, 0o600) == 0)
        let child = try ChildProcess(product: "hangwatch-fixture-remote", ["unstoppable", fifo])
        let ready = try child.waitForOutput("READY unstoppable")
        let stuck = try #require(ready.split(separator: "\n").first { $0.hasPrefix("READY unstoppable") }
            .flatMap { Int32($0.split(separator: " ").last ?? "") })
        #expect(RemoteCapture.threadInfo(pid: child.pid, tid: stuck, reader: TaskReader(pid: child.pid)).state == "D")

        let result = try RemoteCapture.capture(pid: child.pid, options: .init(stopTimeoutSeconds: 0.3, includeModules: false))
        let threads = result.snapshot.threads
        #expect(threads.count == 2)
        let stuckThread = try #require(threads.first { $0.tid == stuck })
        #expect(stuckThread.status == .timedOut)
        #expect(stuckThread.state == "D")
        #expect(stuckThread.frames.isEmpty && stuckThread.registers == nil)
        #expect(threads.first { $0.tid == child.pid }?.status == .ptrace)
        #expect(tracerPIDs(of: child.pid).allSatisfy { $0 == 0 })

        // The main thread answers, and once the gate opens the stuck thread finishes its spawn:
        // nothing was left stopped by the interrupt it never saw in time.
        child.signal(SIGUSR1)
        try child.waitForOutput("PONG", timeout: 10)
        let writer = open(fifo, O_WRONLY)
        #expect(writer >= 0)
        try child.waitForOutput("SPAWNED", timeout: 10)
        close(writer)
        #expect(RemoteCapture.threadIDs(of: child.pid).allSatisfy {
            RemoteCapture.threadInfo(pid: child.pid, tid: $0, reader: TaskReader(pid: child.pid)).state != "t"
        })
        child.signal(SIGTERM)
        #expect(try child.waitForExit(timeout: 10) == 0)
    }

    /// Sampling a process with a thread in D sleep: each sample gives that thread up (timed
    /// out), and it stays traced by the capture's thread (only a stopped tracee can be
    /// detached). The next sample must take it as its own, not as "already being traced".
    @Test func samplesGoOnPastAThreadThatCannotStop() throws {
        let directory = try makeTemporaryDirectory("hangwatch-remote")
        defer { removeTemporaryDirectory(directory) }
        let fifo = directory + "/gate"
        #expect(mkfifo(fifo, 0o600) == 0)
        let child = try ChildProcess(product: "hangwatch-fixture-remote", ["unstoppable", fifo])
        let ready = try child.waitForOutput("READY unstoppable")
        let stuck = try #require(ready.split(separator: "\n").first { $0.hasPrefix("READY unstoppable") }
            .flatMap { Int32($0.split(separator: " ").last ?? "") })

        let result = try RemoteCapture.captureSamples(pid: child.pid, count: 3, interval: 0.05,
                                                      options: .init(stopTimeoutSeconds: 0.3, includeModules: false))
        #expect(result.endedEarly == nil, "\(result.endedEarly ?? "")")
        #expect(result.sampleCount == 3)
        #expect(result.snapshot.threads.first { $0.tid == stuck }?.status == .timedOut)
        #expect(tracerPIDs(of: child.pid).allSatisfy { $0 == 0 })

        let writer = open(fifo, O_WRONLY)
        #expect(writer >= 0)
        try child.waitForOutput("SPAWNED", timeout: 10)
        close(writer)
        child.signal(SIGTERM)
        #expect(try child.waitForExit(timeout: 10) == 0)
    }

    /// The program's own quiet-capture helper (Sources/CHangwatchCapture/hw_quiet.c) holds a
    /// thread as the capture begins: the capture seizes the main thread, is refused the held
    /// one, waits for the helper to be gone and tries again (RemoteCapture.capture). The main
    /// thread is still its own then (it never stopped, so it could not be detached): the retry
    /// must take it, not fail as "already being traced by" the capture itself. `hangwatch run`
    /// blamed another process of the job for a child's reported hang so
    /// (Tests/hangwatchTests/RunWithCaptureHelperTests.swift).
    @Test func aRetryAfterTheProgramsOwnHelperTakesTheThreadsItHadSeized() throws {
        let child = try ChildProcess(product: "hangwatch-fixture-remote", ["own-helper"])
        let ready = try child.waitForOutput("READY own-helper")
        let held = try #require(ready.split(separator: "\n").first { $0.hasPrefix("READY own-helper") }
            .flatMap { Int32($0.split(separator: " ").last ?? "") })
        // Held as the capture begins (for 1 s from READY), by a process named as the helper.
        let tracer = ProcFS.status("/proc/\(child.pid)/task/\(held)/status")["TracerPid"].flatMap { Int32($0) } ?? 0
        #expect(tracer != 0 && ProcFS.comm(of: tracer) == ProcFS.quietCaptureHelperName)

        let snapshot = try RemoteCapture.captureProcess(pid: child.pid, options: .init(includeModules: false))
        #expect(snapshot.threads.count == 3)
        #expect(snapshot.threads.allSatisfy { $0.status == .ptrace && !$0.frames.isEmpty })
        #expect(tracerPIDs(of: child.pid).allSatisfy { $0 == 0 })
        try child.waitForOutput("RELEASED", timeout: 10)
        child.signal(SIGTERM)
        #expect(try child.waitForExit(timeout: 10) == 0)
    }

    @Test func concurrentCapturesOfDifferentProcesses() throws {
        let children = try (0..<3).map { _ in try ChildProcess(product: "hangwatch-fixture-remote", ["threads", "8"]) }
        for child in children { try child.waitForOutput("READY threads 8") }
        let pids = children.map(\.pid)
        let counts = Mutex<[Int32: [Int]]>([:])
        DispatchQueue.concurrentPerform(iterations: 12) { index in
            let pid = pids[index % pids.count]
            let frames = (try? RemoteCapture.captureProcess(pid: pid, options: .init(includeModules: false)))?
                .threads.map(\.frames.count) ?? []
            counts.withLock { $0[pid, default: []].append(frames.count >= 8 && frames.allSatisfy { $0 >= 30 } ? 1 : 0) }
        }
        for pid in pids {
            #expect(counts.withLock { $0[pid] } == [1, 1, 1, 1], "pid \(pid)")
            #expect(tracerPIDs(of: pid).allSatisfy { $0 == 0 })
        }
        for (number, child) in children.enumerated() {
            child.signal(SIGUSR1)
            try child.waitForOutput("PONG 1", timeout: 10)
            child.signal(SIGTERM)
            #expect(try child.waitForExit(timeout: 10) == 0, "child \(number)")
        }
    }

    @Test func aJobControlStoppedProcessStaysStopped() throws {
        let child = try ChildProcess(product: "hangwatch-fixture-remote", ["counter"])
        try child.waitForOutput("READY counter")
        child.signal(SIGSTOP)
        waitUntilEveryThread(of: child.pid, is: "T")

        let snapshot = try RemoteCapture.captureProcess(pid: child.pid, options: .init(includeModules: false))
        #expect(snapshot.threads.count == 2)
        #expect(snapshot.threads.allSatisfy { $0.status == .ptrace && $0.state == "T" && !$0.frames.isEmpty })
        // Still stopped (a capture must not resume what the user stopped), and untraced.
        let frozen = lastCount(child)
        usleep(50_000)
        #expect(lastCount(child) == frozen)
        #expect(RemoteCapture.threadIDs(of: child.pid).allSatisfy {
            RemoteCapture.threadInfo(pid: child.pid, tid: $0, reader: TaskReader(pid: child.pid)).state == "T"
        })
        #expect(tracerPIDs(of: child.pid).allSatisfy { $0 == 0 })
        child.signal(SIGCONT)
        #expect(waitForCount(above: frozen, in: child))
        child.signal(SIGTERM)
        #expect(try child.waitForExit(timeout: 10) == 0)
    }

    @Test func processAlreadyTracedNamesTheTracerAndIsLeftRunning() throws {
        let target = try ChildProcess(product: "hangwatch-fixture-remote", ["counter"])
        try target.waitForOutput("READY counter")
        let tracer = try ChildProcess(product: "hangwatch-fixture-remote", ["tracer", "\(target.pid)"])
        try tracer.waitForOutput("READY tracing")

        #expect(throws: RemoteCaptureError.alreadyTraced(pid: target.pid, tracerPID: tracer.pid, tracerName: "hangwatch-fixtu")) {
            try RemoteCapture.captureProcess(pid: target.pid)
        }
        let error = RemoteCaptureError.alreadyTraced(pid: target.pid, tracerPID: tracer.pid, tracerName: "hangwatch-fixtu")
        #expect(error.description.contains("already being traced by pid \(tracer.pid) (hangwatch-fixtu)"))
        // The counter's other thread was never left stopped or traced by us.
        #expect(waitForCount(above: lastCount(target), in: target))
        let threads = RemoteCapture.threadIDs(of: target.pid)
        let ours = threads.filter { $0 != target.pid }
        #expect(ours.allSatisfy { ProcFS.status("/proc/\(target.pid)/task/\($0)/status")["TracerPid"] == "0" })

        // Once the other tracer is gone, capture works.
        tracer.signal(SIGTERM)
        #expect(try tracer.waitForExit(timeout: 10) == 0)
        let snapshot = try RemoteCapture.captureProcess(pid: target.pid)
        #expect(snapshot.threads.count == 2)
        #expect(waitForCount(above: lastCount(target), in: target))
        target.signal(SIGTERM)
        #expect(try target.waitForExit(timeout: 10) == 0)
    }

    @Test func missingProcessAndSelfAreClearErrors() throws {
        let pidMax = Int32(ProcFS.firstLine("/proc/sys/kernel/pid_max") ?? "") ?? 4_194_304
        // pid_max itself is never handed out.
        #expect(throws: RemoteCaptureError.noSuchProcess(pid: pidMax)) {
            try RemoteCapture.captureProcess(pid: pidMax)
        }
        #expect(RemoteCaptureError.noSuchProcess(pid: pidMax).description == "no process with pid \(pidMax)")
        #expect(throws: RemoteCaptureError.cannotCaptureSelf(pid: getpid())) {
            try RemoteCapture.captureProcess(pid: getpid())
        }
        #expect(throws: RemoteCaptureError.self) { try RemoteCapture.captureProcess(pid: 0) }
        #expect(throws: RemoteCaptureError.self) { try RemoteCapture.captureSamples(pid: getppid(), count: 0, interval: 0.1) }

        // A process that exited (and was reaped) between launch and capture.
        let child = try ChildProcess(product: "hangwatch-fixture-remote", ["counter"])
        try child.waitForOutput("READY counter")
        let gone = child.pid
        child.signal(SIGTERM)
        try child.waitForExit(timeout: 10)
        #expect(throws: RemoteCaptureError.noSuchProcess(pid: gone)) { try RemoteCapture.captureProcess(pid: gone) }
    }

    /// A child of the capturing process that ends while it is being stopped: the capture
    /// learns it ended, and its exit stays for its parent's own wait (`hangwatch run`'s
    /// supervisor, Supervisor.swift). Taken by the capture's wait, it was reaped there: the
    /// supervisor never saw its child end and polled forever, and its pid was free for another
    /// process while the supervisor still signalled the child by it.
    @Test func aChildThatEndsWhileBeingStoppedIsLeftForItsParentToReap() throws {
        let child = try ChildProcess("/usr/bin/python3", ["-c", "import os, time; time.sleep(0.3); os._exit(7)"])
        #expect(hwp_seize(child.pid) == 0)
        let deadline = Date().addingTimeInterval(10)
        while ProcFS.processStat(of: child.pid)?.state != "Z", Date() < deadline { usleep(10_000) }
        #expect(ProcFS.processStat(of: child.pid)?.state == "Z", "the child did not end")
        var signal: Int32 = 0
        #expect(hwp_wait_stopped(child.pid, 200, &signal) == HWP_WAIT_EXITED)
        #expect(try child.waitForExit(timeout: 10) == 7, "its exit status was taken by the capture's wait")
    }

    /// The same for a child with a second thread, killed while both are seized: the second
    /// thread's end is the capture's to take (the kernel tells the parent of the process's end
    /// only once every traced thread has been waited for), the leader's is the parent's.
    @Test func aKilledChildsOtherThreadIsTakenAndItsEndLeftForItsParent() throws {
        let child = try ChildProcess("/usr/bin/python3", ["-c", "import threading, time; threading.Thread(target=time.sleep, args=(60,)).start(); print('READY', flush=True); time.sleep(60)"])
        try child.waitForOutput("READY")
        let other = try #require(RemoteCapture.threadIDs(of: child.pid).first { $0 != child.pid })
        #expect(hwp_seize(child.pid) == 0 && hwp_seize(other) == 0)
        kill(child.pid, SIGKILL)
        var signal: Int32 = 0
        #expect(hwp_wait_stopped(other, 5_000, &signal) == HWP_WAIT_EXITED)
        let deadline = Date().addingTimeInterval(10)
        while ProcFS.processStat(of: child.pid)?.state != "Z", Date() < deadline { usleep(10_000) }
        #expect(hwp_wait_stopped(child.pid, 200, &signal) == HWP_WAIT_EXITED)
        let told = Date().addingTimeInterval(10)
        while child.isRunning, Date() < told { usleep(10_000) }
        #expect(!child.isRunning, "the child's end was never told to its parent (its other thread was left unwaited)")
        // Should it have been left, taking it now lets the test end instead of hanging in the reap.
        var status: Int32 = 0
        _ = waitpid(other, &status, __WALL | WNOHANG)
        #expect(try child.waitForExit(timeout: 10) == 128 + SIGKILL, "the child's end was taken by the capture's wait")
    }

    @Test func permissionDenialsExplainTheRule() {
        let otherUser = RemoteCapture.explainDenial(pid: 42, targetUIDs: [1000, 1000, 1000, 1000], ownUIDs: [1001, 1001, 1001, 1001],
                                                    hasPtraceCapability: false, yamaScope: 0, isDescendant: false)
        #expect(otherUser.description.contains("belongs to uid 1000"))
        #expect(otherUser.description.contains("CAP_SYS_PTRACE"))
        // A set-user-ID program started by this user: its real uid is ours, the others are not.
        let setuid = RemoteCapture.explainDenial(pid: 42, targetUIDs: [1000, 0, 0, 0], ownUIDs: [1000, 1000, 1000, 1000],
                                                 hasPtraceCapability: false, yamaScope: 0, isDescendant: true)
        #expect(setuid.description.contains("runs set-user-ID (real uid 1000, effective uid 0)"), "\(setuid)")
        let yama1 = RemoteCapture.explainDenial(pid: 42, targetUIDs: [1000], ownUIDs: [1000], hasPtraceCapability: false,
                                                yamaScope: 1, isDescendant: false)
        #expect(yama1.description.contains("ptrace_scope is 1"))
        #expect(yama1.description.contains("only a parent"))
        let yama2 = RemoteCapture.explainDenial(pid: 42, targetUIDs: [1000], ownUIDs: [1000], hasPtraceCapability: false,
                                                yamaScope: 2, isDescendant: true)
        #expect(yama2.description.contains("ptrace_scope is 2"))
        let yama3 = RemoteCapture.explainDenial(pid: 42, targetUIDs: [0], ownUIDs: [0], hasPtraceCapability: true,
                                                yamaScope: 3, isDescendant: true)
        #expect(yama3.description.contains("disabled for everyone"))
        let other = RemoteCapture.explainDenial(pid: 42, targetUIDs: [1000], ownUIDs: [1000], hasPtraceCapability: false,
                                                yamaScope: 1, isDescendant: true)
        #expect(other.description.contains("seccomp"))
        #expect(!other.description.contains("\n"))
    }

    @Test func unwinderLoadsWithoutHijackingUnwind() throws {
        var message = [CChar](repeating: 0, count: 256)
        #expect(hwpLoadForTest(&message) == 0)
        // libunwind lives in a private namespace: _Unwind_RaiseException still comes from libgcc_s.
        let symbol = try #require(dlsym(UnsafeMutableRawPointer(bitPattern: 0), "_Unwind_RaiseException"))
        let address = UInt64(UInt(bitPattern: symbol))
        let library = ProcFS.fileMappings(of: getpid())
            .first { $0.start <= address && address < $0.end }?.path ?? ""
        #expect(library.contains("libgcc_s"), "resolved from \(library)")
        // In-process capture may have loaded libunwind.so.8 too (RTLD_LOCAL): loaded is fine,
        // visible in the global scope is not.
        #expect(dlsym(UnsafeMutableRawPointer(bitPattern: 0), "_Ux86_64_init_remote") == nil, "remote unwinder visible globally")
        #expect(dlsym(UnsafeMutableRawPointer(bitPattern: 0), "_ULx86_64_step") == nil, "local unwinder visible globally")
    }
}

import CHangwatchPtrace
import HangwatchStageTestSupport
func hwpLoadForTest(_ buffer: inout [CChar]) -> Int32 { hwp_load_unwinder(&buffer, buffer.count) }

@Suite("RemoteCapture ELF reading", .ownThread)
struct RemoteCaptureELFTests {
    /// A minimal ELF64 file: header, one PT_NOTE program header at 64, the note at 120.
    func elf(noteOffset: UInt64 = 120, noteSize: UInt64, note: [UInt8], phnum: UInt16 = 1) -> [UInt8] {
        func le<T: FixedWidthInteger>(_ value: T) -> [UInt8] { withUnsafeBytes(of: value.littleEndian) { Array($0) } }
        var header = [UInt8](repeating: 0, count: 64)
        header.replaceSubrange(0..<6, with: [0x7f, 0x45, 0x4c, 0x46, 2, 1])
        header.replaceSubrange(32..<40, with: le(UInt64(64)))   // e_phoff
        header.replaceSubrange(54..<56, with: le(UInt16(56)))   // e_phentsize
        header.replaceSubrange(56..<58, with: le(phnum))        // e_phnum
        var program = le(UInt32(4)) + le(UInt32(4))             // PT_NOTE, flags
        program += le(noteOffset) + le(UInt64(0)) + le(UInt64(0)) + le(noteSize) + le(noteSize) + le(UInt64(4))
        return header + program + note
    }

    func write(_ bytes: [UInt8], _ directory: String, _ name: String) -> String {
        let path = directory + "/" + name
        _ = FileManager.default.createFile(atPath: path, contents: Data(bytes))
        return path
    }

    @Test func readsBuildIDAndSurvivesHostileNotes() throws {
        let directory = try makeTemporaryDirectory("hangwatch-elf")
        defer { removeTemporaryDirectory(directory) }
        let id: [UInt8] = [0xde, 0xad, 0xbe, 0xef, 0x01, 0x02]
        let good = [4, 0, 0, 0, 6, 0, 0, 0, 3, 0, 0, 0, 0x47, 0x4e, 0x55, 0] + id + [0, 0]
        let valid = write(elf(noteSize: UInt64(good.count), note: good), directory, "valid")
        #expect(RemoteCapture.ELFFile(path: valid)?.buildID() == "deadbeef0102")

        // Sizes that overflow, point past the end, or loop must give "" (never crash or hang).
        let hostile: [(String, [UInt8])] = [
            ("huge-note", elf(noteSize: .max, note: good)),
            ("note-past-end", elf(noteOffset: 1 << 40, noteSize: 24, note: good)),
            ("name-size-huge", elf(noteSize: 24, note: [0xff, 0xff, 0xff, 0x7f] + Array(good.dropFirst(4)))),
            ("desc-size-huge", elf(noteSize: 24, note: [4, 0, 0, 0, 0xff, 0xff, 0xff, 0xff] + Array(good.dropFirst(8)))),
            ("phnum-huge", elf(noteSize: 24, note: good, phnum: .max)),
            ("truncated", Array(elf(noteSize: 24, note: good).prefix(90))),
        ]
        for (name, bytes) in hostile {
            let path = write(bytes, directory, name)
            #expect(RemoteCapture.ELFFile(path: path)?.buildID() == "", "\(name)")
        }
        #expect(RemoteCapture.ELFFile(path: write(Array(repeating: 0, count: 100), directory, "not-elf")) == nil)
        #expect(RemoteCapture.ELFFile(path: valid, inode: 1) == nil, "an inode mismatch must be refused")
        #expect(mkfifo(directory + "/fifo", 0o600) == 0)
        #expect(RemoteCapture.ELFFile(path: directory + "/fifo") == nil)
    }

    @Test func modulesOfALiveProcessHaveBiasAndBuildIDs() throws {
        let child = try ChildProcess(product: "hangwatch-fixture-remote", ["counter"])
        try child.waitForOutput("READY counter")
        let modules = RemoteCapture.Modules.read(pid: child.pid)
        let libc = try #require(modules.first { $0.path.hasSuffix("/libc.so.6") })
        let executable = try #require(modules.first { $0.path == (try? productPath("hangwatch-fixture-remote")) })
        for module in [libc, executable] {
            #expect(module.start < module.end)
            #expect(module.buildID.count == 40, "\(module.path) build-id \(module.buildID)")
            let readelf = try runTool("/usr/bin/readelf", ["-n", module.path])
            #expect(readelf.contains("Build ID: \(module.buildID)"))
        }
        #expect(Set(modules.map(\.path)).count == modules.count)
        child.signal(SIGTERM)
        #expect(try child.waitForExit(timeout: 10) == 0)
    }

    /// Processes made as the quiet-capture helper is (Sources/CHangwatchCapture/hw_quiet.c:
    /// sharing memory, exit signal 0) are no members of a tree, named hangwatch-quiet or still
    /// bearing their maker's name (a walk can meet the helper before it has run to name itself);
    /// a vfork child, which shares memory too, is one.
    @Test func aTreeLeavesOutHelperClonesButNotAVforkChild() throws {
        let child = try ChildProcess(product: "hangwatch-fixture-remote", ["helper-clones"])
        try child.waitForOutput("READY helper-clones")
        let children = ProcFS.processIDs().compactMap { pid in ProcFS.processStat(of: pid).map { (pid, $0) } }
            .filter { $0.1.parent == child.pid && $0.1.state != "Z" }
        defer {
            for (pid, _) in children { kill(pid, SIGKILL) }
            child.signal(SIGKILL)
        }
        #expect(children.count == 3)
        let vfork = children.filter { $0.1.exitSignal == SIGCHLD }.map(\.0)
        let clones = children.filter { $0.1.exitSignal == 0 }
        #expect(vfork.count == 1 && clones.count == 2)
        #expect(Set(clones.map(\.1.name)) == [ProcFS.quietCaptureHelperName, "hangwatch-fixtu"])
        #expect(children.allSatisfy { ProcFS.sharesMemory(child.pid, $0.0) == true })

        #expect(ProcFS.descendants(of: child.pid).map(\.pid) == vfork)
        let tree = TreeCapture.capture(root: child.pid, options: RemoteCaptureOptions(stopTimeoutSeconds: 0.3, includeModules: false))
        #expect(tree.members.map(\.pid) == [child.pid] + vfork)
    }

    /// A process its own hang monitor named is the culprit even when it cannot be captured (here
    /// another tracer holds it): its child, captured and asleep, is not blamed in its place.
    @Test func aNamedCulpritThatCannotBeCapturedIsStillTheCulprit() throws {
        let shell = try ChildProcess("/bin/sh", ["-c", "sleep 30 & echo READY; wait"])
        defer {
            for pid in ProcFS.descendants(of: shell.pid).map(\.pid) { kill(pid, SIGKILL) }
            shell.signal(SIGKILL)
        }
        try shell.waitForOutput("READY")
        let tracer = try ChildProcess(product: "hangwatch-fixture-remote", ["tracer", "\(shell.pid)"])
        defer { tracer.signal(SIGTERM) }
        try tracer.waitForOutput("READY tracing")

        let tree = TreeCapture.capture(root: shell.pid, options: RemoteCaptureOptions(includeModules: false), namedCulprit: shell.pid)
        #expect(tree.members.count == 2)
        #expect(tree.members[0].snapshot == nil && (tree.members[0].failure ?? "").contains("already being traced"))
        #expect(tree.members[1].snapshot != nil)
        #expect(tree.culpritPID == shell.pid)
        #expect(tree.culpritReason == "its hang monitor reported the hang; it could not be captured")
        // Unnamed, the captured child is the likely culprit.
        #expect(TreeCapture.findCulprit(tree.members, named: nil).0 == tree.members[1].pid)
    }

    /// Tree capture is bounded: a process with more threads than the per-process limit, and
    /// processes past the count limit, are listed with the limit as their capture error.
    @Test func treeCaptureListsWhatItsLimitsLeaveOut() throws {
        let shell = try ChildProcess("/bin/sh", ["-c", "\(try productPath("hangwatch-fixture-remote")) threads 65 & sleep 30 & wait"])
        defer {
            for pid in ProcFS.descendants(of: shell.pid).map(\.pid) { kill(pid, SIGKILL) }
            shell.signal(SIGKILL)
        }
        try shell.waitForOutput("READY")
        let tree = TreeCapture.capture(root: shell.pid, options: RemoteCaptureOptions(),
                                       limits: TreeCaptureLimits(maxProcesses: 2, maxThreadsPerProcess: 16))
        #expect(tree.members.count == 3 && tree.processesFound == 3)
        #expect(tree.members[0].pid == shell.pid && tree.members[0].snapshot != nil)
        let bigIndex = try #require(tree.members.firstIndex { $0.arguments.contains("65") })
        let big = tree.members[bigIndex]
        #expect(big.snapshot == nil)
        if bigIndex == 1 {
            // Within the count limit, but over the thread limit; the next one is over the count.
            #expect((big.failure ?? "").contains("threads, over the limit of 16 per process"), "\(big.failure ?? "")")
            #expect((tree.members[2].failure ?? "").contains("the limit is 2 processes"), "\(tree.members[2].failure ?? "")")
        } else {
            #expect((big.failure ?? "").contains("the limit is 2 processes"), "\(big.failure ?? "")")
            #expect(tree.members[1].snapshot != nil)
        }
        #expect(big.activity == .unknown)
    }
}
