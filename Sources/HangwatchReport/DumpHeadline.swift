// What a dump's headline says: the process, how many threads, what they were doing (running,
// in an uninterruptible wait, in which system calls), and the lock the first blocked thread
// waits for — "my-server [4242]: 12 threads: 1 running, 11 in system calls (8 futex, 2
// epoll_wait, 1 read); thread 4243 "worker" waits for mutex 0x… held by thread 4244 …".
import HangwatchPlatform
import HangwatchSnapshot

package enum DumpHeadline {
    /// The most system calls the headline names; the rest are counted as "N other".
    static let namedCalls = 3

    /// The headline of a dump report (`hangwatch dump`, DumpWithoutCrash): `requester` is the
    /// thread that asked for it, when one did.
    package static func text(_ report: Report) -> String {
        var text = ""
        if let requester = report.threads.first(where: { $0.roles.contains(.requester) }) {
            text = "requested by thread \(requester.tid) \"\(requester.name)\" of "
        }
        text += "\(report.process.name) [\(report.process.pid)]: \(Text.counted(report.threads.count, "thread"))"
        let activity = activity(report.threads)
        if !activity.isEmpty { text += ": " + activity }
        if let lock = LockReport.headline(report.threads) { text += "; " + lock }
        return text
    }

    /// "1 running, 2 in uninterruptible waits (D), 9 in system calls (7 futex, 2 epoll_wait)".
    static func activity(_ threads: [Report.Thread]) -> String {
        var running = 0, uninterruptible = 0
        var calls: [String: Int] = [:]
        for thread in threads {
            if thread.state == .diskSleep {
                uninterruptible += 1
            } else if thread.syscall == "running" || thread.state == .running {
                running += 1
            } else if let number = Syscalls.number(ofLine: thread.syscall) {
                calls[thread.syscallName ?? Syscalls.name(of: number) ?? "syscall \(number)", default: 0] += 1
            }
        }
        var parts: [String] = []
        if running > 0 { parts.append("\(running) running") }
        if uninterruptible > 0 { parts.append("\(uninterruptible) in uninterruptible waits (D)") }
        if !calls.isEmpty { parts.append("\(calls.values.reduce(0, +)) in system calls (\(callCounts(calls)))") }
        return parts.joined(separator: ", ")
    }

    /// "7 futex, 2 epoll_wait, 1 other": the most frequent first, ties by name.
    static func callCounts(_ calls: [String: Int]) -> String {
        let sorted = calls.sorted { $0.value != $1.value ? $0.value > $1.value : $0.key < $1.key }
        var parts = sorted.prefix(namedCalls).map { "\($0.value) \($0.key)" }
        let others = sorted.dropFirst(namedCalls).reduce(0) { $0 + $1.value }
        if others > 0 { parts.append("\(others) other") }
        return parts.joined(separator: ", ")
    }
}
