/// One HTTP request as plain values, so that routing is testable without sockets.
///
/// The transport fills it from libmicrohttpd; tests build it directly.
package struct HTTPRequest: Sendable {
    /// `GET`, `POST`, ... as sent (libmicrohttpd passes the token unchanged).
    package var method: String
    /// The path, percent-decoded, without the query string.
    package var path: String
    /// The query parameters, decoded: the first value of each name. A name that came more than
    /// once is also in ``repeatedQueryNames``, and the responder refuses the request before any
    /// endpoint reads it.
    package var query: [String: String]
    /// The query's names that came more than once (decoded, so `a` and `%61` are one name).
    /// RFC 6749 section 3.1 forbids repeating a parameter; keeping the first value silently
    /// would let two parties read one request differently.
    package var repeatedQueryNames: Set<String>
    /// Set by the transport when a query name or value decoded to a zero byte (`%00`); the
    /// responder refuses the request before any endpoint reads the query. No parameter of this
    /// protocol holds one, PostgreSQL cannot store one, and a C string ends at one, so a value
    /// holding one could be read differently by two parts of the server.
    package var queryHoldsNUL = false
    /// Set by the transport when a query name or value decoded to bytes that are not UTF-8
    /// (`%FF`), refused like a zero byte: read as text they would change (each bad byte becomes
    /// U+FFFD), and `state` or `nonce` would come back other than the client sent them.
    package var queryIsNotUTF8 = false
    /// Set by the transport when the headers frame the body ambiguously
    /// (``HTTPHeaders/framingProblem``): why, for the responder's 400. The transport answers
    /// before reading the body, and closes the connection after.
    package var framingProblem: String?
    /// Set by the transport when the path escaped a zero byte (`%00`, which would end it early) or
    /// decoded to bytes that are not UTF-8 (which ``path`` holds repaired): what it held, for the
    /// responder's 400. Read either way, the server would serve another path than the one sent.
    package var pathFault: String?
    /// The header fields.
    package var headers: HTTPHeaders
    /// The body, at most the transport's limit (64 KiB).
    package var body: [UInt8]
    /// The peer's IP address as text (the proxy's, behind a proxy).
    package var clientAddress: String
    /// Set by the transport when the body exceeded the limit; ``body`` is then empty and the
    /// responder answers 413 through the same error mapping as every other error.
    package var bodyTooLarge: Bool

    /// Creates a request.
    package init(
        method: String, path: String, query: [String: String] = [:], repeatedQueryNames: Set<String> = [],
        headers: HTTPHeaders = HTTPHeaders(), body: [UInt8] = [], clientAddress: String = "127.0.0.1",
        bodyTooLarge: Bool = false
    ) {
        self.method = method
        self.path = path
        self.query = query
        self.repeatedQueryNames = repeatedQueryNames
        self.headers = headers
        self.body = body
        self.clientAddress = clientAddress
        self.bodyTooLarge = bodyTooLarge
    }
}
