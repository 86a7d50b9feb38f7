// One capture session on the tracer thread: stop every thread of the target, copy what
// unwinding needs, release them all, then unwind from the copies (copy-then-resume, as
// tbstack does). The order keeps the pause short: /proc is read and every thread seized
// (which does not stop it) before the first interrupt; the interrupts go out back-to-back,
// then the waits; each stopped thread's registers and stack window are copied; all detaches
// go out together; libunwind runs after the target runs again (docs/performance.md,
// "4. Out-of-process capture").
import HangwatchPlatform
import HangwatchSnapshot
import HangwatchTaskCapture
#if canImport(Glibc)
import Glibc
#endif
import CHangwatchPtrace

extension RemoteCapture {
    final class Session {
        let pid: Int32
        let options: RemoteCaptureOptions
        private let unwinder: OpaquePointer
        private var frameBuffer: [UInt64]

        /// Rounds of "list threads, stop the new ones" before accepting the set: each round
        /// can only find threads created before the previous round's threads stopped.
        private static let maxRounds = 64

        init(pid: Int32, options: RemoteCaptureOptions) throws {
            var message = [CChar](repeating: 0, count: 512)
            guard hwp_load_unwinder(&message, message.count) == 0 else {
                throw RemoteCaptureError.unwinderUnavailable(detail: message.withUnsafeBufferPointer { String(cString: $0.baseAddress!) })
            }
            guard let unwinder = hwp_unwinder_create() else {
                throw RemoteCaptureError.unwinderUnavailable(detail: "cannot create a libunwind address space")
            }
            self.pid = pid
            self.options = options
            self.unwinder = unwinder
            self.frameBuffer = [UInt64](repeating: 0, count: options.maxFrames)
        }

        deinit { hwp_unwinder_destroy(unwinder) }

        /// The target's task directory, opened once per session.
        private lazy var tasks = TaskReader(pid: pid)

        func fullCapture() throws -> RemoteCaptureResult {
            let began = monotonicSeconds()
            let timestamp = wallClockSeconds()
            let (threads, pause) = try stopUnwindRelease(readThreadInfo: true)
            // Its name and arguments after the stop proved it the process chosen; checked again
            // after they are read (it may have exited since the release).
            let identity = RemoteCapture.identity(pid: pid)
            try checkIdentity()
            // Modules after the release: /proc/PID/maps and ELF files need no stopped target.
            let modules = options.includeModules ? Modules.read(pid: pid) : []
            let snapshot = ProcessSnapshot(reason: options.reason, timestamp: timestamp, process: identity,
                                           threads: threads, modules: modules, annotations: options.annotations,
                                           captureDurationSeconds: monotonicSeconds() - began)
            return RemoteCaptureResult(snapshot: snapshot, pauseSeconds: pause)
        }

        private enum TraceState {
            case seized
            /// In a ptrace stop; `signal` was intercepted on its way in and is re-delivered on detach.
            case stopped(signal: Int32)
            case exited
            case timedOut
        }

        private struct Tracee {
            var tid: Int32
            var info: RemoteCapture.ThreadInfo
            var state: TraceState
            var registers: Registers?
            var frames: [UInt64] = []
            var stack: [UInt8] = []
            /// The stack from the stack pointer up, copied while the thread was stopped (in a
            /// `WindowArena` that outlives the tracee's unwind).
            var window = UnsafeMutableRawBufferPointer(start: nil, count: 0)
        }

        /// The stack windows of one round of newly seized threads, in one mapping whose pages
        /// the kernel fills in one call (MAP_POPULATE) before the first interrupt: not page by
        /// page while the target is stopped, nor by zeroing 65 arrays of 32 KiB (520 page
        /// faults, 0.7 ms on the bench machine against 0.4 ms).
        private final class WindowArena {
            private let base: UnsafeMutableRawPointer?
            private let size: Int
            private let mapped: Bool
            let windowBytes: Int

            init(windows: Int, windowBytes: Int) {
                self.windowBytes = windowBytes
                size = windows * windowBytes
                let mapping = size > 0 ? mmap(nil, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0)
                                       : MAP_FAILED
                if let mapping, mapping != MAP_FAILED {
                    base = mapping
                    mapped = true
                } else if size > 0 {
                    let memory = UnsafeMutableRawPointer.allocate(byteCount: size, alignment: 16)
                    memory.initializeMemory(as: UInt8.self, repeating: 0, count: size)
                    base = memory
                    mapped = false
                } else {
                    base = nil
                    mapped = false
                }
            }

            func window(_ index: Int) -> UnsafeMutableRawBufferPointer {
                guard let base else { return UnsafeMutableRawBufferPointer(start: nil, count: 0) }
                return UnsafeMutableRawBufferPointer(start: base + index * windowBytes, count: windowBytes)
            }

            deinit {
                guard let base else { return }
                if mapped { munmap(base, size) } else { base.deallocate() }
            }
        }

        /// Stops all threads, unwinds them, lets them go. Returns the threads (main thread
        /// first) and the pause in seconds.
        func stopUnwindRelease(readThreadInfo: Bool) throws -> ([ThreadSnapshot], Double) {
            var tracees: [Tracee] = []
            var arenas: [WindowArena] = []
            defer { withExtendedLifetime(arenas) {} }
            var index: [Int32: Int] = [:]
            var pauseStart: Double?
            var locks: [Int32: LockWait] = [:]
            do {
                var deadline = Double.infinity
                for _ in 0..<Self.maxRounds {
                    let listed = RemoteCapture.threadIDs(of: pid)
                    if listed.isEmpty {
                        if tracees.isEmpty { throw RemoteCaptureError.noSuchProcess(pid: pid) }
                        break
                    }
                    let fresh = listed.filter { index[$0] == nil }
                    if fresh.isEmpty { break }
                    let firstNew = tracees.count
                    let arena = WindowArena(windows: fresh.count, windowBytes: windowBytes)
                    arenas.append(arena)
                    for (position, tid) in fresh.enumerated() {
                        let info = readThreadInfo ? RemoteCapture.threadInfo(pid: pid, tid: tid, reader: tasks, lineAfterStop: true)
                            : RemoteCapture.ThreadInfo()
                        index[tid] = tracees.count
                        var tracee = Tracee(tid: tid, info: info, state: try seize(tid, isFirst: tracees.isEmpty))
                        tracee.window = arena.window(position)
                        tracees.append(tracee)
                    }
                    if pauseStart == nil {
                        pauseStart = monotonicSeconds()
                        deadline = pauseStart! + options.stopTimeoutSeconds
                    }
                    for i in firstNew..<tracees.count where isSeized(tracees[i].state) {
                        let result = hwp_interrupt(tracees[i].tid)
                        if result == ESRCH { tracees[i].state = .exited }
                        else if result != 0 {
                            throw RemoteCaptureError.ptraceFailed(pid: pid, operation: "PTRACE_INTERRUPT of thread \(tracees[i].tid)", errno: result, hint: "")
                        }
                    }
                    for i in firstNew..<tracees.count where isSeized(tracees[i].state) {
                        let remainingMs = Int32(clamping: Int(max(0, (deadline - monotonicSeconds()) * 1000)))
                        var signal: Int32 = 0
                        switch hwp_wait_stopped(tracees[i].tid, remainingMs, &signal) {
                        case HWP_WAIT_STOPPED: tracees[i].state = .stopped(signal: signal)
                        case HWP_WAIT_EXITED: tracees[i].state = .exited
                        default: tracees[i].state = .timedOut
                        }
                    }
                }
                // Stopped: before a register or a byte is read, the process must be the one
                // chosen, and each thread still one of its own (a tid recycled since the
                // listing by another process's thread is let go unread).
                try checkIdentity()
                let own = Set(RemoteCapture.threadIDs(of: pid))
                for i in tracees.indices where !own.contains(tracees[i].tid) {
                    detach(tracees[i])
                    tracees[i].state = .exited
                }
                for i in tracees.indices { copyStoppedThread(&tracees[i]) }
                // While every thread is stopped: a holder cannot let go between the two reads.
                if readThreadInfo { locks = LockCapture.waits(pid: pid, threads: tracees.map { ($0.tid, $0.info.syscall) }) }
            } catch {
                _ = release(&tracees)
                throw error
            }
            let pauseEnd = release(&tracees)
            let pause = pauseStart.map { max(0, pauseEnd - $0) } ?? 0
            // The target may have loaded, unloaded or exec'ed since the last capture.
            hwp_unwinder_forget_modules(unwinder)
            // Samples keep frames only: no stack memory for them.
            for i in tracees.indices { unwindCopy(&tracees[i], keepStack: readThreadInfo) }
            let threads = tracees.map { tracee -> ThreadSnapshot in
                let status: ThreadCaptureStatus
                switch tracee.state {
                case .stopped, .seized: status = tracee.frames.isEmpty && tracee.registers == nil ? .exited : .ptrace
                case .exited: status = .exited
                case .timedOut: status = .timedOut
                }
                var thread = ThreadSnapshot(tid: tracee.tid, name: tracee.info.name, state: tracee.info.state,
                                            syscall: tracee.info.syscall, userCPUSeconds: tracee.info.userCPUSeconds,
                                            systemCPUSeconds: tracee.info.systemCPUSeconds,
                                            roles: tracee.tid == pid ? .mainThread : [], status: status,
                                            registers: tracee.registers, frames: tracee.frames, stackMemory: tracee.stack)
                thread.lockWait = locks[tracee.tid]
                return thread
            }
            return (threads, pause)
        }

        /// Throws `replaced` when `pid` is no longer the process that started at the expected time.
        private func checkIdentity() throws {
            guard let expected = options.expectedStartTicks else { return }
            guard let now = ProcFS.startTicks(of: pid) else { throw RemoteCaptureError.noSuchProcess(pid: pid) }
            if now != expected { throw RemoteCaptureError.replaced(pid: pid) }
        }

        private func isSeized(_ state: TraceState) -> Bool {
            if case .seized = state { return true }
            return false
        }

        private func seize(_ tid: Int32, isFirst: Bool) throws -> TraceState {
            var result = hwp_seize(tid)
            // Refused, and no tracer holds the thread now: the program's own quiet-capture helper
            // holds a thread for microseconds, and may have let go between the refusal and a look
            // at TracerPid (RunWithCaptureHelperTests, on a loaded machine). Asked again a few
            // times, 1 ms apart; a lasting refusal (seccomp, an LSM, Yama) is diagnosed below.
            for _ in 0..<Self.transientRefusalRetries where result == EPERM && !isTraced(tid) {
                usleep(1_000)
                result = hwp_seize(tid)
            }
            switch result {
            case 0:
                return .seized
            case ESRCH:
                if isFirst && !ProcFS.processExists(pid) { throw RemoteCaptureError.noSuchProcess(pid: pid) }
                return .exited
            case EPERM:
                // The kernel also returns EPERM for a thread that is already exiting: a zombie
                // main thread (it called pthread_exit) or a thread vanishing right now.
                let state = RemoteCapture.threadInfo(pid: pid, tid: tid, reader: tasks).state
                if state.hasExited || (state == .unknown && !isFirst) { return .exited }
                if !ProcFS.processExists(pid) { throw RemoteCaptureError.noSuchProcess(pid: pid) }
                // Already ours: an earlier attempt on this tracer thread seized it and could not
                // let it go (PTRACE_DETACH needs a stopped tracee; one that never stopped stays
                // traced until this thread exits). So after a retry (RemoteCapture.capture, when
                // the program's own quiet-capture helper held another thread) and in every
                // sample after one that timed out on a thread in D sleep.
                if isTracedByThisThread(tid) { return .seized }
                throw RemoteCapture.diagnosePermission(pid: pid, tid: tid)
            default:
                throw RemoteCaptureError.ptraceFailed(pid: pid, operation: "PTRACE_SEIZE of thread \(tid)", errno: result, hint: "")
            }
        }

        /// How many times a refused seize of a thread that no one traces is tried again.
        static let transientRefusalRetries = 5

        /// Thread `tid`'s current tracer, as its TracerPid reports it (a tracing thread's id, not a
        /// process's); nil when it has none or its status cannot be read.
        private func tracer(of tid: Int32) -> Int32? {
            ProcFS.status("/proc/\(pid)/task/\(tid)/status")["TracerPid"].flatMap { Int32($0) }.flatMap { $0 == 0 ? nil : $0 }
        }

        /// Whether thread `tid` of the target has a tracer now.
        private func isTraced(_ tid: Int32) -> Bool { tracer(of: tid) != nil }

        /// Whether thread `tid` of the target is traced by the calling (tracer) thread.
        private func isTracedByThisThread(_ tid: Int32) -> Bool { tracer(of: tid) == hwp_current_tid() }

        /// While `tracee` is stopped: its registers, stack window and, where the registers reveal it,
        /// its syscall line (`copyStopped`).
        private func copyStoppedThread(_ tracee: inout Tracee) {
            guard case .stopped = tracee.state else { return }
            let copied = copyStopped(tracee.tid, window: tracee.window)
            if copied.gone { tracee.state = .exited }
            tracee.registers = copied.registers
            if tracee.info.syscallFromStop, let registers = copied.registers, let call = copied.syscall {
                tracee.info.syscall = Syscalls.line(number: call.number, arguments: call.arguments, sp: registers.sp, pc: registers.pc)
            }
            tracee.window = UnsafeMutableRawBufferPointer(rebasing: tracee.window[..<copied.bytes])
        }

        private var windowBytes: Int { max(options.unwindWindowBytes, options.stackMemoryBytes) }

        /// After the release: frames from the copied registers and window.
        private func unwindCopy(_ tracee: inout Tracee, keepStack: Bool) {
            guard let registers = tracee.registers else { return }
            tracee.frames = unwind(tracee.tid, registers: registers, window: UnsafeRawBufferPointer(tracee.window))
            if keepStack && options.stackMemoryBytes > 0 { tracee.stack = Array(tracee.window.prefix(options.stackMemoryBytes)) }
            tracee.window = UnsafeMutableRawBufferPointer(start: nil, count: 0)
        }

        /// While `tid` is stopped: its registers, the system call the stop interrupted (number
        /// -1 for none; taken from the registers only where HWP_SYSCALL_FROM_REGISTERS) and, into
        /// `window`, its stack from the stack pointer up (one process_vm_readv; fewer bytes where
        /// the stack mapping ends or the thread's own descriptor begins), and how many bytes that
        /// was. No registers when they cannot be read; `gone` when the thread vanished (ESRCH).
        private func copyStopped(_ tid: Int32, window: UnsafeMutableRawBufferPointer)
            -> (registers: Registers?, syscall: (number: Int64, arguments: [UInt64])?, bytes: Int, gone: Bool) {
            var values = [UInt64](repeating: 0, count: Int(HWP_REGISTER_COUNT))
            var number: Int64 = -1
            var arguments = [UInt64](repeating: 0, count: 6)
            var threadPointer: UInt64 = 0
            let result = hwp_get_registers(tid, &values, &number, &arguments, &threadPointer)
            guard result == 0 else { return (nil, nil, 0, result == ESRCH) }
            let registers = Registers(values: values)
            // Not past the thread's own descriptor (hwd_stack_window_bytes): no frame lies there.
            let wanted = Int(hwd_stack_window_bytes(registers.sp, threadPointer, UInt32(clamping: window.count)))
            let got = wanted > 0 ? hwp_read_memory(pid, registers.sp, window.baseAddress, wanted) : 0
            return (registers, (number, arguments), min(wanted, max(0, got)), false)
        }

        /// Frames from copied registers and stack window; even when unwinding fails the program
        /// counter is known.
        private func unwind(_ tid: Int32, registers: Registers, window: UnsafeRawBufferPointer) -> [UInt64] {
            let count = frameBuffer.withUnsafeMutableBufferPointer { frames in
                hwp_unwind_copied(unwinder, tid, registers.values, window.baseAddress, registers.sp, window.count,
                                  frames.baseAddress, Int32(frames.count))
            }
            return count > 0 ? Array(frameBuffer[..<Int(count)]) : [registers.pc]
        }

        struct StoppedThread {
            var registers: Registers?
            var frames: [UInt64] = []
            var stack: [UInt8] = []
            /// The thread vanished (ESRCH) before its registers could be read.
            var gone = false
        }

        /// Registers, frames and (optionally) stack bytes of `tid`, which must be in a
        /// ptrace-stop of the calling thread: copied, then unwound as a capture does. Shared
        /// with `ChildTracer`, whose threads are already traced.
        func readStoppedThread(_ tid: Int32, copyStack: Bool) -> StoppedThread {
            hwp_unwinder_forget_modules(unwinder)
            let arena = WindowArena(windows: 1, windowBytes: windowBytes)
            let copied = copyStopped(tid, window: arena.window(0))
            guard let registers = copied.registers else { return StoppedThread(gone: copied.gone) }
            let window = UnsafeRawBufferPointer(rebasing: arena.window(0)[..<copied.bytes])
            var read = StoppedThread(registers: registers, frames: unwind(tid, registers: registers, window: window))
            if copyStack && options.stackMemoryBytes > 0 { read.stack = Array(window.prefix(options.stackMemoryBytes)) }
            return withExtendedLifetime(arena) { read }
        }

        /// Detaches every thread back-to-back; returns the time after the last detach.
        private func release(_ tracees: inout [Tracee]) -> Double {
            for tracee in tracees { detach(tracee) }
            return monotonicSeconds()
        }

        private func detach(_ tracee: Tracee) {
            switch tracee.state {
            case .stopped(let signal):
                _ = hwp_detach(tracee.tid, signal)
            case .seized, .timedOut:
                // Fails while the thread runs; the tracer thread's exit releases it then.
                _ = hwp_detach(tracee.tid, 0)
            case .exited:
                break
            }
        }
    }
}
