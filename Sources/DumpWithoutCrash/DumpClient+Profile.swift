// A profile of this process, for the tools a team already runs (`go tool pprof`, Pyroscope,
// Parca, Grafana, speedscope): every other thread's stack sampled at an interval, as a
// gzipped pprof profile.proto (Sources/HangwatchReport/Pprof.swift; docs/pprof.md). Threads
// are sampled as a HangMonitor samples a hung thread (LiveCapture.sampleStack): a thread blocked
// in a system call that has not run since its last sample is not stopped again.
import HangwatchCapture
import HangwatchReport
import HangwatchSnapshot
import HangwatchSymbolication
import Foundation
#if canImport(Glibc)
import Glibc
#endif

extension DumpClient {
    /// The most samples one profile takes, and the interval's bounds (1 ms to 10 s).
    static let profileSampleLimit = 10_000

    /// Samples every thread of this process but the calling one `samples` times, `interval`
    /// apart, and returns the profile as a gzipped pprof `profile.proto`: samples with their
    /// counts and period, locations with addresses, mappings with build ids, symbolicated and
    /// demangled functions with file and line, labels for each sample's thread. The calling
    /// thread waits meanwhile (about `samples × interval`); threads that start later are not
    /// sampled, threads that end are sampled while they live.
    ///
    /// - Throws: `CaptureError.invalidOptions` when `samples` is not 1…10,000 or `interval` not
    ///   1 ms…10 s; a `CaptureError` when this process cannot be captured.
    public func pprofProfile(samples: Int = 100, interval: Duration = .milliseconds(10)) throws -> Data {
        let seconds = Double(interval.components.seconds) + Double(interval.components.attoseconds) / 1e18
        guard (1...Self.profileSampleLimit).contains(samples), seconds >= 0.001, seconds <= 10 else {
            throw CaptureError.invalidOptions("a profile takes 1…\(Self.profileSampleLimit) samples 1 ms…10 s apart (asked \(samples), \(seconds) s)")
        }
        let snapshot = try capture(reason: .dumpRequested)
        let me = LiveCapture.currentThreadID()
        var live = snapshot.threads.map(\.tid).filter { $0 != me }
        var taken: [StackSample] = []
        for round in 0..<samples {
            if round > 0 { usleep(UInt32(seconds * 1e6)) }
            live = live.filter { tid in
                // A thread that could not be sampled this time (a capture timed out) stays, unless it ended.
                guard let frames = try? LiveCapture.sampleStack(tid: tid, options: captureOptions) else {
                    return access("/proc/self/task/\(tid)", F_OK) == 0
                }
                if !frames.isEmpty { taken.append(StackSample(tid: tid, frames: frames, count: 1)) }
                return true
            }
        }
        let symbolicator = Symbolicator()
        var report = ReportBuilder.makeReport(from: snapshot, id: UUID().uuidString.lowercased(), kind: .dump, symbolicator: symbolicator)
        report.profile = Report.Profile(samples: samples, intervalSeconds: seconds, sampledThreads: Array(Set(taken.map(\.tid))).sorted(),
                                        stacks: [])
        let source = PprofSource(samples: taken, modules: snapshot.modules, tasks: snapshot.tasks?.tasks ?? [], symbolicator: symbolicator)
        guard let profile = Pprof.profile(report, source: source) else {
            throw CaptureError.unavailable("the profile could not be compressed")
        }
        return profile
    }
}
