// Sends pending reports with Crashpad's upload protocol: multipart/form-data with the
// minidump in `upload_file_minidump`, annotations as fields, `prod`, `ver`, `guid`. The server's
// answer becomes the report's server id and the report moves to completed/. Failures leave
// the report pending with its retry state; nothing is ever deleted here. docs/upload.md.
import HangwatchMinidump
import HangwatchReport
import HangwatchDatabase
import HangwatchSnapshot
import Foundation
import HangwatchPlatform
#if canImport(Glibc)
import Glibc
#endif

package struct UploadOutcome: Sendable, Equatable {
    package enum Result: Sendable, Equatable {
        /// Sent; the report is completed with this server id.
        case uploaded(serverID: String)
        /// This attempt failed; retried after `retryAt`, or never automatically when `gaveUp`.
        case failed(UploadError, attempts: Int, retryAt: Date?, gaveUp: Bool)
        /// Not tried: its backoff has not expired yet.
        case waiting(until: Date)
        /// Not tried: marked failed earlier (use `retryFailed`).
        case markedFailed
        /// Not tried: the hourly rate limit is used up.
        case rateLimited
    }
    package var reportID: String
    package var result: Result
}

package final class ReportUploader: Sendable {
    package let database: CrashReportDatabase
    package let options: UploadOptions

    package init(database: CrashReportDatabase, options: UploadOptions) {
        self.database = database
        self.options = options
    }

    static let lockName = "upload.lock"
    static let historyName = "upload-history.json"
    /// One request at a time in this process; `upload.lock` does the same across processes.
    private static let inFlight = NSLock()

    /// One pass over the pending reports, oldest first (or only `ids`). `ignoreBackoff` tries
    /// reports whose retry time has not come (a user asked); `retryFailed` includes reports
    /// marked failed. Throws `UploadError.busy` when another process is uploading.
    package func uploadPending(ids: [String]? = nil, ignoreBackoff: Bool = false, retryFailed: Bool = false,
                              now: @Sendable () -> Date = Date.init) throws -> [UploadOutcome] {
        Self.inFlight.lock()
        defer { Self.inFlight.unlock() }
        try acquireLock()
        defer { releaseLock() }
        var history = loadHistory(now: now())
        var outcomes: [UploadOutcome] = []
        let pending = try database.listReports().filter { $0.state == .pending }
        for report in pending where ids.map({ $0.contains(report.id) }) ?? true {
            let state = database.uploadState(id: report.id)
            if state.failed && !retryFailed {
                outcomes.append(UploadOutcome(reportID: report.id, result: .markedFailed))
                continue
            }
            if !ignoreBackoff, !state.failed, let next = state.nextAttempt, next > now() {
                outcomes.append(UploadOutcome(reportID: report.id, result: .waiting(until: next)))
                continue
            }
            if options.maxUploadsPerHour > 0 && history.count >= options.maxUploadsPerHour {
                outcomes.append(UploadOutcome(reportID: report.id, result: .rateLimited))
                continue
            }
            history.append(now())
            saveHistory(history)
            outcomes.append(UploadOutcome(reportID: report.id, result: attempt(report.id, state: state, now: now)))
        }
        return outcomes
    }

    /// Longest server answer kept as a report's server id (Crashpad servers answer
    /// "CrashID=bp-<uuid>", 43 bytes).
    static let maxServerIDBytes = 256

    /// What a server's 2xx answer leaves as the report's server id: the answer when it is short
    /// printable text (ASCII 0x20–0x7E), else "" — the server accepted the report, but its
    /// answer is not worth keeping or printing (NUL bytes, a forged line, a 4 KiB blob).
    static func serverID(in answer: String) -> String {
        guard answer.utf8.count <= maxServerIDBytes, answer.utf8.allSatisfy({ $0 >= 0x20 && $0 <= 0x7E }) else { return "" }
        return answer
    }

    private func attempt(_ id: String, state: UploadState, now: () -> Date) -> UploadOutcome.Result {
        var state = state
        let result: Result<String, UploadError>
        do {
            let form = try makeForm(reportID: id)
            let body = form.data
            result = HTTPPost.send(body, contentType: form.contentType, to: options.url, timeout: options.timeoutSeconds,
                                   gzip: options.gzip)
                .flatMap { answer in
                    let text = String(decoding: answer.body, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
                    return (200..<300).contains(answer.status) ? .success(Self.serverID(in: text))
                        : .failure(.httpStatus(answer.status, body: Text.singleLine(String(text.prefix(200)))))
                }
        } catch let error as UploadError {
            result = .failure(error)
        } catch {
            result = .failure(.unreadableReport("\(error)"))
        }
        switch result {
        case .success(let serverID):
            do {
                try database.markCompleted(id: id, serverID: serverID)
                return .uploaded(serverID: serverID)
            } catch {
                // Uploaded but not moved: the next pass sends it again (the server may dedupe by guid+id).
                return .failed(.unreadableReport("uploaded, but could not mark completed: \(error)"), attempts: state.attempts,
                               retryAt: nil, gaveUp: false)
            }
        case .failure(let error):
            state.attempts += 1
            state.lastAttempt = now()
            state.lastError = error.description
            if case .tooLarge = error { state.failed = true }
            if state.attempts >= options.maxAttempts { state.failed = true }
            state.nextAttempt = state.failed ? nil : now().addingTimeInterval(options.backoff(afterAttempts: state.attempts))
            try? database.writeUploadState(state, id: id)
            return .failed(error, attempts: state.attempts, retryAt: state.nextAttempt, gaveUp: state.failed)
        }
    }

    /// The multipart body of report `id`: fields, the minidump, the JSON report.
    package func makeForm(reportID id: String) throws -> MultipartForm {
        var json = try database.readReport(id: id)
        var report = try Report.decode(from: json)
        var minidump: Data
        if options.redaction.isEmpty {
            minidump = Data(try database.minidump(forReport: id))
        } else {
            // Redacted again on the way out: the stored report may predate the redaction.
            let snapshot = try database.snapshotForMinidump(id: id).redacted(options.redaction)
            minidump = Data(MinidumpWriter.minidump(from: snapshot, metadata: MinidumpMetadata(reportID: UUID(uuidString: id), clientID: database.clientID)))
            report.redact(options.redaction)
            json = ReportRenderer.json(report)
        }
        let size = minidump.count + (options.attachJSONReport ? json.count : 0)
        guard size <= options.maxReportBytes else { throw UploadError.tooLarge(bytes: size, limit: options.maxReportBytes) }
        var form = MultipartForm()
        let reserved: Set<String> = ["prod", "ver", "guid", "upload_file_minidump", "hangwatch_report"]
        for key in report.annotations.keys.sorted() where !reserved.contains(key) {
            form.addField(key, report.annotations[key] ?? "")
        }
        form.addField("prod", options.product ?? report.annotations["prod"] ?? report.process.bundleID)
        form.addField("ver", options.version ?? report.annotations["ver"] ?? report.annotations["version"] ?? "unknown")
        form.addField("guid", database.clientID.uuidString.lowercased())
        form.addField("hangwatch_report_id", id)
        form.addField("hangwatch_kind", report.kind.rawValue)
        form.addFile("upload_file_minidump", filename: "\(id).dmp", contentType: "application/octet-stream", minidump)
        if options.attachJSONReport {
            form.addFile("hangwatch_report", filename: "\(id).json", contentType: "application/json", json)
        }
        return form
    }

    // MARK: - Cross-process lock and rate-limit history (in the database root)

    /// `upload.lock` holds the uploader's pid; a lock whose pid is gone is taken over.
    private func acquireLock() throws {
        for _ in 0..<2 {
            do {
                let fd = try database.root.createExclusive(Self.lockName)
                try? database.root.writeAll(fd, Data("\(getpid())\n".utf8), name: Self.lockName)
                close(fd)
                return
            } catch DatabaseError.system(_, _, let code) where code == EEXIST {
                let holder = (try? database.root.readFile(Self.lockName, limit: 64))
                    .flatMap { Int32(String(decoding: $0, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)) }
                if let holder, holder > 0, kill(holder, 0) == 0 || errno == EPERM { throw UploadError.busy }
                // Empty (a writer died between create and write) or dead holder: take it over.
                _ = try? database.root.remove(Self.lockName)
            }
        }
        throw UploadError.busy
    }

    private func releaseLock() {
        _ = try? database.root.remove(Self.lockName)
    }

    private func loadHistory(now: Date) -> [Date] {
        guard let data = try? database.root.readFile(Self.historyName, limit: 1 << 20) else { return [] }
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        let times = (try? decoder.decode([Date].self, from: data)) ?? []
        return times.filter { now.timeIntervalSince($0) < 3600 && $0 <= now.addingTimeInterval(60) }
    }

    private func saveHistory(_ times: [Date]) {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        if let data = try? encoder.encode(times.suffix(10_000)) { try? database.root.writeAtomically(Self.historyName, data) }
    }
}
