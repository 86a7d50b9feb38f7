// What a thread blocked on a lock waits for, read from the lock's own memory at capture time
// (HangwatchTaskCapture/LockCapture.swift; docs/locks.md names the layouts read and how each
// was verified).

/// The kind of lock a blocked thread waits for.
public enum LockKind: String, Sendable, Equatable, CaseIterable {
    /// A glibc `pthread_mutex_t` (normal, recursive, error-checking, adaptive; what NSLock wraps).
    case mutex
    /// A priority-inheritance futex (Swift `Synchronization.Mutex` on Linux, a
    /// `PTHREAD_PRIO_INHERIT` mutex): the kernel's futex word holds its owner.
    case piMutex = "pi-mutex"
    /// A glibc `pthread_rwlock_t` held for writing: its writer is named (readers are not recorded).
    case rwlock
    /// A `DispatchQueue` a `sync` waits for: the thread running it is named (a serial queue's
    /// worker, or the thread the main queue is bound to).
    case queue
    /// A futex wait that looks like a lock but whose memory could not be read as one.
    case unknown

    /// The dump's value (never renumbered).
    package var wire: UInt64 {
        switch self {
        case .unknown: 0
        case .mutex: 1
        case .piMutex: 2
        case .rwlock: 3
        case .queue: 4
        }
    }

    /// The kind of a dump's value (a later build's kind reads as unknown).
    package init(wire: UInt64) {
        self = Self.allCases.first { $0.wire == wire } ?? .unknown
    }
}

/// A lock a thread waits for and, when the lock's memory identifies it, the thread holding it.
public struct LockWait: Sendable, Equatable {
    /// What kind of lock.
    public var kind: LockKind
    /// The lock's address in the process (the futex word the thread sleeps on; for a queue, the
    /// queue object whose running thread is named).
    public var address: UInt64
    /// The holder's kernel thread id: always a thread captured with this one.
    public var holder: Int32?
    /// Why the holder is not named, when it is not (an unknown layout, unreadable memory, a
    /// holder that is no thread of the process…).
    public var unknown: String?
    /// A queue's label, as the program set it (untrusted: escape before printing).
    public var label: String?

    /// A wait; each parameter is the property of the same name.
    public init(kind: LockKind, address: UInt64, holder: Int32? = nil, unknown: String? = nil, label: String? = nil) {
        self.kind = kind
        self.address = address
        self.holder = holder
        self.unknown = unknown
        self.label = label
    }
}
