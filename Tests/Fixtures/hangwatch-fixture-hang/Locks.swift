// The lock scenarios of hangwatch-fixture-hang (docs/locks.md): the main queue blocks on a lock
// another named thread holds, so a hang report must say who holds it.
//   lock-held      a glibc mutex held SECONDS by thread "export-worker" (asleep in
//                  hangFixtureHoldLock); the main queue locks it, gets it when it is let go, exit 0
//   lock-deadlock  threads "lock-a" and "lock-b" take mutexes A and B, then each the other's
//                  (AB-BA, forever); the main queue waits SECONDS for A (pthread_mutex_timedlock),
//                  gives up, exit 0
//   rwlock-writer  a pthread_rwlock_t write-locked SECONDS by thread "export-writer"; the main
//                  queue read-locks it, exit 0
//   swift-mutex    a Synchronization.Mutex held SECONDS by thread "mutex-holder"; the main
//                  queue takes it, exit 0
//   queue-sync     the serial queue "fixture.store" runs a block SECONDS on a worker it names
//                  "store-worker"; the main queue syncs onto "fixture.inner", which targets it
//                  (the waiter takes the inner queue, then waits for the store), exit 0
//   queue-deadlock thread "sync-caller" takes mutex A, then syncs onto the main queue; the main
//                  queue waits SECONDS for A (pthread_mutex_timedlock): a lock and a queue that
//                  wait for each other. It gives up, the sync runs, exit 0
// Each prints {"event":"locked","holders":[tid…]} once the locks are held.
import Foundation
import Synchronization
import CHangwatchFixtureHangSupport

/// A thread of its own with a name (/proc/…/comm), running `body` with its tid.
func startNamedThread(_ name: String, _ body: @escaping @Sendable (Int32) -> Void) {
    Thread.detachNewThread { body(hwf_name_thread(name)) }
}

/// Where a holder sleeps with its lock: its frames name this function.
@inline(never)
func hangFixtureHoldLock(seconds: Double) {
    sleepFully(seconds)
}

/// A glibc mutex that lives as long as the process (statically, as a real program's does).
struct FixtureMutex: @unchecked Sendable {
    let pointer: UnsafeMutablePointer<pthread_mutex_t>

    init() {
        pointer = .allocate(capacity: 1)
        pthread_mutex_init(pointer, nil)
    }

    func lock() { pthread_mutex_lock(pointer) }
    func unlock() { pthread_mutex_unlock(pointer) }
}

let fixtureMutexes = [FixtureMutex(), FixtureMutex()]

let fixtureSwiftMutex = Mutex<Int>(0)

let fixtureStore = DispatchQueue(label: "fixture.store")
let fixtureInner = DispatchQueue(label: "fixture.inner", target: fixtureStore)

/// A glibc rwlock that lives as long as the process.
struct FixtureRwlock: @unchecked Sendable {
    let pointer: UnsafeMutablePointer<pthread_rwlock_t> = {
        let lock = UnsafeMutablePointer<pthread_rwlock_t>.allocate(capacity: 1)
        pthread_rwlock_init(lock, nil)
        return lock
    }()
}

let fixtureRwlock = FixtureRwlock()

/// Waits until `count` holders said their tids, then prints them.
func announceHolders(_ count: Int, _ start: (@escaping @Sendable (Int32) -> Void) -> Void) {
    let holders = Mutex<[Int32]>([])
    let ready = DispatchSemaphore(value: 0)
    start { tid in
        holders.withLock { $0.append(tid) }
        ready.signal()
    }
    for _ in 0..<count { ready.wait() }
    let tids = holders.withLock { $0 }
    emit("{\"event\":\"locked\",\"holders\":[\(tids.map(String.init).joined(separator: ","))],\"waiter\":\(getpid())}")
}

@MainActor func runLockScenario(_ scenario: String) {
    let mutexA = fixtureMutexes[0], mutexB = fixtureMutexes[1]
    switch scenario {
    case "lock-held":
        announceHolders(1) { held in
            startNamedThread("export-worker") { tid in
                mutexA.lock()
                held(tid)
                hangFixtureHoldLock(seconds: seconds)
                mutexA.unlock()
            }
        }
        mutexA.lock()
        mutexA.unlock()
    case "lock-deadlock":
        announceHolders(2) { held in
            for (name, first, second) in [("lock-a", mutexA, mutexB), ("lock-b", mutexB, mutexA)] {
                startNamedThread(name) { tid in
                    first.lock()
                    held(tid)
                    usleep(200_000)  // the other has taken its first by now
                    second.lock()
                }
            }
        }
        usleep(300_000)
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        var deadline = now
        deadline.tv_sec += Int(seconds)
        emit("{\"event\":\"timedlock\",\"result\":\(pthread_mutex_timedlock(mutexA.pointer, &deadline))}")
    case "rwlock-writer":
        announceHolders(1) { held in
            startNamedThread("export-writer") { tid in
                pthread_rwlock_wrlock(fixtureRwlock.pointer)
                held(tid)
                hangFixtureHoldLock(seconds: seconds)
                pthread_rwlock_unlock(fixtureRwlock.pointer)
            }
        }
        pthread_rwlock_rdlock(fixtureRwlock.pointer)
        pthread_rwlock_unlock(fixtureRwlock.pointer)
    case "swift-mutex":
        announceHolders(1) { held in
            startNamedThread("mutex-holder") { tid in
                fixtureSwiftMutex.withLock { _ in
                    held(tid)
                    hangFixtureHoldLock(seconds: seconds)
                }
            }
        }
        fixtureSwiftMutex.withLock { $0 += 1 }
    case "queue-sync":
        announceHolders(1) { held in
            fixtureStore.async {
                held(hwf_name_thread("store-worker"))
                hangFixtureHoldLock(seconds: seconds)
            }
        }
        fixtureInner.sync {}
    case "queue-deadlock":
        announceHolders(1) { held in
            startNamedThread("sync-caller") { tid in
                mutexA.lock()
                held(tid)
                usleep(200_000)  // the main queue waits for A by now
                DispatchQueue.main.sync {}
                mutexA.unlock()
            }
        }
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        var deadline = now
        deadline.tv_sec += Int(seconds)
        emit("{\"event\":\"timedlock\",\"result\":\(pthread_mutex_timedlock(mutexA.pointer, &deadline))}")
    default:
        return
    }
    DispatchQueue.global().async { finish(0, after: max(0.5, thresholdSeconds / 2)) }
}
