// Live in-process capture, checked on real child processes (hangwatch-fixture-capture) that hang their
// main queue under each of the three setups Linux programs use, and in this process itself.
import Foundation
import HangwatchTestSupport
import Testing
@testable import HangwatchCapture
@testable import HangwatchSnapshot
import HangwatchPlatform
import HangwatchStageTestSupport

@Suite("Capture", .ownThread, .serialized)
struct CaptureTests {
    struct Setup: CustomTestStringConvertible, Sendable {
        var mode: String
        var hangFunction: String
        var mainQueueOnMainThread: Bool
        var testDescription: String { mode }
    }

    static let setups = [
        Setup(mode: "runloop", hangFunction: "16hangUnderRunLoop", mainQueueOnMainThread: true),
        Setup(mode: "dispatchmain", hangFunction: "21hangUnderDispatchMain", mainQueueOnMainThread: false),
        Setup(mode: "asyncmain", hangFunction: "18hangUnderAsyncMain", mainQueueOnMainThread: false),
    ]

    func runFixture(_ arguments: [String], method: CaptureMethod = .quiet, timeout: Double = 60) throws -> (FixtureOutput, Int32, ChildProcess) {
        let child = try ChildProcess(product: "hangwatch-fixture-capture", arguments, environment: ["HANGWATCH_CAPTURE": method.rawValue])
        let status = try child.waitForExit(timeout: timeout)
        return (FixtureOutput(child.stdout), status, child)
    }

    @Test("captures every thread and finds the one draining the main queue", arguments: setups, CaptureMethod.allCases)
    func capturesEveryThread(setup: Setup, method: CaptureMethod) throws {
        let (output, status, child) = try runFixture([setup.mode], method: method)
        #expect(status == 0, "stdout: \(child.stdout) stderr: \(child.stderr)")
        let pid = try #require(Int32(output.snapshot["pid"] ?? ""))
        let executable = try #require(output.snapshot["exe"])
        let symbols = try SymbolRanges(file: executable)
        let bias = try #require(output.base(of: executable), "the executable is among the modules")

        // Every thread that existed before and after the capture is in the snapshot, once.
        let tids = output.threads.map(\.tid)
        #expect(Set(tids).count == tids.count)
        let stable = Set(output.tasksBefore).intersection(output.tasksAfter)
        #expect(stable.count >= 9)
        #expect(stable.isSubset(of: Set(tids)), "missing: \(stable.subtracting(tids))")

        // Exactly one thread drains the main queue, and it is hung in the fixture's function.
        let mainQueue = output.threads.filter { $0.roles.contains(.mainQueue) }
        try #require(mainQueue.count == 1, "main-queue threads: \(mainQueue.map(\.fields))")
        let drainer = mainQueue[0]
        #expect((drainer.tid == pid) == setup.mainQueueOnMainThread)
        #expect(drainer.status == .captured)
        #expect(drainer.queue == "com.apple.main-thread")
        #expect(symbols.contains(setup.hangFunction, frames: drainer.frames, bias: bias),
                "frames \(drainer.frames.map { String($0, radix: 16) }) bias \(String(bias, radix: 16))")
        // The cheap queue-only capture the hang monitor uses agrees.
        #expect(output.lines.contains("MAIN_QUEUE_THREAD \(drainer.tid)"))
        // …and the address check is not vacuous: the drainer is not parked like a plain worker.
        #expect(!symbols.contains("parkPlainWorker", frames: drainer.frames, bias: bias))
        let mainThread = try #require(output.threads.first { $0.tid == pid })
        #expect(mainThread.roles.contains(.mainThread))
        #expect(mainThread.status == .captured)

        // The thread that blocks every signal: stopped by ptrace all the same (quiet), or
        // reported from /proc, not waited for (signals).
        let blocker = try #require(output.thread(named: "hw-sigblock"))
        #expect(blocker.state == "S")
        if method == .quiet {
            #expect(blocker.status == .captured)
            #expect(symbols.contains("blockAllSignalsAndSleep", frames: blocker.frames, bias: bias))
        } else {
            #expect(blocker.status == .unreachable)
            #expect(blocker.frames.isEmpty)
        }

        // The thread in read(2) on a silent pipe: asleep in syscall 0.
        let reader = try #require(output.thread(named: "hw-pipe-read"))
        #expect(reader.state == "S")
        #expect(reader.syscall.hasPrefix("0 "), "syscall line: \(reader.syscall)")
        #expect(reader.status == .captured)
        #expect(symbols.contains("readFromSilentPipe", frames: reader.frames, bias: bias))

        // A Dispatch pool thread (blocks all but SIGPROF) is reached and unwound.
        let pool = try #require(output.thread(named: "hw-pool-busy"))
        #expect(pool.status == .captured)
        #expect(symbols.contains("busyWorkInPool", frames: pool.frames, bias: bias), "\(output.describe(pool.frames))")
        // Its CPU time is read (from the thread's CPU clocks), and is not the sleeping reader's.
        let busyCPU = try #require(Int(pool.fields["cpu_us"] ?? ""))
        #expect(busyCPU > 0 && busyCPU > Int(reader.fields["cpu_us"] ?? "") ?? .max, "cpu: \(pool.fields) vs \(reader.fields)")

        for index in 1...3 {
            let worker = try #require(output.thread(named: "hw-worker-\(index)"))
            #expect(worker.status == .captured)
            #expect(symbols.contains("parkPlainWorker", frames: worker.frames, bias: bias))
            #expect(worker.fields["stack"] == "512", "stack bytes copied from sp up")
        }

        // The requester records its own stack, which shows the capture being asked for.
        let requester = try #require(output.threads.first { $0.roles.contains(.requester) })
        #expect(requester.name == "hw-capturer")
        #expect(requester.status == .captured)
        #expect(symbols.contains("16HangwatchCapture", frames: requester.frames, bias: bias))  // a function of the capture module

        // Modules: the executable with the build-id the file carries.
        let exeModule = try #require(output.modules.first { $0["path"] == executable })
        #expect(exeModule["buildid"] == (try readelfBuildID(executable)))
        #expect(output.modules.contains { ($0["path"] ?? "").hasSuffix("libdispatch.so") })
    }

    @Test("libunwind is loaded privately: _Unwind_RaiseException still resolves to libgcc_s")
    func unwinderNotHijacked() throws {
        let (output, status, child) = try runFixture(["unwind-resolve"])
        #expect(status == 0, "stdout: \(child.stdout) stderr: \(child.stderr)")
        let loaded = output.lines.first { $0.hasPrefix("LIBUNWIND_LOADED ") }
        #expect(loaded?.contains("libunwind.so.8") == true, "capture loaded libunwind: \(output.lines)")
        let resolved = try #require(output.lines.first { $0.hasPrefix("UNWIND_RAISE ") })
        #expect(resolved.contains("libgcc_s"), "\(resolved)")
        #expect(!resolved.contains("libunwind"))
    }

    @Test("a missing libunwind is a clear, lasting error naming the library")
    func missingUnwinder() throws {
        let (output, status, child) = try runFixture(["missing-libunwind"])
        #expect(status == 0, "stdout: \(child.stdout) stderr: \(child.stderr)")
        let error = try #require(output.lines.first { $0.hasPrefix("CAPTURE_ERROR ") })
        #expect(FixtureOutput.decode(error).contains("libunwind-hangwatch-missing.so.8"), "\(error)")
        #expect(output.lines.contains("SECOND_CAPTURE_FAILED true"))
    }

    @Test("an earlier SIGPROF handler keeps its signals and never sees capture requests")
    func chainsToPreviousHandler() throws {
        let (output, status, child) = try runFixture(["chain"])
        #expect(status == 0, "stdout: \(child.stdout) stderr: \(child.stderr)")
        #expect(output.lines.contains("CHAINED_AFTER_KILL 1"), "\(output.lines)")
        #expect(output.lines.contains("CHAINED_AFTER_CAPTURES 1"), "\(output.lines)")
        let captures = output.lines.filter { $0.hasPrefix("CAPTURE ") }
        #expect(captures.count == 5)
        for line in captures {
            let fields = FixtureOutput.fields(line.split(separator: " ").map(String.init).dropFirst())
            #expect((Int(fields["threads"] ?? "") ?? 0) >= 4)
            #expect(fields["captured"] == fields["threads"], "\(line)")
        }
    }

    @Test("repeated captures while threads come and go neither hang nor crash")
    func stress() throws {
        let (output, status, child) = try runFixture(["stress", "50"], timeout: 120)
        #expect(status == 0, "stdout: \(child.stdout) stderr: \(child.stderr)")
        let captures = output.lines.filter { $0.hasPrefix("CAPTURE ") }
        #expect(captures.count == 50)
        #expect(captures.allSatisfy { $0.contains("main=captured") })
        #expect(output.lines.filter { $0.hasPrefix("SAMPLE frames=") && !$0.hasSuffix("=0") }.count == 50)
    }

    @Test("parked threads 30 frames deep are all captured with their depth")
    func parkedThreads() throws {
        let (output, status, child) = try runFixture(["threads", "40", "2"])
        #expect(status == 0, "stdout: \(child.stdout) stderr: \(child.stderr)")
        let captures = output.lines.filter { $0.hasPrefix("CAPTURE ") }
        #expect(captures.count == 2)
        for line in captures {
            let fields = FixtureOutput.fields(line.split(separator: " ").map(String.init).dropFirst())
            let threads = Int(fields["threads"] ?? "") ?? 0
            #expect(threads >= 41)
            #expect(fields["captured"] == String(threads), "\(line)")
            #expect((Int(fields["frames"] ?? "") ?? 0) >= 40 * 30)
        }
    }

    // MARK: In this process

    @Test("sampling one thread of this process gives its stack")
    func samplesAThreadInProcess() throws {
        let ready = DispatchSemaphore(value: 0)
        let tidBox = TidBox()
        let thread = Thread {
            tidBox.set(LiveCapture.currentThreadID())
            ready.signal()
            while !tidBox.done { usleep(1_000) }
        }
        thread.start()
        ready.wait()
        defer { tidBox.finish() }
        let frames = try LiveCapture.sampleStack(tid: tidBox.tid)
        #expect(frames.count >= 3)
        let snapshot = try LiveCapture.captureProcess(reason: .dumpRequested, bundleID: "tests")
        let sampled = try #require(snapshot.threads.first { $0.tid == tidBox.tid })
        #expect(sampled.status == .captured)
        #expect(sampled.registers?.sp != 0)
        #expect(snapshot.threads.contains { $0.roles.contains(.requester) && $0.status == .captured })
        #expect(snapshot.process.pid == getpid())
        #expect(snapshot.modules.contains { $0.path.hasSuffix("libc.so.6") && $0.buildID.count == 40 })
    }

    @Test("sampling a thread that does not exist says it exited")
    func samplingAGoneThread() throws {
        #expect(throws: CaptureError.self) { try LiveCapture.sampleStack(tid: Int32.max - 1) }
    }

    /// A capture asks each thread with the signal its last answer accepted, without reading
    /// /proc status; a thread that blocks that signal since must still be captured, at once —
    /// not after the timeout — and the stale signal it later unblocks must do nothing.
    @Test("a thread whose mask changed since its last answer is asked again, and a renamed thread shows its new name")
    func maskAndNameChangesBetweenCaptures() throws {
        let flipper = ParkedThread()
        defer { flipper.perform(.exit) }
        let options = CaptureOptions(timeout: 20)
        func capture() throws -> (thread: ThreadSnapshot, seconds: Double) {
            let started = Date()
            let snapshot = try LiveCapture.captureProcess(reason: .dumpRequested, bundleID: "tests", options: options)
            return (try #require(snapshot.threads.first { $0.tid == flipper.tid }), Date().timeIntervalSince(started))
        }
        #expect(try capture().thread.status == .captured)  // with the ordinary signal: remembered
        flipper.perform(.blockOrdinarySignal)
        flipper.perform(.rename("hw-renamed"))
        let second = try capture()
        #expect(second.thread.status == .captured, "asked again with SIGPROF when the first signal stayed pending")
        #expect(second.seconds < 5, "noticed when the answers stopped, not at the 20 s timeout: \(second.seconds) s")
        #expect(second.thread.name == "hw-renamed")
        #expect(second.thread.frames.count >= 3)
        #expect(try capture().thread.status == .captured)
        flipper.perform(.unblockOrdinarySignal)  // the pending signal of the second capture arrives now
        let last = try capture()
        #expect(last.thread.status == .captured && last.thread.frames.count >= 3)
    }

    @Test("a signal is chosen that the thread does not block")
    func signalChoice() {
        let ordinary = CaptureOptions.defaultOrdinarySignal
        #expect(LiveCapture.signal(forBlockedMask: 0, ordinary: ordinary) == ordinary)
        // A pool thread's SigBlk (docs/platform-facts.md fact 2): everything but a few, SIGPROF included.
        let pool: UInt64 = 0xffff_fffe_7ffb_9eb8 & ~(1 << UInt64(SIGPROF - 1))
        #expect(LiveCapture.signal(forBlockedMask: pool | (1 << UInt64(ordinary - 1)), ordinary: ordinary) == SIGPROF)
        #expect(LiveCapture.signal(forBlockedMask: .max, ordinary: ordinary) == 0)
        #expect(LiveCapture.signal(forBlockedMask: 0, ordinary: 0) == SIGPROF)
    }
}

/// A thread of this process parked on a condition; between captures it changes its own signal
/// mask or name on request.
final class ParkedThread: @unchecked Sendable {
    enum Command { case none, blockOrdinarySignal, unblockOrdinarySignal, rename(String), exit }
    private let condition = NSCondition()
    private var command = Command.none
    private var requested = 0
    private var performed = 0
    private var threadID: Int32 = 0

    init() {
        Thread { [self] in run() }.start()
        condition.lock()
        while threadID == 0 { condition.wait() }
        condition.unlock()
    }

    var tid: Int32 { condition.withLock { threadID } }

    func perform(_ next: Command) {
        condition.lock()
        command = next
        requested += 1
        condition.broadcast()
        while performed < requested { condition.wait() }
        condition.unlock()
    }

    private func run() {
        // A new thread inherits its creator's mask, and tests run on pool threads that block
        // nearly every signal (docs/platform-facts.md fact 2): start accepting the ordinary one.
        var ordinary = sigset_t()
        sigemptyset(&ordinary)
        sigaddset(&ordinary, CaptureOptions.defaultOrdinarySignal)
        pthread_sigmask(SIG_UNBLOCK, &ordinary, nil)
        condition.lock()
        threadID = LiveCapture.currentThreadID()
        condition.broadcast()
        while true {
            while performed == requested { condition.wait() }
            var exiting = false
            switch command {
            case .blockOrdinarySignal: pthread_sigmask(SIG_BLOCK, &ordinary, nil)
            case .unblockOrdinarySignal: pthread_sigmask(SIG_UNBLOCK, &ordinary, nil)
            case .rename(let name): PlatformThread.setCurrentName(name)
            case .exit: exiting = true
            case .none: break
            }
            performed = requested
            condition.broadcast()
            if exiting { break }
        }
        condition.unlock()
    }
}

final class TidBox: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Int32 = 0
    private var finished = false
    func set(_ tid: Int32) { lock.withLock { value = tid } }
    var tid: Int32 { lock.withLock { value } }
    func finish() { lock.withLock { finished = true } }
    var done: Bool { lock.withLock { finished } }
}

func readelfBuildID(_ path: String) throws -> String {
    let output = try runTool("/usr/bin/readelf", ["-n", path])
    let line = output.split(separator: "\n").first { $0.contains("Build ID:") }
    return line.map { String($0.split(separator: ":").last ?? "").trimmingCharacters(in: .whitespaces) } ?? ""
}

extension CaptureMethod: CustomTestStringConvertible {
    public var testDescription: String { rawValue }
}
