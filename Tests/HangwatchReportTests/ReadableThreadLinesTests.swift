// What a person reads on a thread line and in a dump's headline (issue 50): the system call by
// name with its arguments decoded, a name libdispatch cut to 15 bytes with the queue it stands
// for, and what a dump caught. The lines are the kernel's format (/proc/PID/task/TID/syscall);
// hangwatchTests' FirstHourTests check the same on real processes.
import HangwatchReport
import HangwatchSnapshot
import HangwatchPlatform
import Foundation
import Testing

@Suite struct ReadableThreadLinesTests {
    #if arch(x86_64)
    static let (futex, clockNanosleep, epollWait, read, ioctl) = (202, 230, 232, 0, 16)
    static let (epollName, epollLine) = ("epoll_wait", "epoll_wait(5, 0x7f0000000300, 1024, -1)")
    #else
    // arm64 has no epoll_wait: epoll_pwait, with its signal mask and its size.
    static let (futex, clockNanosleep, epollWait, read, ioctl) = (98, 115, 22, 63, 29)
    static let (epollName, epollLine) = ("epoll_pwait", "epoll_pwait(5, 0x7f0000000300, 1024, -1, NULL, 0)")
    #endif

    static func line(_ number: Int, _ arguments: [UInt64]) -> String {
        Syscalls.line(number: Int64(number), arguments: arguments, sp: 0x7ffd_0000_1000, pc: 0x7f00_0000_2000)
    }

    @Test func callsAreNamedOnThisArchitectureAndInTheSharedNumbers() {
        #expect(Syscalls.name(of: Self.futex) == "futex")
        #expect(Syscalls.name(of: Self.clockNanosleep) == "clock_nanosleep")
        #expect(Syscalls.name(of: 424) == "pidfd_send_signal")
        #expect(Syscalls.name(of: 441) == "epoll_pwait2")
        #expect(Syscalls.name(of: 470) == "listns")
        #if arch(x86_64)
        #expect(Syscalls.name(of: 334) == "rseq" && Syscalls.name(of: 335) == "uretprobe", "x86_64's last own calls")
        #endif
        for unknown in [-1, 400, 471, 1_000_000] { #expect(Syscalls.name(of: unknown) == nil, "\(unknown)") }
        // The numbers hangwatch already reads meaning into name the calls they stand for.
        #expect(Syscalls.name(of: Syscalls.wait4) == "wait4" && Syscalls.name(of: Syscalls.waitid) == "waitid")
        #expect(Syscalls.name(of: Syscalls.restart) == "restart_syscall")
        #expect(Syscalls.eventWaits.allSatisfy { Syscalls.name(of: $0)?.hasPrefix("epoll_") == true })
    }

    @Test func commonCallsAreDecodedAsStraceWritesThem() {
        let cases: [(String, String)] = [
            (Self.line(Self.futex, [0x5621_0000_1234, 0x80, 2, 0, 0, 0]), "futex(0x562100001234, FUTEX_WAIT_PRIVATE, 2, NULL)"),
            (Self.line(Self.futex, [0x5621_0000_1234, 0x189, 0, 0x7ffd_0000_0100, 0, 0xffff_ffff]),
             "futex(0x562100001234, FUTEX_WAIT_BITSET_PRIVATE|FUTEX_CLOCK_REALTIME, 0, 0x7ffd00000100, NULL, FUTEX_BITSET_MATCH_ANY)"),
            (Self.line(Self.futex, [0x7f00_0000_0040, 0x86, 0, 0, 0, 0]), "futex(0x7f0000000040, FUTEX_LOCK_PI_PRIVATE, NULL)"),
            (Self.line(Self.clockNanosleep, [1, 0, 0x7ffd_0000_0200, 0x7ffd_0000_0200, 0, 0]),
             "clock_nanosleep(CLOCK_MONOTONIC, 0, 0x7ffd00000200, 0x7ffd00000200)"),
            (Self.line(Self.epollWait, [5, 0x7f00_0000_0300, 1024, 0xffff_ffff, 0, 0]), Self.epollLine),
            (Self.line(Self.read, [7, 0x7f00_0000_0400, 65536, 0, 0, 0]), "read(7, 0x7f0000000400, 65536)"),
            // A call without a decoder: its six arguments as the kernel gives them.
            (Self.line(Self.ioctl, [3, 0x5401, 0x7ffd_0000_0500, 0, 0, 0]), "ioctl(3, 0x5401, 0x7ffd00000500)"),
            ("running", "not in a system call (running)"),
            ("-1 0x7ffd00001000 0x7f0000002000", "not in a system call"),
            // Not a line the kernel writes: shown as it is (the text report escapes it).
            ("0 0x3 0x7f00 0x1000", "0 0x3 0x7f00 0x1000"),
        ]
        for (line, expected) in cases { #expect(SyscallText.describe(line) == expected, "\(line)") }
        // A number no call has is still shown by number.
        #expect(SyscallText.describe(Self.line(400, [1, 2, 3, 4, 5, 6])) == "syscall_400(0x1, 0x2, 0x3, 0x4, 0x5, 0x6)")
        // The report's name wins over this architecture's numbering (a report made elsewhere).
        #expect(SyscallText.describe(Self.line(Self.ioctl, [3, 0x80, 1, 0, 0, 0]), name: "futex") == "futex(0x3, FUTEX_WAIT_PRIVATE, 1, NULL)")
    }

    @Test func namesLibdispatchCutAreGivenTheirQueue() {
        // Each root queue's label, cut as libdispatch cuts it (its last 15 bytes).
        #expect(ThreadNames.dispatchLabel(of: "oot.default-qos") == "com.apple.root.default-qos")
        #expect(ThreadNames.dispatchLabel(of: "r-initiated-qos") == "com.apple.root.user-initiated-qos")
        #expect(ThreadNames.dispatchLabel(of: "interactive-qos") == "com.apple.root.user-interactive-qos")
        #expect(ThreadNames.dispatchLabel(of: ".background-qos") == "com.apple.root.background-qos")
        #expect(ThreadNames.dispatchLabel(of: "maintenance-qos") == "com.apple.root.maintenance-qos")
        #expect(ThreadNames.dispatchLabel(of: "-qos.overcommit") == "com.apple.root.<QoS>-qos.overcommit")
        #expect(ThreadNames.dispatchLabel(of: "ispatch-manager") == "com.apple.libdispatch-manager")
        for other in ["server", "default-qos", "hangwatch-mon", "oot.default-qoz"] { #expect(ThreadNames.dispatchLabel(of: other) == nil) }
    }

    static func thread(_ tid: Int32, _ name: String, state: ThreadState = .sleeping, syscall: String?,
                       lockWait: LockWait? = nil) -> Report.Thread {
        Report.Thread(info: ThreadInfo(tid: tid, name: name, state: state, syscall: syscall, cpuSeconds: CPUTime(user: 0, system: 0),
                                       roles: tid == 100 ? .mainThread : [], status: .ptrace, lockWait: lockWait),
                      frames: [], syscallName: syscall.flatMap(Syscalls.number(ofLine:)).flatMap(Syscalls.name(of:)))
    }

    static func dump(_ threads: [Report.Thread]) -> Report {
        Report(id: "r", kind: .dump, timestamp: 1_714_564_800, process: ProcessIdentity(pid: 100, name: "server", executable: "/srv/server",
                                                                                      arguments: [], bundleID: ""),
               threads: threads, modules: [])
    }

    /// The text says the call; the JSON keeps the kernel's line and adds the name.
    @Test func theTextNamesTheCallAndTheJSONKeepsTheNumbers() throws {
        let futex = Self.line(Self.futex, [0x5621_0000_1234, 0x80, 2, 0, 0, 0])
        let report = Self.dump([Self.thread(100, "server", syscall: futex), Self.thread(101, "oot.default-qos", syscall: "running")])
        let text = ReportRenderer.text(report)
        #expect(text.contains("Thread 100 \"server\" (main-thread) — state S, ptrace, syscall futex(0x562100001234, FUTEX_WAIT_PRIVATE, 2, NULL), cpu "))
        #expect(text.contains("Thread 101 \"oot.default-qos\" [libdispatch: com.apple.root.default-qos] — state S, ptrace, "
            + "syscall not in a system call (running), cpu "))
        let json = try #require(try JSONSerialization.jsonObject(with: ReportRenderer.json(report)) as? [String: Any])
        let threads = try #require(json["threads"] as? [[String: Any]])
        #expect(threads[0]["syscall"] as? String == futex && threads[0]["syscallName"] as? String == "futex")
        #expect(threads[1]["syscall"] as? String == "running" && threads[1]["syscallName"] == nil)
        #expect(try Report.decode(from: ReportRenderer.json(report)) == report)
    }

    /// A dump's headline says what was dumped: the process, its threads, what they were in,
    /// and the lock the first blocked thread waits for.
    @Test func aDumpsHeadlineSaysWhatWasCaught() {
        let wait = LockWait(kind: .mutex, address: 0x5621_0000_1234, holder: 102)
        let threads = [
            Self.thread(100, "server", syscall: Self.line(Self.futex, [0x5621_0000_1234, 0x80, 2, 0, 0, 0]), lockWait: wait),
            Self.thread(101, "io", syscall: Self.line(Self.epollWait, [5, 0x7f00_0000_0300, 1024, 0xffff_ffff, 0, 0])),
            Self.thread(102, "export", state: .running, syscall: "running"),
            Self.thread(103, "disk", state: .diskSleep, syscall: Self.line(Self.read, [7, 0x7f00_0000_0400, 4096, 0, 0, 0])),
            Self.thread(104, "pool", syscall: Self.line(Self.futex, [0x5621_0000_2000, 0x80, 0, 0, 0, 0])),
        ]
        let headline = ReportRenderer.text(Self.dump(threads)).split(separator: "\n")[0]
        #expect(headline == "*** Dump: server [100]: 5 threads: 1 running, 1 in uninterruptible waits (D), 3 in system calls (2 futex, 1 \(Self.epollName)); "
            + "thread 100 \"server\" waits for mutex 0x0000562100001234 held by thread 102 \"export\" ***")
        let one = ReportRenderer.text(Self.dump([Self.thread(100, "server", syscall: "running")])).split(separator: "\n")[0]
        #expect(one == "*** Dump: server [100]: 1 thread: 1 running ***")
    }
}
