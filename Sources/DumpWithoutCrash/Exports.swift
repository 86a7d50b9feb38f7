// The facade's public surface: the client verbs in this module, plus the value types its
// verbs take and return, which live in the stage modules (docs/architecture.md). Each module
// re-exported here declares nothing public but such types (its DocC catalog,
// DumpWithoutCrash.docc, lists them all); the stages with no public type (minidump,
// symbolication, remote capture, platform) are not re-exported.
@_exported import HangwatchCapture
@_exported import HangwatchDatabase
@_exported import HangwatchReport
@_exported import HangwatchSnapshot
@_exported import HangwatchUpload
