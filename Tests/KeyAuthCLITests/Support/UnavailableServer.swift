import KeyAuthTestSupport

/// A server that answers every request with 503 `temporarily_unavailable`, one for the whole
/// test process: it can be reached, so a login reads its discovery answer (an error, which a
/// login can do without) and asks for the PIN, and only then fails, at the token request, with
/// exit status 69. Tests of PIN prompts use it where a port nobody listens on would now stop the
/// login before the prompt.
enum UnavailableServer {
    private static let responder = Result {
        try LoopbackHTTPResponder { _ in .oauthError(503, "temporarily_unavailable", "down for maintenance") }
    }

    /// The server's URL (`http://127.0.0.1:PORT`).
    static func url() throws -> String {
        try responder.get().url
    }
}
