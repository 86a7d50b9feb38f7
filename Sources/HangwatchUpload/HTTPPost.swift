// One synchronous POST through FoundationNetworking's URLSession (libcurl underneath: HTTP,
// HTTPS, proxies from the environment), bounded by a timeout and by the size of the answer
// (counted decoded, as it streams in); redirects are never followed.
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
    /// Bytes of the server's answer that are kept (Crashpad servers answer with a short id);
    /// the rest is never read: the transfer is cut once this much has arrived, decoded.
    static let maxResponseBytes = 4096

    /// One exchange, driven by delegate calls rather than a completion handler: a completion
    /// handler gets the answer only once FoundationNetworking has buffered (and decompressed)
    /// all of it, and after redirects it followed on its own.
    private final class Exchange: NSObject, URLSessionDataDelegate, @unchecked Sendable {
        private let lock = NSLock()
        private var status: Int?
        private var received = Data()
        private var refusedRedirect: (status: Int, location: String)?
        private var cutShort = false
        private var failure: UploadError?
        let done = DispatchSemaphore(value: 0)

        /// Never followed: a 301/302/303 would turn the POST into a GET whose 200 would mark the
        /// report uploaded, a 307/308 would send it to another server.
        func urlSession(_ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse,
                        newRequest request: URLRequest, completionHandler: @escaping (URLRequest?) -> Void) {
            lock.withLock { refusedRedirect = (response.statusCode, request.url?.absoluteString ?? "?") }
            completionHandler(nil)
        }

        func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse,
                        completionHandler: @escaping (URLSession.ResponseDisposition) -> Void) {
            lock.withLock { status = (response as? HTTPURLResponse)?.statusCode }
            completionHandler(.allow)
        }

        /// Decoded bytes as they stream in: kept up to the limit, then the transfer is cancelled.
        func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
            let full: Bool = lock.withLock {
                received.append(data.prefix(max(0, maxResponseBytes - received.count)))
                if received.count >= maxResponseBytes && data.count > 0 { cutShort = true }
                return cutShort
            }
            if full { dataTask.cancel() }
        }

        func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: Error?) {
            lock.withLock {
                if let error, !cutShort { failure = .transport(HTTPPost.describe(error)) }
            }
            done.signal()
        }

        var result: Result<(status: Int, body: Data), UploadError> {
            lock.withLock {
                if let refusedRedirect {
                    return .failure(.httpStatus(refusedRedirect.status, body: "redirect to \(refusedRedirect.location) not followed"))
                }
                if let failure { return .failure(failure) }
                guard let status else { return .failure(.transport("not an HTTP response")) }
                return .success((status, received))
            }
        }
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
        let exchange = Exchange()
        let session = URLSession(configuration: configuration, delegate: exchange, delegateQueue: nil)
        defer { session.finishTasksAndInvalidate() }
        let task = session.uploadTask(with: request, from: body)
        task.resume()
        // URLSession enforces the timeout; this is only a backstop against a lost callback.
        if exchange.done.wait(timeout: .now() + timeout + 10) == .timedOut {
            task.cancel()
            return .failure(.transport("timed out after \(Int(timeout)) s"))
        }
        return exchange.result
    }

    fileprivate static func describe(_ error: Error) -> String {
        let nsError = error as NSError
        switch nsError.code {
        case NSURLErrorTimedOut: return "timed out"
        case NSURLErrorCannotConnectToHost: return "connection refused"
        case NSURLErrorNetworkConnectionLost: return "connection lost"
        default: return nsError.localizedDescription
        }
    }
}
