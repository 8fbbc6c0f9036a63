/// Turns a request into a response: the seam between the transport and the application.
///
/// Synchronous because libmicrohttpd calls it on a worker thread and waits for the answer;
/// implementations must be safe to call from several threads at once.
package protocol HTTPResponder: Sendable {
    /// Answers `request`. Never throws: every failure is a response.
    func respond(to request: HTTPRequest) -> HTTPResponse
}
