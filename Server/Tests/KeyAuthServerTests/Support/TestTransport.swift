import KeyAuth
import KeyAuthServer

/// How a test reaches the server: directly through the responder, or over a real socket.
///
/// Scenarios are written once against this protocol and run both ways, so the socket tests
/// prove the transport adds nothing and loses nothing.
protocol TestTransport: Sendable {
    func send(_ request: HTTPRequest) throws -> HTTPResponse
}

/// Calls the responder with the request value: no sockets.
struct DirectTransport: TestTransport {
    let responder: KeyAuthResponder

    /// A long poll's deferred answer is waited for, as the transport would.
    func send(_ request: HTTPRequest) throws -> HTTPResponse {
        responder.respond(to: request).settled()
    }
}

/// Sends the request over a fresh TCP connection to 127.0.0.1:`port`, from `sourceAddress`
/// (another loopback address, to be another client) or the kernel's choice.
struct SocketTransport: TestTransport {
    let port: UInt16
    var sourceAddress: String? = nil
    /// How long each send and each read may wait.
    var timeoutSeconds = 10

    func send(_ request: HTTPRequest) throws -> HTTPResponse {
        let connection = try RawHTTPConnection(
            port: port, timeoutSeconds: timeoutSeconds, sourceAddress: sourceAddress)
        var path = request.path
        if !request.query.isEmpty {
            path += "?" + request.query.map { "\($0.key)=\($0.value)" }.joined(separator: "&")
        }
        var headers = request.headers.map { ($0.name, $0.value) }
        headers.append(("Connection", "close"))
        try connection.send(
            RawHTTPConnection.requestBytes(method: request.method, path: path, headers: headers, body: request.body))
        let raw = try connection.readResponse()
        var responseHeaders = HTTPHeaders()
        for (name, value) in raw.headers { responseHeaders.add(name, value) }
        return HTTPResponse(status: raw.status, headers: responseHeaders, body: raw.body)
    }
}

extension HTTPResponse {
    /// The body as JSON, when it is.
    var json: JSONValue? { try? JSONValue(parsing: body) }
    /// The OAuth `error` member.
    var errorCode: String? { json?["error"]?.stringValue }
    /// The OAuth `error_description` member.
    var errorDescription: String? { json?["error_description"]?.stringValue }
    /// The body as text.
    var text: String { String(decoding: body, as: UTF8.self) }
}
