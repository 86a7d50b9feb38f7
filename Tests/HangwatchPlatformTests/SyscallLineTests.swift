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

    @Test func linesWrittenFromRegistersReadAsTheKernelsDo() {
        let line = Syscalls.line(number: 202, arguments: [0x7f3a_5c00_09b0, 0x80, 0x2, 0, 0, UInt64.max],
                                 sp: 0x7ffd_2b9c_1e08, pc: 0x7f3a_5e8a_3d47)
        #expect(line == "202 0x7f3a5c0009b0 0x80 0x2 0x0 0x0 0xffffffffffffffff 0x7ffd2b9c1e08 0x7f3a5e8a3d47")
        #expect(Syscalls.line(number: 0, arguments: [10, 9, 16, 15, 255, 256], sp: 1, pc: 0) == "0 0xa 0x9 0x10 0xf 0xff 0x100 0x1 0x0")
        #expect(Syscalls.line(number: 1234, arguments: [1, 2, 3, 4, 5, 6], sp: 7, pc: 8).hasPrefix("1234 0x1 "))
        #expect(Syscalls.line(number: -1, arguments: [1, 2, 3, 4, 5, 6], sp: 7, pc: 8) == "running")
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
