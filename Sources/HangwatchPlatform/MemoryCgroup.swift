// A process's memory cgroup: the one place hangwatch reads /proc/PID/cgroup, /proc/self/mountinfo
// and /sys/fs/cgroup (docs/killed.md). Both hierarchies count: cgroup v2's unified one, and
// v1's `memory` hierarchy, which a hybrid system (systemd's, the CI machines') uses for memory
// while v2 is mounted without controllers. The OOM-kill counter is what distinguishes an OOM kill from
// any other SIGKILL: v2 `memory.events` (`oom_kill`, `oom_group_kill`), v1 `memory.oom_control`
// (`oom_kill`, Linux 4.13+). `hangwatch run --memory-max` makes a cgroup of its own for the job
// under hangwatch's (`createChild`), which makes an OOM kill of the job its own to count.
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// A memory cgroup, by its directory.
package struct MemoryCgroup: Sendable, Equatable, Codable {
    package enum Hierarchy: String, Sendable, Codable {
        /// The unified hierarchy: `memory.max`, `memory.events`.
        case v2
        /// The v1 memory controller's: `memory.limit_in_bytes`, `memory.oom_control`.
        case v1
    }

    package var hierarchy: Hierarchy
    /// The cgroup's directory, e.g. `/sys/fs/cgroup/memory/job` (v1).
    package var path: String

    package init(hierarchy: Hierarchy, path: String) {
        self.hierarchy = hierarchy
        self.path = path
    }

    /// The memory cgroup of `pid` (nil: this process); nil when no memory controller is mounted
    /// where this process can see it.
    package static func of(_ pid: Int32?) -> MemoryCgroup? {
        guard let membership = ProcFS.readText(ProcFS.directory(of: pid) + "/cgroup", limit: 64 << 10) else { return nil }
        let mounts = ProcFS.readText("/proc/self/mountinfo", limit: 1 << 20) ?? ""
        var unified: String?
        for line in membership.split(separator: "\n") {
            // hierarchy-id:controllers:path
            let fields = line.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
            guard fields.count == 3 else { continue }
            if fields[0] == "0" && fields[1].isEmpty { unified = String(fields[2]); continue }
            if fields[1].split(separator: ",").contains("memory"),
               let mount = mountPoint(in: mounts, v1Controller: "memory") {
                return MemoryCgroup(hierarchy: .v1, path: joined(mount, String(fields[2])))
            }
        }
        if let unified, let mount = mountPoint(in: mounts, v1Controller: nil) {
            let cgroup = MemoryCgroup(hierarchy: .v2, path: joined(mount, unified))
            // The memory controller is on in this v2 cgroup only when its files are there.
            return access(cgroup.path + "/memory.events", R_OK) == 0 ? cgroup : nil
        }
        return nil
    }

    /// This cgroup when its path is one a cgroup filesystem holds — absolute, no `.` or `..`
    /// component, no symbolic link on the way, and the directory on a cgroup (v1) or cgroup2
    /// filesystem's mount of the same hierarchy (/proc/self/mountinfo) — nil otherwise. A path read back from a file (a run
    /// record) is read only then: a directory planted elsewhere with a `memory.events` of its
    /// own proves nothing about any process.
    package func verified() -> MemoryCgroup? {
        guard path.hasPrefix("/"), path.utf8.count < 4096,
              !path.split(separator: "/").contains(where: { $0 == "." || $0 == ".." }),
              let resolved = realpath(path, nil) else { return nil }
        defer { free(resolved) }
        guard String(cString: resolved) == path else { return nil }  // a link on the way, or a path spelled otherwise
        let mounts = ProcFS.readText("/proc/self/mountinfo", limit: 1 << 20) ?? ""
        guard let mount = Self.mountPoint(in: mounts, v1Controller: hierarchy == .v1 ? "memory" : nil) else { return nil }
        return path == mount.point || path.hasPrefix(mount.point + "/") ? self : nil
    }

    /// Processes killed by an OOM killer while in this cgroup (v2: `oom_kill` plus
    /// `oom_group_kill`); nil when the cgroup is gone or the kernel does not count.
    package func oomKills() -> UInt64? {
        switch hierarchy {
        case .v2:
            guard let events = keyedValues("memory.events"), let kills = events["oom_kill"] else { return nil }
            return kills + (events["oom_group_kill"] ?? 0)
        case .v1:
            return keyedValues("memory.oom_control")?["oom_kill"]
        }
    }

    /// The limit, nil when there is none (v2 `max`, v1's page-rounded "unlimited").
    package func limitBytes() -> UInt64? {
        let text = value(hierarchy == .v2 ? "memory.max" : "memory.limit_in_bytes")
        guard let text, let bytes = UInt64(text), bytes < (1 << 62) else { return nil }
        return bytes
    }

    /// The most memory the cgroup has used (v2 `memory.peak`, Linux 5.19+; v1 `memory.max_usage_in_bytes`).
    package func peakBytes() -> UInt64? {
        value(hierarchy == .v2 ? "memory.peak" : "memory.max_usage_in_bytes").flatMap { UInt64($0) }
    }

    /// A cgroup `name` under this one, limited to `limitBytes` (v1: swap included, when the
    /// kernel accounts swap, so the job cannot page out instead of hitting the limit).
    package func createChild(named name: String, limitBytes: UInt64) throws -> MemoryCgroup {
        guard !name.isEmpty, !name.contains("/"), name != ".", name != ".." else { throw CgroupError(path: name, what: "a bad cgroup name") }
        let child = MemoryCgroup(hierarchy: hierarchy, path: path + "/" + name)
        guard mkdir(child.path, 0o700) == 0 else { throw CgroupError(path: child.path, what: "cannot create it", errno: errno) }
        do {
            if hierarchy == .v2 {
                try child.write("memory.max", "\(limitBytes)")
                // No swap for the job: the limit is reached, not paged around.
                if access(child.path + "/memory.swap.max", W_OK) == 0 { try child.write("memory.swap.max", "0") }
            } else {
                try child.write("memory.limit_in_bytes", "\(limitBytes)")
                if access(child.path + "/memory.memsw.limit_in_bytes", W_OK) == 0 {
                    try child.write("memory.memsw.limit_in_bytes", "\(limitBytes)")
                }
            }
        } catch {
            child.remove()
            throw error
        }
        return child
    }

    /// Moves process `pid` into this cgroup.
    package func add(_ pid: Int32) throws { try write("cgroup.procs", "\(pid)") }

    /// Removes the (empty) cgroup; a cgroup with processes left in it stays.
    @discardableResult
    package func remove() -> Bool { rmdir(path) == 0 }

    /// Removes the empty cgroup `name` under this one only when it is one `createChild` made for
    /// this user: a directory (lstat, no link followed), owned by the effective user, that
    /// nobody else may enter or write (0700, as made). Another user's cgroup of the same name —
    /// root may remove it, the kernel does not ask whose it is — stays; so does one with
    /// processes left in it (EBUSY).
    @discardableResult
    package func removeOwnChild(named name: String) -> Bool {
        guard !name.isEmpty, !name.contains("/"), name != ".", name != ".." else { return false }
        let directory = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard directory >= 0 else { return false }
        defer { close(directory) }
        var info = stat()
        guard fstatat(directory, name, &info, AT_SYMLINK_NOFOLLOW) == 0, info.st_mode & S_IFMT == S_IFDIR,
              info.st_uid == geteuid(), info.st_mode & 0o077 == 0 else { return false }
        return unlinkat(directory, name, AT_REMOVEDIR) == 0
    }

    // MARK: - Files

    private func value(_ name: String) -> String? {
        ProcFS.firstLine(path + "/" + name).map { String($0.filter { $0 != " " && $0 != "\t" }) }
    }

    /// `key value` lines (memory.events, memory.oom_control).
    private func keyedValues(_ name: String) -> [String: UInt64]? {
        guard let text = ProcFS.readText(path + "/" + name, limit: 16 << 10) else { return nil }
        var values: [String: UInt64] = [:]
        for line in text.split(separator: "\n") {
            let parts = line.split(separator: " ")
            if parts.count == 2, let number = UInt64(parts[1]) { values[String(parts[0])] = number }
        }
        return values
    }

    private func write(_ name: String, _ text: String) throws {
        let file = path + "/" + name
        let fd = open(file, O_WRONLY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { throw CgroupError(path: file, what: "cannot open it", errno: errno) }
        defer { close(fd) }
        let written = Array(text.utf8).withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
        guard written == text.utf8.count else { throw CgroupError(path: file, what: "cannot write \(text)", errno: errno) }
    }

    /// The mount point of the v1 hierarchy holding `v1Controller`, or of the v2 hierarchy (nil).
    /// Its root within the hierarchy is dropped from the paths /proc/PID/cgroup gives (a cgroup
    /// namespace, a container's bind mount).
    private static func mountPoint(in mountinfo: String, v1Controller: String?) -> (point: String, root: String)? {
        for line in mountinfo.split(separator: "\n") {
            // id parent major:minor root mount-point options [optional…] - type source super-options
            let halves = line.split(separator: " - ", maxSplits: 1)
            guard halves.count == 2 else { continue }
            let before = halves[0].split(separator: " "), after = halves[1].split(separator: " ")
            guard before.count >= 5, after.count >= 3 else { continue }
            let root = unescape(before[3]), point = unescape(before[4])
            if let v1Controller {
                if after[0] == "cgroup", after[2].split(separator: ",").contains(Substring(v1Controller)) { return (point, root) }
            } else if after[0] == "cgroup2" {
                return (point, root)
            }
        }
        return nil
    }

    private static func joined(_ mount: (point: String, root: String), _ path: String) -> String {
        var relative = path
        if mount.root != "/", relative.hasPrefix(mount.root) { relative = String(relative.dropFirst(mount.root.count)) }
        if relative == "/" || relative.isEmpty { return mount.point }
        return mount.point + (relative.hasPrefix("/") ? "" : "/") + relative
    }

    /// mountinfo escapes space, tab, newline and backslash as \ooo.
    private static func unescape(_ field: Substring) -> String {
        guard field.contains("\\") else { return String(field) }
        var bytes: [UInt8] = [], utf8 = Array(field.utf8), index = 0
        while index < utf8.count {
            if utf8[index] == UInt8(ascii: "\\"), index + 3 < utf8.count,
               let value = UInt8(String(decoding: utf8[(index + 1)...(index + 3)], as: UTF8.self), radix: 8) {
                bytes.append(value)
                index += 4
            } else {
                bytes.append(utf8[index])
                index += 1
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}

/// A cgroup file that could not be made or written.
package struct CgroupError: Error, CustomStringConvertible {
    package var path: String
    package var what: String
    package var errno: Int32 = 0

    package init(path: String, what: String, errno: Int32 = 0) {
        self.path = path
        self.what = what
        self.errno = errno
    }

    package var description: String {
        errno == 0 ? "\(path): \(what)" : "\(path): \(what): \(String(cString: strerror(errno)))"
    }
}

/// The kernel's log (/dev/kmsg), read for the OOM killer's line about one process. Root (or
/// CAP_SYSLOG, or `kernel.dmesg_restrict=0`) can read it; otherwise nothing is known from it.
package enum KernelLog {
    /// The OOM killer's lines about one process, as `oomKill(of:named:within:)` finds them.
    package struct OOMKill: Equatable, Sendable {
        /// "Memory cgroup out of memory: Killed process PID (name) …", at most 400 bytes.
        package var line: String
        /// The memory cgroup the process was in when killed, from the `oom-kill:` line before
        /// it (`task_memcg=`, relative to the cgroup mount: "/…/hangwatch-RUN"); nil without one.
        package var taskCgroup: String?
    }

    /// The OOM killer's "Killed process PID (name)" line for process `pid` named `name` (its
    /// comm, cut at 15 bytes as the kernel does) logged `within` that span (seconds since boot,
    /// the log's own clock), with the cgroup its `oom-kill:` line gives; nil when the log has
    /// none or cannot be read. A line of the same pid with another name, or outside the span, is
    /// another process's. At most `maxRecords` records are read.
    package static func oomKill(of pid: Int32, named name: String, within span: ClosedRange<Double>,
                                maxRecords: Int = 20_000) -> OOMKill? {
        let fd = open("/dev/kmsg", O_RDONLY | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        let comm = String(decoding: Array(name.utf8.prefix(15)), as: UTF8.self)
        let needle = "Killed process \(pid) (\(comm))", detail = ",pid=\(pid),"
        var buffer = [UInt8](repeating: 0, count: 8192), found: OOMKill?, taskCgroup: String?
        for _ in 0..<maxRecords {
            let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count < 0 && errno == EPIPE { continue }  // records overwritten under us: go on
            guard count > 0 else { break }  // EAGAIN: the end
            let record = String(decoding: buffer[0..<count], as: UTF8.self)
            // "priority,sequence,microseconds,flags;message"
            guard let semicolon = record.firstIndex(of: ";") else { continue }
            let header = record[..<semicolon].split(separator: ",")
            guard header.count >= 3, let micros = Double(header[2]), span.contains(micros / 1e6) else { continue }
            let message = record[record.index(after: semicolon)...].prefix { $0 != "\n" }
            if message.hasPrefix("oom-kill:") && message.contains(detail) {
                taskCgroup = Self.field("task_memcg", in: message)
            } else if message.contains(needle) {
                found = OOMKill(line: String(message.prefix(400)), taskCgroup: taskCgroup)
                taskCgroup = nil
            }
        }
        return found
    }

    /// `key=value` of a comma-separated kernel line.
    static func field(_ key: String, in message: Substring) -> String? {
        message.split(separator: ",").first { $0.hasPrefix(key + "=") }.map { String($0.dropFirst(key.count + 1).prefix(512)) }
    }
}
