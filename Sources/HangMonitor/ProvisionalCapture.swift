// TEMPORARY ADAPTER — delete when LiveCapture and the intermediate dump writer/reader land
// on main. It lets the monitor run end to end meanwhile: threads come from /proc only (one
// frame: the user pc of a thread blocked in a syscall) and the staged "dump" is plain JSON.
// Nothing here is the product's capture or dump code.
import Foundation
import DumpWithoutCrash

struct ProvisionalCapture {
    let databasePath: String
    let bundleID: String

    func captureAll(reason: CaptureReason) throws -> ProcessSnapshot {
        let pid = getpid()
        let tids = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task"))?.compactMap { Int32($0) }.sorted() ?? []
        let threads = tids.map { tid -> ThreadSnapshot in
            let comm = ProcFile.read("/proc/self/task/\(tid)/comm")?.trimmingCharacters(in: .whitespacesAndNewlines) ?? ""
            let stat = ProcFile.read("/proc/self/task/\(tid)/stat") ?? ""
            let state = stat.split(separator: ")").last.flatMap { $0.split(separator: " ").first }.map(String.init) ?? "?"
            let syscall = ProcFile.read("/proc/self/task/\(tid)/syscall")?.split(separator: "\n").first.map(String.init)
            let frames = (try? sample(tid: tid)) ?? []
            return ThreadSnapshot(tid: tid, name: comm, state: state, syscall: syscall,
                                  roles: tid == pid ? .mainThread : [], status: frames.isEmpty ? .unreachable : .captured,
                                  frames: frames)
        }
        let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? ""
        return ProcessSnapshot(reason: reason, timestamp: Date().timeIntervalSince1970,
                               process: ProcessIdentity(pid: pid, name: ProcessInfo.processInfo.processName, executable: exe,
                                                        arguments: CommandLine.arguments, bundleID: bundleID),
                               threads: threads, modules: [], annotations: ["hangwatch.provisional-capture": "true"])
    }

    /// /proc/self/task/TID/syscall ends with "sp pc" while the thread is blocked in a syscall.
    func sample(tid: Int32) throws -> [UInt64] {
        guard let line = ProcFile.read("/proc/self/task/\(tid)/syscall"), let last = line.split(whereSeparator: \.isWhitespace).last,
              last.hasPrefix("0x"), let pc = UInt64(last.dropFirst(2), radix: 16) else { return [] }
        return [pc]
    }

    func stage(_ snapshot: ProcessSnapshot, atPath path: String) throws {
        try SecureFile.writeAtomically(Data(ProvisionalJSON.encode(snapshot).utf8), to: path)
    }

    func loadStaged(atPath path: String) throws -> ProcessSnapshot {
        let data = try SecureFile.read(path, limit: 16 << 20)
        return try ProvisionalJSON.decode(data)
    }

}

/// TEMPORARY: the provisional staged-dump encoding.
enum ProvisionalJSON {
    static func encode(_ s: ProcessSnapshot) -> String {
        var object: [String: Any] = ["timestamp": s.timestamp, "pid": Int(s.process.pid), "bundleID": s.process.bundleID,
                                     "annotations": s.annotations]
        if case .hang(let hang) = s.reason {
            object["kind"] = hang.recovered ? "hang" : (s.annotations["hang.outcome"] ?? "hang-in-progress")
            object["hang"] = ["target": hang.target, "thresholdSeconds": hang.thresholdSeconds, "durationSeconds": hang.durationSeconds,
                              "recovered": hang.recovered, "startTime": hang.startTime,
                              "samples": hang.samples.map { ["tid": Int($0.tid), "frames": $0.frames.map { "0x" + String($0, radix: 16) }, "count": $0.count] as [String: Any] }]
        }
        object["threads"] = s.threads.map { t -> [String: Any] in
            ["tid": Int(t.tid), "name": t.name, "state": t.state, "roles": t.roles.names, "frames": t.frames.map { "0x" + String($0, radix: 16) }]
        }
        let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .prettyPrinted])) ?? Data()
        return String(decoding: data, as: UTF8.self)
    }

    static func decode(_ data: Data) throws -> ProcessSnapshot {
        guard let o = try JSONSerialization.jsonObject(with: data) as? [String: Any] else { throw StagingError.corrupt("not an object") }
        func hex(_ v: Any?) -> [UInt64] { (v as? [String] ?? []).compactMap { UInt64($0.dropFirst(2), radix: 16) } }
        let threads = (o["threads"] as? [[String: Any]] ?? []).map { t -> ThreadSnapshot in
            var roles: ThreadRoles = []
            for (role, name) in ThreadRoles.names where (t["roles"] as? [String] ?? []).contains(name) { roles.insert(role) }
            return ThreadSnapshot(tid: Int32(t["tid"] as? Int ?? 0), name: t["name"] as? String ?? "", state: t["state"] as? String ?? "?",
                                  roles: roles, status: .captured, frames: hex(t["frames"]))
        }
        var reason = CaptureReason.dumpRequested
        if let h = o["hang"] as? [String: Any] {
            reason = .hang(HangInfo(target: h["target"] as? String ?? "?", thresholdSeconds: h["thresholdSeconds"] as? Double ?? 0,
                                    durationSeconds: h["durationSeconds"] as? Double ?? 0, recovered: h["recovered"] as? Bool ?? false,
                                    startTime: h["startTime"] as? Double ?? 0))
        }
        return ProcessSnapshot(reason: reason, timestamp: o["timestamp"] as? Double ?? 0,
                               process: ProcessIdentity(pid: Int32(o["pid"] as? Int ?? 0), name: "", executable: "", arguments: [],
                                                        bundleID: o["bundleID"] as? String ?? ""),
                               threads: threads, modules: [], annotations: o["annotations"] as? [String: String] ?? [:])
    }
}
