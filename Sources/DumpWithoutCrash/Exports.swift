// The facade's public surface: `DumpClient` (this module) and, named here one by one, the
// types its verbs take, return and throw, which are declared in the stage modules
// (docs/architecture.md, "Access"). The stages themselves are not re-exported: a program that
// imports DumpWithoutCrash sees these names and nothing else of them. The DocC catalog
// (DumpWithoutCrash.docc) lists the same set.
import HangwatchCapture
import HangwatchDatabase
import HangwatchReport
import HangwatchSnapshot
import HangwatchUpload

// MARK: Capturing and crash handling (DumpClient.init, installCrashHandlers)

/// How a capture of this process is taken: how threads are stopped, how long to wait for them,
/// how deep to unwind and how much stack to keep.
public typealias CaptureOptions = HangwatchCapture.CaptureOptions
/// How a capture stops the other threads of the process.
public typealias CaptureMethod = HangwatchCapture.CaptureMethod
/// Why a capture of this process could not be taken.
public typealias CaptureError = HangwatchCapture.CaptureError
/// How the fatal-signal handlers capture a crash (docs/crash-handling.md).
public typealias CrashHandlerOptions = HangwatchCapture.CrashHandlerOptions
/// Why the crash handlers could not be installed or changed.
public typealias CrashHandlingError = HangwatchCapture.CrashHandlingError
/// Called in the crash handler (`DumpClient.setCrashCallback`): async-signal-safe code only
/// (docs/crash-handling.md).
public typealias CrashCallback = HangwatchCapture.CrashCallback
/// What dumps and reports leave out (arguments, key-values, stderr, stack memory, kernel log).
public typealias Redaction = HangwatchSnapshot.Redaction
/// A redaction name that is not one.
public typealias RedactionError = HangwatchSnapshot.RedactionError
/// Why an intermediate dump could not be read (`processIntermediateDump(atPath:)`).
public typealias IntermediateDumpError = HangwatchSnapshot.IntermediateDumpError

// MARK: The database (DumpClient.database)

/// The crash-report database: dumps, staged hangs and reports (docs/database.md).
public typealias CrashReportDatabase = HangwatchDatabase.CrashReportDatabase
/// Limits and grace periods of a database's readers and processors.
public typealias DatabaseOptions = HangwatchDatabase.DatabaseOptions
/// Why a database operation failed.
public typealias DatabaseError = HangwatchDatabase.DatabaseError
/// A report in the database, as `CrashReportDatabase.listReports()` finds it.
public typealias StoredReport = HangwatchDatabase.StoredReport
/// What `CrashReportDatabase.prune(policy:)` keeps.
public typealias PrunePolicy = HangwatchDatabase.PrunePolicy
/// What a prune removed and what it left.
public typealias PruneResult = HangwatchDatabase.PruneResult

// MARK: Reports (what the verbs return)

/// A symbolicated report (docs/report-schema.md).
public typealias Report = HangwatchReport.Report
/// Why a report exists.
public typealias ReportKind = HangwatchSnapshot.ReportKind
/// A report as text (what `hangwatch show` prints), JSON (docs/report-schema.md) or folded stacks.
public typealias ReportRenderer = HangwatchReport.ReportRenderer
/// Why a report's JSON could not be read (`Report.decode(from:)`).
public typealias ReportDecodingError = HangwatchReport.ReportDecodingError
/// Who the captured process was (`Report.process`).
public typealias ProcessIdentity = HangwatchSnapshot.ProcessIdentity
/// What capture knew of a thread besides its stack (`Report.Thread.info`).
public typealias ThreadInfo = HangwatchSnapshot.ThreadInfo
/// CPU time a thread had used (`ThreadInfo.cpuSeconds`).
public typealias CPUTime = HangwatchSnapshot.CPUTime
/// A thread's scheduling state (`ThreadInfo.state`).
public typealias ThreadState = HangwatchSnapshot.ThreadState
/// What a thread was doing for the capture (`ThreadInfo.roles`).
public typealias ThreadRoles = HangwatchSnapshot.ThreadRoles
/// How a thread's stack was obtained (`ThreadInfo.status`).
public typealias ThreadCaptureStatus = HangwatchSnapshot.ThreadCaptureStatus
/// A module as capture found it (`Report.Module.snapshot`).
public typealias ModuleSnapshot = HangwatchSnapshot.ModuleSnapshot
/// A fatal signal as caught (`Report.Signal.info`).
public typealias SignalInfo = HangwatchSnapshot.SignalInfo
/// What ended a process from outside (`Report.Killed.cause`).
public typealias KillCause = HangwatchSnapshot.KillCause
/// What a reading knew of a Swift task besides its links and await chain (`Report.Task.info`).
public typealias TaskInfo = HangwatchSnapshot.TaskInfo
/// Where a Swift task was (`TaskInfo.state`).
public typealias TaskState = HangwatchSnapshot.TaskState
/// What the runtime reported about a Swift task besides its state (`TaskInfo.flags`).
public typealias TaskFlags = HangwatchSnapshot.TaskFlags
/// What stopped answering (`Report.Hang.target`).
public typealias HangTarget = HangwatchSnapshot.HangTarget
/// How a hang ended (a hang report's `hang.outcome` annotation, and its kind).
public typealias HangOutcome = HangwatchSnapshot.HangOutcome

// MARK: Uploading (DumpClient.startProcessingPendingReports)

/// Where and how reports are uploaded (docs/upload.md).
public typealias UploadOptions = HangwatchUpload.UploadOptions
/// Processes dumps and uploads pending reports in the background.
public typealias UploadScheduler = HangwatchUpload.UploadScheduler
