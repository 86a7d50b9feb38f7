// A server that links only HangMonitor gets a watchdog without the pipeline's heavy parts:
// checked on a real HangMonitor-only program (hangwatch-fixture-monitor-only), statically
// (ldd, symbols) and at run time after a hang was staged and stored (/proc/PID/maps, so a
// dlopen counts too).
import Foundation
import HangwatchTestSupport
import Testing

@Suite(.ownThread) struct MonitorOnlyLinkageTests {
    /// Libraries that belong to processing, remote capture and upload, never to the watchdog.
    /// (libunwind's remote library, libunwind-x86_64.so.8, is the quiet capture's copy
    /// unwinder: the watchdog loads it, RTLD_LOCAL, beside libunwind.so.8. libunwind-ptrace,
    /// which reads another process, it never loads.)
    static let forbidden = ["libdw", "libelf", "libz.so", "libcurl", "libFoundationNetworking",
                            "libunwind-ptrace", "libssl", "libgssapi"]

    static func offenders(_ paths: [String]) -> [String] {
        paths.filter { path in forbidden.contains { path.split(separator: "/").last?.hasPrefix($0) == true } }
    }

    @Test func aHangMonitorOnlyProgramLinksNoProcessingUploadOrPtraceCode() throws {
        let program = try productPath("hangwatch-fixture-monitor-only")
        let linked = try runTool("/usr/bin/ldd", [program]).split(separator: "\n").map { String($0) }
        #expect(Self.offenders(linked).isEmpty, "\(linked)")
        // No remote-capture (hwp_) or symbolication (hws_) C code was linked in; the quiet
        // capture's helper is the capture shim's own (hwc_capture_quiet).
        let symbols = try runTool("/usr/bin/nm", [program])
        #expect(!symbols.contains(" hwp_") && !symbols.contains(" hws_"))
        // Nor SwiftNIO, which only HangMonitorNIO brings.
        #expect(!symbols.contains("NIOCore"), "a HangMonitor-only program links no SwiftNIO")
        #expect(symbols.contains(" hwc_capture"), "the in-process capture it needs is there")
    }

    @Test func afterAHangWasStagedAndStoredNothingHeavyIsMapped() throws {
        let db = try makeTemporaryDirectory()
        defer { removeTemporaryDirectory(db) }
        let child = try ChildProcess(product: "hangwatch-fixture-monitor-only", ["on", db])
        #expect(try child.waitForExit(timeout: 30) == 0, "\(child.stderr)")
        let line = try #require(child.stdout.split(separator: "\n").last)
        let result = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        // The hang really went through capture, staging and the database.
        #expect(result["events"] as? [String] == ["detected", "stored"], "\(child.stdout) \(child.stderr)")
        let mapped = try #require(result["mapped"] as? [String])
        #expect(Self.offenders(mapped).isEmpty, "\(mapped)")
        #expect(mapped.contains { $0.contains("libunwind.so.8") }, "capture dlopen'ed its unwinder: \(mapped)")
        #expect(mapped.contains { $0.contains("libunwind-x86_64.so.8") || $0.contains("libunwind-aarch64.so.8") },
                "and the quiet capture's copy unwinder: \(mapped)")
        let pending = try FileManager.default.contentsOfDirectory(atPath: db + "/intermediate")
        #expect(pending.count == 1 && pending[0].hasSuffix(".hwdump"), "the hang waits as a dump for processing: \(pending)")
    }
}
