import KeyAuth

/// `/end-session`: OpenID Connect RP-Initiated Logout 1.0 (PROTOCOL.md section 10).
///
/// A relying party sends the browser here with `id_token_hint`, optionally `client_id`,
/// `post_logout_redirect_uri` (which must equal one registered for that client, byte for
/// byte) and `state`. The browser session ends at once when the hint is an ID token of ours for
/// the session's user, issued to a registered client: only a party that received that token can
/// send it (an access token is refused, ``IDTokens/hint(_:)``). Without such a hint
/// (any site can link here), the page asks the user to confirm with a form that carries the
/// session's CSRF token, so another site cannot sign the user out unseen. A redirect URI that
/// is not registered gets a page and no redirect; without one, the page says the user signed out.
struct EndSessionEndpoint: Sendable {
    static let path = "/end-session"

    /// The rules: which hints and redirect URIs are good, and the end of a session.
    let provider: OpenIDProvider
    /// The browser's session: the account page's.
    let signIn: BrowserSignIn
    /// Cookies, CSRF tokens, the cross-site check and the answers' headers.
    var browser: BrowserRequests { signIn.browser }

    /// Answers `GET` or `POST /end-session`; `caller` learns the client of a valid hint or of a
    /// registered post-logout redirect URI, and the user whose signed-in session ends.
    func respond(to request: HTTPRequest, caller: inout KeyAuthResponder.Caller) throws -> HTTPResponse {
        guard request.repeatedQueryNames.isEmpty else {
            return errorPage("The request repeats a parameter; each may appear only once.")
        }
        var parameters = request.query
        let confirmed = request.method == "POST"
        if confirmed {
            guard let form = try? request.formBody() else { return errorPage("The form could not be read.") }
            // A relying party's form post (RP-Initiated Logout 1.0 section 2 allows POST) is
            // cross-site, and the browser sends no SameSite=Lax cookie with it: the session
            // could not be found, let alone ended. The same request as a GET is a top-level
            // navigation that carries the cookie; it is a request, not the confirmation form,
            // so without a hint proving the session it asks the user, as any GET does.
            if browser.crossSiteRefusal(request) != nil {
                return redirectedAsGet(form, hasQuery: !request.query.isEmpty)
            }
            parameters = form
        }
        var hinted: IDTokens.LogoutHint?
        if let hint = parameters["id_token_hint"], !hint.isEmpty {
            guard let token = try provider.logoutHint(hint) else {
                return errorPage("The id_token_hint is not an ID token of this server.")
            }
            hinted = token
            caller.clientID = token.clientID
        }
        let clientID = parameters["client_id"].flatMap { $0.isEmpty ? nil : $0 }
        if let clientID, let hinted, hinted.clientID != clientID {
            return errorPage("The client_id is not the audience of the id_token_hint.")
        }
        var redirect: String?
        if let uri = parameters["post_logout_redirect_uri"], !uri.isEmpty {
            guard let id = clientID ?? hinted?.clientID,
                let client = try provider.postLogoutClient(id, redirectURI: uri)
            else { return errorPage("The post_logout_redirect_uri is not registered for this application.") }
            caller.clientID = client.id
            redirect = uri
        }
        let session = try signIn.session(of: request)
        if let session {
            // Only an ID token of this very session proves it: any ID token the user was ever
            // issued (any age, any client, a CIBA one without `sid`) would otherwise sign them
            // out unasked for whoever found one in a log or a browser's history.
            let currentSessionID = try BrowserSessions.sessionID(of: session.record)
            let proven =
                session.record.isSignedIn && hinted?.user == session.record.user
                && hinted?.sessionID?.isSameBytes(as: currentSessionID) == true
            if !proven && !confirmed {
                return confirmationPage(
                    session.record, parameters: parameters, clientID: clientID ?? hinted?.clientID,
                    redirectsTo: redirect)
            }
            if confirmed && !BrowserRequests.tokensMatch(parameters["csrf"], session.record.csrfToken) {
                return browser.refusedCSRF()
            }
            caller.identify(session.record)
            try provider.endSession(session, clientID: clientID ?? hinted?.clientID)
        }
        var response: HTTPResponse
        if let redirect {
            let location =
                // A state over /authorize's limit is not sent back (the Location header's size).
                parameters["state"].flatMap {
                    $0.utf8.count <= OpenIDProvider.maximumParameterLength
                        ? RedirectURI.adding([("state", $0)], to: redirect) : nil
                } ?? redirect
            response = browser.redirect(to: location)
        } else {
            response = browser.html(RefusedPage.signedOut(basePath: browser.basePath).html)
        }
        response.headers.add("Set-Cookie", browser.clearCookie(browser.sessionCookieName))
        return response
    }

    /// The parameters RP-Initiated Logout 1.0 defines (section 2); the others are ignored.
    static let logoutParameters: Set<String> = [
        "id_token_hint", "logout_hint", "client_id", "post_logout_redirect_uri", "state", "ui_locales",
    ]

    /// 303 to this endpoint with `form`'s logout parameters as the query, as `/authorize` does
    /// with a posted request; a form beside a query, or one too long for a URL, is refused.
    private func redirectedAsGet(_ form: [String: String], hasQuery: Bool) -> HTTPResponse {
        guard !hasQuery else {
            return errorPage("A posted sign-out carries its parameters in the form, none in the URL.")
        }
        return browser.redirectAsGet(to: Self.path, form: form, keeping: Self.logoutParameters)
            ?? errorPage("The sign-out request is too long.")
    }

    /// Asks the user to confirm; the form carries the request's parameters back, checked again.
    ///
    /// The client goes back as `client_id`, also when it came as the hint's audience: the hint
    /// itself is not carried (an ID token has no place in a page), and without a client the
    /// post-logout redirect URI could not be checked, so a confirmed sign-out would fail.
    private func confirmationPage(
        _ session: BrowserSessionRecord, parameters: [String: String], clientID: String?,
        redirectsTo redirect: String?
    ) -> HTTPResponse {
        let carried =
            (clientID.map { [("client_id", $0)] } ?? [])
            + ["post_logout_redirect_uri", "state"].compactMap { name in parameters[name].map { (name, $0) } }
        let fields: HTML = "\(PageDocument.hidden("csrf", session.csrfToken))\(PageDocument.hiddenFields(carried))"
        return browser.html(
            ConfirmationPage(
                basePath: browser.basePath, title: "Sign out", text: "Sign out of keyauth as \(session.user)?",
                action: browser.basePath + Self.path, fields: fields, button: "Sign out"
            ).html,
            redirectsTo: redirect)
    }

    private func errorPage(_ reason: String) -> HTTPResponse {
        browser.html(RefusedPage.signOutRefused(basePath: browser.basePath, reason: reason).html, status: 400)
    }
}
