import HangwatchMinidump
import HangwatchReport
import HangwatchDatabase
import CHangwatchZlib
import Foundation

enum Gzip {
    /// One gzip member holding `data`; nil if zlib failed.
    static func compress(_ data: Data) -> Data? {
        var output = [UInt8](repeating: 0, count: hwz_gzip_bound(data.count))
        let written = data.withUnsafeBytes { input in
            output.withUnsafeMutableBufferPointer { out in
                hwz_gzip(input.bindMemory(to: UInt8.self).baseAddress, data.count, out.baseAddress, out.count)
            }
        }
        return written == 0 ? nil : Data(output[0..<written])
    }
}
