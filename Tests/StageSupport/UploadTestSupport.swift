// A real Crashpad-protocol collector for the upload tests: scripts/upload-test-server
// (Python standard library) started on loopback, parsing multipart bodies independently.
import Foundation
#if canImport(Glibc)
import Glibc
#endif
import HangwatchDatabase
import HangwatchReport
import HangwatchSnapshot
import HangwatchSymbolication
import HangwatchUpload
import HangwatchTestSupport

/// A temporary directory holding a database (`<dir>/db`) and a running `UploadTestServer`
/// (`<dir>/server`); the caller removes the directory.
package func makeUploadSandbox() throws -> (directory: String, database: CrashReportDatabase, server: UploadTestServer) {
    let directory = try makeTemporaryDirectory("hangwatch-upload")
    try FileManager.default.createDirectory(atPath: directory + "/server", withIntermediateDirectories: true)
    let database = try CrashReportDatabase(path: directory + "/db")
    let server = try UploadTestServer(directory: directory + "/server")
    return (directory, database, server)
}

package final class UploadTestServer {
    package static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("scripts/upload-test-server").path

    package let directory: String
    package private(set) var port: Int = 0
    private var child: ChildProcess?

    /// Starts the server; `port` 0 picks a free one, a given port restarts on it.
    package init(directory: String, port: Int = 0) throws {
        self.directory = directory
        try start(port: port)
    }

    package func start(port: Int = 0) throws {
        let child = try ChildProcess("/usr/bin/python3", [Self.script, "--dir", directory, "--port", String(port)])
        let out = try child.waitForOutput("PORT ", timeout: 30)
        guard let line = out.split(separator: "\n").first(where: { $0.hasPrefix("PORT ") }), let number = Int(line.dropFirst(5)) else {
            throw TestSupportError.timedOut("server port: \(out)")
        }
        self.port = number
        self.child = child
    }

    package func stop() {
        guard let child else { return }
        child.signal(SIGKILL)
        _ = try? child.waitForExit(timeout: 10)
        self.child = nil
    }

    deinit { stop() }

    package var url: URL { URL(string: "http://127.0.0.1:\(port)/submit")! }

    package func setMode(_ mode: String) throws {
        let control = URL(string: "http://127.0.0.1:\(port)/control?mode=\(mode)")!
        let body = "mode \(mode)"
        let result = HTTPPost.send(Data(), contentType: "text/plain", to: control, timeout: 10)
        guard case .success(let answer) = result, String(decoding: answer.body, as: UTF8.self) == body else {
            throw TestSupportError.timedOut("setting server mode \(mode): \(result)")
        }
    }

    /// Uploads the server accepted, in order: (record JSON, raw parts by field name).
    package func received() throws -> [(record: [String: Any], parts: [String: Data])] {
        let names = try FileManager.default.contentsOfDirectory(atPath: directory)
            .filter { $0.hasSuffix(".json") && !$0.hasPrefix(".") }.sorted()
        return try names.map { name in
            let data = try Data(contentsOf: URL(fileURLWithPath: directory + "/" + name))
            let record = try JSONSerialization.jsonObject(with: data) as? [String: Any] ?? [:]
            let number = name.dropLast(5)
            var parts: [String: Data] = [:]
            for file in (record["files"] as? [String: Any] ?? [:]).keys {
                parts[file] = try Data(contentsOf: URL(fileURLWithPath: "\(directory)/\(number).\(file)"))
            }
            return (record, parts)
        }
    }
}

/// A port nothing listens on (bound, then closed).
package func unusedLoopbackPort() throws -> Int {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = 0
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
    }
    guard bound else { throw POSIXError(.EADDRINUSE) }
    return Int(UInt16(bigEndian: address.sin_port))
}

/// A small but real report: two threads with registers and stack bytes, stored with its dump.
@discardableResult
package func storeSyntheticReport(in database: CrashReportDatabase, annotations: [String: String] = ["ver": "2.5", "channel": "beta"],
                          stackBytes: Int = 256, arguments: [String] = ["app"]) throws -> String {
    let registers = Registers(values: (0..<18).map { UInt64($0) * 8 + 0x7fff_0000_0000 })
    let threads = [Int32(100), 101].map { tid in
        ThreadSnapshot(tid: tid, name: "t\(tid)", state: "S", roles: tid == 100 ? [.mainThread, .requester] : [],
                       status: .captured, registers: registers, frames: [registers.pc],
                       stackMemory: (0..<stackBytes).map { UInt8(truncatingIfNeeded: $0 &* Int(tid)) })
    }
    let snapshot = ProcessSnapshot(reason: .dumpRequested, timestamp: Date().timeIntervalSince1970,
                                   process: ProcessIdentity(pid: 100, name: "app", executable: "/usr/bin/app", arguments: arguments,
                                                            bundleID: "com.example.app"),
                                   threads: threads, modules: [], annotations: annotations)
    let id = UUID().uuidString.lowercased()
    let report = ReportBuilder.makeReport(from: snapshot, id: id, kind: .dump, symbolicator: Symbolicator())
    try database.writeReport(id: id, json: ReportRenderer.json(report), text: nil, dump: Data(IntermediateDumpWriter.encode(snapshot)))
    return id
}
