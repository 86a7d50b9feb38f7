// The quiet capture's CFI stepper (Sources/CHangwatchCFI/hw_cfi.c) against libunwind on
// the same threads: threads of this process parked at different depths in Swift recursion,
// blocked in a semaphore (futex), a pipe read, a poll and a nanosleep (ParkedThreads.swift),
// captured with the stepper, then
// with libunwind alone, then with the stepper again. Their frames must be the same, and the
// stepper must have unwound them (not handed them all to libunwind).
import CHangwatchCapture
import Foundation
import HangwatchTestSupport
import HangwatchStageTestSupport
import Testing
@testable import HangwatchCapture
#if canImport(Glibc)
import Glibc
#endif

// Alone: the stepper switch and the count of stepped threads are the process's, which another
// test's capture would change between a capture and its check.
@Suite(.serialized, .ownThreadAlone) struct CFIStepperTests {
    @Test func theStepperGivesLibunwindsFramesForParkedThreads() throws {
        try LiveCapture.prepare()
        if let why = LiveCapture.quietCaptureUnavailable {
            print("skipped: quiet capture unavailable here (\(why))")
            return
        }
        let parked = try ParkedThreads(count: 9)
        defer { parked.release() }
        let tids = Set(parked.lock.withLock { parked.tids })
        func frames() throws -> (frames: [Int32: [UInt64]], stepped: UInt32) {
            let snapshot = try LiveCapture.captureProcess(reason: .dumpRequested, bundleID: "tests", options: CaptureOptions(method: .quiet))
            #expect(snapshot.annotations[LiveCapture.methodAnnotation] == "ptrace")
            var found: [Int32: [UInt64]] = [:]
            for thread in snapshot.threads where tids.contains(thread.tid) {
                #expect(thread.status == .captured)
                found[thread.tid] = thread.frames
            }
            return (found, hwc_quiet_stepped_threads())
        }
        let stepped = try frames()
        hwc_quiet_set_cfi_stepper(0)
        defer { hwc_quiet_set_cfi_stepper(1) }
        let unwound = try frames()
        hwc_quiet_set_cfi_stepper(1)
        let again = try frames()
        #expect(stepped.frames.count == tids.count)
        #expect(unwound.stepped == 0, "off: libunwind for every thread")
        #expect(stepped.stepped >= UInt32(tids.count), "the stepper unwound the parked threads: \(stepped.stepped)")
        // A library loaded since (built here, so never loaded before) changes glibc's load count:
        // the next capture reads the loaded objects again and drops the rules; its frames are
        // still libunwind's.
        let directory = try makeTestDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try "int hw_cfi_probe(int x) { return x + 1; }\n".write(toFile: directory + "/probe.c", atomically: false, encoding: .utf8)
        try runTool("/usr/bin/gcc", ["-O2", "-shared", "-fPIC", directory + "/probe.c", "-o", directory + "/libprobe.so"])
        let library = try #require(dlopen(directory + "/libprobe.so", RTLD_NOW | RTLD_LOCAL), "\(dlerror().map { String(cString: $0) } ?? "?")")
        defer { dlclose(library) }
        let afterLoad = try frames()
        #expect(afterLoad.stepped >= UInt32(tids.count))
        for tid in tids {
            let expected = try #require(unwound.frames[tid])
            #expect(expected.count >= 8, "libunwind went through the recursion: \(expected.count) frames")
            #expect(stepped.frames[tid] == expected, "thread \(tid)")
            #expect(again.frames[tid] == expected, "thread \(tid), rules from the cache")
            #expect(afterLoad.frames[tid] == expected, "thread \(tid), after a library was loaded")
        }
    }
}
