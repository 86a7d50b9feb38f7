// The facade's public surface: the client verbs in this module, plus the value types its
// verbs take and return, which live in the stage modules (docs/architecture.md).
@_exported import HangwatchCapture
@_exported import HangwatchDatabase
@_exported import HangwatchMinidump
@_exported import HangwatchReport
@_exported import HangwatchSnapshot
@_exported import HangwatchUpload
