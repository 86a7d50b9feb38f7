// Processes: identity, not numbers (SECURITY.md, "Only what is ours"). In a pid namespace of
// their own (`unshare --pid --fork --mount-proc`, as root), /proc/sys/kernel/ns_last_pid forces
// the pid a test wants onto an outsider, so the reuse a busy machine produces by chance happens
// every run: hangwatch must never signal nor read a process that took a job member's pid.
import Foundation
import HangwatchTestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// unshare(1) can make a pid namespace here (root, or CAP_SYS_ADMIN).
private let namespacesAvailable: Bool = {
    guard getuid() == 0, let probe = try? ChildProcess("/usr/bin/unshare", ["--pid", "--fork", "--mount-proc", "/bin/true"]) else { return false }
    return (try? probe.waitForExit(timeout: 10)) == 0
}()

/// Runs `script` (bash) as pid 1's child in a new pid namespace; its stdout.
private func inPidNamespace(_ script: String, environment: [String: String] = [:], timeout: Double = 60) throws -> String {
    let child = try ChildProcess("/usr/bin/unshare", ["--pid", "--fork", "--mount-proc", "/bin/bash", "-c", script],
                                 environment: environment)
    let status = try child.waitForExit(timeout: timeout)
    #expect(status == 0, "stdout: \(child.stdout) stderr: \(child.stderr)")
    return child.stdout
}

@Suite("Process identity", .ownThread, .enabled(if: namespacesAvailable, "needs root to make a pid namespace (unshare)"))
struct ProcessIdentityTests {
    /// The child led its own process group G and exited; a leftover of the job (a daemon in a
    /// session of its own, so G has no member left and its number is free) ignores SIGTERM, so
    /// the kill of what is left comes after the grace period. Meanwhile an outsider is started
    /// with pid G and its own session (`setsid`: process group G). Before, hangwatch's
    /// `kill(-G, SIGSTOP/SIGKILL)` killed it.
    @Test(arguments: [["--kill-grace", "2"], ["--silence", "1", "--kill-after", "1", "--kill-signal", "TERM", "--kill-grace", "2"]])
    func anOutsiderThatTookTheChildsGroupIdIsNeverSignalled(_ options: [String]) throws {
        let hangwatch = try productPath("hangwatch")
        let database = try makeTemporaryDirectory("hangwatch-pidns")
        defer { removeTemporaryDirectory(database) }
        // `\$\$`: the child's own pid (its process group), not the script's.
        let job = #"(trap '' TERM; exec setsid sleep 30) & echo CHILD \$\$; sleep 0.5; exit 0"#
        let script = """
            set -u
            "\(hangwatch)" run --database "\(database)/db" \(options.joined(separator: " ")) -- bash -c "\(job)" > out.txt 2>&1 &
            runner=$!
            for _ in $(seq 100); do grep -q CHILD out.txt 2>/dev/null && break; sleep 0.05; done
            group=$(sed -n 's/^CHILD //p' out.txt)
            # The child exits at 0.5 s and is reaped; then its pid (and group id) is given to an outsider.
            while kill -0 "$group" 2>/dev/null; do sleep 0.05; done
            # hangwatch's own threads take pids too: try until the outsider gets the one wanted.
            for _ in $(seq 50); do
                echo $((group - 1)) > /proc/sys/kernel/ns_last_pid
                setsid sleep 30 &
                outsider=$!
                [ "$outsider" = "$group" ] && break
                kill $outsider; wait $outsider 2>/dev/null
            done
            # setsid makes the group a moment after the fork: read it once it has (up to 2 s).
            for _ in $(seq 200); do
                pgid=$(ps -o pgid= -p $outsider | tr -d ' ')
                [ "$pgid" = "$outsider" ] && break
                sleep 0.01
            done
            echo "GROUP $group OUTSIDER $outsider PGID $pgid"
            wait $runner
            kill -0 $outsider 2>/dev/null && echo OUTSIDER-ALIVE || echo OUTSIDER-KILLED
            kill $outsider 2>/dev/null
            cat out.txt
            """
        let output = try inPidNamespace("cd \(database) && " + script)
        let reuse = try #require(output.split(separator: "\n").first { $0.hasPrefix("GROUP ") }, "\(output)")
        let fields = reuse.split(separator: " ")
        #expect(fields[1] == fields[3] && fields[1] == fields[5], "the outsider took the child's pid and group: \(reuse)")
        #expect(output.contains("OUTSIDER-ALIVE"), "\(output)")
    }

    /// A member of the tree exits between the walk and its capture, and an outsider takes its
    /// pid (HANGWATCH_TEST_TREE_WALK_PAUSE stretches that window). Before, the outsider was
    /// traced and its argv and stack saved in the report.
    @Test func anOutsiderThatTookAMembersPidIsNeverCaptured() throws {
        let hangwatch = try productPath("hangwatch")
        let directory = try makeTemporaryDirectory("hangwatch-pidns")
        defer { removeTemporaryDirectory(directory) }
        let script = """
            set -u
            cd "\(directory)"
            bash -c 'sleep 1.5 & echo $! > member; wait; exec sleep 30' &
            root=$!
            for _ in $(seq 100); do [ -s member ] && break; sleep 0.05; done
            member=$(cat member)
            HANGWATCH_TEST_TREE_WALK_PAUSE=2.5 "\(hangwatch)" dump --pid $root --tree --format json --database "\(directory)/db" > report.json 2> dump.err &
            dump=$!
            while kill -0 "$member" 2>/dev/null; do sleep 0.05; done
            for _ in $(seq 50); do
                echo $((member - 1)) > /proc/sys/kernel/ns_last_pid
                bash -c 'exec -a OUTSIDER-SECRET-TOKEN=hunter2 sleep 30' &
                outsider=$!
                [ "$outsider" = "$member" ] && break
                kill $outsider; wait $outsider 2>/dev/null
            done
            echo "MEMBER $member OUTSIDER $outsider"
            wait $dump; echo "DUMP-STATUS $?"
            kill $outsider $root 2>/dev/null
            cat dump.err
            echo REPORT; cat report.json
            """
        let output = try inPidNamespace(script)
        let reuse = try #require(output.split(separator: "\n").first { $0.hasPrefix("MEMBER ") }, "\(output)")
        let fields = reuse.split(separator: " ")
        #expect(fields[1] == fields[3], "the outsider took the member's pid: \(reuse)")
        #expect(output.contains("DUMP-STATUS 0"), "\(output)")
        let report = try #require(output.components(separatedBy: "REPORT\n").last)
        #expect(report.contains("\"processTree\""), "\(report)")
        #expect(!report.contains("OUTSIDER-SECRET-TOKEN"), "the outsider's argv is in the report")
        #expect(report.contains("exited during the capture"), "\(report)")
    }
}
