// One synchronous POST through FoundationNetworking's URLSession (libcurl underneath: HTTP,
// HTTPS, proxies from the environment), bounded by a timeout and a response-size limit.
import HangwatchMinidump
import HangwatchReport
import HangwatchDatabase
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

package enum UploadError: Error, Equatable, CustomStringConvertible {
    /// Could not reach the server or no complete answer in time (connection refused, timeout…).
    case transport(String)
    /// The server answered with a non-2xx status.
    case httpStatus(Int, body: String)
    /// The report is larger than `UploadOptions.maxReportBytes`.
    case tooLarge(bytes: Int, limit: Int)
    /// Another upload (this or another process) holds the database's upload lock.
    case busy
    case unreadableReport(String)

    package var description: String {
        switch self {
        case .transport(let why): return why
        case .httpStatus(let status, let body):
            return "HTTP \(status)" + (body.isEmpty ? "" : ": " + String(body.prefix(200)))
        case .tooLarge(let bytes, let limit): return "report is \(bytes) bytes, over the \(limit)-byte upload limit"
        case .busy: return "another upload is in flight"
        case .unreadableReport(let why): return "report cannot be read: \(why)"
        }
    }
}

enum HTTPPost {
    /// Bytes of the server's answer that are kept (Crashpad servers answer with a short id).
    static let maxResponseBytes = 4096

    private final class Box: @unchecked Sendable {
        var result: Result<(Int, Data), UploadError> = .failure(.transport("no answer"))
    }

    static func send(_ body: Data, contentType: String, to url: URL, timeout: Double,
                     gzip: Bool = false) -> Result<(status: Int, body: Data), UploadError> {
        var request = URLRequest(url: url, cachePolicy: .reloadIgnoringLocalCacheData, timeoutInterval: timeout)
        request.httpMethod = "POST"
        request.setValue(contentType, forHTTPHeaderField: "Content-Type")
        var body = body
        if gzip {
            guard let compressed = Gzip.compress(body) else { return .failure(.transport("gzip compression failed")) }
            body = compressed
            request.setValue("gzip", forHTTPHeaderField: "Content-Encoding")
        }
        request.setValue("hangwatch", forHTTPHeaderField: "User-Agent")
        let configuration = URLSessionConfiguration.ephemeral
        configuration.timeoutIntervalForRequest = timeout
        configuration.timeoutIntervalForResource = timeout
        let session = URLSession(configuration: configuration)
        defer { session.finishTasksAndInvalidate() }
        let box = Box()
        let done = DispatchSemaphore(value: 0)
        let task = session.uploadTask(with: request, from: body) { data, response, error in
            if let error {
                box.result = .failure(.transport(Self.describe(error)))
            } else if let http = response as? HTTPURLResponse {
                box.result = .success((http.statusCode, (data ?? Data()).prefix(maxResponseBytes)))
            } else {
                box.result = .failure(.transport("not an HTTP response"))
            }
            done.signal()
        }
        task.resume()
        // URLSession enforces the timeout; this is only a backstop against a lost callback.
        if done.wait(timeout: .now() + timeout + 10) == .timedOut {
            task.cancel()
            return .failure(.transport("timed out after \(Int(timeout)) s"))
        }
        return box.result.map { (status: $0.0, body: $0.1) }
    }

    private static func describe(_ error: Error) -> String {
        let nsError = error as NSError
        switch nsError.code {
        case NSURLErrorTimedOut: return "timed out"
        case NSURLErrorCannotConnectToHost: return "connection refused"
        case NSURLErrorNetworkConnectionLost: return "connection lost"
        default: return nsError.localizedDescription
        }
    }
}
