// hangwatch-bench: the figures of issue 7, measured in one run on this machine, printed as a
// table (ratios against eu-stack and gdb measured in the same run) and optionally saved as JSON.
//
//   hangwatch-bench [--json FILE] [--only 1,2,3,4,5,6,7,8,9,10]
//   hangwatch-bench --check-programs   (the programs it runs beside itself are in place)
//
// Arguments starting with "_" run one of the bench's child programs (the bench re-executes
// itself, so every child is a real Swift process of the same release build).
import HangwatchCapture
import Foundation
#if canImport(Glibc)
import Glibc
#endif

let arguments = Array(CommandLine.arguments.dropFirst())

func intArgument(_ index: Int, _ fallback: Int) -> Int { arguments.count > index ? Int(arguments[index]) ?? fallback : fallback }

do {
    switch arguments.first ?? "" {
    case "_inprocess":
        try InProcessChild.run(threads: intArgument(1, 64), captures: intArgument(2, 20),
                               method: arguments.count > 3 ? CaptureMethod(rawValue: arguments[3]) ?? .quiet : .quiet)
    case "_target": try TargetChild.run(threads: intArgument(1, 65), boardPath: arguments[2])
    case "_dump": try DumpChild.run(threads: intArgument(1, 64), path: arguments[2])
    case "_crash": CrashChild.run(threads: intArgument(1, 64))
    case "_remotephases": try DumpPhasesChild.run(pid: Int32(intArgument(1, 0)))
    case "_report": try ReportChild.run(path: arguments[1], rounds: intArgument(2, 20))
    case "_watchallocs": try TaskBench.runAllocationChild(arguments); exit(0)
    default: break
    }
    try MonitorBench.runChildIfAsked(arguments)
} catch {
    FileHandle.standardError.write(Data("hangwatch-bench child: \(error)\n".utf8))
    exit(2)
}

var jsonPath: String?
var only: Set<String> = ["1", "2", "3", "4", "5", "6", "7", "8", "9", "10"]
var index = 0
while index < arguments.count {
    switch arguments[index] {
    case "--json" where index + 1 < arguments.count:
        jsonPath = arguments[index + 1]; index += 1
    case "--only" where index + 1 < arguments.count:
        only = Set(arguments[index + 1].split(separator: ",").map(String.init)); index += 1
    case "--check-programs":
        // scripts/bench --build-only: every program the sections run is in place, nothing measured.
        let problems = BenchProgram.problems()
        for problem in problems { FileHandle.standardError.write(Data("hangwatch-bench: \(problem)\n".utf8)) }
        guard problems.isEmpty else { exit(1) }
        print("hangwatch-bench: every program the bench runs is in place: "
              + (BenchProgram.allCases.map(\.rawValue) + (BenchProgram.largeServer.map { [$0] } ?? [])).joined(separator: ", "))
        exit(0)
    case "-h", "--help":
        print("usage: hangwatch-bench [--json FILE] [--only 1,2,3,4,5,6,7,8,9,10] | --check-programs\n(sections: 1 detection latency, 2 monitor overhead and memory, 3 in-process capture, 4 out-of-process vs eu-stack/gdb, 5 processing, 6 dump size, 7 CLI start-up, 8 a server under load, 9 task capture, 10 the toolchain's own 240-260 MB executables vs eu-stack -s -i)")
        exit(0)
    default:
        FileHandle.standardError.write(Data("hangwatch-bench: unknown argument \(arguments[index]) (try --help)\n".utf8))
        exit(64)
    }
    index += 1
}

let started = Clock.seconds()
var results = BenchResults(machine: MachineInfo.current())
var failures: [String] = []
do {
    let workDirectory = try makeTemporaryDirectory()
    defer { try? FileManager.default.removeItem(atPath: workDirectory) }
    let sections: [(String, (inout BenchResults) throws -> Void)] = [
        ("1", { try MonitorBench.detectionLatency(into: &$0, workDirectory: workDirectory) }),
        ("2", { try MonitorBench.overhead(into: &$0, workDirectory: workDirectory) }),
        ("3", { try InProcessBench.run(into: &$0) }),
        ("4", { try RemoteBench.run(into: &$0, workDirectory: workDirectory) }),
        ("5", { try ProcessingBench.run(into: &$0, workDirectory: workDirectory) }),
        ("7", { try StartupBench.run(into: &$0, workDirectory: workDirectory) }),
        ("8", { try ServerBench.run(into: &$0, workDirectory: workDirectory) }),
        ("9", {
            try TaskBench.run(into: &$0)
            try TaskBench.serialQueue(into: &$0, workDirectory: workDirectory)
            try TaskBench.watchCost(into: &$0, workDirectory: workDirectory)
            try TaskBench.watchAllocations(into: &$0, workDirectory: workDirectory)
        }),
        ("10", { try LargeBinaryBench.run(into: &$0, workDirectory: workDirectory) }),
    ]
    for (name, section) in sections where only.contains(name) || (name == "5" && only.contains("6")) {
        do { try section(&results) } catch {
            failures.append("section \(name): \(error)")
            results.add(name, "section failed", nil, "", note: "\(error)")
        }
    }
} catch {
    failures.append("\(error)")
}
results.durationSeconds = Clock.seconds() - started
results.loadAtEnd = (ProcReading.text("/proc/loadavg") ?? "").split(separator: " ").prefix(3).joined(separator: " ")

print("\nMachine: \(results.machineLine())\n")
print(results.markdownTable())
if let jsonPath {
    do {
        try results.json().write(to: URL(fileURLWithPath: jsonPath))
        print("\nJSON written to \(jsonPath)")
    } catch {
        failures.append("cannot write \(jsonPath): \(error)")
    }
}
for failure in failures { FileHandle.standardError.write(Data("hangwatch-bench: \(failure)\n".utf8)) }
exit(failures.isEmpty ? 0 : 1)
