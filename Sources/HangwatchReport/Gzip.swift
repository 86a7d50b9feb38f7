// gzip, for what leaves hangwatch compressed: upload bodies (HangwatchUpload/HTTPPost.swift) and
// pprof profiles (Pprof.swift). The one owner of the CHangwatchZlib shim; HangMonitor does not
// link this stage, so a watchdog's library set stays without zlib (MonitorOnlyLinkageTests).
import CHangwatchZlib
import FoundationEssentials

package enum Gzip {
    /// One gzip member holding `data`; nil if zlib failed.
    package static func compress(_ data: Data) -> Data? {
        var output = [UInt8](repeating: 0, count: hwz_gzip_bound(data.count))
        let written = data.withUnsafeBytes { input in
            output.withUnsafeMutableBufferPointer { out in
                hwz_gzip(input.bindMemory(to: UInt8.self).baseAddress, data.count, out.baseAddress, out.count)
            }
        }
        return written == 0 ? nil : Data(output[0..<written])
    }
}
