// A process's threads, listed while others start and end without pause
// (hw_proc_list_threads, Sources/CHangwatchProcFS/include/hw_process.h): a real
// hangwatch-fixture-capture child whose two threads start threads living 1 to 3 ms each.
import CHangwatchProcFS
import Foundation
import HangwatchPlatform
import HangwatchTestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

@Suite(.ownThread) struct ThreadListingTests {
    /// Every listing (TaskReader.threadIDs: every capture's, in-process and from outside) has
    /// every thread that lived from before it began until after it ended. readdir's listing of
    /// /proc/PID/task missed one in every 100 to 200 listings of this child (10 to 25 a second):
    /// the kernel's walk ends at a thread that exits under it and the next getdents call counts
    /// its way back past a live one.
    @Test func aListingMissesNoThreadWhileOthersComeAndGo() async throws {
        let child = try ChildProcess(product: "hangwatch-fixture-capture", ["churn-listings", "2"])
        let status = try await offPool { try child.waitForExit(timeout: 120) }
        let out = child.stdout
        #expect(status == 0, "\(out) \(child.stderr)")
        let line = try #require(out.split(separator: "\n").first { $0.hasPrefix("LISTINGS ") }, "\(out)")
        let words = line.split(separator: " ")
        let listings = try #require(Int(words[1])), missed = try #require(Int(words[3])), threads = try #require(Int(words[5]))
        #expect(missed == 0, "\(line)")
        // The run did what it is for: many listings, of a process with threads coming and going.
        #expect(listings >= 200 && threads >= 10, "\(line)")
    }

    /// More threads than the array holds: as many as fit, and `truncated` says so (TaskReader
    /// then lists into a larger one); the thread to skip is left out; the ids ascend.
    @Test func aListingThatDoesNotFitSaysSoAndSkipsWhatItIsTold() throws {
        let directory = open("/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        try #require(directory >= 0)
        defer { close(directory) }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 4096, alignment: 8)
        defer { buffer.deallocate() }
        let main = getpid()  // the main thread's id
        func list(capacity: Int, skip: Int32) -> (tids: [Int32], truncated: Int32) {
            var tids = [Int32](repeating: 0, count: capacity)
            var truncated: Int32 = 0
            let count = tids.withUnsafeMutableBufferPointer {
                hw_proc_list_threads(directory, getpid(), skip, $0.baseAddress, UInt32(capacity), &truncated, buffer.baseAddress, buffer.count)
            }
            return (Array(tids.prefix(Int(max(count, 0)))), truncated)
        }
        let whole = list(capacity: 4096, skip: 0)
        #expect(whole.truncated == 0)
        #expect(whole.tids.contains(main) && whole.tids.count >= 2, "\(whole.tids)")  // Swift Testing runs this off the main thread
        #expect(whole.tids == whole.tids.sorted() && Set(whole.tids).count == whole.tids.count)
        #expect(TaskReader()?.threadIDs()?.contains(main) == true)
        let two = list(capacity: 2, skip: 0)
        #expect(two.truncated == 1 && two.tids.count == 2, "\(two)")
        let skipped = list(capacity: 4096, skip: main).tids
        #expect(!skipped.contains(main) && !skipped.isEmpty)
    }
}
