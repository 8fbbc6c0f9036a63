import KeyAuth

/// The answers to a browser: pages, redirects and scripts' JSON, each with the security headers.
extension BrowserRequests {
    /// The policy of every answer to a browser: only this origin's script, style and images,
    /// forms only to this origin, no framing, no `<base>`. `connect-src 'self'` lets the script
    /// ask for the sign-in's state; nothing else may be fetched.
    static let contentSecurityPolicy =
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
        + "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

    /// Sets the policy, `nosniff`, `Referrer-Policy: same-origin` (with `no-referrer` a browser
    /// sends `Origin: null` on the page's own forms, which the origin check must refuse), no
    /// framing, and `no-store` unless the response chose its caching.
    static func addSecurityHeaders(_ headers: inout HTTPHeaders) {
        headers.set("Content-Security-Policy", contentSecurityPolicy)
        headers.set("X-Content-Type-Options", "nosniff")
        headers.set("Referrer-Policy", "same-origin")
        headers.set("X-Frame-Options", "DENY")
        if headers["Cache-Control"] == nil { headers.set("Cache-Control", "no-store") }
    }

    /// A page with the security headers.
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

    /// A refused request's page (``RefusedPage``).
    func refused(_ reason: String, title: String = "Refused", status: Int) -> HTTPResponse {
        html(RefusedPage(basePath: basePath, reason: reason, title: title).html, status: status)
    }

    /// 303 to `location`, setting `cookies` (post/redirect/get, or back to a relying party).
    func redirect(to location: String, setting cookies: [String] = []) -> HTTPResponse {
        var response = HTTPResponse(status: 303, headers: ["Location": location])
        for cookie in cookies { response.headers.add("Set-Cookie", cookie) }
        Self.addSecurityHeaders(&response.headers)
        return response
    }

    /// A JSON answer for the page's script, with the security headers.
    func json(_ value: JSONValue) -> HTTPResponse {
        var response = HTTPResponse.json(value)
        Self.addSecurityHeaders(&response.headers)
        return response
    }

    /// A static file of the page (its style sheet, its script: revalidated on each use; its
    /// icon: `caching` given).
    static func asset(_ text: String, type: String, caching: String = "no-cache") -> HTTPResponse {
        var response = HTTPResponse.text(text, contentType: type)
        addSecurityHeaders(&response.headers)
        response.headers.set("Cache-Control", caching)
        return response
    }
}
