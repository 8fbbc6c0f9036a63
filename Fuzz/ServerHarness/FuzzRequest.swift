import Glibc
import KeyAuth
import KeyAuthServer

/// One request of a fuzz input, in the text form the corpus is written in: an HTTP/1.1 request
/// without the version, so that a seed reads like the request it stands for.
///
/// ```
/// POST /oauth/token?x=1
/// Content-Type: application/x-www-form-urlencoded
/// X-Fuzz-Peer: 192.0.2.7
///
/// grant_type=...&assertion={{assertion}}
/// ```
///
/// Everything a client controls comes from the input: the method, the path (percent-decoded,
/// as libmicrohttpd hands it over), the query (every parameter, repeated ones included), the
/// header fields (cookies among them), the body, and the peer address (`X-Fuzz-Peer`, which
/// the transport would take from the socket; `X-Fuzz-` fields steer the harness and are not
/// sent). Nothing is rejected here: a line without a colon
/// is a header with an empty value, a missing request line is an empty method and path.
struct FuzzRequest {
    var method: String
    var path: String
    var query: [(name: String, value: String)]
    var headers: [(name: String, value: String)]
    var body: [UInt8]
    var peer: String

    /// The value of the harness field `name` (`X-Fuzz-Claims`), if any.
    func harnessField(_ name: String) -> String? {
        headers.last { $0.name.lowercased() == name.lowercased() }?.value
    }

    /// What separates the requests of one input.
    static let separator = Array("\n----\n".utf8)

    /// The requests of an input, at most `limit` of them.
    static func split(_ bytes: [UInt8], limit: Int) -> [[UInt8]] {
        var parts: [[UInt8]] = []
        var start = 0
        var index = 0
        while index + separator.count <= bytes.count, parts.count < limit - 1 {
            if bytes[index] == separator[0], Array(bytes[index..<(index + separator.count)]) == separator {
                parts.append(Array(bytes[start..<index]))
                index += separator.count
                start = index
            } else {
                index += 1
            }
        }
        parts.append(Array(bytes[start...]))
        return parts
    }

    /// Reads one request.
    init(parsing bytes: [UInt8]) {
        var lines: [[UInt8]] = []
        var cursor = 0
        var bodyStart = bytes.count
        while cursor < bytes.count {
            let end = bytes[cursor...].firstIndex(of: UInt8(ascii: "\n")) ?? bytes.count
            var line = Array(bytes[cursor..<end])
            if line.last == UInt8(ascii: "\r") { line.removeLast() }
            cursor = end + 1
            if line.isEmpty, !lines.isEmpty {
                bodyStart = min(cursor, bytes.count)
                break
            }
            lines.append(line)
        }
        let requestLine = String(decoding: lines.first ?? [], as: UTF8.self)
        let space = requestLine.firstIndex(of: " ")
        method = space.map { String(requestLine[..<$0]) } ?? requestLine
        let target = space.map { String(requestLine[requestLine.index(after: $0)...]) } ?? "/"
        let question = target.firstIndex(of: "?")
        path = Self.percentDecoded(question.map { String(target[..<$0]) } ?? target, plusIsSpace: false)
        query = question.map { Self.queryItems(String(target[target.index(after: $0)...])) } ?? []
        headers = lines.dropFirst().map { line in
            let text = String(decoding: line, as: UTF8.self)
            guard let colon = text.firstIndex(of: ":") else { return (text, "") }
            let value = text[text.index(after: colon)...].drop { $0 == " " || $0 == "\t" }
            return (String(text[..<colon]), String(value))
        }
        body = Array(bytes[bodyStart...])
        // The transport formats the socket's address, so only an address's text can arrive.
        let chosen = headers.last { $0.name.lowercased() == "x-fuzz-peer" }?.value ?? ""
        peer = Self.isAddress(chosen) ? chosen : "192.0.2.1"
    }

    /// The request as the transport would build it: the first value of a repeated query
    /// parameter in ``HTTPRequest/query`` and its name in ``HTTPRequest/repeatedQueryNames``.
    ///
    /// Text fields end at a NUL byte, as the C strings libmicrohttpd hands over do; only the body
    /// may carry one.
    var httpRequest: HTTPRequest {
        var fields = HTTPHeaders()
        for header in headers where !header.name.lowercased().hasPrefix("x-fuzz-") {
            fields.add(Self.cString(header.name), Self.cString(header.value))
        }
        var first: [String: String] = [:]
        var repeated: Set<String> = []
        for item in query {
            let name = Self.cString(item.name)
            if first[name] == nil { first[name] = Self.cString(item.value) } else { repeated.insert(name) }
        }
        return HTTPRequest(
            method: Self.cString(method), path: Self.cString(path), query: first, repeatedQueryNames: repeated,
            headers: fields, body: body, clientAddress: peer)
    }

    private static func cString(_ text: String) -> String {
        guard let nul = text.firstIndex(of: "\u{0}") else { return text }
        return String(text[..<nul])
    }

    /// Whether `text` is an IPv4 or IPv6 address.
    static func isAddress(_ text: String) -> Bool {
        var buffer = [UInt8](repeating: 0, count: 16)
        return inet_pton(AF_INET, text, &buffer) == 1 || inet_pton(AF_INET6, text, &buffer) == 1
    }

    /// `a=1&b=%20` as pairs, decoded.
    static func queryItems(_ text: String) -> [(name: String, value: String)] {
        text.split(separator: "&", omittingEmptySubsequences: true).map { pair in
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            return (
                percentDecoded(String(parts[0]), plusIsSpace: true),
                parts.count > 1 ? percentDecoded(String(parts[1]), plusIsSpace: true) : ""
            )
        }
    }

    /// `%XX` decoded; invalid escapes kept as they are.
    static func percentDecoded(_ text: String, plusIsSpace: Bool) -> String {
        let bytes = Array(text.utf8)
        var output: [UInt8] = []
        var index = 0
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "%"), index + 2 < bytes.count, let high = Hex.value(ofDigit: bytes[index + 1]),
                let low = Hex.value(ofDigit: bytes[index + 2])
            {
                output.append(high << 4 | low)
                index += 3
                continue
            }
            output.append(plusIsSpace && byte == UInt8(ascii: "+") ? UInt8(ascii: " ") : byte)
            index += 1
        }
        return String(decoding: output, as: UTF8.self)
    }

}
