import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

@testable import KeyAuthServer

/// keyauth-server as an OpenID Connect provider (PROTOCOL.md section 10), over real sockets: the
/// code flow with PKCE through the account page's sign-in and a device's approval, the token
/// endpoint's code grant, ID tokens checked with the JWK set, UserInfo, RP-Initiated Logout,
/// and the hostile requests of issue 15.
@Suite(
    "OpenID Connect provider: authorization code flow with PKCE, ID tokens, UserInfo, logout", .timeLimit(.minutes(10)))
struct OpenIDProviderTests {
    /// A server on a socket with alice's active laptop and a registered relying party.
    struct Setup {
        let environment: TestEnvironment
        let runner: ServerRunner
        let api: TestAPI
        let device: ApprovingDevice
        let client: RelyingParty

        init(_ configure: (inout ServerConfiguration) -> Void = { _ in }) throws {
            environment = TestEnvironment()
            runner = try environment.startServer {
                $0.failureLimit = 1000
                configure(&$0)
            }
            api = environment.socketAPI(runner)
            let laptop = try ServerTestKeys.key("alice-1")
            device = ApprovingDevice(api: api, key: laptop, token: try api.activeDevice(user: "alice", key: laptop))
            client = try OpenIDTestAPI.addClient(api)
        }

        /// Runs the authorization request in `browser` through the sign-in form, the device's
        /// approval (or denial) and Continue; returns the final redirect.
        func signIn(
            _ browser: inout OpenIDBrowser, _ parameters: [(String, String)], user: String = "alice",
            approve: Bool = true
        ) throws -> HTTPResponse {
            try OpenIDTestAPI.signIn(&browser, device: device, parameters, user: user, approve: approve)
        }

        /// Whether `browser` is signed in: `prompt=none` for the confidential client gets a code.
        func isSignedIn(_ browser: inout OpenIDBrowser) throws -> Bool {
            let answer = try browser.get(
                "/authorize", query: OpenIDTestAPI.authorization(client, pkce: try PKCE(), changes: ["prompt": "none"]))
            return try OpenIDTestAPI.redirect(answer).parameters["code"] != nil
        }

        /// A full sign-in of `client` in a new browser; returns the browser and the code.
        func code(_ client: RelyingParty? = nil, pkce: PKCE, nonce: String = "n-0S6_WzA2Mj") throws -> (
            OpenIDBrowser, String
        ) {
            var browser = OpenIDBrowser(api: api)
            let done = try signIn(
                &browser, OpenIDTestAPI.authorization(client ?? self.client, pkce: pkce, nonce: nonce))
            let (_, parameters) = try OpenIDTestAPI.redirect(done)
            guard let code = parameters["code"] else { throw TestFailure("no code: \(parameters)") }
            return (browser, code)
        }

        /// A sign-in's code redeemed once by the client: the browser, the code, its PKCE and the
        /// token response.
        func redeemedCode() throws -> (browser: OpenIDBrowser, code: String, pkce: PKCE, tokens: HTTPResponse) {
            let pkce = try PKCE()
            let (browser, code) = try code(pkce: pkce)
            return (browser, code, pkce, try OpenIDTestAPI.redeem(api, client, code: code, verifier: pkce.verifier))
        }
    }

    /// The ID token's claims after checking its signature with the key the JWK set publishes
    /// under its `kid`.
    private static func verifiedIDToken(_ token: String, api: TestAPI) throws -> (header: JSONValue, claims: JSONValue)
    {
        let keys = try JWKSet(json: try api.send("GET", "/.well-known/jwks.json").body)
        let jws = try CompactJWS(parsing: token, algorithms: Set(JWSAlgorithm.allCases))
        let kid = try #require(jws.keyID)
        let key = try #require(keys[kid])
        #expect(jws.isSignatureValid(with: key))
        return (.object(jws.header), .object(try jws.claims()))
    }

    @Test(
        "the account page answers a browser signing in to an application alike, whether the name has a device or not, and never as its own"
    )
    func applicationSignInIsNotTheAccountPages() throws {
        let setup = try Setup()
        defer { setup.runner.stop() }
        var answers: [String: [String]] = [:]
        let note = "To manage your devices, sign in to the account page"
        for user in ["alice", "nobody"] {
            var browser = OpenIDBrowser(api: setup.api)
            let parameters = OpenIDTestAPI.authorization(setup.client, pkce: try PKCE())
            let waiting = try OpenIDTestAPI.startSignIn(&browser, parameters, user: user)
            let csrf = try #require(waiting.first { $0.0 == "csrf" }?.1)
            let page = try browser.get("/account")
            let status = try browser.get("/account/sign-in/status")
            let continued = try browser.post("/account/sign-in/continue", form: [("csrf", csrf)])
            answers[user] = [
                "\(page.status) \(page.text.contains(note))", status.text,
                "\(continued.status) \(continued.text.contains(note))",
            ]
        }
        #expect(answers["alice"] == answers["nobody"], "\(answers)")
        let alice = try #require(answers["alice"])
        #expect(alice[0] == "200 true" && alice[1].contains("pending") && alice[2] == "200 true", "\(alice)")
    }

    @Test("the code flow: sign-in page, approval naming client and redirect host, code, tokens, ID token, userinfo")
    func codeFlow() throws {
        let setup = try Setup()
        defer { setup.runner.stop() }
        let api = setup.api
        let discovery = try #require(try api.send("GET", "/.well-known/openid-configuration").json)
        #expect(discovery["authorization_endpoint"] == .string(api.issuer + "/authorize"))
        #expect(discovery["userinfo_endpoint"] == .string(api.issuer + "/userinfo"))
        #expect(discovery["end_session_endpoint"] == .string(api.issuer + "/end-session"))
        #expect(discovery["code_challenge_methods_supported"] == .array(["S256"]))
        #expect(discovery["id_token_signing_alg_values_supported"] == .array(["RS256"]))
        #expect(discovery["authorization_response_iss_parameter_supported"] == .bool(true))
        #expect(discovery["grant_types_supported"]?.arrayValue?.contains("authorization_code") == true)

        let pkce = try PKCE()
        var browser = OpenIDBrowser(api: api)
        let parameters = OpenIDTestAPI.authorization(setup.client, pkce: pkce, changes: ["login_hint": "alice"])
        let form = try browser.get("/authorize", query: parameters)
        #expect(form.status == 200)
        // The account page's policy, with the redirect URI's origin as a form target: Chromium
        // checks form-action against the redirect that answers Continue.
        #expect(
            form.headers["Content-Security-Policy"]
                == BrowserRequests.contentSecurityPolicy.replacing(
                    "form-action 'self'", with: "form-action 'self' https://wiki.example.org"))
        #expect(form.headers["Content-Security-Policy"]?.contains("frame-ancestors 'none'") == true)
        #expect(form.headers["X-Frame-Options"] == "DENY")
        #expect(form.headers["Cache-Control"] == "no-store")
        #expect(form.text.contains("value=\"alice\""))
        #expect(form.text.contains("Sign in to Wiki (redirects to wiki.example.org)."))
        #expect(!form.text.contains("<script>"))
        let reference = try OpenIDTestAPI.hidden("authorization", in: form.text)
        // The form carries a reference only: none of the request's parameters.
        #expect(!form.text.contains(pkce.challenge) && !form.text.contains("state-1"))
        let waiting = try browser.post(
            "/authorize/sign-in",
            form: [
                ("csrf", try OpenIDTestAPI.hidden("csrf", in: form.text)), ("authorization", reference),
                ("user", "alice"),
            ])
        #expect(waiting.status == 200)
        let session = try #require(browser.cookies["keyauth-session"])
        let listed = try #require(try setup.device.requests().first)
        #expect(listed["client_name"] == .string("Wiki (redirects to wiki.example.org)"))
        #expect(listed["binding_message"] == nil)
        let code = try setup.api.code(of: try #require(listed["id"]?.stringValue))
        #expect(waiting.text.contains("<p id=\"binding-code\">\(code)</p>"))
        try setup.device.answerNewest()
        let done = try browser.post(
            "/authorize/continue",
            form: [("csrf", try OpenIDTestAPI.hidden("csrf", in: waiting.text)), ("authorization", reference)])
        let (base, answer) = try OpenIDTestAPI.redirect(done)
        #expect(base == setup.client.redirectURI)
        #expect(answer["state"] == "state-1")
        #expect(answer["iss"] == api.issuer)
        #expect(browser.cookies["keyauth-session"] != session)
        let cookie = try #require(done.headers.values(for: "Set-Cookie").first { $0.hasPrefix("keyauth-session=") })
        #expect(cookie.contains("SameSite=Lax") && cookie.contains("HttpOnly"))

        let tokens = try OpenIDTestAPI.redeem(
            api, setup.client, code: try #require(answer["code"]), verifier: pkce.verifier)
        #expect(tokens.status == 200, "\(tokens.text)")
        #expect(tokens.headers["Cache-Control"] == "no-store")
        let json = try #require(tokens.json)
        #expect(json["token_type"] == "Bearer")
        #expect(json["scope"] == "openid profile")
        #expect(json["refresh_token"] == nil)
        let accessToken = try #require(json["access_token"]?.stringValue)
        let (header, claims) = try Self.verifiedIDToken(try #require(json["id_token"]?.stringValue), api: api)
        #expect(header["alg"] == "RS256")
        #expect(header["typ"] == "JWT")
        #expect(claims["iss"] == .string(api.issuer))
        #expect(claims["sub"] == "alice")
        #expect(claims["aud"] == .string(setup.client.id))
        #expect(claims["azp"] == .string(setup.client.id))
        #expect(claims["nonce"] == "n-0S6_WzA2Mj")
        #expect(try claims["at_hash"] == .string(IDTokens.accessTokenHash(accessToken)))
        #expect(
            try claims["at_hash"]
                == .string(Base64URL.encode(Array(CryptoPrimitives.sha256(Array(accessToken.utf8)).prefix(16)))))
        #expect(claims["auth_time"] == .integer(setup.environment.clock.now))
        #expect(claims["acr"] == .string(KeyAuthService.keyAndPresenceACR))
        #expect(claims["amr"] == .array(["swk", "pin"]))
        #expect(claims["sid"]?.stringValue?.isEmpty == false)
        #expect(claims["exp"]?.integerValue ?? 0 > claims["iat"]?.integerValue ?? 0)

        let (_, access) = try Self.verifiedIDToken(accessToken, api: api)
        #expect(access["aud"] == .string(setup.client.id))
        #expect(access["sub"] == "alice")
        #expect(access["scope"] == "openid profile")

        let info = try OpenIDTestAPI.userInfo(api, token: accessToken)
        #expect(info.status == 200)
        #expect(info.json == .object(["sub": "alice", "preferred_username": "alice"]))
        let none = try api.send("GET", "/userinfo")
        #expect(none.status == 401 && none.headers["WWW-Authenticate"] == "Bearer realm=\"keyauth\"")
        // A device's own access token (aud the issuer) is not a relying party's.
        let deviceToken = try OpenIDTestAPI.userInfo(api, token: setup.device.token)
        #expect(deviceToken.status == 401)
        #expect(deviceToken.headers["WWW-Authenticate"]?.contains("error=\"invalid_token\"") == true)
        // It says why, in the challenge (RFC 6750 section 3) and in the body.
        #expect(
            deviceToken.headers["WWW-Authenticate"]?.contains(
                "error_description=\"a device token is not an OpenID access token; ") == true)
        #expect(deviceToken.json?["error_description"] == .string(AccessTokens.deviceTokenRefusal))
        // A token that is not valid says no more than that.
        let forged = try OpenIDTestAPI.userInfo(api, token: setup.device.token + "x")
        #expect(forged.status == 401)
        #expect(forged.json?["error_description"] == "the access token is not valid")
        // And the relying party's token opens none of the device API.
        #expect(try api.authorized("GET", "/v1/devices", token: accessToken).status == 401)
    }

    @Test("errors before the redirect URI is validated are a 400 page, never a redirect")
    func errorsBeforeRedirectValidation() throws {
        let setup = try Setup()
        defer { setup.runner.stop() }
        let pkce = try PKCE()
        let good = setup.client.redirectURI
        let cases: [(String, [String: String?])] = [
            ("no client_id", ["client_id": nil]),
            ("an unknown client_id", ["client_id": "unknown"]),
            ("no redirect_uri", ["redirect_uri": nil]),
            ("a trailing slash", ["redirect_uri": good + "/"]),
            ("another path", ["redirect_uri": "https://wiki.example.org/callback2"]),
            ("a path below", ["redirect_uri": good + "/x"]),
            ("another port", ["redirect_uri": "https://wiki.example.org:8443/callback"]),
            ("another host", ["redirect_uri": "https://evil.example/callback"]),
            ("an added query", ["redirect_uri": good + "?next=https://evil.example"]),
            ("a case change", ["redirect_uri": "https://Wiki.example.org/callback"]),
            // Even a request that is bad in other ways too gets the page, not a redirect.
            ("bad PKCE and a bad redirect", ["redirect_uri": good + "/", "code_challenge_method": "plain"]),
        ]
        for (name, changes) in cases {
            var browser = OpenIDBrowser(api: setup.api)
            let response = try browser.get(
                "/authorize", query: OpenIDTestAPI.authorization(setup.client, pkce: pkce, changes: changes))
            #expect(response.status == 400, "\(name)")
            #expect(response.headers["Location"] == nil, "\(name)")
            #expect(response.headers["Content-Type"]?.hasPrefix("text/html") == true, "\(name)")
            #expect(response.headers["X-Frame-Options"] == "DENY", "\(name)")
        }
    }

    @Test("a public client's loopback redirect matches on any port; a confidential client's does not")
    func loopbackAnyPort() throws {
        let setup = try Setup()
        defer { setup.runner.stop() }
        let api = setup.api
        let native = try OpenIDTestAPI.addClient(
            api, name: "Native", redirect: "http://127.0.0.1/callback", logout: [], isPublic: true)
        let native6 = try OpenIDTestAPI.addClient(
            api, name: "Native6", redirect: "http://[::1]/callback", logout: [], isPublic: true)
        let confidential = try OpenIDTestAPI.addClient(
            api, name: "Local", redirect: "http://127.0.0.1:8080/callback", logout: [])
        let confidentialNoPort = try OpenIDTestAPI.addClient(
            api, name: "Local2", redirect: "http://127.0.0.1/callback", logout: [])
        let pkce = try PKCE()
        func status(_ client: RelyingParty, _ redirect: String) throws -> Int {
            var browser = OpenIDBrowser(api: api)
            return try browser.get(
                "/authorize",
                query: OpenIDTestAPI.authorization(client, pkce: pkce, changes: ["redirect_uri": redirect])
            ).status
        }
        #expect(try status(native, "http://127.0.0.1:54321/callback") == 200)
        #expect(try status(native, "http://127.0.0.1/callback") == 200)
        #expect(try status(native6, "http://[::1]:40000/callback") == 200)
        #expect(try status(native, "http://127.0.0.1:54321/callback/") == 400)
        #expect(try status(native, "http://127.0.0.1:54321/other") == 400)
        #expect(try status(native, "http://localhost:54321/callback") == 400)
        #expect(try status(native, "https://127.0.0.1:54321/callback") == 400)
        #expect(try status(confidential, "http://127.0.0.1:9090/callback") == 400)
        #expect(try status(confidential, "http://127.0.0.1:8080/callback") == 200)
        #expect(try status(confidentialNoPort, "http://127.0.0.1:54321/callback") == 400)

        // The public client completes the flow with PKCE and its client_id alone.
        var browser = OpenIDBrowser(api: api)
        let done = try setup.signIn(
            &browser,
            OpenIDTestAPI.authorization(
                native, pkce: pkce, changes: ["redirect_uri": "http://127.0.0.1:54321/callback"]))
        let (base, answer) = try OpenIDTestAPI.redirect(done)
        #expect(base == "http://127.0.0.1:54321/callback")
        let redeemed = try OpenIDTestAPI.redeem(
            api, native, code: try #require(answer["code"]), verifier: pkce.verifier,
            redirectURI: "http://127.0.0.1:54321/callback")
        #expect(redeemed.status == 200, "\(redeemed.text)")
        // A public client cannot authenticate with a secret, and a confidential one not without.
        let withSecret = try api.clientPost(
            "/oauth/token", client: TestClient(id: native.id, secret: "x"),
            form: [("grant_type", "authorization_code"), ("code", "c")])
        #expect(withSecret.status == 401 && withSecret.errorCode == "invalid_client")
        let noSecret = try api.clientPost(
            "/oauth/token", client: nil,
            form: [("grant_type", "authorization_code"), ("code", "c"), ("client_id", setup.client.id)])
        #expect(noSecret.status == 401 && noSecret.errorCode == "invalid_client")
    }

    @Test("after the redirect URI is valid, errors go back with error, error_description, state and iss")
    func redirectedErrors() throws {
        let setup = try Setup()
        defer { setup.runner.stop() }
        let pkce = try PKCE()
        let cases: [(String, [String: String?])] = [
            ("invalid_request", ["code_challenge_method": nil]),
            ("invalid_request", ["code_challenge_method": "plain"]),
            ("invalid_request", ["code_challenge": nil]),
            ("invalid_request", ["code_challenge": nil, "code_challenge_method": nil]),
            ("invalid_request", ["response_type": nil]),
            ("unsupported_response_type", ["response_type": "token"]),
            ("unsupported_response_type", ["response_type": "code id_token"]),
            ("invalid_scope", ["scope": "profile"]),
            ("invalid_scope", ["scope": nil]),
            ("invalid_request", ["prompt": "select_account"]),
            ("invalid_request", ["prompt": "none login"]),
            ("invalid_request", ["prompt": "none consent"]),
            ("invalid_request", ["max_age": "-1"]),
            ("invalid_request", ["response_mode": "fragment"]),
            ("request_not_supported", ["request": "eyJ"]),
            ("login_required", ["prompt": "none"]),
        ]
        for (error, changes) in cases {
            var browser = OpenIDBrowser(api: setup.api)
            let response = try browser.get(
                "/authorize", query: OpenIDTestAPI.authorization(setup.client, pkce: pkce, changes: changes))
            let (base, parameters) = try OpenIDTestAPI.redirect(response)
            #expect(base == setup.client.redirectURI, "\(changes)")
            #expect(parameters["error"] == error, "\(changes)")
            #expect(parameters["error_description"]?.isEmpty == false, "\(changes)")
            #expect(parameters["state"] == "state-1", "\(changes)")
            #expect(parameters["iss"] == setup.api.issuer, "\(changes)")
            #expect(parameters["code"] == nil, "\(changes)")
        }
        // A state longer than the limit is not sent back with another error: 10 KiB of it,
        // percent-encoded, would be a 30 KiB Location header.
        var long = OpenIDBrowser(api: setup.api)
        let longState = String(repeating: "%", count: 10_000)
        let refused = try long.get(
            "/authorize",
            query: OpenIDTestAPI.authorization(
                setup.client, pkce: pkce, changes: ["response_type": "token", "state": longState]))
        let (_, longParameters) = try OpenIDTestAPI.redirect(refused)
        #expect(longParameters["error"] == "unsupported_response_type")
        #expect(longParameters["state"] == nil)
        #expect((refused.headers["Location"]?.utf8.count ?? 0) < 2_000)
        // A denial on the device goes back as access_denied.
        var browser = OpenIDBrowser(api: setup.api)
        let denied = try setup.signIn(
            &browser, OpenIDTestAPI.authorization(setup.client, pkce: pkce), approve: false)
        let (_, parameters) = try OpenIDTestAPI.redirect(denied)
        #expect(parameters["error"] == "access_denied")
        #expect(parameters["state"] == "state-1")
        #expect(parameters["code"] == nil)
    }

    @Test("a code is one-time: its second use is invalid_grant and revokes the first use's access token")
    func codeReuse() throws {
        let setup = try Setup()
        defer { setup.runner.stop() }
        let api = setup.api
        let (_, code, pkce, first) = try setup.redeemedCode()
        #expect(first.status == 200)
        let accessToken = try #require(first.json?["access_token"]?.stringValue)
        #expect(try OpenIDTestAPI.userInfo(api, token: accessToken).status == 200)
        let second = try OpenIDTestAPI.redeem(api, setup.client, code: code, verifier: pkce.verifier)
        #expect(second.status == 400 && second.errorCode == "invalid_grant")
        let refused = try OpenIDTestAPI.userInfo(api, token: accessToken)
        #expect(refused.status == 401)
        #expect(refused.headers["WWW-Authenticate"]?.contains("error=\"invalid_token\"") == true)
        let audit = try AuditTrail(storage: api.storage).events(since: 0).map(\.action)
        #expect(audit.contains(.issueCode) && audit.contains(.redeemCode) && audit.contains(.reuseCode))
    }

    @Test("a used code presented by another client, or without its verifier, is refused and revokes nothing")
    func codeReuseBySomeoneElse() throws {
        let setup = try Setup()
        defer { setup.runner.stop() }
        let api = setup.api
        let (_, code, pkce, first) = try setup.redeemedCode()
        let accessToken = try #require(first.json?["access_token"]?.stringValue)
        // Someone who only saw the code: another client, the right verifier or not; this client
        // without the verifier or with another redirect URI.
        let other = try OpenIDTestAPI.addClient(api, name: "Other")
        for (client, verifier, redirectURI) in [
            (other, pkce.verifier, other.redirectURI), (other, try PKCE().verifier, other.redirectURI),
            (setup.client, try PKCE().verifier, setup.client.redirectURI),
            (setup.client, pkce.verifier, "https://elsewhere.example/cb"),
        ] {
            let reused = try OpenIDTestAPI.redeem(api, client, code: code, verifier: verifier, redirectURI: redirectURI)
            #expect(reused.status == 400 && reused.errorCode == "invalid_grant")
        }
        #expect(try OpenIDTestAPI.userInfo(api, token: accessToken).status == 200)
        let audit = try AuditTrail(storage: api.storage).events(since: 0).map(\.action)
        #expect(!audit.contains(.reuseCode))
    }

    @Test("/userinfo refuses a token once the device that approved its sign-in is revoked or its user deleted")
    func userInfoAfterRevocation() throws {
        for way in ["revoke", "delete-user"] {
            let setup = try Setup()
            defer { setup.runner.stop() }
            let api = setup.api
            let pkce = try PKCE()
            let (_, code) = try setup.code(pkce: pkce)
            let granted = try OpenIDTestAPI.redeem(api, setup.client, code: code, verifier: pkce.verifier)
            let accessToken = try #require(granted.json?["access_token"]?.stringValue)
            #expect(try OpenIDTestAPI.userInfo(api, token: accessToken).status == 200)
            if way == "revoke" {
                let kid = setup.device.key.publicKey.fingerprint
                #expect(try api.authorized("DELETE", "/v1/devices/\(kid)", token: setup.device.token).status == 204)
            } else {
                _ = try api.storage.deleteUser("alice", listingSSHKeysUntil: 0)
            }
            let refused = try OpenIDTestAPI.userInfo(api, token: accessToken)
            #expect(refused.status == 401, "\(way)")
            #expect(refused.headers["WWW-Authenticate"]?.contains("error=\"invalid_token\"") == true, "\(way)")
        }
    }

    @Test(
        "a code redeemed with a DPoP proof gives a token bound to the proof's key: /userinfo takes it only with a fresh proof of that key"
    )
    func dpopBoundCodeGrant() throws {
        let setup = try Setup()
        defer { setup.runner.stop() }
        let api = setup.api
        let clock = setup.environment.clock.clock
        let relyingPartyKey = try ServerTestKeys.key("dpop-relying-party")
        let proofs = DPoPProofBuilder(key: relyingPartyKey, clock: clock)
        let pkce = try PKCE()
        let (_, code) = try setup.code(pkce: pkce)
        let granted = try OpenIDTestAPI.redeem(
            api, setup.client, code: code, verifier: pkce.verifier,
            dpopProof: try proofs.proof(method: "POST", url: api.issuer + "/oauth/token"))
        #expect(granted.status == 200, "\(granted.text)")
        #expect(granted.json?["token_type"] == "DPoP")
        let token = try #require(granted.json?["access_token"]?.stringValue)
        let claims = try CompactJWS(parsing: token).claims()
        #expect(claims["cnf"]?["jkt"] == .string(relyingPartyKey.publicKey.fingerprint))

        let url = api.issuer + "/userinfo"
        // As a Bearer token, or with the DPoP scheme but no proof or another key's proof: refused.
        #expect(try OpenIDTestAPI.userInfo(api, token: token).status == 401)
        #expect(try api.send("GET", "/userinfo", headers: ["Authorization": "DPoP \(token)"]).status == 401)
        let thief = DPoPProofBuilder(key: try ServerTestKeys.key("dpop-thief"), clock: clock)
        let stolen = try api.send(
            "GET", "/userinfo",
            headers: [
                "Authorization": "DPoP \(token)", "DPoP": try thief.proof(method: "GET", url: url, accessToken: token),
            ])
        #expect(stolen.status == 401 && stolen.errorCode == "invalid_dpop_proof", "\(stolen.text)")
        // With a proof of its key: the user; the same proof again is a replay.
        let proof = try proofs.proof(method: "GET", url: url, accessToken: token)
        let answered = try api.send("GET", "/userinfo", headers: ["Authorization": "DPoP \(token)", "DPoP": proof])
        #expect(answered.status == 200, "\(answered.text)")
        #expect(answered.json?["sub"] == "alice")
        let replayed = try api.send("GET", "/userinfo", headers: ["Authorization": "DPoP \(token)", "DPoP": proof])
        #expect(replayed.status == 401 && replayed.errorCode == "invalid_dpop_proof")
    }

    @Test("another client's code, a wrong verifier, another redirect_uri or a code after 60 s is invalid_grant")
    func codeBindings() throws {
        let setup = try Setup()
        defer { setup.runner.stop() }
        let api = setup.api
        let other = try OpenIDTestAPI.addClient(api, name: "Other", redirect: "https://other.example/cb")
        let pkce = try PKCE()
        let (_, code) = try setup.code(pkce: pkce)
        let wrongVerifier = try PKCE().verifier
        let refusals: [(String, HTTPResponse)] = [
            (
                "another client",
                try OpenIDTestAPI.redeem(
                    api, other, code: code, verifier: pkce.verifier, redirectURI: setup.client.redirectURI)
            ),
            ("a wrong verifier", try OpenIDTestAPI.redeem(api, setup.client, code: code, verifier: wrongVerifier)),
            ("a short verifier", try OpenIDTestAPI.redeem(api, setup.client, code: code, verifier: "short")),
            (
                "the challenge as verifier",
                try OpenIDTestAPI.redeem(api, setup.client, code: code, verifier: pkce.challenge)
            ),
            (
                "another redirect_uri",
                try OpenIDTestAPI.redeem(
                    api, setup.client, code: code, verifier: pkce.verifier, redirectURI: setup.client.redirectURI + "/")
            ),
            (
                "an unknown code",
                try OpenIDTestAPI.redeem(api, setup.client, code: String(code.reversed()), verifier: pkce.verifier)
            ),
        ]
        for (name, response) in refusals {
            #expect(response.status == 400 && response.errorCode == "invalid_grant", "\(name): \(response.text)")
        }
        let missing = try api.clientPost(
            "/oauth/token", client: setup.client.basic,
            form: [("grant_type", "authorization_code"), ("code", code), ("redirect_uri", setup.client.redirectURI)])
        #expect(missing.status == 400 && missing.errorCode == "invalid_request")
        // None of those spent the code.
        #expect(try OpenIDTestAPI.redeem(api, setup.client, code: code, verifier: pkce.verifier).status == 200)

        let late = try PKCE()
        let (_, lateCode) = try setup.code(pkce: late)
        setup.environment.clock.advance(by: 60)
        let expired = try OpenIDTestAPI.redeem(api, setup.client, code: lateCode, verifier: late.verifier)
        #expect(expired.status == 400 && expired.errorCode == "invalid_grant")
    }

    @Test("max_age against a stored sign-in time at either end of the range answers instead of trapping")
    func extremeSignInTime() throws {
        let setup = try Setup()
        defer { setup.runner.stop() }
        let openID = setup.runner.responder.service.openID
        var session = BrowserSessionRecord(
            idHash: [UInt8](repeating: 1, count: 32), csrfToken: "csrf", user: "alice", signInRequestID: nil,
            bindingCode: "42", createdAt: 0, expiresAt: 1)
        session.signedInAt = Int64.min
        #expect(!openID.isFresh(session, maxAge: 0))
        #expect(!openID.isFresh(session, maxAge: Int64.max - 1))
        session.signedInAt = Int64.max
        #expect(openID.isFresh(session, maxAge: 1))
        // max_age=0 asks for a sign-in now: no session is fresh enough, not even one from the
        // future (OpenID Connect Core 1.0 errata set 2).
        #expect(!openID.isFresh(session, maxAge: 0))
    }

    @Test("a signed-in session signs a second client in without approval; prompt=login and max_age ask again")
    func browserSession() throws {
        let setup = try Setup()
        defer { setup.runner.stop() }
        let api = setup.api
        let second = try OpenIDTestAPI.addClient(api, name: "Tracker", redirect: "https://tracker.example.org/cb")
        let pkce = try PKCE()
        var (browser, _) = try setup.code(pkce: pkce)
        setup.environment.clock.advance(by: 30)

        let nonce = "ünïcode nonce with spaces & symbols=?"
        let direct = try browser.get(
            "/authorize", query: OpenIDTestAPI.authorization(second, pkce: pkce, state: "s2", nonce: nonce))
        let (base, answer) = try OpenIDTestAPI.redirect(direct)
        #expect(base == second.redirectURI)
        #expect(answer["state"] == "s2")
        #expect(try setup.device.requests().isEmpty)
        let tokens = try OpenIDTestAPI.redeem(api, second, code: try #require(answer["code"]), verifier: pkce.verifier)
        let (_, claims) = try Self.verifiedIDToken(try #require(tokens.json?["id_token"]?.stringValue), api: api)
        #expect(claims["nonce"] == .string(nonce))
        #expect(claims["aud"] == .string(second.id))
        #expect(claims["auth_time"] == .integer(setup.environment.clock.now - 30))

        // max_age shorter than the session's age: a new approval.
        let aged = try browser.get(
            "/authorize", query: OpenIDTestAPI.authorization(second, pkce: pkce, changes: ["max_age": "10"]))
        #expect(aged.status == 200 && aged.text.contains("name=\"authorization\""))
        let young = try browser.get(
            "/authorize", query: OpenIDTestAPI.authorization(second, pkce: pkce, changes: ["max_age": "60"]))
        #expect(try OpenIDTestAPI.redirect(young).parameters["code"] != nil)
        // prompt=none with a max_age the session exceeds: login_required.
        let noneAged = try browser.get(
            "/authorize",
            query: OpenIDTestAPI.authorization(second, pkce: pkce, changes: ["max_age": "10", "prompt": "none"]))
        #expect(try OpenIDTestAPI.redirect(noneAged).parameters["error"] == "login_required")
        // prompt=none with a fresh session: a code at once.
        let noneFresh = try browser.get(
            "/authorize", query: OpenIDTestAPI.authorization(second, pkce: pkce, changes: ["prompt": "none"]))
        #expect(try OpenIDTestAPI.redirect(noneFresh).parameters["code"] != nil)

        // prompt=login: the sign-in form and a new approval, though the session is alive.
        let forced = try setup.signIn(
            &browser, OpenIDTestAPI.authorization(second, pkce: pkce, changes: ["prompt": "login"]))
        let forcedCode = try #require(try OpenIDTestAPI.redirect(forced).parameters["code"])
        let forcedTokens = try OpenIDTestAPI.redeem(api, second, code: forcedCode, verifier: pkce.verifier)
        let (_, forcedClaims) = try Self.verifiedIDToken(
            try #require(forcedTokens.json?["id_token"]?.stringValue), api: api)
        #expect(forcedClaims["auth_time"] == .integer(setup.environment.clock.now))
    }

    @Test("a signed-in session gets 30 codes a minute; past that the client is told temporarily_unavailable")
    func codesPerUserAreLimited() throws {
        let setup = try Setup()
        defer { setup.runner.stop() }
        let pkce = try PKCE()
        var (browser, _) = try setup.code(pkce: pkce)
        var issued = 1
        var refusal: [String: String]?
        for _ in 0..<40 {
            let answer = try browser.get(
                "/authorize",
                query: OpenIDTestAPI.authorization(setup.client, pkce: pkce, changes: ["prompt": "none"]))
            let parameters = try OpenIDTestAPI.redirect(answer).parameters
            guard parameters["code"] != nil else {
                refusal = parameters
                break
            }
            issued += 1
        }
        #expect(issued == AttemptLimits.authorizationCodesPerWindow)
        #expect(refusal?["error"] == "temporarily_unavailable" && refusal?["state"] == "state-1")
        let audited = try setup.api.storage.auditEvents(since: 0).filter { $0.action == .issueCode }
        #expect(audited.count == issued)
    }

    @Test("a code whose redemption cannot be audited is not used up: the client's retry gets the tokens")
    func failedRedemptionAuditKeepsTheCode() throws {
        let setup = try Setup()
        defer { setup.runner.stop() }
        let pkce = try PKCE()
        var browser = OpenIDBrowser(api: setup.api)
        let done = try setup.signIn(&browser, OpenIDTestAPI.authorization(setup.client, pkce: pkce))
        let code = try #require(try OpenIDTestAPI.redirect(done).parameters["code"])
        try setup.api.executeSQL(
            "CREATE TRIGGER refuse_write BEFORE INSERT ON audit_events WHEN NEW.action = 'redeem-code' "
                + "BEGIN SELECT RAISE(ABORT, 'the disk is full'); END")
        let failed = try OpenIDTestAPI.redeem(setup.api, setup.client, code: code, verifier: pkce.verifier)
        #expect(failed.status == 503, "\(failed.text)")
        try setup.api.executeSQL("DROP TRIGGER refuse_write")
        let retried = try OpenIDTestAPI.redeem(setup.api, setup.client, code: code, verifier: pkce.verifier)
        #expect(retried.status == 200, "\(retried.text)")
        let audited = try setup.api.storage.auditEvents(since: 0).filter { $0.action == .redeemCode }
        #expect(audited.count == 1)
    }

    @Test("auth_time is when the device approved, not when the browser collected the approval")
    func authTimeIsTheApproval() throws {
        let setup = try Setup()
        defer { setup.runner.stop() }
        let pkce = try PKCE()
        var browser = OpenIDBrowser(api: setup.api)
        let form = try OpenIDTestAPI.startSignIn(&browser, OpenIDTestAPI.authorization(setup.client, pkce: pkce))
        try setup.device.answerNewest()
        let approvedAt = setup.environment.clock.now
        setup.environment.clock.advance(by: 40)
        let done = try browser.post("/authorize/continue", form: form)
        let code = try #require(try OpenIDTestAPI.redirect(done).parameters["code"])
        let tokens = try OpenIDTestAPI.redeem(setup.api, setup.client, code: code, verifier: pkce.verifier)
        let (_, claims) = try Self.verifiedIDToken(
            try #require(tokens.json?["id_token"]?.stringValue), api: setup.api)
        #expect(claims["auth_time"] == .integer(approvedAt))
    }

    @Test("a sign-in form sent again after its request was answered is refused and keeps the signed-in session")
    func answeredSignInFormSentAgain() throws {
        let setup = try Setup()
        defer { setup.runner.stop() }
        var browser = OpenIDBrowser(api: setup.api)
        let page = try browser.get("/authorize", query: OpenIDTestAPI.authorization(setup.client, pkce: try PKCE()))
        let reference = try OpenIDTestAPI.hidden("authorization", in: page.text)
        let signInForm = [
            ("csrf", try OpenIDTestAPI.hidden("csrf", in: page.text)), ("authorization", reference), ("user", "alice"),
        ]
        let waiting = try browser.post("/authorize/sign-in", form: signInForm)
        #expect(waiting.status == 200)
        try setup.device.answerNewest()
        let done = try browser.post(
            "/authorize/continue",
            form: [("csrf", try OpenIDTestAPI.hidden("csrf", in: waiting.text)), ("authorization", reference)])
        #expect(done.status == 303)
        let signedIn = try #require(browser.cookies["keyauth-session"])
        // Back to the sign-in form, and Sign in again: the request was answered, so no new
        // request goes to the device and the browser stays signed in.
        let again = try browser.post("/authorize/sign-in", form: signInForm)
        #expect(again.status == 400)
        #expect(again.text.contains("already answered"))
        #expect(browser.cookies["keyauth-session"] == signedIn)
        #expect(try setup.device.requests().isEmpty)
    }

    @Test("a second tab's continue, while the first has collected the approval, leaves the first its session")
    func twoTabsContinue() throws {
        let setup = try Setup()
        defer { setup.runner.stop() }
        var browser = OpenIDBrowser(api: setup.api)
        let form = try OpenIDTestAPI.startSignIn(
            &browser, OpenIDTestAPI.authorization(setup.client, pkce: try PKCE()))
        let waitingCookie = try #require(browser.cookies["keyauth-session"])
        let id = try #require(try setup.device.answerNewest()["id"]?.stringValue)
        // The first tab collected the request and is about to store its signed-in session.
        #expect(
            try setup.api.storage.markSignInRequestIssued(
                id: id, expiringAfter: SignInRequests.collectionCutoff(at: setup.environment.clock.now)))
        let second = try browser.post("/authorize/continue", form: form)
        #expect(second.status == 303)
        #expect(!second.headers.values(for: "Set-Cookie").contains { $0.contains("Max-Age=0") })
        #expect(try setup.api.storage.browserSession(idHash: try BrowserSessions.hash(waitingCookie)) != nil)
    }

    @Test("the sign-in forms are bound to the browser, carry CSRF tokens and refuse other sites")
    func formsBoundToBrowser() throws {
        let setup = try Setup()
        defer { setup.runner.stop() }
        let pkce = try PKCE()
        var browser = OpenIDBrowser(api: setup.api)
        let form = try browser.get("/authorize", query: OpenIDTestAPI.authorization(setup.client, pkce: pkce))
        let reference = try OpenIDTestAPI.hidden("authorization", in: form.text)
        let csrf = try OpenIDTestAPI.hidden("csrf", in: form.text)
        let good = [("csrf", csrf), ("authorization", reference), ("user", "alice")]
        #expect(try browser.forgedPostStatuses("/authorize/sign-in", form: good) == [403, 403, 400])
        // Another browser (its own CSRF cookie) cannot continue this browser's request.
        var other = OpenIDBrowser(api: setup.api)
        let otherForm = try other.get("/authorize", query: OpenIDTestAPI.authorization(setup.client, pkce: pkce))
        let stolen = try other.post(
            "/authorize/sign-in",
            form: [
                ("csrf", try OpenIDTestAPI.hidden("csrf", in: otherForm.text)), ("authorization", reference),
                ("user", "alice"),
            ])
        #expect(stolen.status == 400)
        #expect(try setup.device.requests().isEmpty)
        #expect(try browser.post("/authorize/sign-in", form: good).status == 200)
    }

    @Test("end-session: an unregistered post_logout_redirect_uri is a page; a valid one ends the session with state")
    func endSession() throws {
        let setup = try Setup()
        defer { setup.runner.stop() }
        let api = setup.api
        var (browser, _, pkce, tokens) = try setup.redeemedCode()
        let idToken = try #require(tokens.json?["id_token"]?.stringValue)

        let unregistered = try browser.get(
            "/end-session",
            query: [("id_token_hint", idToken), ("post_logout_redirect_uri", "https://evil.example/"), ("state", "x")])
        #expect(unregistered.status == 400 && unregistered.headers["Location"] == nil)
        let forged = try browser.get("/end-session", query: [("id_token_hint", idToken + "x")])
        #expect(forged.status == 400 && forged.headers["Location"] == nil)
        // Still signed in: prompt=none gets a code.
        let still = try browser.get(
            "/authorize", query: OpenIDTestAPI.authorization(setup.client, pkce: pkce, changes: ["prompt": "none"]))
        #expect(try OpenIDTestAPI.redirect(still).parameters["code"] != nil)

        // Without a hint the page asks first; another site cannot sign the user out unseen.
        let asked = try browser.get("/end-session")
        #expect(asked.status == 200 && asked.text.contains("action=\"/end-session\""))
        let stillSignedIn = try browser.get(
            "/authorize", query: OpenIDTestAPI.authorization(setup.client, pkce: pkce, changes: ["prompt": "none"]))
        #expect(try OpenIDTestAPI.redirect(stillSignedIn).parameters["code"] != nil)

        // An expired ID token is still a valid hint (RP-Initiated Logout section 2).
        var fresh = try setup.code(pkce: pkce)
        let freshTokens = try OpenIDTestAPI.redeem(api, setup.client, code: fresh.1, verifier: pkce.verifier)
        let freshHint = try #require(freshTokens.json?["id_token"]?.stringValue)
        setup.environment.clock.advance(by: 600)
        // The session lives on by use, so it outlasts the ID token.
        _ = try fresh.0.get("/account")
        setup.environment.clock.advance(by: 600)
        _ = try fresh.0.get("/account")
        let out = try fresh.0.get(
            "/end-session",
            query: [
                ("id_token_hint", freshHint), ("post_logout_redirect_uri", "https://wiki.example.org/signed-out"),
                ("state", "bye"),
            ])
        let (base, parameters) = try OpenIDTestAPI.redirect(out)
        #expect(base == "https://wiki.example.org/signed-out")
        #expect(parameters["state"] == "bye")
        #expect(out.headers.values(for: "Set-Cookie").contains { $0.hasPrefix("keyauth-session=;") })
        let after = try fresh.0.get(
            "/authorize", query: OpenIDTestAPI.authorization(setup.client, pkce: pkce, changes: ["prompt": "none"]))
        #expect(try OpenIDTestAPI.redirect(after).parameters["error"] == "login_required")
        _ = browser
    }

    @Test("a relying party's form post to end-session goes on as a GET, which ends the session and redirects")
    func endSessionPosted() throws {
        let setup = try Setup()
        defer { setup.runner.stop() }
        var (browser, _, pkce, tokens) = try setup.redeemedCode()
        let idToken = try #require(tokens.json?["id_token"]?.stringValue)
        let posted = try browser.post(
            "/end-session",
            form: [
                ("id_token_hint", idToken), ("post_logout_redirect_uri", "https://wiki.example.org/signed-out"),
                ("state", "bye"), ("unrelated", "left out"),
            ],
            headers: ["Origin": "https://wiki.example.org", "Sec-Fetch-Site": "cross-site"])
        // A browser sends no Lax cookie with that post: the answer is the same request as a GET.
        let (path, query) = try OpenIDTestAPI.redirect(posted)
        #expect(path == "/end-session")
        #expect(query["id_token_hint"] == idToken && query["state"] == "bye" && query["unrelated"] == nil)
        #expect(!posted.headers.values(for: "Set-Cookie").contains { $0.hasPrefix("keyauth-session=") })
        let out = try browser.get("/end-session", query: query.sorted { $0.key < $1.key })
        let (base, parameters) = try OpenIDTestAPI.redirect(out)
        #expect(base == "https://wiki.example.org/signed-out")
        #expect(parameters["state"] == "bye")
        let after = try browser.get(
            "/authorize", query: OpenIDTestAPI.authorization(setup.client, pkce: pkce, changes: ["prompt": "none"]))
        #expect(try OpenIDTestAPI.redirect(after).parameters["error"] == "login_required")
    }

    @Test("end-session: an ID token of another of the user's sessions asks before signing out")
    func endSessionHintOfAnotherSession() throws {
        let setup = try Setup()
        defer { setup.runner.stop() }
        let (_, _, _, earlierTokens) = try setup.redeemedCode()
        let earlierHint = try #require(earlierTokens.json?["id_token"]?.stringValue)
        var (browser, _, pkce, tokens) = try setup.redeemedCode()
        let ownHint = try #require(tokens.json?["id_token"]?.stringValue)
        // The same user and client, another browser session (sid): a leaked old ID token.
        let asked = try browser.get(
            "/end-session",
            query: [
                ("id_token_hint", earlierHint), ("post_logout_redirect_uri", "https://wiki.example.org/signed-out"),
            ])
        #expect(asked.status == 200 && asked.text.contains("action=\"/end-session\""), "\(asked.status)")
        #expect(!asked.headers.values(for: "Set-Cookie").contains { $0.hasPrefix("keyauth-session=;") })
        let still = try browser.get(
            "/authorize", query: OpenIDTestAPI.authorization(setup.client, pkce: pkce, changes: ["prompt": "none"]))
        #expect(try OpenIDTestAPI.redirect(still).parameters["code"] != nil)
        // This session's own ID token ends it at once.
        let out = try browser.get(
            "/end-session",
            query: [("id_token_hint", ownHint), ("post_logout_redirect_uri", "https://wiki.example.org/signed-out")])
        #expect(try OpenIDTestAPI.redirect(out).base == "https://wiki.example.org/signed-out")
        let after = try browser.get(
            "/authorize", query: OpenIDTestAPI.authorization(setup.client, pkce: pkce, changes: ["prompt": "none"]))
        #expect(try OpenIDTestAPI.redirect(after).parameters["error"] == "login_required")
    }

    @Test("the longest state and nonce /authorize accepts, all control characters, still sign in")
    func longestStateAndNonce() throws {
        let setup = try Setup()
        defer { setup.runner.stop() }
        let pkce = try PKCE()
        let longest = String(repeating: "\u{1}", count: 1024)
        var browser = OpenIDBrowser(api: setup.api)
        let form = try browser.get(
            "/authorize",
            query: OpenIDTestAPI.authorization(setup.client, pkce: pkce, changes: ["state": longest, "nonce": longest]))
        #expect(form.status == 200)
        let started = try browser.post(
            "/authorize/sign-in",
            form: [
                ("csrf", try OpenIDTestAPI.hidden("csrf", in: form.text)),
                ("authorization", try OpenIDTestAPI.hidden("authorization", in: form.text)), ("user", "alice"),
            ])
        #expect(started.status == 200 && !started.text.contains("expired"), "\(started.status)")
        #expect(try setup.device.requests().count == 1)
    }

    @Test("end-session's confirmation carries the hint's client, so the confirmed sign-out reaches the redirect")
    func endSessionConfirmedWithHint() throws {
        let setup = try Setup()
        defer { setup.runner.stop() }
        let pkce = try PKCE()
        let (_, code) = try setup.code(pkce: pkce)
        let tokens = try OpenIDTestAPI.redeem(setup.api, setup.client, code: code, verifier: pkce.verifier)
        let idToken = try #require(tokens.json?["id_token"]?.stringValue)
        // Another browser, its session waiting: the hint does not prove its user, so it asks.
        var other = OpenIDBrowser(api: setup.api)
        let form = try other.get("/authorize", query: OpenIDTestAPI.authorization(setup.client, pkce: pkce))
        let started = try other.post(
            "/authorize/sign-in",
            form: [
                ("csrf", try OpenIDTestAPI.hidden("csrf", in: form.text)),
                ("authorization", try OpenIDTestAPI.hidden("authorization", in: form.text)), ("user", "alice"),
            ])
        #expect(started.status == 200)
        let signedOut = "https://wiki.example.org/signed-out"
        let asked = try other.get(
            "/end-session",
            query: [("id_token_hint", idToken), ("post_logout_redirect_uri", signedOut), ("state", "bye")])
        #expect(asked.status == 200 && !asked.text.contains(idToken))
        let carried = try OpenIDTestAPI.hidden("client_id", in: asked.text)
        #expect(carried == setup.client.id)
        let confirmed = try other.post(
            "/end-session",
            form: [
                ("csrf", try OpenIDTestAPI.hidden("csrf", in: asked.text)), ("client_id", carried),
                ("post_logout_redirect_uri", signedOut), ("state", "bye"),
            ])
        let (base, parameters) = try OpenIDTestAPI.redirect(confirmed)
        #expect(base == signedOut)
        #expect(parameters["state"] == "bye")
    }

    @Test(
        "a signed-in browser gets no silent code for a public client: a consent page names the redirect origin with its port, and only Allow gives a code"
    )
    func publicClientConsent() throws {
        let setup = try Setup()
        defer { setup.runner.stop() }
        let api = setup.api
        let native = try OpenIDTestAPI.addClient(
            api, name: "Native", redirect: "http://127.0.0.1/callback", logout: [], isPublic: true)
        let own = try PKCE()
        var browser = OpenIDBrowser(api: api)
        // The user signs in to the app listening on its port, approving on the device.
        let first = try setup.signIn(
            &browser,
            OpenIDTestAPI.authorization(native, pkce: own, changes: ["redirect_uri": "http://127.0.0.1:54321/callback"])
        )
        #expect(try OpenIDTestAPI.redirect(first).parameters["code"] != nil)
        setup.environment.clock.advance(by: 30)

        // The attack (RFC 8252 section 8.6): any site or local program sends the signed-in browser
        // here with the public client's id, a loopback port the attacker listens on and the
        // attacker's own PKCE challenge, so a code sent there is the attacker's to redeem.
        let attacker = try PKCE()
        let stolen = OpenIDTestAPI.authorization(
            native, pkce: attacker, changes: ["redirect_uri": "http://127.0.0.1:40000/callback"])
        let asked = try browser.get("/authorize", query: stolen)
        #expect(asked.status == 200, "answered with \(asked.headers["Location"] ?? "no redirect")")
        #expect(asked.headers["Location"] == nil)
        #expect(asked.text.contains("Sign in to <strong>Native</strong> as <strong>alice</strong>?"))
        #expect(asked.text.contains("<strong id=\"redirect-origin\">http://127.0.0.1:40000</strong>"))
        #expect(asked.text.contains("action=\"/authorize/consent\""))
        #expect(asked.text.contains("value=\"allow\">Allow</button>") && asked.text.contains("Deny</button>"))
        #expect(asked.headers["Content-Security-Policy"]?.contains("form-action 'self' http://127.0.0.1:40000") == true)
        #expect(!asked.text.contains(attacker.challenge))
        #expect(try setup.device.requests().isEmpty)
        // prompt=none cannot skip the page.
        let silent = try browser.get(
            "/authorize",
            query: OpenIDTestAPI.authorization(
                native, pkce: attacker,
                changes: ["redirect_uri": "http://127.0.0.1:40000/callback", "prompt": "none"]))
        let (_, none) = try OpenIDTestAPI.redirect(silent)
        #expect(none["error"] == "consent_required")
        #expect(none["code"] == nil)

        let reference = try OpenIDTestAPI.hidden("authorization", in: asked.text)
        let csrf = try OpenIDTestAPI.hidden("csrf", in: asked.text)
        let allow = [("csrf", csrf), ("authorization", reference), ("decision", "allow")]
        // Only this browser answers, from this site and with its session's token.
        #expect(try browser.forgedPostStatuses("/authorize/consent", form: allow) == [403, 403, 403])
        var other = OpenIDBrowser(api: api)
        _ = try other.get("/account")
        #expect(try other.post("/authorize/consent", form: allow).status == 400)
        // A consent's reference is no sign-in's, and a sign-in's no consent's: the approval that
        // prompt=login asks for cannot be skipped.
        #expect(
            try browser.post("/authorize/continue", form: [("csrf", csrf), ("authorization", reference)]).status == 400)
        let login = try browser.get(
            "/authorize",
            query: OpenIDTestAPI.authorization(
                native, pkce: attacker,
                changes: ["redirect_uri": "http://127.0.0.1:40000/callback", "prompt": "login"]))
        #expect(login.text.contains("name=\"user\""))
        let loginReference = try OpenIDTestAPI.hidden("authorization", in: login.text)
        #expect(
            try browser.post(
                "/authorize/consent", form: [("csrf", csrf), ("authorization", loginReference), ("decision", "allow")]
            ).status == 400)
        // Nor does the sign-in's own continue form, posted with the signed-in session's token
        // (it is on the consent page): the session's sign-in was not this request's.
        let skipped = try browser.post(
            "/authorize/continue", form: [("csrf", csrf), ("authorization", loginReference)])
        #expect(skipped.status == 400 && skipped.text.contains("sign in again"), "\(skipped.status)")
        #expect(skipped.headers["Location"] == nil)

        // Deny: access_denied to the client, and the request is gone.
        let denied = try browser.post(
            "/authorize/consent", form: [("csrf", csrf), ("authorization", reference), ("decision", "deny")])
        let (deniedBase, deniedAnswer) = try OpenIDTestAPI.redirect(denied)
        #expect(deniedBase == "http://127.0.0.1:40000/callback")
        #expect(deniedAnswer["error"] == "access_denied")
        #expect(deniedAnswer["state"] == "state-1")
        #expect(deniedAnswer["code"] == nil)
        #expect(try browser.post("/authorize/consent", form: allow).status == 400)

        // Allow: a code for the port the page named, once; the ID token's auth_time is the
        // sign-in's, since nothing new was approved on a device.
        let again = try browser.get("/authorize", query: stolen)
        let allowAgain = [
            ("csrf", try OpenIDTestAPI.hidden("csrf", in: again.text)),
            ("authorization", try OpenIDTestAPI.hidden("authorization", in: again.text)), ("decision", "allow"),
        ]
        let allowed = try browser.post("/authorize/consent", form: allowAgain)
        let (base, answer) = try OpenIDTestAPI.redirect(allowed)
        #expect(base == "http://127.0.0.1:40000/callback")
        #expect(answer["state"] == "state-1")
        #expect(answer["iss"] == api.issuer)
        #expect(try browser.post("/authorize/consent", form: allowAgain).status == 400)
        let tokens = try OpenIDTestAPI.redeem(
            api, native, code: try #require(answer["code"]), verifier: attacker.verifier,
            redirectURI: "http://127.0.0.1:40000/callback")
        #expect(tokens.status == 200, "\(tokens.text)")
        let (_, claims) = try Self.verifiedIDToken(try #require(tokens.json?["id_token"]?.stringValue), api: api)
        #expect(claims["aud"] == .string(native.id))
        #expect(claims["auth_time"] == .integer(setup.environment.clock.now - 30))

        // A confidential client keeps the silent sign-in, unless it asks with prompt=consent.
        let sso = try browser.get("/authorize", query: OpenIDTestAPI.authorization(setup.client, pkce: own))
        #expect(try OpenIDTestAPI.redirect(sso).parameters["code"] != nil)
        let consent = try browser.get(
            "/authorize", query: OpenIDTestAPI.authorization(setup.client, pkce: own, changes: ["prompt": "consent"]))
        #expect(consent.status == 200)
        #expect(consent.text.contains("<strong id=\"redirect-origin\">https://wiki.example.org</strong>"))
    }

    @Test(
        "a repeated parameter is refused (RFC 6749 section 3.1): client_id or redirect_uri with a page, others at the redirect URI, and at every other endpoint"
    )
    func repeatedParameters() throws {
        let setup = try Setup()
        defer { setup.runner.stop() }
        let api = setup.api
        let pkce = try PKCE()
        let other = try OpenIDTestAPI.addClient(api, name: "Other", redirect: "https://other.example/cb")
        let good = OpenIDTestAPI.authorization(setup.client, pkce: pkce)
        // A signed-in browser, which would get a code at once for the request as first read.
        var (browser, _) = try setup.code(pkce: pkce)

        for (name, value) in [
            ("client_id", setup.client.id), ("client_id", other.id), ("redirect_uri", setup.client.redirectURI),
            ("redirect_uri", other.redirectURI),
        ] {
            let response = try browser.get("/authorize", query: good + [(name, value)])
            #expect(response.status == 400, "\(name)")
            #expect(response.headers["Location"] == nil, "\(name)")
            #expect(response.text.contains("repeats \(name)"), "\(name)")
        }
        // The transport decodes names first: client%5Fid is client_id again.
        let encoded = try browser.get("/authorize?" + OpenIDTestAPI.encode(good) + "&client%5Fid=" + other.id)
        #expect(encoded.status == 400 && encoded.headers["Location"] == nil)

        for (name, value) in [
            ("state", "state-2"), ("code_challenge", try PKCE().challenge), ("nonce", "n-2"), ("scope", "openid"),
            ("response_type", "code"), ("code_challenge_method", "S256"),
        ] {
            let response = try browser.get("/authorize", query: good + [(name, value)])
            let (base, parameters) = try OpenIDTestAPI.redirect(response)
            #expect(base == setup.client.redirectURI, "\(name)")
            #expect(parameters["error"] == "invalid_request", "\(name)")
            #expect(parameters["error_description"] == "the parameter \(name) is repeated", "\(name)")
            #expect(parameters["code"] == nil, "\(name)")
            // Neither state is echoed when state itself is repeated.
            #expect(parameters["state"] == (name == "state" ? nil : "state-1"), "\(name)")
        }
        // The same for a posted authorization request's form.
        let posted = try browser.post("/authorize", form: good + [("nonce", "n-2")])
        #expect(try OpenIDTestAPI.redirect(posted).parameters["error"] == "invalid_request")
        let postedClient = try browser.post("/authorize", form: good + [("client_id", other.id)])
        #expect(postedClient.status == 400 && postedClient.headers["Location"] == nil)

        // Every other endpoint, whether it reads a query or a form.
        let endSession = try browser.get(
            "/end-session", query: [("client_id", setup.client.id), ("state", "a"), ("state", "b")])
        #expect(endSession.status == 400, "\(endSession.text)")
        let devices = try api.send(
            "GET", "/v1/devices?limit=1&limit=100", headers: ["Authorization": "Bearer \(setup.device.token)"])
        #expect(devices.status == 400 && devices.errorCode == "invalid_request", "\(devices.text)")
        let requests = try api.send(
            "GET", "/v1/auth-requests?wait=0&wait=30", headers: ["Authorization": "Bearer \(setup.device.token)"])
        #expect(requests.status == 400 && requests.errorCode == "invalid_request", "\(requests.text)")
        let health = try api.send("GET", "/healthz?a=1&a=2")
        #expect(health.status == 400 && health.errorCode == "invalid_request")
        let account = try browser.get("/account?a=1&a=2")
        #expect(account.status == 400 && account.headers["Content-Type"]?.hasPrefix("text/html") == true)
        let token = try api.clientPost(
            "/oauth/token", client: setup.client.basic,
            form: [
                ("grant_type", "authorization_code"), ("code", "a"), ("code", "b"),
                ("redirect_uri", setup.client.redirectURI), ("code_verifier", pkce.verifier),
            ])
        #expect(token.status == 400 && token.errorCode == "invalid_request", "\(token.text)")
        let desk = try api.addClient()
        let backchannel = try api.clientPost(
            "/bc-authorize", client: desk, form: [("login_hint", "alice"), ("login_hint", "bob")])
        #expect(backchannel.status == 400 && backchannel.errorCode == "invalid_request", "\(backchannel.text)")
        #expect(try setup.device.requests().isEmpty)
        // None of it ended the session.
        #expect(try setup.isSignedIn(&browser))
    }

    @Test(
        "end-session takes only ID tokens as id_token_hint: a device's access token or a relying party's neither signs out nor picks a redirect"
    )
    func accessTokenIsNoHint() throws {
        let setup = try Setup()
        defer { setup.runner.stop() }
        let api = setup.api
        let pkce = try PKCE()
        var (browser, code) = try setup.code(pkce: pkce)
        let tokens = try OpenIDTestAPI.redeem(api, setup.client, code: code, verifier: pkce.verifier)
        let clientToken = try #require(tokens.json?["access_token"]?.stringValue)
        let idToken = try #require(tokens.json?["id_token"]?.stringValue)
        // Both are RS256 tokens of this server's keys, for alice: what a resource server holds.
        for (name, token) in [
            ("a device's access token", setup.device.token), ("the code flow's access token", clientToken),
        ] {
            for extra in [[], [("post_logout_redirect_uri", "https://wiki.example.org/signed-out")]] {
                let response = try browser.get("/end-session", query: [("id_token_hint", token)] + extra)
                #expect(response.status == 400, "\(name): \(response.status)")
                #expect(response.headers["Location"] == nil, "\(name)")
                #expect(!response.headers.values(for: "Set-Cookie").contains { $0.hasPrefix("keyauth-session=") })
                #expect(try setup.isSignedIn(&browser), "\(name) signed the user out")
            }
        }
        // The ID token of a client removed since is no hint either.
        let removed = try OpenIDTestAPI.addClient(api, name: "Removed", redirect: "https://removed.example/cb")
        let removedPKCE = try PKCE()
        let silent = try browser.get("/authorize", query: OpenIDTestAPI.authorization(removed, pkce: removedPKCE))
        let removedCode = try #require(try OpenIDTestAPI.redirect(silent).parameters["code"])
        let removedTokens = try OpenIDTestAPI.redeem(api, removed, code: removedCode, verifier: removedPKCE.verifier)
        let removedHint = try #require(removedTokens.json?["id_token"]?.stringValue)
        #expect(try api.storage.deleteClient(id: removed.id))
        #expect(try browser.get("/end-session", query: [("id_token_hint", removedHint)]).status == 400)
        #expect(try setup.isSignedIn(&browser))
        // The ID token itself still signs the user out at once.
        let out = try browser.get("/end-session", query: [("id_token_hint", idToken)])
        #expect(out.status == 200)
        #expect(out.headers.values(for: "Set-Cookie").contains { $0.hasPrefix("keyauth-session=;") })
        #expect(try !setup.isSignedIn(&browser))
    }

    @Test(
        "a CIBA request with scope openid gets an RS256 ID token the JWKS verifies, naming the request; without openid none"
    )
    func backchannelIDToken() throws {
        let setup = try Setup()
        defer { setup.runner.stop() }
        let api = setup.api
        let desk = try api.addClient()
        let started = try api.backchannelAuthorize(
            desk, user: "alice", extra: [("binding_message", "AB12"), ("scope", "openid profile")])
        let id = try #require(started.json?["auth_req_id"]?.stringValue, "\(started.text)")
        try setup.device.answerNewest()
        let approvedAt = setup.environment.clock.now
        setup.environment.clock.advance(by: 5)
        let response = try api.poll(desk, id: id)
        #expect(response.status == 200, "\(response.text)")
        #expect(response.headers["Cache-Control"] == "no-store")
        let json = try #require(response.json)
        #expect(json["token_type"] == "Bearer")
        #expect(json["scope"] == "openid profile")
        let accessToken = try #require(json["access_token"]?.stringValue)
        let (header, claims) = try Self.verifiedIDToken(try #require(json["id_token"]?.stringValue), api: api)
        #expect(header["alg"] == "RS256")
        #expect(header["typ"] == "JWT")
        #expect(claims["iss"] == .string(api.issuer))
        #expect(claims["sub"] == "alice")
        #expect(claims["aud"] == .string(desk.id))
        #expect(claims["azp"] == .string(desk.id))
        #expect(claims["auth_time"] == .integer(approvedAt))
        #expect(claims["exp"]?.integerValue ?? 0 > claims["iat"]?.integerValue ?? 0)
        #expect(claims["acr"] == .string(KeyAuthService.keyAndPresenceACR))
        #expect(claims["amr"] == .array(["swk", "pin"]))
        #expect(try claims["at_hash"] == .string(IDTokens.accessTokenHash(accessToken)))
        #expect(claims["urn:openid:params:jwt:claim:auth_req_id"] == .string(id))
        #expect(claims["nonce"] == nil && claims["sid"] == nil)
        // The access token names the user at /userinfo, as the code flow's does.
        #expect(try OpenIDTestAPI.userInfo(api, token: accessToken).json?["sub"] == .string("alice"))

        // Without openid, the token response of section 4 alone.
        for scope in [nil, "profile", "openidx"] {
            let plain = try api.backchannelAuthorize(
                desk, user: "alice", extra: [("binding_message", "CD34")] + (scope.map { [("scope", $0)] } ?? []))
            let plainID = try #require(plain.json?["auth_req_id"]?.stringValue)
            try setup.device.answerNewest()
            setup.environment.clock.advance(by: 5)
            let collected = try api.poll(desk, id: plainID)
            #expect(collected.status == 200, "\(collected.text)")
            #expect(collected.json?["access_token"] != nil)
            #expect(collected.json?["id_token"] == nil, "\(scope ?? "no scope")")
        }
    }

    @Test("with --token-alg ES256 access tokens are ES256 and ID tokens still RS256, both in the JWK set")
    func idTokensStayRS256() throws {
        let environment = TestEnvironment()
        let storage = try SQLiteStorage(path: environment.databasePath, now: environment.clock.closure)
        let runner = try ServerRunner(
            configuration: try environment.configuration {
                $0.tokenAlgorithm = .es256
                $0.failureLimit = 1000
            },
            storage: storage, log: SilentLog(), now: environment.clock.closure)
        defer { runner.stop() }
        let api = environment.socketAPI(runner)
        let laptop = try ServerTestKeys.key("alice-1")
        let device = ApprovingDevice(api: api, key: laptop, token: try api.activeDevice(user: "alice", key: laptop))
        let tokens = try OpenIDTestAPI.codeFlowTokens(api, device: device, client: try OpenIDTestAPI.addClient(api))
        let (idHeader, _) = try Self.verifiedIDToken(try #require(tokens.json?["id_token"]?.stringValue), api: api)
        #expect(idHeader["alg"] == "RS256")
        let (accessHeader, _) = try Self.verifiedIDToken(
            try #require(tokens.json?["access_token"]?.stringValue), api: api)
        #expect(accessHeader["alg"] == "ES256")
        let accessToken = try #require(tokens.json?["access_token"]?.stringValue)
        #expect(try OpenIDTestAPI.userInfo(api, token: accessToken).status == 200)
    }

    @Test("POST /authorize with a form (Core 3.1.2.1) is read as the query; metrics labels are a fixed set")
    func postedAuthorizationAndLabels() throws {
        let setup = try Setup()
        defer { setup.runner.stop() }
        let pkce = try PKCE()
        // A relying party's auto-submitted form comes from its own origin: no Origin check here.
        let posted = try setup.api.send(
            "POST", "/authorize",
            headers: ["Content-Type": "application/x-www-form-urlencoded", "Origin": "https://wiki.example.org"],
            body: Array(OpenIDTestAPI.encode(OpenIDTestAPI.authorization(setup.client, pkce: pkce)).utf8))
        // It goes on as a GET with the same parameters, which brings the browser's cookies.
        #expect(posted.status == 303)
        let followed = try setup.api.send("GET", try #require(posted.headers["Location"]))
        #expect(followed.status == 200 && followed.text.contains("name=\"authorization\""))
        let refused = try setup.api.send(
            "POST", "/authorize", headers: ["Content-Type": "application/x-www-form-urlencoded"],
            body: Array(
                OpenIDTestAPI.encode(OpenIDTestAPI.authorization(setup.client, pkce: pkce, changes: ["scope": "email"]))
                    .utf8))
        let refusedGet = try setup.api.send("GET", try #require(refused.headers["Location"]))
        #expect(try OpenIDTestAPI.redirect(refusedGet).parameters["error"] == "invalid_scope")
        for (path, label) in [
            ("/authorize", "/authorize"), ("/authorize/sign-in", "/authorize/sign-in"),
            ("/authorize/continue", "/authorize/continue"), ("/authorize/cancel", "/authorize/cancel"),
            ("/authorize/consent", "/authorize/consent"), ("/authorize/x/y", "/authorize/{unknown}"),
            ("/userinfo", "/userinfo"), ("/end-session", "/end-session"),
        ] {
            #expect(KeyAuthResponder.routes.label(for: path) == label, "\(path)")
        }
    }

    @Test("a redirect URI matches byte for byte, not by Unicode equivalence")
    func redirectBytes() {
        let cases: [(presented: String, registered: String)] = [
            ("https://rp.example/\u{212A}cb", "https://rp.example/Kcb"),  // the Kelvin sign
            ("https://rp.example/caf\u{E9}", "https://rp.example/cafe\u{301}"),
            ("https://rp.example/\u{212B}", "https://rp.example/\u{C5}"),  // the angstrom sign
            ("http://127.0.0.1:4444/\u{212A}cb", "http://127.0.0.1/Kcb"),
        ]
        for (presented, registered) in cases {
            // Swift's == calls them equal (the loopback one but for its port): the test's point.
            #expect(presented.replacing(":4444", with: "") == registered)
            for isPublic in [false, true] {
                #expect(
                    !RedirectURI.matches(presented, registered: registered, isPublicClient: isPublic), "\(presented)")
            }
        }
        #expect(
            RedirectURI.matches("http://127.0.0.1:4444/Kcb", registered: "http://127.0.0.1/Kcb", isPublicClient: true))
    }

    @Test("a %00 in a query neither cuts a redirect URI to a registered one nor shortens state: a page, no redirect")
    func queryValuesKeepZeroBytes() throws {
        let setup = try Setup()
        defer { setup.runner.stop() }
        let pkce = try PKCE()
        var browser = OpenIDBrowser(api: setup.api)
        // The registered URI followed by %00 and more is another URI: a page, no redirect.
        let longer = try browser.get(
            "/authorize",
            query: OpenIDTestAPI.authorization(
                setup.client, pkce: pkce, changes: ["redirect_uri": setup.client.redirectURI + "\u{0}.evil.example"]))
        #expect(longer.status == 400 && longer.headers["Location"] == nil)
        let logout = try browser.get(
            "/end-session",
            query: [
                ("client_id", setup.client.id),
                ("post_logout_redirect_uri", "https://wiki.example.org/signed-out\u{0}.evil.example"),
            ])
        #expect(logout.status == 400 && logout.headers["Location"] == nil)
        // Not sent back cut short, nor at all: which parameter held the byte is not trusted.
        let answer = try browser.get(
            "/authorize",
            query: OpenIDTestAPI.authorization(
                setup.client, pkce: pkce, state: "ab\u{0}cd", changes: ["prompt": "none"]))
        #expect(answer.status == 400 && answer.headers["Location"] == nil)
        #expect(answer.text.contains("NUL character"))
        // POST /authorize reads its form with the same rule.
        let posted = try browser.post(
            "/authorize",
            form: OpenIDTestAPI.authorization(
                setup.client, pkce: pkce, state: "ab\u{0}cd", changes: ["prompt": "none"]))
        #expect(posted.status == 400 && posted.headers["Location"] == nil)
        // An API endpoint answers JSON.
        let listed = try browser.get("/v1/devices", query: [("cursor", "\u{0}")])
        #expect(listed.status == 400)
        #expect(listed.json?["error"]?.stringValue == "invalid_request")
        #expect(listed.json?["error_description"]?.stringValue?.contains("NUL character") == true)
    }

    @Test("a query that decodes to bytes that are not UTF-8 is refused, not read with U+FFFD: a page, no redirect")
    func queryValuesThatAreNotUTF8() throws {
        let setup = try Setup()
        defer { setup.runner.stop() }
        let pkce = try PKCE()
        var browser = OpenIDBrowser(api: setup.api)
        let query = OpenIDTestAPI.encode(
            OpenIDTestAPI.authorization(setup.client, pkce: pkce, changes: ["prompt": "none", "state": nil]))
        for bad in ["state=%FF%FE", "%C3%28=1"] {
            let answer = try browser.get("/authorize?" + query + "&" + bad)
            #expect(answer.status == 400 && answer.headers["Location"] == nil, "\(bad)")
            #expect(answer.text.contains("bytes that are not UTF-8"), "\(bad)")
        }
        let listed = try browser.get("/v1/devices?cursor=%FF")
        #expect(listed.status == 400)
        #expect(listed.errorDescription == "the query holds bytes that are not UTF-8")
        // UTF-8 beyond ASCII is text like any other, and comes back exactly as sent.
        let accented = try browser.get("/authorize?" + query + "&state=%C3%A9t%C3%A9")
        #expect(accented.status == 303)
        #expect(accented.headers["Location"]?.contains("state=%C3%A9t%C3%A9") == true, "\(accented.headers)")
    }

    @Test("redirect URIs at registration: absolute, no fragment, https or loopback http")
    func registrationRules() throws {
        for good in [
            "https://wiki.example.org/callback", "http://127.0.0.1/cb", "http://[::1]:8080/cb",
            "http://localhost:3000/cb", "https://app.example/cb?tenant=1",
        ] {
            #expect(RedirectURI.problem(with: good) == nil, "\(good)")
        }
        for bad in [
            "http://wiki.example.org/callback", "https://wiki.example.org/cb#frag", "/callback", "wiki.example.org/cb",
            "https://user@wiki.example.org/cb", "https://wiki.example.org/a b", "javascript://x", "", "https://:443/",
        ] {
            #expect(RedirectURI.problem(with: bad) != nil, "\(bad)")
        }
        let environment = TestEnvironment()
        let storage = try environment.openStorage()
        defer { storage.close() }
        let registry = ClientRegistry(storage: storage)
        #expect(throws: ServerConfigurationError.self) {
            try registry.add(name: "Bad", redirectURIs: ["http://wiki.example.org/cb"])
        }
        #expect(throws: ServerConfigurationError.self) { try registry.add(name: "NoRedirect", isPublic: true) }
        let (client, secret) = try registry.add(name: "App", redirectURIs: ["http://127.0.0.1/cb"], isPublic: true)
        #expect(secret == nil && client.isPublic && client.secretHash.isEmpty)
        #expect(try storage.client(id: client.id) == client)
    }
}

@Suite("keyauth-server clients add: relying parties with redirect URIs")
struct RelyingPartyCommandTests {
    @Test("--redirect-uri repeats, --post-logout-redirect-uri and --public are stored; a bad URI is refused")
    func clientsAdd() throws {
        let environment = TestEnvironment()
        let database = environment.databasePath
        try StorageFactory.open(database).close()
        let add = CapturedOutput()
        #expect(
            ServerCommand.main(
                arguments: [
                    "clients", "add", "Wiki", "--redirect-uri", "https://wiki.example.org/cb", "--redirect-uri",
                    "https://wiki.example.org/cb2", "--post-logout-redirect-uri", "https://wiki.example.org/bye",
                    "--db", database,
                ], environment: [:], output: add.output) == 0)
        #expect(add.standard.contains("client_secret="))
        let native = CapturedOutput()
        #expect(
            ServerCommand.main(
                arguments: [
                    "clients", "add", "App", "--public", "--redirect-uri", "http://127.0.0.1/cb", "--db", database,
                ],
                environment: [:], output: native.output) == 0)
        #expect(native.standard.hasPrefix("client_id=") && !native.standard.contains("client_secret"))
        // Added in the same second, so ordered by their random ids: sort by name.
        let clients = try StorageFactory.open(database).allClients().sorted { $0.name > $1.name }
        #expect(
            clients.map(\.redirectURIs) == [
                ["https://wiki.example.org/cb", "https://wiki.example.org/cb2"], ["http://127.0.0.1/cb"],
            ])
        #expect(clients.map(\.postLogoutRedirectURIs) == [["https://wiki.example.org/bye"], []])
        #expect(clients.map(\.isPublic) == [false, true])
        let list = CapturedOutput()
        #expect(
            ServerCommand.main(arguments: ["clients", "list", "--db", database], environment: [:], output: list.output)
                == 0)
        // Columns CLIENT_ID CREATED TYPE REDIRECT_URIS POST_LOGOUT_REDIRECT_URIS ALLOWED_USERS NAME.
        #expect(
            list.standard.split(separator: "\n").contains {
                $0.split(separator: " ").dropFirst(2).prefix(3) == ["public", "http://127.0.0.1/cb", "-"]
            })

        for arguments in [
            ["clients", "add", "Bad", "--redirect-uri", "http://wiki.example.org/cb"],
            ["clients", "add", "Bad", "--redirect-uri", "https://wiki.example.org/cb#x"],
            ["clients", "add", "Bad", "--public"],
            ["clients", "add", "Bad", "--listen", "x"],
        ] {
            let refused = CapturedOutput()
            #expect(
                ServerCommand.main(arguments: arguments + ["--db", database], environment: [:], output: refused.output)
                    != 0, "\(arguments)")
        }
        #expect(try StorageFactory.open(database).allClients().count == 2)
    }
}
