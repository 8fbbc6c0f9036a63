import KeyAuth

/// One HTTP response as plain values; the transport copies it into libmicrohttpd.
package struct HTTPResponse: Sendable {
    /// The status code.
    package var status: Int
    /// The header fields (`Content-Type` included; the transport adds `Content-Length`).
    package var headers: HTTPHeaders
    /// The body.
    package var body: [UInt8]
    /// Set when the answer comes later (``deferred(_:)``): the transport then waits for it with
    /// the connection suspended, and ignores ``status``, ``headers`` and ``body``.
    package var deferred: DeferredResponse?

    /// Creates a response.
    package init(status: Int, headers: HTTPHeaders = HTTPHeaders(), body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// A JSON response. Every JSON answer says `no-store`: tokens must not be cached (RFC 6749
    /// section 5.1) and nothing else here benefits from caching either.
    package static func json(_ value: JSONValue, status: Int = 200, headers extra: HTTPHeaders = HTTPHeaders())
        -> HTTPResponse
    {
        json(serialized: Array(value.serialized().utf8), status: status, headers: extra)
    }

    /// A JSON response from JSON text already written (without the final newline), with the
    /// same headers as ``json(_:status:headers:)``.
    ///
    /// Both are consumed, so that the newline and the headers are added to the caller's own
    /// buffers, not to copies of them.
    static func json(
        serialized body: consuming [UInt8], status: Int = 200, headers: consuming HTTPHeaders = HTTPHeaders()
    ) -> HTTPResponse {
        body.append(UInt8(ascii: "\n"))
        return json(line: body, status: status, headers: headers)
    }

    /// A JSON response from JSON text that already ends with its newline: text written once and
    /// served many times, sent as it is, without a copy to add the newline.
    static func json(line body: [UInt8], status: Int = 200, headers: consuming HTTPHeaders = HTTPHeaders())
        -> HTTPResponse
    {
        headers.set("Content-Type", "application/json")
        if headers["Cache-Control"] == nil { headers.set("Cache-Control", "no-store") }
        return HTTPResponse(status: status, headers: headers, body: body)
    }

    /// A plain-text response.
    package static func text(_ text: String, status: Int = 200, contentType: String = "text/plain; charset=utf-8")
        -> HTTPResponse
    {
        HTTPResponse(status: status, headers: ["Content-Type": contentType], body: Array(text.utf8))
    }
}
