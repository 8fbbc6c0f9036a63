import KeyAuth

/// keyauth-server's own account page at `/account` (PROTOCOL.md section 9): the user signs in by
/// approving on one of their devices (the server is its own CIBA client), then sees, approves,
/// denies, revokes and renames their devices, and signs out.
///
/// Server-rendered HTML, one style sheet, one script; every response carries a strict
/// `Content-Security-Policy`, `nosniff` and `Referrer-Policy: same-origin` (with `no-referrer` a browser sends `Origin: null` on the page's own forms, which the origin check must refuse). Every state-changing form carries a
/// CSRF token (the session's, or before a session a double-submit cookie) compared in constant
/// time, and a POST whose `Origin` is another origin or whose `Sec-Fetch-Site` is not
/// `same-origin` is refused before anything else (defence in depth besides the cookies'
/// `SameSite=Lax`, which a cross-site POST does not carry).
struct AccountPage: Sendable {
    /// Where the page lives.
    static let root = "/account"

    let service: KeyAuthService
    let limits: AttemptLimits
    let metrics: ServerMetrics
    let trustProxy: Bool
    let sessions: BrowserSessions
    /// The issuer's path, for links and form actions behind a proxy that serves the server under
    /// a prefix ("" when the issuer has none).
    let basePath: String
    /// The issuer's origin (`scheme://host[:port]`), which a browser's `Origin` must equal.
    let origin: String
    /// Whether the issuer is https: cookies are then `Secure` and `__Host-` prefixed.
    let isHTTPS: Bool

    init(service: KeyAuthService, limits: AttemptLimits, metrics: ServerMetrics, trustProxy: Bool) {
        self.service = service
        self.limits = limits
        self.metrics = metrics
        self.trustProxy = trustProxy
        sessions = BrowserSessions(service: service)
        let issuer = service.settings.issuer
        isHTTPS = issuer.lowercased().hasPrefix("https://")
        let afterScheme = issuer.firstRange(of: "://").map { issuer[$0.upperBound...] } ?? Substring(issuer)
        let slash = afterScheme.firstIndex(of: "/") ?? afterScheme.endIndex
        origin = String(issuer[..<slash]).lowercased()
        var path = String(afterScheme[slash...])
        while path.hasSuffix("/") { path.removeLast() }
        basePath = path
    }

    /// The session cookie's name: `__Host-` prefixed under https, where the prefix makes the
    /// browser refuse a cookie set by another host or for another path; plain under http, since
    /// browsers accept a `__Host-` cookie only with `Secure`, which an http page cannot set.
    var sessionCookieName: String { isHTTPS ? "__Host-keyauth-session" : "keyauth-session" }
    /// The double-submit cookie that protects the sign-in form, named like the session's.
    var csrfCookieName: String { isHTTPS ? "__Host-keyauth-csrf" : "keyauth-csrf" }
    /// The account page's own sign-in forms.
    var accountForms: SignInForms { .account(basePath: basePath) }

    /// The metrics label of a path under `/account`: a fixed set, never a raw path.
    static func label(of path: String) -> String {
        let rest = path.dropFirst(root.count)
        switch rest {
        case "", "/account.css", "/account.js", "/sign-in", "/sign-in/status", "/sign-in/continue",
            "/sign-in/cancel", "/sign-out":
            return root + rest
        default:
            let parts = rest.split(separator: "/")
            if parts.count == 3, parts[0] == "devices", DeviceAction(rawValue: String(parts[2])) != nil {
                return root + "/devices/{kid}/" + parts[2]
            }
            return root + "/{unknown}"
        }
    }

    /// What a device form asks for.
    enum DeviceAction: String, Sendable {
        case approve, deny, revoke, rename
    }

    // MARK: Routing

    /// Answers a request under `/account`.
    func respond(to request: HTTPRequest, path: String) throws -> HTTPResponse {
        let rest = String(path.dropFirst(Self.root.count))
        let isRead = request.method == "GET" || request.method == "HEAD"
        switch (rest, isRead) {
        case ("", true): return try page(request)
        case ("/account.css", true): return Self.asset(AccountAssets.css, type: "text/css; charset=utf-8")
        case ("/account.js", true): return Self.asset(AccountAssets.javaScript, type: "text/javascript; charset=utf-8")
        case ("/sign-in/status", true): return try signInStatus(request)
        case (_, true): throw RoutingError.noSuchEndpoint
        default: break
        }
        if let refusal = crossSiteRefusal(request) { return refusal }
        let form: [String: String]
        do {
            form = try request.formBody()
        } catch {
            return html(RefusedPage(basePath: basePath, reason: "The form could not be read.").html, status: 400)
        }
        switch rest {
        case "/sign-in": return try beginSignIn(request, form: form)
        case "/sign-in/continue": return try continueSignIn(request, form: form)
        case "/sign-in/cancel", "/sign-out": return try end(request, form: form)
        default:
            let parts = rest.split(separator: "/", omittingEmptySubsequences: false)
            guard parts.count == 4, parts[1] == "devices", let action = DeviceAction(rawValue: String(parts[3])) else {
                throw RoutingError.noSuchEndpoint
            }
            return try device(String(parts[2]), action: action, request: request, form: form)
        }
    }

    // MARK: Pages

    /// `GET /account`: the signed-in page, the waiting page, or the sign-in form.
    private func page(_ request: HTTPRequest) throws -> HTTPResponse {
        if let session = try sessions.session(cookie: cookie(sessionCookieName, in: request)) {
            if session.record.isSignedIn { return try signedInPage(session, message: nil) }
            return html(
                WaitingPage(basePath: basePath, session: session.record, message: nil, forms: accountForms).html)
        }
        return try signInForm(request, message: nil)
    }

    /// The sign-in form, setting a fresh double-submit cookie when the browser has none.
    private func signInForm(_ request: HTTPRequest, message: String?, status: Int = 200) throws -> HTTPResponse {
        let (token, headers) = try csrfCookie(request)
        return html(
            SignInPage(basePath: basePath, csrf: token, message: message, forms: accountForms).html, status: status,
            extra: headers)
    }

    /// The browser's double-submit CSRF token, and the `Set-Cookie` header that gives it one when
    /// it has none yet.
    func csrfCookie(_ request: HTTPRequest) throws -> (token: String, headers: HTTPHeaders) {
        var headers = HTTPHeaders()
        if let existing = cookie(csrfCookieName, in: request), existing.utf8.count == 43 {
            return (existing, headers)
        }
        let token = try BrowserSessions.randomToken()
        headers.add("Set-Cookie", setCookie(csrfCookieName, token))
        return (token, headers)
    }

    /// The signed-in page with the user's devices, and the codes of the device approvals it
    /// asked for that still wait.
    private func signedInPage(_ session: BrowserSessions.Presented, message: String?, status: Int = 200) throws
        -> HTTPResponse
    {
        let user = session.record.user
        let devices = try service.storage.devices(user: user)
        var approvalCodes: [String: String] = [:]
        for request in try service.signIn.open(for: user) where request.kind == .device {
            if let kid = request.subject { approvalCodes[kid] = request.bindingMessage }
        }
        let shown = devices.map {
            DevicesPage.Device(record: $0, status: service.visibleStatus($0), approvalCode: approvalCodes[$0.kid])
        }
        return html(
            DevicesPage(basePath: basePath, session: session.record, devices: shown, message: message).html,
            status: status)
    }

    // MARK: Sign-in

    /// `GET /account/sign-in/status`: `{"status": "pending"|"approved"|"denied"|"expired"}` for
    /// the waiting page's script.
    private func signInStatus(_ request: HTTPRequest) throws -> HTTPResponse {
        var state = BrowserSessions.SignInState.expired
        if let session = try sessions.session(cookie: cookie(sessionCookieName, in: request)) {
            state = session.record.isSignedIn ? .approved : try sessions.state(of: session.record)
        }
        var response = HTTPResponse.json(.object(["status": .string(state.rawValue)]))
        Self.addSecurityHeaders(&response.headers)
        return response
    }

    /// `POST /account/sign-in`: starts a sign-in request for the user typed, under the same
    /// per-address limits as logins.
    private func beginSignIn(_ request: HTTPRequest, form: [String: String]) throws -> HTTPResponse {
        guard let expected = cookie(csrfCookieName, in: request), Self.tokensMatch(form["csrf"], expected) else {
            return try signInForm(request, message: "The form expired; please try again.", status: 403)
        }
        let user = form["user"]?.trimmingCharacters() ?? ""
        guard InputRules.isValidUser(user) else {
            return try signInForm(request, message: "A user name is \(InputRules.userRule).", status: 400)
        }
        guard let session = try beginSession(request, user: user) else {
            return try signInForm(
                request, message: "Too many sign-in requests; wait a few minutes and try again.", status: 429)
        }
        return redirect(setting: [setCookie(sessionCookieName, session.cookie)])
    }

    /// Starts a waiting session for `user` (``BrowserSessions/begin(user:from:client:redirectURI:)``)
    /// with every attempt counted against the address's sign-in budget: the account page's and
    /// the authorization endpoint's sign-in both come here.
    ///
    /// The user's own limits (open requests, requests an hour) never show here: a refused start
    /// gets a waiting page like any other, so that neither a flood nor the answer to it tells
    /// which user names exist.
    /// - Returns: the session; nil when this address started too many sign-ins (the same for
    ///   every user name).
    func beginSession(
        _ request: HTTPRequest, user: String, client: String? = nil, redirectURI: String? = nil
    ) throws -> BrowserSessions.Presented? {
        let address = clientAddress(of: request)
        var begun: BrowserSessions.Presented?
        do {
            _ = try limits.run(
                from: RateLimitKey(address: address), everyAttempt: .signInStarts, record: metrics.recordSignInRequest
            ) {
                begun = try sessions.begin(user: user, from: address, client: client, redirectURI: redirectURI)
                return (HTTPResponse(status: 204), "created")
            }
        } catch let error as ServiceError {
            guard case .slowDown = error.kind else { throw error }
            return nil
        }
        guard let session = begun else { throw StorageError(.queryFailed, "the session was not stored") }
        return session
    }

    /// `POST /account/sign-in/continue`: completes an approved sign-in, or says why not.
    private func continueSignIn(_ request: HTTPRequest, form: [String: String]) throws -> HTTPResponse {
        guard let session = try sessions.session(cookie: cookie(sessionCookieName, in: request)) else {
            return redirect()
        }
        guard Self.tokensMatch(form["csrf"], session.record.csrfToken) else { return refusedCSRF() }
        if session.record.isSignedIn { return redirect() }
        switch try sessions.state(of: session.record) {
        case .pending:
            return html(
                WaitingPage(
                    basePath: basePath, session: session.record, message: "Not approved yet.", forms: accountForms
                ).html)
        case .approved:
            guard let signedIn = try sessions.complete(session) else {
                try sessions.end(session)
                return try signInForm(request, message: "The sign-in could not be completed; start again.")
            }
            metrics.recordSignInRequest(result: "session")
            return redirect(setting: [setCookie(sessionCookieName, signedIn.cookie)])
        case .denied:
            try sessions.end(session)
            return try signInForm(request, message: "The sign-in was denied on your device.")
        case .expired:
            try sessions.end(session)
            return try signInForm(request, message: "The sign-in request expired; start again.")
        }
    }

    /// `POST /account/sign-in/cancel` and `/account/sign-out`: ends the session.
    private func end(_ request: HTTPRequest, form: [String: String]) throws -> HTTPResponse {
        guard let session = try sessions.session(cookie: cookie(sessionCookieName, in: request)) else {
            return redirect()
        }
        guard Self.tokensMatch(form["csrf"], session.record.csrfToken) else { return refusedCSRF() }
        try sessions.end(session)
        return redirect(setting: [clearCookie(sessionCookieName)])
    }

    // MARK: Devices

    /// `POST /account/devices/{kid}/{action}`: the device API's rules, for the signed-in user.
    private func device(
        _ kid: String, action: DeviceAction, request: HTTPRequest, form: [String: String]
    ) throws -> HTTPResponse {
        guard let session = try sessions.session(cookie: cookie(sessionCookieName, in: request)),
            session.record.isSignedIn
        else { return try signInForm(request, message: "Your session ended; sign in again.", status: 403) }
        guard Self.tokensMatch(form["csrf"], session.record.csrfToken) else { return refusedCSRF() }
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
                _ = try service.signIn.start(
                    kind: .device, clientID: nil, user: user, bindingMessage: nil, scope: nil, requestedExpiry: nil,
                    from: clientAddress(of: request), subject: kid)
            case .deny, .revoke:
                _ = try service.registry.revoke(kid: kid, ownedBy: user, by: actor)
                // The lookup of every session checks its device; this ends them at once too.
                try service.storage.deleteBrowserSessions(approvedBy: kid)
            case .rename:
                try service.registry.rename(kid: kid, ownedBy: user, to: form["name"] ?? "")
            }
        } catch let error as ServiceError {
            return try signedInPage(session, message: error.description, status: 400)
        }
        return redirect()
    }

    // MARK: Checks

    /// A 403 for a POST that a browser says comes from another site: an `Origin` other than the
    /// issuer's, or `Sec-Fetch-Site` other than `same-origin`. Clients that send neither (not a
    /// browser) still need the CSRF token.
    func crossSiteRefusal(_ request: HTTPRequest) -> HTTPResponse? {
        let site = request.headers["Sec-Fetch-Site"]?.lowercased()
        let requestOrigin = request.headers["Origin"]?.lowercased()
        let crossSite = (site != nil && site != "same-origin") || (requestOrigin != nil && requestOrigin != origin)
        guard crossSite else { return nil }
        return html(RefusedPage(basePath: basePath, reason: "The request came from another site.").html, status: 403)
    }

    func refusedCSRF() -> HTTPResponse {
        html(RefusedPage(basePath: basePath, reason: "The form expired; reload the page.").html, status: 403)
    }

    /// Whether a form's token equals the expected one, in constant time.
    static func tokensMatch(_ presented: String?, _ expected: String) -> Bool {
        guard let presented, !expected.isEmpty else { return false }
        return CryptoPrimitives.constantTimeEquals(Array(presented.utf8), Array(expected.utf8))
    }

    /// The client address as the responder determines it (behind a trusted proxy, the last
    /// `X-Forwarded-For` hop).
    func clientAddress(of request: HTTPRequest) -> String {
        guard trustProxy, let header = request.headers.values(for: "X-Forwarded-For").last,
            let last = header.split(separator: ",").last?.trimmingWhitespace(), RateLimitKey(parsing: last) != nil
        else { return request.clientAddress }
        return last
    }

    // MARK: Cookies and responses

    /// The value of cookie `name` in the request's `Cookie` headers.
    func cookie(_ name: String, in request: HTTPRequest) -> String? {
        for header in request.headers.values(for: "Cookie") {
            for pair in header.split(separator: ";") {
                let parts = pair.split(separator: "=", maxSplits: 1)
                guard parts.count == 2, parts[0].trimmingWhitespace() == name else { continue }
                return parts[1].trimmingWhitespace()
            }
        }
        return nil
    }

    /// A `Set-Cookie` value: `HttpOnly`, `SameSite=Lax`, `Path=/`, no `Domain`, `Secure` under
    /// https; a session cookie (no `Max-Age`): the server ends the session itself.
    ///
    /// `Lax`, not `Strict`: a relying party sends the browser to `/authorize` by a cross-site
    /// top-level redirect, on which browsers do not send `Strict` cookies, so a signed-in
    /// session would never be found there (PROTOCOL.md section 9). `Lax` cookies go with
    /// top-level GET navigations only, and every GET here only reads; every POST still needs
    /// its CSRF token and passes the `Origin`/`Sec-Fetch-Site` check.
    func setCookie(_ name: String, _ value: String) -> String {
        "\(name)=\(value); Path=/; HttpOnly; SameSite=Lax" + (isHTTPS ? "; Secure" : "")
    }

    /// A `Set-Cookie` value that deletes cookie `name`.
    func clearCookie(_ name: String) -> String {
        "\(name)=; Path=/; Max-Age=0; HttpOnly; SameSite=Lax" + (isHTTPS ? "; Secure" : "")
    }

    /// 303 to the page itself (post/redirect/get), setting `cookies`.
    private func redirect(setting cookies: [String] = []) -> HTTPResponse {
        var response = HTTPResponse(status: 303, headers: ["Location": basePath + Self.root])
        for cookie in cookies { response.headers.add("Set-Cookie", cookie) }
        Self.addSecurityHeaders(&response.headers)
        return response
    }

    /// An HTML page with the security headers.
    ///
    /// - Parameter redirectsTo: a URI the page's forms are answered with a redirect to (a relying
    ///   party's redirect URI): its origin joins `form-action`, since Chromium applies
    ///   `form-action` to the redirects that follow a form submission too.
    func html(
        _ page: HTML, status: Int = 200, extra: HTTPHeaders = HTTPHeaders(), redirectsTo: String? = nil
    ) -> HTTPResponse {
        var response = HTTPResponse.text(page.markup, status: status, contentType: "text/html; charset=utf-8")
        for field in extra { response.headers.add(field.name, field.value) }
        Self.addSecurityHeaders(&response.headers)
        if let origin = redirectsTo.flatMap(RedirectURI.origin(of:)) {
            response.headers.set(
                "Content-Security-Policy",
                Self.contentSecurityPolicy.replacing("form-action 'self'", with: "form-action 'self' \(origin)"))
        }
        return response
    }

    private static func asset(_ text: String, type: String) -> HTTPResponse {
        var response = HTTPResponse.text(text, contentType: type)
        addSecurityHeaders(&response.headers)
        response.headers.set("Cache-Control", "no-cache")
        return response
    }

    /// The policy of every response under `/account`: only this origin's script, style and
    /// images, forms only to this origin, no framing, no `<base>`. `connect-src 'self'` lets the
    /// script ask for the sign-in's state; nothing else may be fetched.
    static let contentSecurityPolicy =
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
        + "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

    static func addSecurityHeaders(_ headers: inout HTTPHeaders) {
        headers.set("Content-Security-Policy", contentSecurityPolicy)
        headers.set("X-Content-Type-Options", "nosniff")
        headers.set("Referrer-Policy", "same-origin")
        headers.set("X-Frame-Options", "DENY")
        if headers["Cache-Control"] == nil { headers.set("Cache-Control", "no-store") }
    }
}

extension String {
    /// The text without leading and trailing spaces and tabs.
    fileprivate func trimmingCharacters() -> String {
        Substring(self).trimmingWhitespace()
    }
}
