// Crashpad's StartProcessingPendingReports: off until the program calls it with a URL.
import HangwatchSymbolication
import HangwatchSnapshot
import HangwatchDatabase
import HangwatchCapture
import HangwatchReport
import HangwatchMinidump
import HangwatchUpload
import Foundation

extension DumpClient {
    /// Starts a background thread that processes this bundle's intermediate dumps and uploads
    /// pending reports to `uploadURL` with Crashpad's protocol, retrying failures with
    /// exponential backoff. Nothing is uploaded unless this is called. Keep the returned
    /// scheduler; `stop()` ends it.
    @discardableResult
    public func startProcessingPendingReports(uploadURL: URL, options: UploadOptions? = nil,
                                              pollInterval: Double = 300) -> UploadScheduler {
        var settings = options ?? UploadOptions(url: uploadURL)
        settings.url = uploadURL
        settings.redaction.formUnion(redaction)
        let scheduler = UploadScheduler(uploader: ReportUploader(database: database, options: settings),
                                        pollInterval: pollInterval,
                                        process: { [self] in _ = try processIntermediateDumps() })
        scheduler.start()
        return scheduler
    }
}
