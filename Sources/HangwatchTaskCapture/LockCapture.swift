// Who holds the lock a blocked thread waits for (docs/locks.md): a thread asleep in futex(2)
// has the lock's address as the call's first argument (its /proc syscall line), and the lock's
// own memory names its owner. Read at capture time, through the same bounded process_vm_readv
// copy as the task reader (hwt_read, hw_tasks.c): memory that is gone or unmapped is an error,
// never a trap. Every value is untrusted: a layout is read only for a libc in `GlibcMutex.verified`,
// and a holder is named only when it is one of the threads captured with the waiter.
import CHangwatchTasks
import HangwatchPlatform
import HangwatchSnapshot
#if canImport(Glibc)
import Glibc
#endif

package enum LockCapture {
    /// What each thread of `threads` (tid and /proc syscall line) blocked on a lock waits for,
    /// read from process `pid` (getpid(): this one). Threads not blocked on a lock are left out.
    package static func waits(pid: Int32, threads: [(tid: Int32, syscall: String?)]) -> [Int32: LockWait] {
        let tids = Set(threads.map(\.tid))
        var libc: String??
        var waits: [Int32: LockWait] = [:]
        for thread in threads {
            let number = Syscalls.number(ofLine: thread.syscall)
            guard number == Syscalls.futex || number == Syscalls.restart,
                  let args = Syscalls.arguments(ofLine: thread.syscall) else { continue }
            // A timed wait that a stop interrupted continues in restart_syscall with the same
            // arguments, which are then unreliable: it is claimed only when the memory is the lock.
            let certain = number == Syscalls.futex
            let (address, op, value) = (args[0], args[1] & Futex.commandMask, args[2])
            var wait: LockWait
            if op == Futex.lockPI || op == Futex.lockPI2 {
                wait = piMutex(pid: pid, address: address)
                if !certain && wait.holder == nil { continue }
            } else if (op == Futex.wait || op == Futex.waitBitset) && value == GlibcMutex.contended {
                if libc == nil { libc = GlibcMutex.version(of: pid) }
                wait = GlibcMutex.wait(pid: pid, address: address, libc: libc ?? nil)
                // A timed lock waits with FUTEX_WAIT_BITSET, as condition variables and
                // semaphores do: claimed only when its memory is a mutex.
                if (op == Futex.waitBitset || !certain) && wait.kind != .mutex { continue }
            } else if op == Futex.wait && value == DispatchSync.waiting {
                // A dispatch_sync waiter's event; any other FUTEX_WAIT on ~0 is not claimed.
                guard let found = DispatchSync.wait(pid: pid, futex: address, waiter: thread.tid) else { continue }
                wait = found
            } else if op == Futex.waitBitset && value == GlibcRwlock.waiting {
                if libc == nil { libc = GlibcMutex.version(of: pid) }
                guard let found = GlibcRwlock.wait(pid: pid, futex: address, libc: libc ?? nil) else { continue }
                wait = found
            } else {
                continue  // a condition, a semaphore, a one-time flag: no lock with an owner
            }
            if let holder = wait.holder, !tids.contains(holder) {
                wait.unknown = "its owner word says thread \(holder), which is not a thread of this process"
                wait.holder = nil
            } else if wait.holder == thread.tid {
                wait.unknown = "its owner word names the waiting thread itself"
                wait.holder = nil
            }
            waits[thread.tid] = wait
        }
        return waits
    }

    /// `waits` set on each of `threads`.
    package static func attach(pid: Int32, to threads: inout [ThreadSnapshot]) {
        let found = waits(pid: pid, threads: threads.map { ($0.info.tid, $0.info.syscall) })
        for index in threads.indices { threads[index].info.lockWait = found[threads[index].info.tid] }
    }

    /// A PI futex: the kernel's ABI (linux/futex.h) keeps the owner's tid in the word's low 30 bits.
    private static func piMutex(pid: Int32, address: UInt64) -> LockWait {
        var word: UInt32 = 0
        guard hwt_read(pid, address, &word, 4) == 0 else {
            return LockWait(kind: .piMutex, address: address, unknown: "its memory could not be read")
        }
        let owner = word & Futex.tidMask
        guard owner != 0 else { return LockWait(kind: .piMutex, address: address, unknown: "it was free when read") }
        return LockWait(kind: .piMutex, address: address, holder: Int32(bitPattern: owner))
    }

    /// linux/futex.h.
    enum Futex {
        static let commandMask: UInt64 = 0x7f  // FUTEX_CMD_MASK without the private and clock flags
        static let wait: UInt64 = 0
        static let waitBitset: UInt64 = 9
        static let lockPI: UInt64 = 6
        static let lockPI2: UInt64 = 13
        static let tidMask: UInt32 = 0x3fff_ffff
    }
}

/// glibc's `pthread_mutex_t` (`struct __pthread_mutex_s`, sysdeps/nptl/bits/struct_mutex.h of
/// glibc): on 64-bit Linux `__lock` at 0, `__owner` at 8, `__kind` at 16, 40 bytes in all. A
/// contended `lll_lock` sleeps in FUTEX_WAIT on `__lock` with the value 2.
enum GlibcMutex {
    /// glibc versions whose 64-bit layout is verified: 2.36 measured here (Debian 12: one
    /// thread holds the mutex, another reads its bytes; Tests/HangwatchCaptureTests/LockCaptureTests.swift),
    /// and 2.30–2.42 by the struct in the glibc source, unchanged since it moved to
    /// struct_mutex.h in 2.30 (`__kind` must stay put for static initializers).
    static let verified = 30...42
    static let contended: UInt64 = 2
    static let size = 40
    static let ownerOffset = 8
    static let kindOffset = 16
    /// PTHREAD_MUTEX_{NORMAL,RECURSIVE,ERRORCHECK,ADAPTIVE}_NP; robust (16), PI (32),
    /// PP (64) and process-shared (128) kinds keep other things in `__owner` or name other processes.
    static let plainKinds: Set<Int32> = [0, 1, 2, 3]
    /// Lock elision's flags (256, 512), which leave the owner where it is.
    static let elisionFlags: Int32 = 0x300

    /// The glibc version process `pid` runs ("2.36"), when it is the very libc.so.6 this process
    /// runs (the same file mapped): nil when it runs another or none.
    static func version(of pid: Int32) -> String? {
        let ours = libcPath(getpid())
        guard let ours, libcPath(pid) == ours else { return nil }
        return String(cString: hwt_libc_version())
    }

    private static func libcPath(_ pid: Int32) -> String? {
        ProcFS.memoryRegions(of: pid).first { $0.executable && $0.path.hasSuffix("/libc.so.6") }?.path
    }

    static func isVerified(_ version: String, in minors: ClosedRange<Int> = verified) -> Bool {
        let parts = version.split(separator: ".").compactMap { Int($0) }
        return parts.count >= 2 && parts[0] == 2 && minors.contains(parts[1])
    }

    static func wait(pid: Int32, address: UInt64, libc: String?) -> LockWait {
        var wait = LockWait(kind: .unknown, address: address)
        guard let libc, isVerified(libc) else {
            wait.unknown = "a futex wait like a glibc mutex's, in a libc whose layout is not verified (\(libc ?? "not this glibc"))"
            return wait
        }
        var bytes = [UInt8](repeating: 0, count: size)
        guard hwt_read(pid, address, &bytes, size) == 0 else {
            wait.unknown = "its memory could not be read"
            return wait
        }
        let lock = int32(bytes, 0), owner = int32(bytes, ownerOffset), kind = int32(bytes, kindOffset)
        guard plainKinds.contains(kind & ~elisionFlags), (0...2).contains(lock) else {
            wait.unknown = "its memory is not a glibc mutex (lock word \(lock), kind \(kind))"
            return wait
        }
        wait.kind = .mutex
        if lock == 0 {
            wait.unknown = "it was free when read"
        } else if owner > 0 {
            wait.holder = owner
        } else {
            wait.unknown = "its owner word is \(owner)"
        }
        return wait
    }

    private static func int32(_ bytes: [UInt8], _ offset: Int) -> Int32 {
        bytes.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: offset, as: Int32.self) }
    }
}

/// glibc's `pthread_rwlock_t` held for writing (`struct __pthread_rwlock_arch_t`, 56 bytes on
/// 64-bit Linux): `__readers` at 0 (bit 0 the write phase, bit 1 write-locked), `__cur_writer`
/// at 24 (the writer's tid), `__shared` at 28, `__flags` at 48. A reader blocked by the writer
/// sleeps on `__wrphase_futex` (8), a writer on `__writers_futex` (12), each in
/// FUTEX_WAIT_BITSET with the value 3 (1 | PTHREAD_RWLOCK_FUTEX_USED): so the lock starts 8 or
/// 12 bytes before the futex, and the words must say which — both or neither is no answer.
enum GlibcRwlock {
    /// Measured on glibc 2.36 only (a writer holds the lock, a reader and a writer sleep on it:
    /// Tests/HangwatchCaptureTests/LockCaptureTests.swift).
    static let verified = 36...36
    static let waiting: UInt64 = 3
    static let size = 56

    static func wait(pid: Int32, futex: UInt64, libc: String?) -> LockWait? {
        guard let libc, GlibcMutex.isVerified(libc, in: verified) else { return nil }
        let found = [UInt64(8), 12].compactMap { offset -> (UInt64, Int32)? in
            guard futex >= offset, let writer = writer(pid: pid, lock: futex - offset, futexOffset: Int(offset)) else { return nil }
            return (futex - offset, writer)
        }
        guard found.count == 1 else { return nil }
        return LockWait(kind: .rwlock, address: found[0].0, holder: found[0].1)
    }

    /// The writer, when the 56 bytes at `lock` are a private rwlock write-locked with its futex
    /// word at `futexOffset` still saying waiters sleep.
    private static func writer(pid: Int32, lock: UInt64, futexOffset: Int) -> Int32? {
        var bytes = [UInt8](repeating: 0, count: size)
        guard hwt_read(pid, lock, &bytes, size) == 0 else { return nil }
        let word = { (offset: Int) in bytes.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: offset, as: Int32.self) } }
        let (readers, writer, shared, flags) = (word(0), word(24), word(28), word(48))
        guard word(futexOffset) == Int32(waiting), readers & 3 == 3, writer > 0, shared == 0, (0...2).contains(flags) else { return nil }
        return writer
    }
}

/// A `sync` (or `async_and_wait`) onto a busy queue: libdispatch's `_dispatch_sync_f_slow` keeps
/// a `struct dispatch_sync_context_s` on the waiter's stack and sleeps in FUTEX_WAIT with the
/// value ~0 on its `dsc_event` (src/queue_internal.h and src/shims/lock.h of
/// swift-corelibs-libdispatch; 64-bit Linux, no Objective-C):
///
/// | byte | `dispatch_sync_context_s` | | byte | `dispatch_queue_s` |
/// | --- | --- | --- | --- | --- |
/// | 0 | `dc_flags` (`DC_FLAG_SYNC_WAITER` = 1) | | 24 | `do_targetq` |
/// | 40 | `dc_ctxt`: the context itself | | 56 | `dq_state`: the drain owner's tid in its low 30 bits |
/// | 56 | `dc_other`: the queue synced onto | | 72 | `dq_label` |
/// | 96 | `dsc_event.dte_value` (the futex), ~0 while waiting | | 80 | `dq_width` (16 bits) |
/// | 100 | `dsc_waiter`: the waiter's tid | | | |
///
/// The context is claimed only when its self-pointer, its waiter's tid, its event and its flag
/// all say so, so the offsets are checked on every read. The queue's drain owner is the thread
/// running it: a serial queue's worker, a `sync` caller inside it, or the main thread the main
/// queue is bound to. Unchanged from Swift 5.5 to 6.3.2 by the source; measured with Swift 6.3.1
/// (Tests/HangwatchCaptureTests/LockCaptureTests.swift).
enum DispatchSync {
    static let waiting: UInt64 = 0xffff_ffff
    static let eventOffset: UInt64 = 96
    static let contextSize = 104
    static let queueSize = 88
    static let syncWaiterFlag: UInt64 = 1
    /// `dq_state`'s suspend count, side count, inactive and needs-activation bits.
    static let suspendBits: UInt64 = 0xff80_0000_0000_0000
    static let inactiveBit: UInt64 = 0x0100_0000_0000_0000
    /// A queue synced onto may target another the waiter must also get: a few levels are read.
    static let maxTargets = 8
    static let maxLabel = 128

    /// What thread `waiter`, asleep on `futex`, waits for when `futex` is a sync context's event.
    static func wait(pid: Int32, futex: UInt64, waiter: Int32) -> LockWait? {
        guard futex >= eventOffset, let queue = queueSyncedOnto(pid: pid, context: futex - eventOffset, waiter: waiter) else { return nil }
        var address = queue
        for _ in 0..<maxTargets {
            guard let state = queueState(pid: pid, queue: address) else {
                return LockWait(kind: .queue, address: address, unknown: "its memory could not be read")
            }
            let label = readLabel(pid: pid, at: state.label)
            if state.bits & suspendBits != 0 {
                let why = state.bits & inactiveBit != 0 ? "it is inactive (never activated)" : "it is suspended"
                return LockWait(kind: .queue, address: address, unknown: why, label: label)
            }
            let owner = Int32(bitPattern: UInt32(truncatingIfNeeded: state.bits) & LockCapture.Futex.tidMask)
            if owner != 0 && owner != waiter { return LockWait(kind: .queue, address: address, holder: owner, label: label) }
            // Held by the waiter itself (a sync through a hierarchy takes each level in turn) or
            // by no one: the queue it targets is the one still to get, unless that is a root queue.
            guard state.width == 1, state.target != 0 else {
                return LockWait(kind: .queue, address: address, unknown: "no thread ran it when read", label: label)
            }
            address = state.target
        }
        return LockWait(kind: .queue, address: queue, unknown: "its targets go deeper than \(maxTargets) queues")
    }

    /// `dc_other` of the sync context at `context`, when its words are a waiting context's.
    private static func queueSyncedOnto(pid: Int32, context: UInt64, waiter: Int32) -> UInt64? {
        var bytes = [UInt8](repeating: 0, count: contextSize)
        guard hwt_read(pid, context, &bytes, contextSize) == 0 else { return nil }
        let word = { (offset: Int) in bytes.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: offset, as: UInt64.self) } }
        let half = { (offset: Int) in bytes.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: offset, as: UInt32.self) } }
        guard word(40) == context, half(96) == UInt32(waiting), Int32(bitPattern: half(100)) == waiter,
              word(0) & syncWaiterFlag != 0, word(0) < 0x1000, word(56) != 0 else { return nil }
        return word(56)
    }

    private static func queueState(pid: Int32, queue: UInt64) -> (bits: UInt64, label: UInt64, width: UInt16, target: UInt64)? {
        var bytes = [UInt8](repeating: 0, count: queueSize)
        guard hwt_read(pid, queue, &bytes, queueSize) == 0 else { return nil }
        return bytes.withUnsafeBytes { raw in
            (raw.loadUnaligned(fromByteOffset: 56, as: UInt64.self), raw.loadUnaligned(fromByteOffset: 72, as: UInt64.self),
             raw.loadUnaligned(fromByteOffset: 80, as: UInt16.self), raw.loadUnaligned(fromByteOffset: 24, as: UInt64.self))
        }
    }

    /// The queue's label: at most `maxLabel` bytes up to its NUL, read a page's rest at a time
    /// (a label near the end of a mapping); nil when there is none or it cannot be read.
    static func readLabel(pid: Int32, at address: UInt64) -> String? {
        guard address != 0 else { return nil }
        var bytes: [UInt8] = []
        var next = address
        while bytes.count < maxLabel {
            let count = min(maxLabel - bytes.count, Int(4096 - next % 4096))
            var chunk = [UInt8](repeating: 0, count: count)
            guard hwt_read(pid, next, &chunk, count) == 0 else { break }
            if let end = chunk.firstIndex(of: 0) { return String(decoding: bytes + chunk[..<end], as: UTF8.self) }
            bytes += chunk
            next &+= UInt64(count)
        }
        return bytes.isEmpty ? nil : String(decoding: bytes, as: UTF8.self) + "…"
    }
}
