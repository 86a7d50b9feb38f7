// Which threads hang a pool (docs/hang-monitor.md, "Pool hangs"). Linux cannot say which job a
// pool thread runs, so a thread hanging a pool is told by its stack: it is one of the pool's
// threads, it runs the program's own code (a frame outside the system and Swift runtime
// libraries), and it is not an event loop waiting in epoll.
// - The cooperative pool's threads are those running a Swift concurrency job (a frame in
//   libswift_Concurrency, when that library is loaded; a statically linked runtime cannot be
//   told apart). An idle one waits in libdispatch, with no such frame.
// - A `.pool` target's threads are those that ran one of its pings, and the threads named as
//   they are but for a trailing number (`TP-#0`, `TP-#1`, …), so a thread that never ran a ping
//   still counts.
// A hung thread is one whose top frames are the same in two captures at least one threshold
// apart. While the hang lasts, each sample keeps only the threads still at work, and a thread
// gone idle is replaced by those now running the blocked work (HangWatcher.samplePool).
import HangwatchPlatform
import HangwatchSnapshot

enum PoolHangThreads {
    /// Frames compared between the two captures.
    static let comparedFrames = 8
    /// Hung threads named (and sampled) at most.
    static let maximumThreads = 8

    /// Which threads belong to the pool: nil for the cooperative pool (told by its frames),
    /// else a `.pool` target's threads.
    struct Members: Equatable {
        var threads: Set<Int32>

        /// The threads of `snapshot` that answered a ping (`answering`), and those whose names
        /// match one of theirs without its trailing digits. A name that is the process's own (a
        /// thread never named) only counts for the threads that answered.
        init(answering: Set<Int32>, in snapshot: ProcessSnapshot) {
            let processName = snapshot.threads.first { $0.roles.contains(.mainThread) }?.name
            let names = Set(snapshot.threads.filter { answering.contains($0.tid) }.map { Self.stem($0.name) }
                .filter { !$0.isEmpty && $0 != processName.map(Self.stem) })
            threads = Set(snapshot.threads.filter { answering.contains($0.tid) || names.contains(Self.stem($0.name)) }.map(\.tid))
        }

        /// A thread's name without its trailing digits (Linux keeps 15 bytes of a name, so a
        /// long prefix may have lost them already).
        static func stem(_ name: String) -> String {
            String(name.reversed().drop { $0.isASCII && $0.isNumber }.reversed())
        }
    }

    /// Threads of `snapshot` that may be stuck in the pool's work: tid → top frames.
    static func candidates(in snapshot: ProcessSnapshot, excluding excluded: Set<Int32>, members: Members?) -> [Int32: [UInt64]] {
        var found: [Int32: [UInt64]] = [:]
        for thread in snapshot.threads where !excluded.contains(thread.tid) && !thread.frames.isEmpty {
            if thread.roles.contains(.mainThread) || thread.roles.contains(.mainQueue) || thread.roles.contains(.requester) { continue }
            if let syscall = Syscalls.number(ofLine: thread.syscall), Syscalls.eventWaits.contains(syscall) { continue }
            if let members, !members.threads.contains(thread.tid) { continue }
            guard isAtWork(thread.frames, modules: snapshot.modules, cooperative: members == nil) else { continue }
            found[thread.tid] = Array(thread.frames.prefix(comparedFrames))
        }
        return found
    }

    /// Whether a pool thread's stack runs the pool's work: a frame of the program's own code,
    /// and for the cooperative pool a frame of the concurrency runtime (an idle cooperative
    /// thread waits in libdispatch). A `.pool` thread's idle wait cannot be told from its stack.
    static func isAtWork(_ frames: [UInt64], modules: [ModuleSnapshot], cooperative: Bool) -> Bool {
        guard frames.contains(where: { isProgramCode($0, modules: modules) }) else { return false }
        guard cooperative else { return true }
        let concurrency = modules.filter { Paths.lastComponent(of: $0.path).hasPrefix("libswift_Concurrency") }
        return concurrency.isEmpty || frames.contains { frame in concurrency.contains { frame >= $0.start && frame < $0.end } }
    }

    /// The candidates of the first capture whose top frames are unchanged in `later`, lowest
    /// tid first, at most `maximumThreads`.
    static func confirmed(_ first: [Int32: [UInt64]], in later: ProcessSnapshot, excluding excluded: Set<Int32>, members: Members?) -> [Int32] {
        let now = candidates(in: later, excluding: excluded, members: members)
        return first.filter { now[$0.key] == $0.value }.keys.sorted().prefix(maximumThreads).map { $0 }
    }

    /// A stable text of the candidates' stacks (sorted), for dedup signatures.
    static func signature(_ candidates: [Int32: [UInt64]]) -> String {
        candidates.values.map { $0.map { String($0, radix: 16) }.joined(separator: ",") }.sorted().joined(separator: "|")
    }

    /// The address lies in a module that is not libc, the dynamic loader, libgcc/libstdc++,
    /// libdispatch or the Swift runtime and standard libraries.
    static func isProgramCode(_ address: UInt64, modules: [ModuleSnapshot]) -> Bool {
        guard let module = modules.first(where: { address >= $0.start && address < $0.end }) else { return false }
        let file = Paths.lastComponent(of: module.path)
        return !systemLibraryPrefixes.contains { file.hasPrefix($0) }
    }

    static let systemLibraryPrefixes = [
        "libc.so", "libc-", "ld-linux", "libpthread", "libm.so", "libdl.so", "librt.so", "libgcc_s", "libstdc++",
        "libdispatch", "libBlocksRuntime", "libswift", "libFoundation", "lib_Foundation", "libicu", "libunwind",
    ]
}
