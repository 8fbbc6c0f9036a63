import KeyAuth

/// keyauth-server's own account page at `/account` (PROTOCOL.md section 9): the user signs in by
/// approving on one of their devices (the server is its own CIBA client), then sees, approves,
/// denies, revokes and renames their devices, and signs out.
///
/// Server-rendered HTML (`Pages/`), one style sheet, one script; the cookies, CSRF tokens,
/// cross-site refusal and security headers are the browser helper's (``BrowserRequests``),
/// shared with the OpenID pages.
struct AccountPage: Sendable {
    /// Where the page lives.
    static let root = "/account"

    let service: KeyAuthService
    let metrics: ServerMetrics
    /// Cookies, CSRF tokens, the cross-site check and the answers' headers.
    let browser: BrowserRequests
    /// The browser's session, and the start of a sign-in under the attempt limits.
    let signIn: BrowserSignIn
    var sessions: BrowserSessions { signIn.sessions }
    var basePath: String { browser.basePath }

    init(service: KeyAuthService, signIn: BrowserSignIn) {
        self.service = service
        self.signIn = signIn
        metrics = signIn.metrics
        browser = signIn.browser
    }

    /// The account page's own sign-in forms.
    var accountForms: SignInForms { .account(basePath: basePath) }

    /// What a device form asks for.
    enum DeviceAction: String, Sendable, CaseIterable {
        case approve, deny, revoke, rename
    }

    // MARK: Pages

    /// `GET /account`: the signed-in page, the waiting page, or the sign-in form.
    func page(_ request: HTTPRequest) throws -> HTTPResponse {
        if let session = try signIn.session(of: request) {
            if session.record.isApplicationSession {
                return try signInForm(request, message: Self.applicationSessionNote)
            }
            if session.record.isSignedIn { return try signedInPage(session, message: nil) }
            return browser.html(
                WaitingPage(basePath: basePath, session: session.record, message: nil, forms: accountForms).html)
        }
        return try signInForm(request, message: nil)
    }

    /// Why a browser signed in to an application sees the sign-in form here.
    static let applicationSessionNote =
        "This browser's sign-in is an application's. To manage your devices, sign in to the account page."

    /// The sign-in form, setting a fresh double-submit cookie when the browser has none.
    private func signInForm(_ request: HTTPRequest, message: String?, status: Int = 200) throws -> HTTPResponse {
        let (token, headers) = try browser.csrfCookie(request)
        return browser.html(
            SignInPage(basePath: basePath, csrf: token, message: message, forms: accountForms).html, status: status,
            extra: headers)
    }

    /// The signed-in page with the user's devices, and the codes of the device approvals it
    /// asked for that still wait; with a new set of recovery codes on the one answer that shows it.
    func signedInPage(
        _ session: BrowserSessions.Presented, message: String?, status: Int = 200, newRecoveryCodes: [String]? = nil
    ) throws -> HTTPResponse {
        let user = session.record.user
        let devices = try service.registry.devices(ofUser: user)
        let open = try service.signIn.open(for: user)
        var approvalCodes: [String: String] = [:]
        for request in open where request.kind == .device && Self.isTag(request.requestedBy, of: session) {
            if let kid = request.subject { approvalCodes[kid] = request.bindingMessage }
        }
        let shown = devices.map {
            DevicesPage.Device(record: $0, status: service.visibleStatus($0), approvalCode: approvalCodes[$0.kid])
        }
        var page = DevicesPage(basePath: basePath, session: session.record, devices: shown, message: message)
        page.recoveryCodes = try recoveryCodesSection(session, open: open, newCodes: newRecoveryCodes)
        return browser.html(page.html, status: status)
    }

    // MARK: Sign-in

    /// `GET /account/sign-in/status`: `{"status": "pending"|"approved"|"denied"|"expired"}` for
    /// the waiting page's script.
    func signInStatus(_ request: HTTPRequest) throws -> HTTPResponse {
        var state = BrowserSessions.SignInState.expired
        if let session = try signIn.session(of: request) {
            // `/authorize`'s waiting page asks here too: an application's session has its state.
            state = session.record.isSignedIn ? .approved : try sessions.state(of: session.record)
        }
        return browser.json(.object(["status": .string(state.rawValue)]))
    }

    /// `POST /account/sign-in`: starts a sign-in request for the user typed, under the same
    /// per-address limits as logins; from the waiting page, goes back to the form.
    func beginSignIn(_ request: HTTPRequest, form: [String: String]) throws -> HTTPResponse {
        if form[SignInForms.anotherUserField] != nil {
            // The waiting page's "Use another name": back to the form, without the session.
            guard let ended = try signIn.endWaiting(request, form: form) else { return browser.refusedCSRF() }
            return redirect(setting: ended.values(for: "Set-Cookie"))
        }
        guard let expected = browser.cookie(browser.csrfCookieName, in: request),
            BrowserRequests.tokensMatch(form["csrf"], expected)
        else {
            return try signInForm(request, message: "The form expired; please try again.", status: 403)
        }
        let user = form["user"]?.trimmingCharacters() ?? ""
        guard InputRules.isValidUser(user) else {
            return try signInForm(request, message: "A user name is \(InputRules.userRule).", status: 400)
        }
        guard let session = try signIn.begin(request, user: user) else {
            return try signInForm(
                request, message: "Too many sign-in requests; wait a few minutes and try again.", status: 429)
        }
        return redirect(setting: [browser.setCookie(browser.sessionCookieName, session.cookie)])
    }

    /// `POST /account/sign-in/continue`: completes an approved sign-in, or says why not.
    func continueSignIn(_ request: HTTPRequest, form: [String: String]) throws -> HTTPResponse {
        guard let session = try signIn.session(of: request) else {
            return redirect()
        }
        guard BrowserRequests.tokensMatch(form["csrf"], session.record.csrfToken) else { return browser.refusedCSRF() }
        if session.record.isApplicationSession { return try signInForm(request, message: Self.applicationSessionNote) }
        if session.record.isSignedIn { return redirect() }
        switch try sessions.state(of: session.record) {
        case .pending:
            return browser.html(
                WaitingPage(
                    basePath: basePath, session: session.record, message: "Not approved yet.", forms: accountForms
                ).html)
        case .approved:
            guard let signedIn = try sessions.complete(session) else {
                // Another tab of this browser completed it: its new session is this browser's.
                if try sessions.wasCollected(session.record) { return redirect() }
                try sessions.end(session)
                return try signInForm(request, message: "The sign-in could not be completed; start again.")
            }
            metrics.recordSignInRequest(result: "session")
            return redirect(setting: [browser.setCookie(browser.sessionCookieName, signedIn.cookie)])
        case .denied:
            try sessions.end(session)
            return try signInForm(request, message: "The sign-in was denied on your device.")
        case .expired:
            if try sessions.wasCollected(session.record) { return redirect() }
            try sessions.end(session)
            return try signInForm(request, message: "The sign-in request expired; start again.")
        }
    }

    /// `POST /account/sign-in/cancel` and `/account/sign-out`: ends the session.
    func end(_ request: HTTPRequest, form: [String: String]) throws -> HTTPResponse {
        guard let session = try signIn.session(of: request) else {
            return redirect()
        }
        guard BrowserRequests.tokensMatch(form["csrf"], session.record.csrfToken) else { return browser.refusedCSRF() }
        try sessions.end(session)
        return redirect(setting: [browser.clearCookie(browser.sessionCookieName)])
    }

    // MARK: Devices

    /// `POST /account/devices/{kid}/{action}`: the device API's rules, for the signed-in user.
    func device(
        _ kid: String, action: DeviceAction, request: HTTPRequest, form: [String: String]
    ) throws -> HTTPResponse {
        try withSignedInSession(request, form: form) { session in
            try device(kid, action: action, request: request, form: form, session: session)
        }
    }

    /// `body`'s answer for a form posted in a signed-in session with its CSRF token; the sign-in
    /// form when the session ended, the CSRF refusal when the token is wrong.
    func withSignedInSession(
        _ request: HTTPRequest, form: [String: String],
        _ body: (BrowserSessions.Presented) throws -> HTTPResponse
    ) throws -> HTTPResponse {
        guard let session = try signIn.session(of: request),
            session.record.isSignedInToAccountPage
        else { return try signInForm(request, message: "Your session ended; sign in again.", status: 403) }
        guard BrowserRequests.tokensMatch(form["csrf"], session.record.csrfToken) else { return browser.refusedCSRF() }
        return try body(session)
    }

    /// ``device(_:action:request:form:)`` in the session already checked.
    private func device(
        _ kid: String, action: DeviceAction, request: HTTPRequest, form: [String: String],
        session: BrowserSessions.Presented
    ) throws -> HTTPResponse {
        let user = session.record.user
        let actor = AuditActor.accountPage(approvedBy: session.record.approvingKID ?? "-")
        do {
            switch action {
            case .approve:
                // Approving a device needs the user's device, not this session: the page asks one
                // of the user's devices, where the user types the code this page then shows.
                let target = try service.registry.device(kid: kid, ownedBy: user)
                guard target.status == .pending, !service.isExpiredPending(target) else {
                    throw ServiceError(.invalidRequest, "the device is not waiting for approval")
                }
                // Its code is shown on this session's page only (``isTag(_:of:)``).
                _ = try service.signIn.start(
                    kind: .device, clientID: nil, user: user, bindingMessage: nil, scope: nil, requestedExpiry: nil,
                    from: browser.clientAddress(of: request), subject: kid, requestedBy: Self.tag(of: session))
            case .deny, .revoke:
                // The registry also ends the browser sessions the device approved.
                try service.revoke(kid: kid, ownedBy: user, by: actor)
            case .rename:
                try service.rename(kid: kid, ownedBy: user, to: form["name"] ?? "", by: actor)
            }
        } catch let error as ServiceError {
            return try signedInPage(session, message: error.description, status: 400)
        }
        return redirect()
    }

    /// What names `session` in the requests it makes (base64url of its id's SHA-256), so that
    /// only it is shown their codes: number matching assumes the code is on the screen that asked.
    static func tag(of session: BrowserSessions.Presented) -> String {
        session.record.requestTag
    }

    /// Whether `tag`, as a request stored it, names `session`; a request that names none is
    /// nobody's.
    static func isTag(_ tag: String?, of session: BrowserSessions.Presented) -> Bool {
        guard let tag else { return false }
        return CryptoPrimitives.constantTimeEquals(Array(tag.utf8), Array(Self.tag(of: session).utf8))
    }

    /// 303 to the page itself (post/redirect/get), setting `cookies`.
    func redirect(setting cookies: [String] = []) -> HTTPResponse {
        browser.redirect(to: basePath + Self.root, setting: cookies)
    }
}

extension String {
    /// The text without leading and trailing spaces and tabs.
    fileprivate func trimmingCharacters() -> String {
        Substring(self).trimmingWhitespace()
    }
}
