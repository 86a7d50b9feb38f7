// Fatal crash capture for a DumpClient: signal handlers that write an intermediate dump into
// the client's database from inside the crashing process (see docs/crash-handling.md).
import HangwatchSymbolication
import HangwatchSnapshot
import HangwatchDatabase
import HangwatchCapture
import HangwatchReport
import HangwatchMinidump
import HangwatchUpload
import CHangwatchCapture

extension DumpClient {
    /// Installs handlers for SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT and SIGTRAP. On a crash
    /// the handler runs `saveCriticalData` first, writes the dump (crashed thread from its
    /// signal context, every other thread, signal, annotations, modules), chains to the handler
    /// installed before (the Swift runtime's backtracer) and lets the process die with the
    /// original signal. The next `processIntermediateDumps()` makes it a `crash` report.
    ///
    /// Install after anything whose handler should still run (the Swift runtime installs its
    /// own at start-up); a handler installed after this one must chain to ours. Calling again
    /// updates options and callback. Handlers are process-wide: a second client cannot install.
    public func installCrashHandlers(options: CrashHandlerOptions = CrashHandlerOptions(),
                                     saveCriticalData: CrashCallback? = nil) throws {
        try CrashHandling.install(database: database, bundleID: bundleID, annotations: dumpAnnotations,
                                  captureOptions: captureOptions, options: options, callback: saveCriticalData)
    }

    /// Restores the handlers that were installed before ours and removes the armed dump file.
    public func uninstallCrashHandlers() {
        CrashHandling.uninstall()
    }

    /// Replaces the "save critical data" callback (nil removes it).
    public func setCrashCallback(_ saveCriticalData: CrashCallback?) {
        hwc_crash_set_callback(saveCriticalData)
    }

    /// Re-reads the loaded modules (call after dlopen'ing a library) and re-arms the dump file.
    /// Annotations are refreshed automatically when `annotations` is set.
    public func refreshCrashContext() throws {
        try CrashHandling.refresh(bundleID: bundleID, databasePath: database.path, annotations: dumpAnnotations)
    }

    /// Gives the calling thread an alternate signal stack (so a stack overflow on it is
    /// reported) unless it has one. Threads the program creates itself can call this first.
    /// Returns false when the pool of alternate stacks is exhausted.
    @discardableResult
    public static func installAlternateSignalStackOnCurrentThread() -> Bool {
        hwc_crash_ensure_alternate_stack() == 0
    }

    /// Asks every running thread to take an alternate signal stack now (see
    /// `CrashHandlerOptions.alternateStackRefreshInterval` for doing it periodically).
    public func refreshAlternateSignalStacks() {
        CrashHandling.sweepAlternateStacks(captureOptions: captureOptions)
    }

    /// Called by the `annotations` setter: the handler copies prepared bytes, never the dictionary.
    func crashAnnotationsDidChange(_ annotations: [String: String]) {
        try? CrashHandling.refresh(bundleID: bundleID, databasePath: database.path, annotations: annotations)
    }
}
