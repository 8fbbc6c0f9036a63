/// Turns a request into a response: the seam between the transport and the application.
///
/// Synchronous because libmicrohttpd calls it on a worker thread and waits for the answer;
/// implementations must be safe to call from several threads at once.
package protocol HTTPResponder: Sendable {
    /// Answers `request`. Never throws: every failure is a response.
    func respond(to request: HTTPRequest) -> HTTPResponse

    /// The answer to a request for `path` when the transport itself fails it after ``respond(to:)``: the
    /// writes it depends on failed (a full disk), or the server stops before they are durable.
    /// The application may add what its answers on that path carry (a page's headers).
    func failure(_ error: any Error, at path: String) -> HTTPResponse
}

extension HTTPResponder {
    package func failure(_ error: any Error, at path: String) -> HTTPResponse {
        HTTPResponse(error: error)
    }
}
