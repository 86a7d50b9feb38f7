// multipart/form-data (RFC 7578) as Crashpad's uploader sends it: text fields, then files.
import HangwatchMinidump
import HangwatchReport
import HangwatchDatabase
import Foundation

package struct MultipartForm: Sendable {
    package let boundary: String
    private var body = Data()

    package init(boundary: String = "----hangwatch-" + UUID().uuidString.lowercased()) {
        self.boundary = boundary
    }

    package var contentType: String { "multipart/form-data; boundary=\(boundary)" }

    package mutating func addField(_ name: String, _ value: String) {
        body.append(Data("--\(boundary)\r\nContent-Disposition: form-data; name=\"\(Self.quoted(name))\"\r\n\r\n".utf8))
        body.append(Data(value.utf8))
        body.append(Data("\r\n".utf8))
    }

    package mutating func addFile(_ name: String, filename: String, contentType: String, _ data: Data) {
        body.append(Data(("--\(boundary)\r\nContent-Disposition: form-data; name=\"\(Self.quoted(name))\"; "
            + "filename=\"\(Self.quoted(filename))\"\r\nContent-Type: \(contentType)\r\n\r\n").utf8))
        body.append(data)
        body.append(Data("\r\n".utf8))
    }

    /// The body with its closing boundary.
    package var data: Data { body + Data("--\(boundary)--\r\n".utf8) }

    /// Quotes and line breaks cannot appear inside a quoted header parameter: percent-encode
    /// them, as browsers do (RFC 7578 §4.2).
    static func quoted(_ text: String) -> String {
        var out = ""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "%22"
            case "\r": out += "%0D"
            case "\n": out += "%0A"
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out
    }
}
