// The crash handler copies the Swift runtime's fatal error message with hwc_copy_string
// (Sources/CHangwatchCapture/hw_crash.c): a page at a time, so that a bad pointer cannot fault
// in the handler. A message that crosses a page boundary is copied whole (it was cut at the
// boundary: "…Fatal error: crash-fixtur" in a CrashTests run, where the runtime's heap put it),
// and one that runs into an unmapped page stops there.
import CHangwatchCapture
import Testing
#if canImport(Glibc)
import Glibc
#endif

@Suite struct CrashMessageCopyTests {
    /// Two pages, the second unmapped when `secondMapped` is false; `text` written to end
    /// `tail` bytes into the second page, NUL-terminated (or without its NUL, up to the end of
    /// the first page).
    private func copy(_ text: String, crossing tail: Int, secondMapped: Bool, capacity: Int = 1024) throws -> String {
        let page = Int(sysconf(Int32(_SC_PAGESIZE)))
        let base = try #require(mmap(nil, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0))
        #expect(base != MAP_FAILED)
        defer { munmap(base, 2 * page) }
        let bytes = Array(text.utf8) + (secondMapped ? [0] : [])
        let start = base.advanced(by: page + (secondMapped ? tail : 0) - bytes.count)
        bytes.withUnsafeBytes { start.copyMemory(from: $0.baseAddress!, byteCount: bytes.count) }
        if !secondMapped { munmap(base.advanced(by: page), page) }
        var out = [CChar](repeating: 1, count: capacity)
        let length = hwc_copy_string(start.assumingMemoryBound(to: CChar.self), &out, capacity)
        #expect(out[length] == 0)
        return String(decoding: out.prefix(length).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    @Test func aMessageAcrossAPageBoundaryIsCopiedWhole() throws {
        let message = "hangwatch_fixture_crash/main.swift:22: Fatal error: crash-fixture fatal: mode fatal\n"
        for tail in [1, 2, 20, message.utf8.count] {
            #expect(try copy(message, crossing: tail, secondMapped: true) == message, "\(tail) bytes in the second page")
        }
    }

    @Test func aMessageRunningIntoAnUnmappedPageStopsThereWithoutFaulting() throws {
        // No NUL before the page ends: what is readable is copied, nothing faults.
        let message = String(repeating: "x", count: 100)
        let copied = try copy(message, crossing: 0, secondMapped: false)
        #expect(copied == message)
        #expect(hwc_copy_string(UnsafePointer(bitPattern: 8), nil, 0) == 0)
        var out = [CChar](repeating: 1, count: 16)
        #expect(hwc_copy_string(UnsafePointer(bitPattern: 8), &out, 16) == 0 && out[0] == 0)
    }

    @Test func aLongMessageIsCutAtTheBuffer() throws {
        let message = String(repeating: "y", count: 300)
        #expect(try copy(message, crossing: 150, secondMapped: true, capacity: 64) == String(repeating: "y", count: 63))
    }
}
