/// A browser's sign-in, shared by the account page and the authorization endpoint: the session
/// a request's cookie names, and the start of a sign-in under the address's attempt limits.
struct BrowserSignIn: Sendable {
    let browser: BrowserRequests
    let sessions: BrowserSessions
    let limits: AttemptLimits
    let metrics: ServerMetrics

    /// The live session the request's session cookie names (``BrowserSessions/session(cookie:)``).
    func session(of request: HTTPRequest) throws -> BrowserSessions.Presented? {
        try sessions.session(cookie: browser.cookie(browser.sessionCookieName, in: request))
    }

    /// Ends the browser's waiting session for the waiting page's "Use another name"
    /// (``SignInForms/anotherUserField``), when the form carries its CSRF token. A signed-in
    /// session is left alone (a stale page cannot sign its user out this way), and the sign-in
    /// request is withdrawn from the user's devices, as after Cancel (``BrowserSessions/end(_:)``).
    ///
    /// - Returns: the headers that clear the session cookie (none when the browser has no
    ///   waiting session: the form comes back all the same); nil when the CSRF token is wrong.
    func endWaiting(_ request: HTTPRequest, form: [String: String]) throws -> HTTPHeaders? {
        var headers = HTTPHeaders()
        guard let session = try session(of: request), !session.record.isSignedIn else { return headers }
        guard BrowserRequests.tokensMatch(form["csrf"], session.record.csrfToken) else { return nil }
        try sessions.end(session)
        headers.add("Set-Cookie", browser.clearCookie(browser.sessionCookieName))
        return headers
    }

    /// Starts a waiting session for `user` (``BrowserSessions/begin(user:from:client:redirectURI:acrValues:)``)
    /// with every attempt counted against the address's sign-in budget: the account page's and
    /// the authorization endpoint's sign-in both come here.
    ///
    /// The user's own limits (open requests, requests an hour) never show here: a refused start
    /// gets a waiting page like any other, so that neither a flood nor the answer to it tells
    /// which user names exist.
    /// - Returns: the session; nil when this address started too many sign-ins (the same for
    ///   every user name).
    func begin(
        _ request: HTTPRequest, user: String, client: String? = nil, redirectURI: String? = nil,
        acrValues: [String] = []
    ) throws -> BrowserSessions.Presented? {
        let address = browser.clientAddress(of: request)
        var begun: BrowserSessions.Presented?
        do {
            _ = try limits.run(
                from: RateLimitKey(address: address), everyAttempt: .signInStarts, record: metrics.recordSignInRequest
            ) {
                begun = try sessions.begin(
                    user: user, from: address, client: client, redirectURI: redirectURI, acrValues: acrValues)
                return (HTTPResponse(status: 204), "created")
            }
        } catch let error as ServiceError {
            guard case .slowDown = error.kind else { throw error }
            return nil
        }
        guard let session = begun else { throw StorageError(.queryFailed, "the session was not stored") }
        // The new session's cookie replaces the browser's earlier one, and that session ends with
        // it: a sign-in again (prompt=login, max_age) must not leave alive a session the browser
        // no longer holds, which whoever had copied its cookie would go on using.
        if let earlier = try self.session(of: request), earlier.record.idHash != session.record.idHash {
            try sessions.end(earlier)
        }
        return session
    }
}
