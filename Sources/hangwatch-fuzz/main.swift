// hangwatch-fuzz: coverage-guided fuzzing of the pipeline's readers, built from the package's
// own targets. scripts/fuzz builds it with AddressSanitizer and coverage and links libFuzzer
// (HANGWATCH_FUZZING); a normal build replays inputs, e.g. a crash libFuzzer saved:
//
//   hangwatch-fuzz TARGET [libFuzzer options] [CORPUS…]     (scripts/fuzz TARGET SECONDS)
//   hangwatch-fuzz TARGET FILE…                              (a normal build: replay)
//
// TARGET: intermediate-dump, report-json, minidump, symbol-index, procfs, run-record, staging,
// unit-ranges or unit-reader (Harnesses.swift).
import FoundationEssentials
import Glibc
#if HANGWATCH_FUZZING
import CHangwatchFuzz
#endif

func complain(_ text: String) {
    let bytes = Array((text + "\n").utf8)
    _ = bytes.withUnsafeBytes { write(STDERR_FILENO, $0.baseAddress, $0.count) }
}

let arguments = Array(CommandLine.arguments.dropFirst())
guard let name = arguments.first, let harness = Harness(rawValue: name) else {
    let names = Harness.allCases.map(\.rawValue).joined(separator: ", ")
    complain("usage: hangwatch-fuzz TARGET [options or files]  (TARGET: \(names))")
    exit(64)
}
nonisolated(unsafe) var selected = harness

#if HANGWATCH_FUZZING
// libFuzzer parses the rest of the command line as its own (TARGET is taken out of it).
var fuzzArguments = [CommandLine.arguments[0]] + arguments.dropFirst()
var argc = Int32(fuzzArguments.count)
var cStrings: [UnsafeMutablePointer<CChar>?] = fuzzArguments.map { strdup($0) } + [nil]
let status = cStrings.withUnsafeMutableBufferPointer { buffer -> Int32 in
    var argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = buffer.baseAddress
    return LLVMFuzzerRunDriver(&argc, &argv) { data, size in
        selected.run(data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? [])
        return 0
    }
}
exit(status)
#else
var replayed = 0
for path in arguments.dropFirst() {
    guard let data = FileManager.default.contents(atPath: path) else {
        complain("hangwatch-fuzz: cannot read \(path)")
        exit(66)
    }
    selected.run([UInt8](data))
    replayed += 1
}
print("replayed \(replayed) input(s) through \(name) without a crash")
#endif
