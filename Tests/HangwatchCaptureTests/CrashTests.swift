// The crash matrix: each case is a real child process (hangwatch-fixture-crash MODE) that installs the
// crash handlers and crashes; the test then processes the database like the next start would.
import HangwatchDatabase
import HangwatchProcessing
import HangwatchReport
import HangwatchSnapshot
import HangwatchRemoteCapture
import HangwatchSymbolication
import Foundation
import HangwatchTestSupport
import Testing
#if canImport(Glibc)
import Glibc
import HangwatchStageTestSupport
#endif

struct CrashCase: Sendable, CustomStringConvertible {
    var mode: String
    var signal: Int32
    /// Substring of the function that must appear, with file:line, among the crashed thread's top frames.
    var function: String
    var file: String
    var description: String { mode }
}

private let swiftFile = "hangwatch-fixture-crash/main.swift"
private let cFile = "crash_fixture_support.c"

let crashMatrix: [CrashCase] = [
    CrashCase(mode: "null", signal: SIGSEGV, function: "crashByNullDereference", file: swiftFile),
    CrashCase(mode: "fatal", signal: SIGILL, function: "crashByFatalError", file: swiftFile),
    CrashCase(mode: "index", signal: SIGILL, function: "crashByIndexOutOfRange", file: swiftFile),
    CrashCase(mode: "unwrap", signal: SIGILL, function: "crashByForceUnwrap", file: swiftFile),
    CrashCase(mode: "abort", signal: SIGABRT, function: "crashByAbort", file: swiftFile),
    CrashCase(mode: "fpe", signal: SIGFPE, function: "hwf_divide", file: cFile),
    CrashCase(mode: "trap", signal: SIGILL, function: "hwf_trap", file: cFile),
    CrashCase(mode: "int3", signal: SIGTRAP, function: "hwf_breakpoint", file: cFile),
    CrashCase(mode: "bus", signal: SIGBUS, function: "hwf_touch_truncated_mapping", file: cFile),
    CrashCase(mode: "overflow", signal: SIGSEGV, function: "recurseWithoutEnd", file: swiftFile),
    // Threads created after install, given an alternate stack by the periodic sweep.
    CrashCase(mode: "thread-overflow", signal: SIGSEGV, function: "recurseWithoutEnd", file: swiftFile),
    CrashCase(mode: "dispatch-overflow", signal: SIGSEGV, function: "recurseWithoutEnd", file: swiftFile),
    CrashCase(mode: "thread", signal: SIGSEGV, function: "crashOnWorkerThread", file: swiftFile),
    CrashCase(mode: "dispatch", signal: SIGSEGV, function: "crashOnDispatchPool", file: swiftFile),
    CrashCase(mode: "two", signal: SIGSEGV, function: "crashConcurrently", file: swiftFile),
    CrashCase(mode: "staged", signal: SIGSEGV, function: "crashByNullDereference", file: swiftFile),
]

private func stderrSaysNoAlternateStack(_ text: String) -> Bool { text.contains("no alternate stack after") }

/// Runs the fixture to its death and processes what it left, as the next start would.
struct CrashRun {
    var status: Int32
    var stderr: String
    var reports: [Report]
    var reportsOnSecondPass: Int
    var stagingFiles: [String]
    var leftoverIntermediate: [String]

    init(mode: String, extraArguments: [String] = [], environment: [String: String] = [:]) throws {
        let directory = try makeTemporaryDirectory("crash-test")
        defer { removeTemporaryDirectory(directory) }
        let database = directory + "/db"
        (status, stderr) = try Self.runToDeath(try productPath("hangwatch-fixture-crash"), [mode, database] + extraArguments,
                                               environment: environment)
        // Processed as the program's next start would (DumpClient.processIntermediateDumps).
        let processor = DumpProcessor(database: try CrashReportDatabase(path: database))
        reports = try processor.processIntermediateDumps()
        reportsOnSecondPass = try processor.processIntermediateDumps().count
        stagingFiles = try processor.database.stagingArea.fileNames()
        leftoverIntermediate = try FileManager.default.contentsOfDirectory(atPath: database + "/intermediate")
    }
}

extension CrashRun {
    /// Runs the fixture to its death (killed after two minutes). Returns 128+N for death by signal N.
    static func runToDeath(_ executable: String, _ arguments: [String], environment: [String: String]) throws -> (Int32, String) {
        let result = try runProgram(executable, arguments, environment: environment)
        return (result.status, result.stderr)
    }
}

@Suite("Crash handling", .ownThread)
struct CrashTests {
    @Test("each crash makes exactly one crash report naming the crashing function", arguments: crashMatrix)
    func crashMatrixCase(_ crash: CrashCase) throws {
        let run = try CrashRun(mode: crash.mode)
        #expect(run.status == 128 + crash.signal, "exit status must be the original signal's; stderr: \(run.stderr.prefix(2000))")
        // The Swift runtime's backtracer still ran after ours, to the end (on by default here, tty
        // or not): banner, "done", the crashed thread, the crashing function. A banner alone meant
        // it died half-way (it was called with the wrong signal mask).
        let runtime = run.stderr
        #expect(runtime.contains("*** Signal \(crash.signal): Backtracing"), "stderr: \(runtime.prefix(2000))")
        // Two threads crashing at once: the second may enter the runtime's handler itself (ours is
        // restored before chaining), which blocks the runtime's suspend signal; the runtime then
        // says so and gives up on its full backtrace. That is the runtime's behaviour, not ours.
        let runtimeGaveUp = crash.mode == "two" && runtime.contains("failed to suspend thread")
        if !runtimeGaveUp {
            #expect(runtime.contains("... done ***") && runtime.contains("*** Program crashed:"), "stderr: \(runtime.prefix(2000))")
            #expect(runtime.contains(" crashed:"), "stderr: \(runtime.prefix(4000))")
        }
        // For abort() the runtime prints frame 0 (pthread_kill) then "..." even with no handler of
        // ours installed (measured with a bare Swift program): no function name to look for.
        if crash.mode != "abort" && !runtimeGaveUp {
            #expect(runtime.contains(crash.function), "stderr: \(runtime.prefix(4000))")
        }
        try #require(run.reports.count == 1, "reports: \(run.reports.count), left: \(run.leftoverIntermediate)")
        #expect(run.reportsOnSecondPass == 0)
        let report = run.reports[0]
        #expect(report.kind == .crash)
        #expect(report.signal?.number == crash.signal)
        let crashed = report.threads.filter { $0.roles.contains(.crashed) }
        try #require(crashed.count == 1)
        #expect(report.signal?.tid == crashed[0].tid)
        let top = crashed[0].frames.prefix(12)
        // A recursion can overflow in a compiler-generated thunk of the function (no line): the
        // first frame that names it *with* its source file counts.
        let hit = top.first { ($0.function ?? "").contains(crash.function) && $0.file?.hasSuffix(crash.file) == true }
            ?? top.first { ($0.function ?? "").contains(crash.function) }
        #expect(hit != nil, "top frames: \(top.map { $0.function ?? ReportFormatting.address($0.address) })")
        #expect(hit?.file?.hasSuffix(crash.file) == true && (hit?.line ?? 0) > 0, "frame: \(String(describing: hit))")
        #expect(report.annotations["fixture-mode"] == crash.mode)
        #expect(!report.modules.isEmpty)
        if crash.mode == "fatal" {
            #expect(report.signal?.message?.contains("crash-fixture fatal: mode fatal") == true, "\(String(describing: report.signal))")
        }
        if crash.mode == "staged" {
            #expect(run.stagingFiles.isEmpty, "the staged hang is superseded, not left for a fatal-hang report")
            #expect(report.context?.supersededHang?.target == HangTarget.mainQueue)
            #expect((report.context?.supersededHang?.durationSeconds ?? 0) >= 2)
            #expect(report.annotations.keys.allSatisfy { !$0.hasPrefix("hangwatch.superseded-hang") })
        }
        if ["dispatch", "thread", "two", "thread-overflow", "dispatch-overflow"].contains(crash.mode) {
            #expect(!crashed[0].roles.contains(.mainThread))
            #expect(report.threads.count > 1, "the other threads are in the dump too")
            // The main thread may be inside pthread_create (every signal blocked) at the crash: it
            // must still answer, once it unblocks.
            let main = report.threads.first { $0.roles.contains(.mainThread) }
            #expect(main?.status == .captured && (main?.frames.count ?? 0) > 1,
                    "main: \(main.map { "\($0.status) state \($0.state) frames \($0.frames.count)" } ?? "missing")")
        }
        if crash.mode.hasSuffix("-overflow") {
            #expect(!stderrSaysNoAlternateStack(run.stderr), "the sweep never gave the thread an alternate stack")
        }
    }

    @Test("with crash handlers installed and a capture done, _Unwind_RaiseException still binds to libgcc_s")
    func unwindStaysWithLibgcc() throws {
        let run = try CrashRun(mode: "unwind-binding")
        #expect(run.status == 0, "stderr: \(run.stderr)")
        #expect(run.stderr.contains("libunwind loaded: yes"), "the check means nothing unless libunwind is in the process: \(run.stderr)")
        #expect(run.stderr.contains("_Unwind_RaiseException in libgcc_s.so"), "\(run.stderr)")
        #expect(run.stderr.contains("_Unwind_Backtrace in libgcc_s.so"), "\(run.stderr)")
    }

    @Test("a crash while a live capture holds the capture slots still writes the whole dump")
    func crashDuringLiveCapture() throws {
        let run = try CrashRun(mode: "during-capture")
        #expect(run.status == 128 + SIGSEGV)
        // The live capture's own dump, when the machine was slow enough for it to have started
        // writing before the crash, is a second (dump) report: processed at once, its writer dead.
        let crashes = run.reports.filter { $0.kind == .crash }
        #expect(run.reports.allSatisfy { $0.kind == .crash || $0.kind == .dump }, "\(run.reports.map(\.kind))")
        try #require(crashes.count == 1, "left: \(run.leftoverIntermediate)")
        let report = crashes[0]
        let crashed = report.threads.filter { $0.roles.contains(.crashed) }
        try #require(crashed.count == 1)
        #expect(crashed[0].frames.prefix(12).contains { ($0.function ?? "").contains("crashByNullDereference") })
        // Not cut short: the other threads (listed, without stacks: the slots are taken), then
        // the modules and annotations written after them.
        let names = Set(report.threads.map(\.name))
        #expect(names.contains("live-capture") && names.contains("vfork-stalled"), "threads: \(names)")
        #expect(report.threads.count >= 3)
        #expect(!report.modules.isEmpty)
        #expect(report.annotations["fixture-mode"] == "during-capture")
    }

    @Test("the save-critical-data callback runs before the dump")
    func callbackRuns() throws {
        let directory = try makeTemporaryDirectory("crash-callback")
        defer { removeTemporaryDirectory(directory) }
        let run = try CrashRun(mode: "null", extraArguments: [directory + "/critical"])
        #expect(run.status == 128 + SIGSEGV)
        #expect(run.reports.count == 1)
        let saved = try String(contentsOfFile: directory + "/critical", encoding: .utf8)
        #expect(saved == "critical data saved for signal 11\n")
    }

    /// A malloc interposer (LD_PRELOAD) reports any allocation made by the crash-handling thread
    /// while it runs our part of the handler (other threads keep running and may allocate: the
    /// main thread freeing a Swift closure context was seen here, outside the handler), with the
    /// caller's address for diagnosis.
    static func buildInterposer(in directory: String) throws -> String {
        let source = directory + "/probe.c"
        let library = directory + "/libprobe.so"
        try """
        #define _GNU_SOURCE
        #include <stddef.h>
        #include <stdint.h>
        #include <sys/syscall.h>
        #include <unistd.h>
        int32_t *hwc_crash_probe_slot;  /* the crash handler points this at the handling thread's tid (0: idle) */
        extern void *__libc_malloc(size_t); extern void *__libc_calloc(size_t, size_t);
        extern void *__libc_realloc(void *, size_t); extern void __libc_free(void *);
        extern void *__libc_memalign(size_t, size_t);
        static void hex(uint64_t value) {
            char text[18] = " 0x";
            for (int i = 0; i < 15; i++) text[3 + i] = "0123456789abcdef"[(value >> (56 - 4 * i)) & 15];
            (void)!write(2, text, 18);
        }
        __attribute__((noinline)) static void check(const char *what, size_t length, void *caller) {
            int32_t *flag = hwc_crash_probe_slot;
            int32_t handling = flag ? __atomic_load_n(flag, __ATOMIC_ACQUIRE) : 0;
            if (handling != 0 && handling == (int32_t)syscall(SYS_gettid)) {
                (void)!write(2, "ALLOCATION-IN-CRASH-HANDLER: ", 29); (void)!write(2, what, length);
                hex((uint64_t)(uintptr_t)caller); (void)!write(2, "\\n", 1);
            }
        }
        #define CALLER __builtin_return_address(0)
        void *malloc(size_t n) { check("malloc", 6, CALLER); return __libc_malloc(n); }
        void *calloc(size_t a, size_t b) { check("calloc", 6, CALLER); return __libc_calloc(a, b); }
        void *realloc(void *p, size_t n) { check("realloc", 7, CALLER); return __libc_realloc(p, n); }
        void free(void *p) { if (p) check("free", 4, CALLER); __libc_free(p); }
        void *memalign(size_t a, size_t n) { check("memalign", 8, CALLER); return __libc_memalign(a, n); }
        void *aligned_alloc(size_t a, size_t n) { check("aligned_alloc", 13, CALLER); return __libc_memalign(a, n); }
        int posix_memalign(void **out, size_t a, size_t n) { check("posix_memalign", 14, CALLER); *out = __libc_memalign(a, n); return *out ? 0 : 12; }
        __attribute__((constructor)) static void loaded(void) { (void)!write(2, "PROBE-LOADED\\n", 13); }
        """.write(toFile: source, atomically: true, encoding: .utf8)
        try runTool("/usr/bin/gcc", ["-shared", "-fPIC", "-O1", "-o", library, source])
        return library
    }

    @Test("the handler does not allocate (and the probe catches a callback that does)")
    func noAllocationInHandler() throws {
        let directory = try makeTemporaryDirectory("crash-malloc")
        defer { removeTemporaryDirectory(directory) }
        let library = try Self.buildInterposer(in: directory)
        // A pool-thread crash (other threads asked, main thread possibly in pthread_create) and a
        // stack overflow (handler on the alternate stack).
        for mode in ["dispatch", "overflow"] {
            let clean = try CrashRun(mode: mode, environment: ["LD_PRELOAD": library])
            #expect(clean.stderr.contains("PROBE-LOADED"))
            #expect(!clean.stderr.contains("ALLOCATION-IN-CRASH-HANDLER"), "\(mode) stderr: \(clean.stderr.prefix(3000))")
            #expect(clean.status == 128 + SIGSEGV)
            #expect(clean.reports.count == 1)
        }
        // Control: the same probe must see a callback that allocates, or the check above proves nothing.
        let dirty = try CrashRun(mode: "callback-malloc", environment: ["LD_PRELOAD": library])
        #expect(dirty.stderr.contains("ALLOCATION-IN-CRASH-HANDLER: malloc"))
        #expect(dirty.status == 128 + SIGSEGV)
    }
}
