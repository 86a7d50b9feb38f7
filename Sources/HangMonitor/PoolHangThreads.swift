// Which threads hang the cooperative pool. Linux cannot say which job a pool thread runs, so
// a hung pool thread is told by its stack: it runs a Swift concurrency job (a frame in
// libswift_Concurrency, when that library is loaded; a statically linked runtime cannot be
// told apart), it runs the program's own code (a frame outside the system and Swift runtime
// libraries), it is not an event loop waiting in epoll, and its top frames are the same in
// two captures at least one threshold apart (docs/hang-monitor.md, "Pool hangs").
import HangwatchPlatform
import HangwatchSnapshot

enum PoolHangThreads {
    /// Frames compared between the two captures.
    static let comparedFrames = 8
    /// Hung threads named at most (sampled, marked `hung`).
    static let maximumThreads = 8

    /// Threads of `snapshot` that may be stuck in program code: tid → top frames.
    static func candidates(in snapshot: ProcessSnapshot, excluding excluded: Set<Int32>) -> [Int32: [UInt64]] {
        let concurrency = snapshot.modules.filter { Paths.lastComponent(of: $0.path).hasPrefix("libswift_Concurrency") }
        var found: [Int32: [UInt64]] = [:]
        for thread in snapshot.threads where !excluded.contains(thread.tid) && !thread.frames.isEmpty {
            if thread.roles.contains(.mainThread) || thread.roles.contains(.mainQueue) || thread.roles.contains(.requester) { continue }
            if let syscall = Syscalls.number(ofLine: thread.syscall), Syscalls.eventWaits.contains(syscall) { continue }
            if !concurrency.isEmpty,
               !thread.frames.contains(where: { frame in concurrency.contains { frame >= $0.start && frame < $0.end } }) { continue }
            guard thread.frames.contains(where: { isProgramCode($0, modules: snapshot.modules) }) else { continue }
            found[thread.tid] = Array(thread.frames.prefix(comparedFrames))
        }
        return found
    }

    /// The candidates of the first capture whose top frames are unchanged in `later`, lowest
    /// tid first, at most `maximumThreads`.
    static func confirmed(_ first: [Int32: [UInt64]], in later: ProcessSnapshot, excluding excluded: Set<Int32>) -> [Int32] {
        let now = candidates(in: later, excluding: excluded)
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
