// One synchronous POST through libcurl (CHangwatchCurl: HTTP, HTTPS, proxies from the
// environment), bounded by construction: one timeout for the whole exchange, and at most
// `maxResponseBytes` of the answer kept, counted decoded, with the transfer cut there — libcurl
// hands the answer over 16 KiB at a time and stops when a piece is refused, so a gzip bomb or
// an endless chunked answer costs nothing. Redirects are never followed. docs/upload.md explains
// why not URLSession (FoundationNetworking queues every decoded chunk without back-pressure).
import CHangwatchCurl
import HangwatchMinidump
import HangwatchReport
import HangwatchDatabase
import Foundation

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

package enum HTTPPost {
    /// Bytes of the server's answer that are kept (Crashpad servers answer with a short id);
    /// the rest is never read: the transfer is cut once this much has arrived, decoded.
    static let maxResponseBytes = 4096

    package static func send(_ body: Data, contentType: String, to url: URL, timeout: Double,
                             gzip: Bool = false) -> Result<(status: Int, body: Data), UploadError> {
        var body = body
        var headers = ["Content-Type: \(contentType)", "Expect:"]  // no 100-continue round trip
        if gzip {
            guard let compressed = Gzip.compress(body) else { return .failure(.transport("gzip compression failed")) }
            body = compressed
            headers.append("Content-Encoding: gzip")
        }
        var answer = hwu_answer()
        let milliseconds = Int(min(timeout, 86_400) * 1000)
        let code = withCStrings(headers) { lines in
            body.withUnsafeBytes { bytes in
                hwu_post(url.absoluteString, bytes.baseAddress, bytes.count, lines, headers.count, milliseconds, maxResponseBytes, &answer)
            }
        }
        defer { hwu_answer_free(&answer) }
        let error = withUnsafeBytes(of: answer.error) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        switch Int(code) {
        case Int(HWU_OK): break
        case Int(HWU_TIMED_OUT): return .failure(.transport("no complete answer within \(timeout.rounded() == timeout ? String(Int(timeout)) : String(timeout)) s (the upload timeout)"))
        case Int(HWU_CONNECT): return .failure(.transport(error.contains("refused") || error.contains("Failed to connect") ? "connection refused" : error))
        default: return .failure(.transport(error))
        }
        let redirect = withUnsafeBytes(of: answer.redirect) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        if (300..<400).contains(answer.status) {
            // Never followed: a 301/302/303 would turn the POST into a GET whose 200 would mark
            // the report uploaded, a 307/308 would send it to another server.
            return .failure(.httpStatus(Int(answer.status), body: "redirect to \(redirect.isEmpty ? "?" : redirect) not followed"))
        }
        let kept = answer.body.map { Data(UnsafeBufferPointer(start: $0, count: answer.body_length)) } ?? Data()
        return .success((Int(answer.status), kept))
    }

    /// `strings` as C strings for the duration of `body`.
    private static func withCStrings<Result>(_ strings: [String], _ body: (UnsafePointer<UnsafePointer<CChar>?>) -> Result) -> Result {
        let copies = strings.map { strdup($0) }
        defer { copies.forEach { free($0) } }
        let pointers = copies.map { UnsafePointer($0) }
        return pointers.withUnsafeBufferPointer { body($0.baseAddress!) }
    }
}
