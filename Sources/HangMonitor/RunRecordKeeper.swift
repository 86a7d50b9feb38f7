// A HangMonitor's run record (RunRecords.swift, docs/killed.md): begun when the monitor starts,
// refreshed from the monitor thread every `Configuration.runRecordInterval` (a sample of
// resident memory, threads and the hangs in progress), removed by `stop()` — or, for a
// program that calls `exit()` without stopping its monitor, by an `atexit` hook. What is
// left behind is what the next processor of the database reports as `killed`.
import FoundationEssentials
import HangwatchDatabase
import HangwatchPlatform
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

final class RunRecordKeeper: @unchecked Sendable {
    private let records: RunRecords
    private let lock = Lock()
    private var held: HeldRunRecord?
    private let interval: UInt64
    private var lastWrite: UInt64

    /// Begins this process's record; throws what the database throws.
    init(records: RunRecords, bundleID: String, interval: Duration, now: UInt64) throws {
        self.records = records
        self.interval = interval.nanoseconds
        var record = RunRecord.current(bundleID: bundleID, heartbeatIntervalSeconds: Double(interval.nanoseconds) / 1e9)
        record.sample(hangs: [])
        held = try records.begin(record)
        lastWrite = now
        Self.open.withLock { $0[ObjectIdentifier(self)] = self }
        Self.installExitHook()
    }

    /// A new sample and heartbeat when the interval has passed since the last one.
    func heartbeatIfDue(now: UInt64, hangs: () -> [String]) {
        guard now &- lastWrite >= interval else { return }
        lastWrite = now
        let targets = hangs()
        lock.withLock {
            guard var current = held else { return }
            current.record.sample(hangs: targets)
            held = current
            try? records.write(current)  // a missed heartbeat only makes the last one older
        }
    }

    /// The clean end: the record is removed (once).
    func close() {
        lock.withLock {
            if let current = held { records.close(current) }
            held = nil
        }
        Self.open.withLock { $0[ObjectIdentifier(self)] = nil }
    }

    private static let open = Mutex<[ObjectIdentifier: RunRecordKeeper]>([:])
    private static let hookInstalled = Atomic<Bool>(false)

    /// `exit()` is a clean end too: every record still open is closed.
    private static func installExitHook() {
        guard !hookInstalled.exchange(true, ordering: .relaxed) else { return }
        atexit {
            let keepers = RunRecordKeeper.open.withLock { Array($0.values) }
            for keeper in keepers { keeper.close() }
        }
    }
}
