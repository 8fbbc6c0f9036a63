import KeyAuth

/// What every page the server shows a browser shares (PROTOCOL.md section 9): the cookies, the
/// CSRF tokens, the refusal of cross-site requests, the client address, and (in
/// `BrowserRequests+Responses.swift`) the security headers of every answer.
///
/// The account page and the OpenID pages (`/authorize`, `/end-session`) use this one value, so
/// that a rule (a cookie attribute, the origin check) cannot differ between them. Every
/// state-changing form carries a CSRF token (the session's, or before a session a double-submit
/// cookie) compared in constant time, and a POST whose `Origin` is another origin or whose
/// `Sec-Fetch-Site` is not `same-origin` is refused before anything else (defence in depth
/// besides the cookies' `SameSite=Lax`, which a cross-site POST does not carry).
struct BrowserRequests: Sendable {
    /// The issuer's path, for links and form actions behind a proxy that serves the server under
    /// a prefix ("" when the issuer has none).
    let basePath: String
    /// The issuer's origin (`scheme://host[:port]`), which a browser's `Origin` must equal.
    let origin: String
    /// Whether the issuer is https: cookies are then `Secure` and `__Host-` prefixed.
    let isHTTPS: Bool
    /// Whether the last `X-Forwarded-For` hop is the client address (`--trust-proxy`).
    let trustProxy: Bool

    init(issuer: String, trustProxy: Bool) {
        self.trustProxy = trustProxy
        isHTTPS = issuer.lowercased().hasPrefix("https://")
        let afterScheme = issuer.firstRange(of: "://").map { issuer[$0.upperBound...] } ?? Substring(issuer)
        let slash = afterScheme.firstIndex(of: "/") ?? afterScheme.endIndex
        origin = String(issuer[..<slash]).lowercased()
        var path = String(afterScheme[slash...])
        while path.hasSuffix("/") { path.removeLast() }
        basePath = path
    }

    /// The client address as the responder determines it (``HTTPRequest/clientAddress(trustingProxy:)``).
    func clientAddress(of request: HTTPRequest) -> String {
        request.clientAddress(trustingProxy: trustProxy)
    }

    // MARK: Cross-site requests and CSRF tokens

    /// A 403 for a POST that a browser says comes from another site: an `Origin` other than the
    /// issuer's, or `Sec-Fetch-Site` other than `same-origin`. Clients that send neither (not a
    /// browser) still need the CSRF token.
    func crossSiteRefusal(_ request: HTTPRequest) -> HTTPResponse? {
        let site = request.headers["Sec-Fetch-Site"]?.lowercased()
        let requestOrigin = request.headers["Origin"]?.lowercased()
        let crossSite = (site != nil && site != "same-origin") || (requestOrigin != nil && requestOrigin != origin)
        guard crossSite else { return nil }
        return refused("The request came from another site.", status: 403)
    }

    /// 303 to `path` with `form`'s values of `names` as its query: how a relying party's
    /// cross-site form post goes on as a top-level `GET`, which carries the `SameSite=Lax`
    /// cookies the post did not. Nil when the query would be longer than every browser and
    /// proxy takes in a URL (``maximumRedirectedQuery``).
    func redirectAsGet(to path: String, form: [String: String], keeping names: Set<String>) -> HTTPResponse? {
        let query = form.filter { names.contains($0.key) }.sorted { $0.key < $1.key }
            .map { FormURLEncoding.encode($0.key) + "=" + FormURLEncoding.encode($0.value) }
            .joined(separator: "&")
        guard query.utf8.count <= Self.maximumRedirectedQuery else { return nil }
        return redirect(to: basePath + path + (query.isEmpty ? "" : "?" + query))
    }

    /// The longest query ``redirectAsGet(to:form:keeping:)`` sends a post back as.
    static let maximumRedirectedQuery = 8 * 1024

    /// The 403 for a form whose CSRF token is not the one expected.
    func refusedCSRF() -> HTTPResponse {
        refused("The form expired; reload the page.", status: 403)
    }

    /// Whether a form's token equals the expected one, in constant time.
    static func tokensMatch(_ presented: String?, _ expected: String) -> Bool {
        guard let presented, !expected.isEmpty else { return false }
        return CryptoPrimitives.constantTimeEquals(Array(presented.utf8), Array(expected.utf8))
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

    // MARK: Cookies

    /// The session cookie's name: `__Host-` prefixed under https, where the prefix makes the
    /// browser refuse a cookie set by another host or for another path; plain under http, since
    /// browsers accept a `__Host-` cookie only with `Secure`, which an http page cannot set.
    var sessionCookieName: String { isHTTPS ? "__Host-keyauth-session" : "keyauth-session" }
    /// The double-submit cookie that protects the sign-in form, named like the session's.
    var csrfCookieName: String { isHTTPS ? "__Host-keyauth-csrf" : "keyauth-csrf" }

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
}
