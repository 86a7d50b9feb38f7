// readdir's records are as long as their names, not sizeof(dirent): a name read from a record
// that ends against an unmapped page must not touch that page (ProcFS.swift, directoryEntryName).
import HangwatchPlatform
import Testing
#if canImport(Glibc)
import Glibc
#endif

@Suite struct DirectoryEntryTests {
    /// A record of the name "28377", the last thing before a page nobody may read: its name
    /// comes back whole (copying `d_name` whole, as the code before did, faulted here).
    @Test func aRecordAgainstAnUnmappedPageIsReadUpToItsName() throws {
        let page = Int(sysconf(Int32(_SC_PAGESIZE)))
        let mapping = try #require(mmap(nil, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0))
        try #require(mapping != MAP_FAILED)
        defer { munmap(mapping, 2 * page) }
        #expect(mprotect(mapping + page, page, PROT_NONE) == 0)
        let nameOffset = MemoryLayout<dirent>.offset(of: \dirent.d_name)!
        let name = Array("28377".utf8) + [0]
        // d_reclen rounds the record up to 8 bytes; it ends at the protected page.
        let length = (nameOffset + name.count + 7) & ~7
        let record = mapping + page - length
        memset(record, 0, length)
        record.storeBytes(of: UInt16(length), toByteOffset: MemoryLayout<dirent>.offset(of: \dirent.d_reclen)!, as: UInt16.self)
        name.withUnsafeBytes { (record + nameOffset).copyMemory(from: $0.baseAddress!, byteCount: name.count) }
        #expect(directoryEntryName(record.assumingMemoryBound(to: dirent.self)) == "28377")
    }

    /// The names of a real directory, as the file system has them.
    @Test func aDirectorysNamesAreItsFiles() throws {
        let directory = try #require(opendir("/proc/self/fd"))
        defer { closedir(directory) }
        var names: [String] = []
        while let entry = readdir(directory) { names.append(directoryEntryName(entry)) }
        #expect(names.contains(".") && names.contains("..") && names.contains("0"), "\(names)")
    }
}
