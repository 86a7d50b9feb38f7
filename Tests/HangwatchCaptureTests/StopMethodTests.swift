// The `capture.method` annotation's one codec (LiveCapture.StopMethod): every method a capture
// gives reads back as itself, and HangMonitor's "fell back to signals" is read from the type.
import HangwatchCapture
import Testing

@Suite struct StopMethodTests {
    @Test func everyMethodReadsBackFromItsAnnotation() {
        let methods: [LiveCapture.StopMethod] = [
            .ptrace, .signals, .signalsInstead(why: "ptrace refused: Operation not permitted (a tracer is attached)"),
            .signalsInstead(why: "the capture helper was killed by SIGSYS (a seccomp filter)"),
            .ptraceAndSignals(threads: 3, why: "ptrace refused (Yama ptrace_scope 3)"),
            .ptraceAndSignals(threads: 1, why: "why (with parentheses) inside"),
        ]
        for method in methods {
            #expect(LiveCapture.StopMethod(annotation: method.annotation) == method, "\(method.annotation)")
        }
        #expect(LiveCapture.StopMethod.ptrace.annotation == "ptrace")
        #expect(LiveCapture.StopMethod.ptraceAndSignals(threads: 2, why: "x").annotation == "ptrace; signals for 2 thread(s) (x)")
        #expect(methods.map(\.fellBackToSignals) == [false, false, true, true, true, true])
        for unknown in ["", "quiet", "signals (", "ptrace; signals for many thread(s) (x)", "ptrace; signals for 2 threads (x)"] {
            #expect(LiveCapture.StopMethod(annotation: unknown) == nil, "\(unknown)")
        }
    }
}
