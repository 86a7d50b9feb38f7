// A regular file open for reading, read in whole ranges that must lie inside it: the one bounded
// pread loop of the ELF readers (ELFBuildID.swift, Sources/HangwatchRemoteCapture/
// RemoteModules.swift, Sources/HangwatchSymbolication/ELFSymbolTable.swift), whose files can be
// hostile or truncated: a range past the end is nil, never a short read taken for a whole one.
#if canImport(Glibc)
import Glibc
#endif

package struct RegularFile {
    /// The descriptor; the caller opened it and closes it.
    package let fd: Int32
    /// Its size when it was looked at.
    package let size: UInt64
    /// Its inode.
    package let inode: UInt64

    /// `fd` when it is a regular file (not a FIFO, device or directory), else nil.
    package init?(fd: Int32) {
        var info = stat()
        guard fstat(fd, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else { return nil }
        self.fd = fd
        size = UInt64(info.st_size)
        inode = UInt64(info.st_ino)
    }

    /// `count` bytes at `offset`, or nil when they are not all in the file (or not all read).
    package func bytes(at offset: UInt64, count: UInt64) -> [UInt8]? {
        guard offset <= size, count <= size - offset else { return nil }
        var buffer = [UInt8](repeating: 0, count: Int(count))
        let complete = buffer.withUnsafeMutableBytes { out -> Bool in
            var filled = 0
            while filled < out.count {
                let got = pread(fd, out.baseAddress! + filled, out.count - filled, off_t(offset) + off_t(filled))
                if got < 0, errno == EINTR { continue }
                guard got > 0 else { return false }
                filled += got
            }
            return true
        }
        return complete ? buffer : nil
    }
}
