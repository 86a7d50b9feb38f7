// Who holds a lock, read from the lock's memory (HangwatchTaskCapture/LockCapture.swift,
// docs/locks.md), in this very process: a real glibc mutex and a real Swift Mutex held by one
// thread while another sleeps on it (the layouts, measured), and crafted futex waits — memory
// that is no mutex, unmapped memory, an owner that is no thread of the process — said as
// unknown, never as a wrong holder.
import Foundation
import Synchronization
import Testing
import HangwatchPlatform
import HangwatchSnapshot
import CHangwatchCapture
@testable import HangwatchTaskCapture
#if canImport(Glibc)
import Glibc
#endif

/// A thread of its own that says its tid, then runs `body`.
private func startThread(_ body: @escaping @Sendable () -> Void) -> Int32 {
    let tid = Mutex<Int32>(0)
    let started = DispatchSemaphore(value: 0)
    Thread.detachNewThread {
        tid.withLock { $0 = hwc_gettid() }
        started.signal()
        body()
    }
    started.wait()
    return tid.withLock { $0 }
}

/// `tid`'s /proc syscall line once it sleeps in futex(2) (nil after 10 s).
private func futexLine(_ tid: Int32) -> String? {
    for _ in 0..<1000 {
        if let line = try? String(contentsOfFile: "/proc/self/task/\(tid)/syscall", encoding: .utf8),
           Syscalls.number(ofLine: line) == Syscalls.futex {
            return line.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        usleep(10_000)
    }
    return nil
}

private struct Pointer: @unchecked Sendable { let raw: UnsafeMutableRawPointer }

/// A thread of its own that takes a lock (`lock`) and holds it until `release` is signalled.
private func holdingThread(lock: @escaping @Sendable () -> Void,
                           unlock: @escaping @Sendable () -> Void) -> (tid: Int32, release: DispatchSemaphore) {
    let release = DispatchSemaphore(value: 0)
    let locked = DispatchSemaphore(value: 0)
    let tid = startThread {
        lock()
        locked.signal()
        release.wait()
        unlock()
    }
    locked.wait()
    return (tid, release)
}

@Suite("lock holders", .ownThread)
struct LockCaptureTests {
    let pid = getpid()

    @Test func aMutexNamesTheThreadHoldingIt() throws {
        let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
        pthread_mutex_init(mutex, nil)
        let pointer = Pointer(raw: UnsafeMutableRawPointer(mutex))
        let (holder, release) = holdingThread(lock: { pthread_mutex_lock(pointer.raw.assumingMemoryBound(to: pthread_mutex_t.self)) },
                                              unlock: { pthread_mutex_unlock(pointer.raw.assumingMemoryBound(to: pthread_mutex_t.self)) })
        let waiter = startThread {
            pthread_mutex_lock(pointer.raw.assumingMemoryBound(to: pthread_mutex_t.self))
            pthread_mutex_unlock(pointer.raw.assumingMemoryBound(to: pthread_mutex_t.self))
        }
        let line = try #require(futexLine(waiter))
        let waits = LockCapture.waits(pid: pid, threads: [(waiter, line), (holder, nil)])
        release.signal()
        #expect(waits[waiter] == LockWait(kind: .mutex, address: UInt64(UInt(bitPattern: mutex)), holder: holder), "\(line)")
        #expect(waits[holder] == nil)
    }

    @Test func aSwiftMutexNamesTheThreadHoldingIt() throws {
        let mutex = Mutex<Int>(0)
        let release = DispatchSemaphore(value: 0)
        let locked = DispatchSemaphore(value: 0)
        let holder = withUnsafePointer(to: mutex) { _ in
            startThread {
                mutex.withLock { _ in
                    locked.signal()
                    release.wait()
                }
            }
        }
        locked.wait()
        let waiter = startThread { mutex.withLock { $0 += 1 } }
        let line = try #require(futexLine(waiter))
        let waits = LockCapture.waits(pid: pid, threads: [(waiter, line), (holder, nil)])
        release.signal()
        let wait = try #require(waits[waiter], "\(line)")
        #expect(wait.kind == .piMutex && wait.holder == holder && wait.unknown == nil, "\(wait)")
    }

    /// A reader and a writer blocked by a writer: both name it, with the lock's own address
    /// (the futex words are 8 and 12 bytes into it).
    @Test func anRwlockNamesItsWriter() throws {
        let lock = UnsafeMutablePointer<pthread_rwlock_t>.allocate(capacity: 1)
        pthread_rwlock_init(lock, nil)
        let pointer = Pointer(raw: UnsafeMutableRawPointer(lock))
        let rw: @Sendable () -> UnsafeMutablePointer<pthread_rwlock_t> = { pointer.raw.assumingMemoryBound(to: pthread_rwlock_t.self) }
        let (writer, release) = holdingThread(lock: { pthread_rwlock_wrlock(rw()) }, unlock: { pthread_rwlock_unlock(rw()) })
        let reader = startThread { pthread_rwlock_rdlock(rw()); pthread_rwlock_unlock(rw()) }
        let otherWriter = startThread { pthread_rwlock_wrlock(rw()); pthread_rwlock_unlock(rw()) }
        let lines = try [reader, otherWriter].map { try #require(futexLine($0)) }
        let waits = LockCapture.waits(pid: pid, threads: [(reader, lines[0]), (otherWriter, lines[1]), (writer, nil)])
        release.signal()
        let expected = LockWait(kind: .rwlock, address: UInt64(UInt(bitPattern: lock)), holder: writer)
        #expect(waits[reader] == expected && waits[otherWriter] == expected, "\(lines) \(waits)")
    }

    /// A `sync` onto a serial queue a block runs on (through a queue that targets it, so the
    /// waiter first takes that one), onto a suspended queue and onto one never activated: the
    /// block's thread is named with the serial queue's label, the others say why no one is.
    @Test func aSyncOntoABusyQueueNamesTheThreadRunningIt() throws {
        let store = DispatchQueue(label: "tests.store")
        let inner = DispatchQueue(label: "tests.inner", target: store)
        let running = Mutex<Int32>(0)
        let started = DispatchSemaphore(value: 0), release = DispatchSemaphore(value: 0)
        store.async {
            running.withLock { $0 = hwc_gettid() }
            started.signal()
            release.wait()
        }
        started.wait()
        let worker = running.withLock { $0 }
        let direct = startThread { store.sync {} }
        let through = startThread { inner.sync {} }
        let suspended = DispatchQueue(label: "tests.suspended")
        suspended.suspend()
        let inactive = DispatchQueue(label: "tests.inactive", attributes: .initiallyInactive)
        let onSuspended = startThread { suspended.sync {} }
        let onInactive = startThread { inactive.sync {} }
        let waiters = [direct, through, onSuspended, onInactive]
        let lines = try waiters.map { try #require(futexLine($0)) }
        let waits = LockCapture.waits(pid: pid, threads: Array(zip(waiters, lines)) + [(worker, nil)])
        release.signal()
        suspended.resume()
        inactive.activate()
        for waiter in [direct, through] {
            let wait = try #require(waits[waiter], "\(lines)")
            #expect(wait.kind == .queue && wait.holder == worker && wait.label == "tests.store" && wait.unknown == nil, "\(wait)")
        }
        #expect(waits[direct]?.address == waits[through]?.address)
        #expect(waits[onSuspended]?.unknown == "it is suspended" && waits[onSuspended]?.label == "tests.suspended", "\(waits)")
        #expect(waits[onInactive]?.unknown == "it is inactive (never activated)", "\(waits)")
    }

    /// FUTEX_WAIT on ~0, what a sync waiter sleeps on: claimed only when the memory is a waiting
    /// sync context (its self-pointer, its waiter, its event, its flag).
    @Test func whatIsNoSyncContextIsNotClaimed() throws {
        let context = UnsafeMutableRawPointer.allocate(byteCount: 104, alignment: 8)
        defer { context.deallocate() }
        let waiter: Int32 = 4242
        func fill(queue: UInt64, selfPointer: UInt64? = nil, tid: Int32 = waiter) {
            context.initializeMemory(as: UInt8.self, repeating: 0, count: 104)
            context.storeBytes(of: UInt64(1), as: UInt64.self)
            context.storeBytes(of: selfPointer ?? UInt64(UInt(bitPattern: context)), toByteOffset: 40, as: UInt64.self)
            context.storeBytes(of: queue, toByteOffset: 56, as: UInt64.self)
            context.storeBytes(of: UInt32.max, toByteOffset: 96, as: UInt32.self)
            context.storeBytes(of: tid, toByteOffset: 100, as: Int32.self)
        }
        let line = "\(Syscalls.futex) 0x\(String(UInt(bitPattern: context) + 96, radix: 16)) 0x80 0xffffffff 0x0 0x0 0x0 0x0 0x0"
        let wait = { LockCapture.waits(pid: pid, threads: [(waiter, line)])[waiter] }
        fill(queue: 0x10)
        #expect(wait() == LockWait(kind: .queue, address: 0x10, unknown: "its memory could not be read"))
        fill(queue: 0x10, selfPointer: 0x1234)
        #expect(wait() == nil)
        fill(queue: 0x10, tid: 7)
        #expect(wait() == nil)
        // A queue whose words are garbage: its owner is no thread of the process.
        let queue = UnsafeMutableRawPointer.allocate(byteCount: 88, alignment: 8)
        defer { queue.deallocate() }
        queue.initializeMemory(as: UInt8.self, repeating: 0xff, count: 88)
        queue.storeBytes(of: UInt64(0x3fff_0000), toByteOffset: 56, as: UInt64.self)
        queue.storeBytes(of: UInt64(0x10), toByteOffset: 72, as: UInt64.self)
        fill(queue: UInt64(UInt(bitPattern: queue)))
        let garbage = try #require(wait())
        #expect(garbage.holder == nil && garbage.label == nil && garbage.unknown?.contains("not a thread of this process") == true, "\(garbage)")
        // The context near the bottom of the address space: no underflow.
        let low = "\(Syscalls.futex) 0x20 0x80 0xffffffff 0x0 0x0 0x0 0x0 0x0"
        #expect(LockCapture.waits(pid: pid, threads: [(waiter, low)]).isEmpty)
    }

    /// A FUTEX_WAIT with glibc's lock value on memory of our choosing.
    private func crafted(_ words: [Int32], tids: [Int32] = [], address: UInt64? = nil, op: UInt64 = 0x80) -> LockWait? {
        let memory = UnsafeMutablePointer<Int32>.allocate(capacity: 10)
        defer { memory.deallocate() }
        memory.initialize(repeating: 0, count: 10)
        for (index, word) in words.enumerated() { memory[index] = word }
        let at = address ?? UInt64(UInt(bitPattern: memory))
        let line = "\(Syscalls.futex) 0x\(String(at, radix: 16)) 0x\(String(op, radix: 16)) 0x2 0x0 0x0 0x0 0x7ffc00000000 0x7f0000000000"
        return LockCapture.waits(pid: pid, threads: [(1, line)] + tids.map { ($0, nil) })[1]
    }

    @Test func whatIsNoMutexIsSaidAsUnknown() throws {
        let me = hwc_gettid()
        // lock word 2, owner 7, kind 99: not a kind glibc has.
        let garbage = try #require(crafted([2, 0, 7, 0, 99]))
        #expect(garbage.kind == .unknown && garbage.holder == nil && garbage.unknown?.contains("not a glibc mutex") == true)
        // lock word 5: no glibc lock state.
        #expect(crafted([5, 0, me, 0, 0], tids: [me])?.unknown?.contains("not a glibc mutex") == true)
        // Unmapped memory: unknown, and no trap.
        let unmapped = try #require(crafted([], address: 0x10))
        #expect(unmapped.holder == nil && unmapped.unknown == "its memory could not be read")
        #expect(crafted([], address: UInt64.max - 3)?.unknown == "its memory could not be read")
        // A well-formed mutex whose owner is no thread of the process.
        let stranger = try #require(crafted([2, 0, 999_999, 0, 0], tids: [me]))
        #expect(stranger.kind == .mutex && stranger.holder == nil && stranger.unknown?.contains("not a thread of this process") == true)
        // The same with a thread of ours as owner names it.
        #expect(crafted([2, 0, me, 0, 0], tids: [me])?.holder == me)
        // A robust mutex (kind 16) keeps other things in its owner: not read.
        #expect(crafted([2, 0, me, 0, 16], tids: [me])?.holder == nil)
        // A PI futex word naming no thread of ours, and one that is free.
        let pi = try #require(crafted([Int32(bitPattern: 0x8000_0000 | 999_999)], tids: [me], op: 0x86))
        #expect(pi.kind == .piMutex && pi.holder == nil && pi.unknown?.contains("not a thread") == true)
        #expect(crafted([0], tids: [me], op: 0x86)?.unknown == "it was free when read")
        // A timed wait (FUTEX_WAIT_BITSET) on memory that is no mutex is a condition or a
        // semaphore: not claimed at all.
        #expect(crafted([2, 0, 7, 0, 99], op: 0x89) == nil)
        // Another futex value (a condition's, a flag's): no lock.
        let line = "\(Syscalls.futex) 0x1000 0x80 0x0 0x0 0x0 0x0 0x0 0x0"
        #expect(LockCapture.waits(pid: pid, threads: [(1, line)]).isEmpty)
        // Malformed lines.
        for bad in ["\(Syscalls.futex) 0xzz 0x80 0x2", "\(Syscalls.futex)", "running", "-1 0x0 0x0", ""] {
            #expect(LockCapture.waits(pid: pid, threads: [(1, bad)]).isEmpty, "\(bad)")
        }
    }
}
