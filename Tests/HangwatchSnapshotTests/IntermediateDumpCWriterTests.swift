// The C writer's contract: sticky errors instead of crashes, nesting checked, errno left
// alone, big values through the fd path intact.
import CHangwatchDump
@testable import HangwatchSnapshot
import Foundation
import Testing
import HangwatchStageTestSupport

@Suite struct IntermediateDumpCWriterTests {
    final class Writer {
        let pointer = UnsafeMutablePointer<hwd_writer>.allocate(capacity: 1)
        var memory: UnsafeMutableBufferPointer<UInt8>
        init(capacity: Int = 1 << 16) {
            memory = .allocate(capacity: max(capacity, 1))
            hwd_writer_init_memory(pointer, memory.baseAddress, UInt64(capacity))
        }
        deinit { pointer.deallocate(); memory.deallocate() }
        var error: Int32 { pointer.pointee.error }
        var total: UInt64 { pointer.pointee.bytes_total }
    }

    @Test func nestingMistakesAreStickyErrors() {
        let w = Writer()
        #expect(hwd_begin_document(w.pointer) == 0)
        #expect(hwd_end_map(w.pointer) == HWD_ERROR_BAD_NESTING)
        let total = w.total
        // Sticky: later calls do nothing and report the first failure.
        #expect(hwd_start_map(w.pointer, HWD_KEY_REASON) == HWD_ERROR_BAD_NESTING)
        #expect(hwd_write_u64(w.pointer, HWD_KEY_VERSION, 1) == HWD_ERROR_BAD_NESTING)
        #expect(hwd_end_document(w.pointer) == HWD_ERROR_BAD_NESTING)
        #expect(w.total == total)

        let crossed = Writer()
        hwd_begin_document(crossed.pointer)
        hwd_start_array(crossed.pointer, HWD_KEY_THREADS)
        #expect(hwd_end_map(crossed.pointer) == HWD_ERROR_BAD_NESTING)

        let propertyInArray = Writer()
        hwd_begin_document(propertyInArray.pointer)
        hwd_start_array(propertyInArray.pointer, HWD_KEY_THREADS)
        #expect(hwd_write_u64(propertyInArray.pointer, HWD_KEY_THREAD_TID, 1) == HWD_ERROR_BAD_NESTING)

        let open = Writer()
        hwd_begin_document(open.pointer)
        hwd_start_map(open.pointer, HWD_KEY_REASON)
        #expect(hwd_end_document(open.pointer) == HWD_ERROR_BAD_NESTING)

        let ended = Writer()
        hwd_begin_document(ended.pointer)
        #expect(hwd_end_document(ended.pointer) == 0)
        #expect(hwd_write_u64(ended.pointer, HWD_KEY_CAPTURE_DURATION, 0) == HWD_ERROR_ENDED)

        let twice = Writer()
        hwd_begin_document(twice.pointer)
        #expect(hwd_begin_document(twice.pointer) == HWD_ERROR_BAD_NESTING)
    }

    @Test func limitsAreEnforcedByTheWriterToo() {
        let deep = Writer()
        hwd_begin_document(deep.pointer)
        for _ in 0..<Int(HWD_MAX_DEPTH) { #expect(hwd_start_map(deep.pointer, hwd_key(rawValue: 900)) == 0) }
        #expect(hwd_start_map(deep.pointer, hwd_key(rawValue: 900)) == HWD_ERROR_TOO_DEEP)

        let large = Writer()
        hwd_begin_document(large.pointer)
        var byte: UInt8 = 0
        // The length is checked before the value is touched.
        #expect(hwd_write_property(large.pointer, HWD_KEY_THREAD_STACK_MEMORY, &byte, UInt64(HWD_MAX_PROPERTY_SIZE) + 1) == HWD_ERROR_VALUE_TOO_LARGE)

        let null = Writer()
        hwd_begin_document(null.pointer)
        #expect(hwd_write_property(null.pointer, HWD_KEY_PROCESS_NAME, nil, 4) == HWD_ERROR_INVALID_ARGUMENT)
        let nullEmpty = Writer()
        hwd_begin_document(nullEmpty.pointer)
        #expect(hwd_write_property(nullEmpty.pointer, HWD_KEY_PROCESS_NAME, nil, 0) == 0)
        #expect(hwd_write_string(nullEmpty.pointer, HWD_KEY_PROCESS_NAME, nil) == 0)

        let badKey = Writer()
        hwd_begin_document(badKey.pointer)
        #expect(hwd_start_map(badKey.pointer, hwd_key(rawValue: 70_000)) == HWD_ERROR_INVALID_ARGUMENT)
    }

    @Test func aFullMemorySinkFailsWithoutOverrunning() {
        let bytes = IntermediateDumpWriter.encode(DumpSamples.hang())
        let w = Writer(capacity: bytes.count - 1)
        #expect(IntermediateDumpWriter.emit(DumpSamples.hang(), into: w.pointer) == HWD_ERROR_NO_SPACE)
        let exact = Writer(capacity: bytes.count)
        #expect(IntermediateDumpWriter.emit(DumpSamples.hang(), into: exact.pointer) == 0)
        #expect(Array(exact.memory) == bytes)
    }

    @Test func theHeaderAndVersionPropertyAreLaidOutAsDocumented() {
        let bytes = IntermediateDumpWriter.encode(DumpSamples.empty)
        #expect(Array(bytes[0..<8]) == Array("HWIDUMP".utf8) + [0])
        #expect(Array(bytes[8..<16]) == [1, 0, 0, 0, 0, 0, 0, 0])
        // Property, key 1, length 8, value 3 (the schema version: 2 added the killed reason and
        // tasks, 3 lock waits and a hang's running operations).
        #expect(Array(bytes[16..<31]) == [1, 1, 0, 8, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0])
        #expect(bytes.last == UInt8(HWD_ELEMENT_END_DOCUMENT.rawValue))
    }

    @Test func aFailedWriteLeavesErrnoAsItWas() throws {
        let fd = open("/dev/full", O_WRONLY | O_CLOEXEC)
        try #require(fd >= 0)
        defer { close(fd) }
        let w = UnsafeMutablePointer<hwd_writer>.allocate(capacity: 1)
        defer { w.deallocate() }
        hwd_writer_init(w, fd)
        hwd_begin_document(w)
        errno = EAGAIN
        #expect(hwd_flush(w) == ENOSPC)
        #expect(errno == EAGAIN)
    }

    /// Larger than a pipe's buffer and the writer's: exercises the direct-write path, with a
    /// reader draining the other end as a database would.
    @Test func bigDumpsStreamThroughAPipeIntact() async throws {
        var snapshot = DumpSamples.hang(threadCount: 8, stackBytes: 32 * 1024)
        snapshot.threads[0].frames = (0..<20_000).map { UInt64($0) }
        let expected = IntermediateDumpWriter.encode(snapshot)
        var fds: [Int32] = [0, 0]
        try #require(pipe(&fds) == 0)
        let readEnd = fds[0], writeEnd = fds[1]
        // Tests run in parallel and some spawn children: one could inherit the write end and
        // keep it open, so the reader stops at the expected length instead of waiting for EOF.
        let length = expected.count
        let reader = Task.detached { () -> [UInt8] in
            var received: [UInt8] = []
            var chunk = [UInt8](repeating: 0, count: 4096)
            while received.count < length {
                let count = chunk.withUnsafeMutableBytes { read(readEnd, $0.baseAddress, 4096) }
                if count <= 0 { break }
                received += chunk[0..<count]
            }
            close(readEnd)
            return received
        }
        try IntermediateDumpWriter.write(snapshot, to: writeEnd)
        close(writeEnd)
        let received = await reader.value
        #expect(received == expected)
        #expect(try IntermediateDumpReader.read(bytes: received) == snapshot)
    }

    /// Key numbers are part of the file format: these must never change.
    @Test func keyNumbersAreFrozen() {
        let frozen: [(hwd_key, UInt32)] = [
            (HWD_KEY_ARRAY_ITEM, 0), (HWD_KEY_VERSION, 1),
            (HWD_KEY_REASON, 100), (HWD_KEY_REASON_KIND, 101), (HWD_KEY_REASON_TIMESTAMP, 102),
            (HWD_KEY_HANG_TARGET, 110), (HWD_KEY_HANG_THRESHOLD, 111), (HWD_KEY_HANG_DURATION, 112),
            (HWD_KEY_HANG_RECOVERED, 113), (HWD_KEY_HANG_START_TIME, 114),
            (HWD_KEY_SIGNAL_NUMBER, 120), (HWD_KEY_SIGNAL_CODE, 121), (HWD_KEY_SIGNAL_ADDRESS, 122),
            (HWD_KEY_SIGNAL_TID, 123), (HWD_KEY_SIGNAL_MESSAGE, 124),
            (HWD_KEY_PROCESS, 200), (HWD_KEY_PROCESS_PID, 201), (HWD_KEY_PROCESS_NAME, 202),
            (HWD_KEY_PROCESS_EXECUTABLE, 203), (HWD_KEY_PROCESS_ARGUMENTS, 204),
            (HWD_KEY_PROCESS_ARGUMENT, 205), (HWD_KEY_PROCESS_BUNDLE_ID, 206),
            (HWD_KEY_THREADS, 300), (HWD_KEY_THREAD_TID, 301), (HWD_KEY_THREAD_NAME, 302),
            (HWD_KEY_THREAD_STATE, 303), (HWD_KEY_THREAD_SYSCALL, 304), (HWD_KEY_THREAD_USER_CPU, 305),
            (HWD_KEY_THREAD_SYSTEM_CPU, 306), (HWD_KEY_THREAD_ROLES, 307), (HWD_KEY_THREAD_CAPTURE_STATUS, 308),
            (HWD_KEY_THREAD_REGISTERS, 309), (HWD_KEY_THREAD_FRAMES, 310), (HWD_KEY_THREAD_QUEUE_LABEL, 311),
            (HWD_KEY_THREAD_STACK_MEMORY, 312),
            (HWD_KEY_HANG_SAMPLES, 400), (HWD_KEY_SAMPLE_TID, 401), (HWD_KEY_SAMPLE_COUNT, 402),
            (HWD_KEY_SAMPLE_FRAMES, 403),
            (HWD_KEY_MODULES, 500), (HWD_KEY_MODULE_PATH, 501), (HWD_KEY_MODULE_BASE, 502),
            (HWD_KEY_MODULE_START, 503), (HWD_KEY_MODULE_END, 504), (HWD_KEY_MODULE_BUILD_ID, 505),
            (HWD_KEY_ANNOTATIONS, 600), (HWD_KEY_ANNOTATION_KEY, 601), (HWD_KEY_ANNOTATION_VALUE, 602),
            (HWD_KEY_CAPTURE_DURATION, 700), (HWD_KEY_INCOMPLETE, 701),
            // Schema 2.
            (HWD_KEY_KILL_SIGNAL, 130), (HWD_KEY_KILL_CAUSE, 131),
            (HWD_KEY_TASKS, 900), (HWD_KEY_TASKS_SCANNED_BYTES, 901), (HWD_KEY_TASKS_DURATION, 902),
            (HWD_KEY_TASKS_TRUNCATED, 903), (HWD_KEY_TASKS_ERROR, 904), (HWD_KEY_TASKS_RUNTIME, 905),
            (HWD_KEY_TASKS_LIST, 906), (HWD_KEY_TASKS_UNTOUCHED_BYTES, 907), (HWD_KEY_TASKS_UNREAD_BYTES, 908),
            (HWD_KEY_TASKS_UNREAD, 909), (HWD_KEY_TASK_ADDRESS, 910), (HWD_KEY_TASK_ID, 911), (HWD_KEY_TASK_STATE, 912),
            (HWD_KEY_TASK_THREAD, 913), (HWD_KEY_TASK_PARENT, 914), (HWD_KEY_TASK_FRAMES, 915),
            (HWD_KEY_TASK_CHAIN_CUT, 916), (HWD_KEY_TASK_FLAGS, 917), (HWD_KEY_TASK_NAME, 918),
            (HWD_KEY_TASK_WAIT_KIND, 919), (HWD_KEY_TASK_WAIT_ADDRESS, 920),
            // Schema 3, additive: what a blocked thread waits for, the operations running when a
            // hang was detected.
            (HWD_KEY_THREAD_LOCK_KIND, 313), (HWD_KEY_THREAD_LOCK_ADDRESS, 314), (HWD_KEY_THREAD_LOCK_HOLDER, 315),
            (HWD_KEY_THREAD_LOCK_UNKNOWN, 316), (HWD_KEY_THREAD_LOCK_LABEL, 317),
            (HWD_KEY_HANG_OPERATIONS, 410), (HWD_KEY_OPERATION_NAME, 411), (HWD_KEY_OPERATION_START_TIME, 412),
            (HWD_KEY_OPERATION_LIMIT, 413), (HWD_KEY_OPERATION_TASK, 414), (HWD_KEY_OPERATION_THREAD, 415),
            (HWD_KEY_OPERATION_TRACEPARENT, 416),
        ]
        for (key, number) in frozen { #expect(key.rawValue == number) }
        // Every key the reader interprets is in the frozen list (key 0 is structural only).
        #expect(Set(IntermediateDumpSchema.knownKeys.keys) == Set(frozen.map { UInt16($0.1) }).subtracting([0]))
    }
}
