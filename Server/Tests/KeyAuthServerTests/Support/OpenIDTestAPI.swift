import Foundation
import KeyAuth
import KeyAuthServer
import KeyAuthTestSupport

@testable import KeyAuthServer

/// A browser over real sockets: it keeps cookies, sends what a same-origin form sends, and
/// follows no redirect (tests read `Location`).
struct OpenIDBrowser {
    let api: TestAPI
    var cookies: [String: String] = [:]

    /// A GET of `path` with `query` percent-encoded, as a browser sends it after a redirect.
    mutating func get(_ path: String, query: [(String, String)] = []) throws -> HTTPResponse {
        let target = query.isEmpty ? path : path + "?" + OpenIDTestAPI.encode(query)
        return try send("GET", target)
    }

    /// A form POST from a page of the server (`Origin` the issuer, `Sec-Fetch-Site: same-origin`).
    mutating func post(_ path: String, form: [(String, String)], headers extra: HTTPHeaders = HTTPHeaders()) throws
        -> HTTPResponse
    {
        var headers = extra
        headers.set("Content-Type", "application/x-www-form-urlencoded")
        if headers["Origin"] == nil { headers.set("Origin", api.issuer) }
        if headers["Sec-Fetch-Site"] == nil { headers.set("Sec-Fetch-Site", "same-origin") }
        return try send("POST", path, headers: headers, body: Array(OpenIDTestAPI.encode(form).utf8))
    }

    /// The statuses of `form` posted to `path` in the ways a forged post comes: with another
    /// site's `Origin`, with `Sec-Fetch-Site: cross-site`, and with a wrong `csrf`.
    mutating func forgedPostStatuses(_ path: String, form: [(String, String)]) throws -> [Int] {
        let wrongToken = form.map { $0.0 == "csrf" ? ("csrf", "x") : $0 }
        return [
            try post(path, form: form, headers: ["Origin": "https://evil.example"]).status,
            try post(path, form: form, headers: ["Sec-Fetch-Site": "cross-site"]).status,
            try post(path, form: wrongToken).status,
        ]
    }

    private mutating func send(
        _ method: String, _ path: String, headers extra: HTTPHeaders = HTTPHeaders(), body: [UInt8] = []
    )
        throws -> HTTPResponse
    {
        var headers = extra
        if !cookies.isEmpty {
            headers.add("Cookie", cookies.map { "\($0.key)=\($0.value)" }.sorted().joined(separator: "; "))
        }
        let response = try api.send(method, path, headers: headers, body: body)
        response.keepCookies(in: &cookies)
        return response
    }
}

extension HTTPResponse {
    /// Stores the response's `Set-Cookie` values in `cookies` as a browser does: a cookie set
    /// empty (or expired) is deleted.
    func keepCookies(in cookies: inout [String: String]) {
        for cookie in headers.values(for: "Set-Cookie") {
            let pair = cookie.split(separator: ";")[0].split(separator: "=", maxSplits: 1)
            let value = pair.count == 2 ? String(pair[1]) : ""
            cookies[String(pair[0])] = value.isEmpty ? nil : value
        }
    }
}

/// A relying party registered with the server.
struct RelyingParty: Sendable {
    let id: String
    /// Nil for a public client.
    let secret: String?
    let redirectURI: String

    /// The credentials for `client_secret_basic`.
    var basic: TestClient? { secret.map { TestClient(id: id, secret: $0) } }
}

/// A PKCE pair (RFC 7636).
struct PKCE: Sendable {
    let verifier: String
    let challenge: String

    init() throws {
        verifier = Base64URL.encode(try CryptoPrimitives.randomBytes(count: 32))
        challenge = try OpenIDProvider.codeChallenge(for: verifier)
    }
}

/// The requests of the OpenID Connect provider's tests.
enum OpenIDTestAPI {
    /// `name=value&...`, each part percent-encoded.
    static func encode(_ pairs: [(String, String)]) -> String {
        pairs.map { TestAPI.formEncode($0.0) + "=" + TestAPI.formEncode($0.1) }.joined(separator: "&")
    }

    /// Registers a relying party.
    static func addClient(
        _ api: TestAPI, name: String = "Wiki", redirect: String = "https://wiki.example.org/callback",
        logout: [String] = ["https://wiki.example.org/signed-out"], isPublic: Bool = false
    ) throws -> RelyingParty {
        let (client, secret) = try ClientRegistry(storage: api.storage, now: api.clock.closure).add(
            name: name, redirectURIs: [redirect], postLogoutRedirectURIs: logout, isPublic: isPublic)
        return RelyingParty(id: client.id, secret: secret, redirectURI: redirect)
    }

    /// The parameters of a good authorization request, with `changes` replacing or (with a nil
    /// value) removing some.
    static func authorization(
        _ client: RelyingParty, pkce: PKCE, state: String = "state-1", nonce: String = "n-0S6_WzA2Mj",
        changes: [String: String?] = [:]
    ) -> [(String, String)] {
        var pairs: [(String, String)] = [
            ("response_type", "code"), ("client_id", client.id), ("redirect_uri", client.redirectURI),
            ("scope", "openid profile"), ("state", state), ("nonce", nonce), ("code_challenge", pkce.challenge),
            ("code_challenge_method", "S256"),
        ]
        for (name, value) in changes {
            pairs.removeAll { $0.0 == name }
            if let value { pairs.append((name, value)) }
        }
        return pairs
    }

    /// The value of the hidden field `name` in a page.
    static func hidden(_ name: String, in page: String) throws -> String {
        let marker = "name=\"\(name)\" value=\""
        guard let start = page.range(of: marker)?.upperBound, let end = page[start...].firstIndex(of: "\"") else {
            throw TestFailure("no hidden field \(name) in the page")
        }
        return String(page[start..<end])
    }

    /// The query parameters of a redirect's `Location`, and the URI before the query.
    static func redirect(_ response: HTTPResponse) throws -> (base: String, parameters: [String: String]) {
        guard response.status == 303, let location = response.headers["Location"] else {
            throw TestFailure("not a redirect: \(response.status) \(response.text.prefix(300))")
        }
        let parts = location.split(separator: "?", maxSplits: 1)
        let parameters = parts.count == 2 ? try FormURLEncoding.decode(Array(parts[1].utf8)) : [:]
        return (String(parts[0]), parameters)
    }

    /// The code grant at the token endpoint; the client authenticates with `client_secret_basic`
    /// (a public one sends `client_id`), and sends `dpopProof` in a `DPoP` header when given.
    static func redeem(
        _ api: TestAPI, _ client: RelyingParty, code: String, verifier: String, redirectURI: String? = nil,
        dpopProof: String? = nil
    ) throws -> HTTPResponse {
        var form = [
            ("grant_type", "authorization_code"), ("code", code), ("redirect_uri", redirectURI ?? client.redirectURI),
            ("code_verifier", verifier),
        ]
        if client.secret == nil { form.append(("client_id", client.id)) }
        var headers = HTTPHeaders()
        if let dpopProof { headers.set("DPoP", dpopProof) }
        return try api.clientPost("/oauth/token", client: client.basic, form: form, headers: headers)
    }

    /// A whole sign-in of `client` in a new browser, approved by `device`, and the redemption of
    /// its code: the token response.
    static func codeFlowTokens(_ api: TestAPI, device: ApprovingDevice, client: RelyingParty) throws -> HTTPResponse {
        let pkce = try PKCE()
        var browser = OpenIDBrowser(api: api)
        let done = try signIn(&browser, device: device, authorization(client, pkce: pkce))
        guard let code = try redirect(done).parameters["code"] else { throw TestFailure("no code in the redirect") }
        return try redeem(api, client, code: code, verifier: pkce.verifier)
    }

    /// Runs the authorization request `parameters` in `browser` through the sign-in form,
    /// `device`'s approval (or denial) and Continue; returns the final answer, a redirect to the
    /// client.
    static func signIn(
        _ browser: inout OpenIDBrowser, device: ApprovingDevice, _ parameters: [(String, String)],
        user: String = "alice", approve: Bool = true
    ) throws -> HTTPResponse {
        let continueForm = try startSignIn(&browser, parameters, user: user)
        try device.answerNewest(approve: approve)
        return try browser.post("/authorize/continue", form: continueForm)
    }

    /// Sends the authorization request `parameters` in `browser` and submits the sign-in form for
    /// `user`; returns the waiting page's Continue form (`csrf`, `authorization`).
    static func startSignIn(
        _ browser: inout OpenIDBrowser, _ parameters: [(String, String)], user: String = "alice"
    ) throws -> [(String, String)] {
        let form = try browser.get("/authorize", query: parameters)
        guard form.status == 200 else { throw TestFailure("no sign-in form: \(form.status) \(form.text)") }
        let reference = try hidden("authorization", in: form.text)
        let waiting = try browser.post(
            "/authorize/sign-in",
            form: [("csrf", try hidden("csrf", in: form.text)), ("authorization", reference), ("user", user)])
        guard waiting.status == 200 else { throw TestFailure("no waiting page: \(waiting.status) \(waiting.text)") }
        return [("csrf", try hidden("csrf", in: waiting.text)), ("authorization", reference)]
    }

    /// `GET /userinfo` with a Bearer token.
    static func userInfo(_ api: TestAPI, token: String) throws -> HTTPResponse {
        try api.send("GET", "/userinfo", headers: ["Authorization": "Bearer \(token)"])
    }
}

/// A device of the user, answering sign-in requests as `keyauth approve` does.
struct ApprovingDevice {
    let api: TestAPI
    let key: RSAPrivateKey
    let token: String

    /// The user's open requests.
    func requests() throws -> [JSONValue] {
        try api.openRequests(token: token).json?["requests"]?.arrayValue ?? []
    }

    /// Approves (or denies) the newest open request; returns it as listed.
    @discardableResult
    func answerNewest(approve: Bool = true) throws -> JSONValue {
        guard let request = try requests().last, let id = request["id"]?.stringValue else {
            throw TestFailure("no open sign-in request")
        }
        let assertion = approve ? try api.approvalAssertion(key, id: id) : nil
        let answer = try api.answer(id, decision: approve ? "approve" : "deny", assertion: assertion, token: token)
        guard answer.status == 200 else { throw TestFailure("answer failed: \(answer.status) \(answer.text)") }
        return request
    }
}
