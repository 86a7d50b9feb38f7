// Code under test: rendering that blocks its caller, the bug the hang limits catch when the
// caller is the main actor or a cooperative-pool thread.
import Dispatch
import Glibc

public struct Thumbnailer: Sendable {
    public init() {}

    /// Blocks the calling thread for `milliseconds`: decoding done synchronously.
    @inline(never) public func renderSynchronously(milliseconds: Int) -> Int {
        let end = DispatchTime.now().uptimeNanoseconds + UInt64(milliseconds) * 1_000_000
        while DispatchTime.now().uptimeNanoseconds < end { usleep(5_000) }
        return milliseconds
    }
}
