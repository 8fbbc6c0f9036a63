import KeyAuth

/// The OpenID Connect authorization endpoint (PROTOCOL.md section 10): `GET` (or `POST`)
/// `/authorize`, then the account page's sign-in flow under `/authorize/sign-in`,
/// `/authorize/continue` and `/authorize/cancel`, or for a signed-in user the consent page's
/// `/authorize/consent`, ending in a redirect back to the relying party with a one-time code.
///
/// The sign-in is the account page's, shared through ``BrowserSignIn`` and ``BrowserRequests``:
/// the same forms, waiting page, script, browser sessions, cookies, CSRF tokens and cross-site
/// refusal. What this type
/// adds is the authorization request: validated before anything else, then carried by the
/// forms sealed with the server's key (``SealedAuthorizations``), bound to the browser by its
/// CSRF cookie, so that nothing anyone can request is stored before a user acts.
///
/// Until the client and its redirect URI are known good, every error is a page (400), never a
/// redirect, so the endpoint cannot be used as an open redirector; after, errors go back to the
/// client as RFC 6749 section 4.1.2.1 parameters with `state` and `iss` (RFC 9207).
///
/// A signed-in browser gets a code without a new approval, except for a public client: anyone
/// can send the browser here with such a client's id and a loopback redirect on a port of their
/// own, and no secret proves who redeems the code, so the user allows each of its sign-ins on a
/// consent page (RFC 8252 section 8.6).
struct AuthorizationEndpoint: Sendable {
    /// Where the endpoint lives.
    static let root = "/authorize"
    /// The rules of the flow: validation, sealing, codes.
    let provider: OpenIDProvider
    let metrics: ServerMetrics
    /// The browser's session, and the start of a sign-in under the attempt limits: the account
    /// page's.
    let signIn: BrowserSignIn
    /// Cookies, CSRF tokens, the cross-site check and the answers' headers.
    var browser: BrowserRequests { signIn.browser }
    var sessions: BrowserSessions { signIn.sessions }

    /// `/authorize` itself: OpenID Connect Core section 3.1.2.1 allows GET with a query or POST
    /// with a form; `caller` learns the client once it is found registered, and the user once a
    /// code is issued or the consent page shown to them.
    func authorizationRequest(_ request: HTTPRequest, caller: inout KeyAuthResponder.Caller) throws -> HTTPResponse {
        guard request.method == HTTPMethod.post.rawValue else {
            return try authorize(request, request.query, repeated: request.repeatedQueryNames, caller: &caller)
        }
        guard let (form, repeated) = try? request.formParameters() else {
            return errorPage("The form could not be read.")
        }
        // A relying party's form post is cross-site, and a browser sends no SameSite=Lax cookie
        // with it: answered here, the browser would look signed out and get a new CSRF cookie in
        // place of its own, which every sign-in page it has open is bound to, so any site could
        // end them by posting here. The same request as a GET is a top-level navigation, which
        // carries the cookies, with the parameters the endpoint reads (the rest are ignored either
        // way). What cannot be sent back so is refused without a cookie: a query beside the form
        // (which of the two would count?) and parameters too long for a URL. A form with repeated
        // names is answered here with its error, which sets no cookie either.
        guard request.query.isEmpty else {
            return errorPage("A posted authorization request carries its parameters in the form, none in the URL.")
        }
        guard repeated.isEmpty else { return try authorize(request, form, repeated: repeated, caller: &caller) }
        guard
            let redirected = browser.redirectAsGet(
                to: Self.root, form: form, keeping: OpenIDProvider.authorizationParameters)
        else { return errorPage("The authorization request is too long.") }
        return redirected
    }

    // MARK: The authorization request

    /// `/authorize`: checks the request; answers at once from a signed-in session (after the
    /// consent page for a public client), or refuses with `login_required` (or
    /// `consent_required`) under `prompt=none`, or shows the sign-in form.
    ///
    /// `repeated` are the names that came more than once (RFC 6749 section 3.1 forbids it): a
    /// repeated `client_id` or `redirect_uri` leaves no redirect URI to trust and gets a page;
    /// any other gets `invalid_request` at the redirect URI.
    private func authorize(
        _ request: HTTPRequest, _ parameters: [String: String], repeated: Set<String>,
        caller: inout KeyAuthResponder.Caller
    ) throws -> HTTPResponse {
        let validated: OpenIDProvider.AuthorizationRequest
        switch try provider.check(parameters, repeated: repeated) {
        case .unsafe(let reason, let client):
            caller.clientID = client?.id
            return errorPage(reason)
        case .refused(let refusal, let client, let redirectURI, let state):
            caller.clientID = client.id
            return redirect(to: redirectURI, error: refusal.code, description: refusal.description, state: state)
        case .valid(let request):
            caller.clientID = request.client.id
            validated = request
        }
        // Nothing repeats in a valid request: its state is the one parameter.
        let (client, redirectURI, state) = (validated.client, validated.record.redirectURI, validated.record.state)
        let session = try signIn.session(of: request)
        let signedIn = session.flatMap { $0.record.isSignedIn ? $0 : nil }
        // A session signed in by a device below the request's acr_values counts as none: the user
        // signs in again, on a device that meets them.
        let meetsContext =
            try signedIn.flatMap { try provider.achievedContext(of: $0.record, for: validated.record) } != nil
        if let signedIn, !validated.prompt.contains("login"),
            provider.isFresh(signedIn.record, maxAge: validated.maxAge), meetsContext
        {
            caller.identify(signedIn.record)
            guard validated.needsConsent else { return try issueCode(for: validated.record, session: signedIn.record) }
            if validated.prompt.contains("none") {
                return redirect(
                    to: redirectURI, error: .consentRequired,
                    description: "the user must allow this application's sign-in", state: state)
            }
            // The request waits for the user's answer, as for a sign-in.
            let (csrf, headers) = try browser.csrfCookie(request)
            let reference = try provider.seal(validated.record, for: .consent, csrf: csrf)
            return browser.html(
                ConsentPage(
                    basePath: browser.basePath, session: signedIn.record, clientName: client.name,
                    redirectOrigin: RedirectURI.origin(of: redirectURI) ?? redirectURI,
                    action: browser.basePath + Self.root + "/consent", hidden: [("authorization", reference)]
                ).html,
                extra: headers, redirectsTo: redirectURI)
        }
        if validated.prompt.contains("none") {
            let description =
                signedIn != nil && !meetsContext
                ? "the user is not signed in with a device that meets acr_values" : "the user is not signed in"
            return redirect(to: redirectURI, error: .loginRequired, description: description, state: state)
        }
        // A sign-in starts: the request waits sealed in the page, and nothing is stored until the
        // user names themselves.
        let (csrf, headers) = try browser.csrfCookie(request)
        let reference = try provider.seal(validated.record, for: .signIn, csrf: csrf)
        return browser.html(
            SignInPage(
                basePath: browser.basePath, csrf: csrf, message: nil,
                forms: forms(reference, client: client, redirectURI: redirectURI),
                user: validated.record.loginHint ?? signedIn?.record.user
            ).html,
            extra: headers, redirectsTo: redirectURI)
    }

    // MARK: Signing in

    /// The pending request a form carries, when the server sealed it for what the form answers,
    /// it is alive, and it is this browser's.
    private func pending(
        _ request: HTTPRequest, form: [String: String], purpose: SealedAuthorizations.Purpose = .signIn,
        caller: inout KeyAuthResponder.Caller
    ) throws -> (reference: String, record: PendingAuthorizationRecord, client: ClientRecord)? {
        guard let reference = form["authorization"], let csrf = browser.cookie(browser.csrfCookieName, in: request),
            let (record, client) = try provider.unseal(reference, for: purpose, csrf: csrf)
        else { return nil }
        caller.clientID = client.id
        return (reference, record, client)
    }

    /// `POST /authorize/sign-in`: the user name form; starts the sign-in request, whose device
    /// prompt names the client and its redirect host.
    func signIn(
        _ request: HTTPRequest, form: [String: String], caller: inout KeyAuthResponder.Caller
    ) throws -> HTTPResponse {
        guard let (reference, record, client) = try pending(request, form: form, caller: &caller),
            let csrf = browser.cookie(browser.csrfCookieName, in: request), try !provider.isAnswered(reference)
        else { return expiredPage() }
        let forms = forms(reference, client: client, redirectURI: record.redirectURI)
        if form[SignInForms.anotherUserField] != nil {
            // The waiting page's "Use another name": its session ends, the request goes on.
            guard let ended = try signIn.endWaiting(request, form: form) else { return browser.refusedCSRF() }
            return browser.html(
                SignInPage(basePath: browser.basePath, csrf: csrf, message: nil, forms: forms, user: nil).html,
                extra: ended, redirectsTo: record.redirectURI)
        }
        guard BrowserRequests.tokensMatch(form["csrf"], csrf) else { return expiredPage() }
        let user = Substring(form["user"] ?? "").trimmingWhitespace()
        guard InputRules.isValidUser(user) else {
            return browser.html(
                SignInPage(
                    basePath: browser.basePath, csrf: csrf, message: "A user name is \(InputRules.userRule).",
                    forms: forms, user: nil
                ).html,
                status: 400, redirectsTo: record.redirectURI)
        }
        guard
            let session = try signIn.begin(
                request, user: user, client: client.id, redirectURI: record.redirectURI, acrValues: record.acrValues)
        else {
            return browser.html(
                SignInPage(
                    basePath: browser.basePath, csrf: csrf,
                    message: "Too many sign-in requests; wait a few minutes and try again.", forms: forms, user: user
                ).html,
                status: 429, redirectsTo: record.redirectURI)
        }
        var headers = HTTPHeaders()
        headers.add("Set-Cookie", browser.setCookie(browser.sessionCookieName, session.cookie))
        return browser.html(
            WaitingPage(basePath: browser.basePath, session: session.record, message: nil, forms: forms).html,
            extra: headers,
            redirectsTo: record.redirectURI)
    }

    /// `POST /authorize/continue` and `/authorize/cancel`: completes an approved sign-in and
    /// redirects with a code, or redirects with `access_denied` when it was denied, expired or
    /// cancelled.
    func continueSignIn(
        _ request: HTTPRequest, form: [String: String], cancel: Bool, caller: inout KeyAuthResponder.Caller
    ) throws -> HTTPResponse {
        guard let (reference, record, client) = try pending(request, form: form, caller: &caller) else {
            return expiredPage()
        }
        let forms = forms(reference, client: client, redirectURI: record.redirectURI)
        guard let session = try signIn.session(of: request) else {
            let (csrf, headers) = try browser.csrfCookie(request)
            return browser.html(
                SignInPage(
                    basePath: browser.basePath, csrf: csrf, message: "Your sign-in expired; start again.", forms: forms
                ).html,
                extra: headers, redirectsTo: record.redirectURI)
        }
        guard BrowserRequests.tokensMatch(form["csrf"], session.record.csrfToken) else { return browser.refusedCSRF() }
        // `claimed`: the page was claimed already, by the approval this denial ends.
        func deny(_ description: String, claimed: Bool = false) throws -> HTTPResponse {
            guard try claimed || provider.claim(reference, until: record.expiresAt) else { return expiredPage() }
            var response = redirect(
                to: record.redirectURI, error: .accessDenied, description: description, state: record.state)
            // Another tab of this browser (same cookie) may have collected the approval and be
            // replacing this waiting session with its signed-in one: ending it, or clearing the
            // cookie, would lose that sign-in or sign that tab out, as the account page knows.
            if try !session.record.isSignedIn && !sessions.wasCollected(session.record) {
                try sessions.end(session)
                response.headers.add("Set-Cookie", browser.clearCookie(browser.sessionCookieName))
            }
            return response
        }
        if cancel { return try deny("the user cancelled the sign-in") }
        if session.record.isSignedIn {
            // The request was sealed for a sign-in because the session did not do for it
            // (prompt=login, max_age, a public client's consent, acr_values): a session answers
            // the form only when its own sign-in was this request's, approved on a device for this
            // client and redirect URI after the request began. Anything else would skip the
            // approval the relying party asked for.
            let began = record.expiresAt.subtractingSaturating(OpenIDProvider.pendingLifetime)
            guard try provider.isApproval(of: session.record, for: record), (session.record.signedInAt ?? .min) >= began
            else {
                let (csrf, headers) = try browser.csrfCookie(request)
                return browser.html(
                    SignInPage(
                        basePath: browser.basePath, csrf: csrf,
                        message: "This application asks you to sign in again: approve it on your device.", forms: forms
                    ).html,
                    status: 400, extra: headers, redirectsTo: record.redirectURI)
            }
            guard try provider.claim(reference, until: record.expiresAt) else { return expiredPage() }
            caller.identify(session.record)
            return try issueCode(for: record, session: session.record)
        }
        // The state first: a waiting session of a name without devices (no request behind it)
        // must look like any other until it expires.
        switch try sessions.state(of: session.record) {
        case .pending:
            return browser.html(
                WaitingPage(
                    basePath: browser.basePath, session: session.record, message: "Not approved yet.", forms: forms
                )
                .html,
                redirectsTo: record.redirectURI)
        case .approved:
            // The approval must be the one this request asked for: its client and redirect host
            // are what the device showed.
            guard try provider.isApproval(of: session.record, for: record) else {
                return try deny("the sign-in was not made for this application")
            }
            guard try provider.claim(reference, until: record.expiresAt) else { return expiredPage() }
            guard let signedIn = try sessions.complete(session) else {
                return try deny("the sign-in could not be completed", claimed: true)
            }
            metrics.recordSignInRequest(result: "session")
            caller.identify(signedIn.record)
            var response = try issueCode(for: record, session: signedIn.record)
            response.headers.add("Set-Cookie", browser.setCookie(browser.sessionCookieName, signedIn.cookie))
            return response
        case .denied:
            return try deny("the sign-in was denied on the user's device")
        case .expired:
            return try deny("the sign-in request expired")
        }
    }

    // MARK: Consent

    /// `POST /authorize/consent`: the signed-in user's answer on the consent page; a code for
    /// `decision=allow`, `access_denied` for anything else.
    func consent(
        _ request: HTTPRequest, form: [String: String], caller: inout KeyAuthResponder.Caller
    ) throws -> HTTPResponse {
        guard let (reference, record, client) = try pending(request, form: form, purpose: .consent, caller: &caller)
        else {
            return expiredPage()
        }
        guard let session = try signIn.session(of: request),
            session.record.isSignedIn
        else { return expiredPage() }
        // The session's own token: the page was made for this session and no other.
        guard BrowserRequests.tokensMatch(form["csrf"], session.record.csrfToken) else { return browser.refusedCSRF() }
        // One answer per page: a denial cannot be turned into an allow, nor an allow into a
        // second code.
        guard try provider.claim(reference, until: record.expiresAt) else { return expiredPage() }
        caller.identify(session.record)
        // The page may have waited minutes: a max_age the session met when it was shown may have
        // passed since, and then the user signs in again, as a fresh request would have them.
        if form["decision"] == "allow", !provider.isFresh(session.record, maxAge: record.maxAge) {
            let (csrf, headers) = try browser.csrfCookie(request)
            let signIn = try provider.seal(record, for: .signIn, csrf: csrf)
            return browser.html(
                SignInPage(
                    basePath: browser.basePath, csrf: csrf,
                    message: "This application asks for a recent sign-in: approve it on your device.",
                    forms: forms(signIn, client: client, redirectURI: record.redirectURI), user: session.record.user
                ).html,
                extra: headers, redirectsTo: record.redirectURI)
        }
        guard form["decision"] == "allow" else {
            return redirect(
                to: record.redirectURI, error: .accessDenied, description: "the user denied the sign-in",
                state: record.state)
        }
        return try issueCode(for: record, session: session.record)
    }

    // MARK: Responses

    /// Issues the code and redirects to the client with `code`, `state` and `iss`; or with
    /// `access_denied` when the device that signed the session in does not meet the request's
    /// `acr_values` (an approval below them is refused on the device, so this is the last guard).
    private func issueCode(for record: PendingAuthorizationRecord, session: BrowserSessionRecord) throws
        -> HTTPResponse
    {
        guard let acr = try provider.achievedContext(of: session, for: record) else {
            return redirect(
                to: record.redirectURI, error: .accessDenied,
                description: "the device that signed in does not meet the requested acr_values", state: record.state)
        }
        do {
            try signIn.limits.count(.other(session.user), against: .authorizationCodes)
        } catch {
            return redirect(
                to: record.redirectURI, error: .temporarilyUnavailable,
                description: "too many sign-ins to applications in a minute; try again shortly", state: record.state)
        }
        let code = try provider.issueAuthorizationCode(for: record, session: session, acr: acr)
        metrics.recordSignInRequest(result: "code")
        var parameters: [(String, String)] = [("code", code)]
        if let state = record.state { parameters.append(("state", state)) }
        parameters.append(("iss", provider.issuer))
        return redirect(to: record.redirectURI, parameters)
    }

    /// A redirect to the client with an RFC 6749 section 4.1.2.1 error.
    private func redirect(to uri: String, error: OAuthError.Code, description: String, state: String?)
        -> HTTPResponse
    {
        var parameters = [("error", error.rawValue), ("error_description", description)]
        if let state { parameters.append(("state", state)) }
        parameters.append(("iss", provider.issuer))
        return redirect(to: uri, parameters)
    }

    /// 303 to `uri` with `parameters` added to its query.
    private func redirect(to uri: String, _ parameters: [(String, String)]) -> HTTPResponse {
        browser.redirect(to: RedirectURI.adding(parameters, to: uri))
    }

    /// The forms of the sign-in pages for the pending request `reference`.
    private func forms(_ reference: String, client: ClientRecord, redirectURI: String) -> SignInForms {
        let base = browser.basePath + Self.root
        return SignInForms(
            signIn: base + "/sign-in", continue: base + "/continue", cancel: base + "/cancel",
            hidden: [("authorization", reference)],
            requester: "Sign in to \(client.name) (redirects to \(RedirectURI.host(of: redirectURI))).",
            application: client.name)
    }

    /// A 400 page for a request that cannot be sent back to its client.
    func errorPage(_ reason: String) -> HTTPResponse {
        browser.html(RefusedPage.signInRequestRefused(basePath: browser.basePath, reason: reason).html, status: 400)
    }

    /// The page for a form whose request is gone (expired, answered, or another browser's).
    private func expiredPage() -> HTTPResponse {
        browser.html(RefusedPage.signInRequestExpired(basePath: browser.basePath).html, status: 400)
    }
}
