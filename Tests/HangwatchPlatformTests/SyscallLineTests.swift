// The /proc syscall line parser (Syscalls.swift) read as bytes: what the kernel prints, and
// what it never does (signs, empty fields, junk) is refused as the Substring parser refused it.
import HangwatchPlatform
import Testing

@Suite struct SyscallLineTests {
    @Test func kernelLinesGiveNumberAndArguments() {
        let line = "202 0x7f3a5c0009b0 0x80 0x2 0x0 0x0 0xffffffffffffffff 0x7ffd2b9c1e08 0x7f3a5e8a3d47"
        #expect(Syscalls.number(ofLine: line) == 202)
        #expect(Syscalls.arguments(ofLine: line) == [0x7f3a_5c00_09b0, 0x80, 0x2, 0, 0, UInt64.max])
        #expect(Syscalls.number(ofLine: "0 0x3 0x1 0x2 0x3 0x4 0x5 0x6 0x7") == 0)
        #expect(Syscalls.arguments(ofLine: "219 0xA 0xb 0xC 0xd 0xE 0xf") == [10, 11, 12, 13, 14, 15], "no sp and pc: still six arguments")
        #expect(Syscalls.arguments(ofLine: "202  0x1 0x2 0x3 0x4 0x5 0x6 0x7 0x8") == [1, 2, 3, 4, 5, 6], "runs of spaces are one")
    }

    @Test func whatIsNotACallIsNil() {
        for line in ["running", "-1 0x7ffd2b9c1e08 0x7f3a5e8a3d47", "", " 202 0x1", "+5 0x1 0x2 0x3 0x4 0x5 0x6", "1234567890 0x1",
                     "2a 0x1 0x2 0x3 0x4 0x5 0x6"] {
            #expect(Syscalls.number(ofLine: line) == nil, "\(line)")
            #expect(Syscalls.arguments(ofLine: line) == nil, "\(line)")
        }
        #expect(Syscalls.number(ofLine: nil) == nil)
        for line in ["202 0x1 0x2 0x3 0x4 0x5", "202 0x1 0x2 0x3 0x4 0x5 0x", "202 0x1 0x2 0x3 0x4 0x5 6", "202 0x1 0x2 0x3 0x4 0x5 0xg",
                     "202 0x1 0x2 0x3 0x4 0x5 0x10000000000000000", "202 0x1 0x2 0x3 0x4 0x5 1x6"] {
            #expect(Syscalls.number(ofLine: line) == 202)
            #expect(Syscalls.arguments(ofLine: line) == nil, "\(line)")
        }
    }
}
