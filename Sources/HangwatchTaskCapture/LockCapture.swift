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
            // A timed wait a stop interrupted goes on in restart_syscall with the same arguments,
            // which then say nothing certain: claimed only when the memory is the lock.
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
        let found = waits(pid: pid, threads: threads.map { ($0.tid, $0.syscall) })
        for index in threads.indices { threads[index].lockWait = found[threads[index].tid] }
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

