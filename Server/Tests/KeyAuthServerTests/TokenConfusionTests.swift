import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

@testable import KeyAuthServer

/// A token-confusion audit of a running `keyauth-server` process, over its socket: every kind of
/// token it issues (device access tokens, Bearer and DPoP-bound; a relying party's access and ID
/// tokens; a CIBA client's; a host login's offline grant) and every kind a device signs (device
/// assertions, DPoP proofs), each presented wherever a token of another kind is taken, and the
/// server's own tokens with their headers, claims and proofs changed. Each must be refused with
/// the endpoint's own OAuth error, never a 5xx.
@Suite("Token confusion: a running keyauth-server", .timeLimit(.minutes(10)))
struct TokenConfusionTests {
    /// Every kind of token, by name, that the deployment's server and devices make.
    private struct Tokens {
        var byKind: [(name: String, token: String)] = []
        subscript(name: String) -> String { byKind.first { $0.name == name }?.token ?? "" }
    }

    /// Collects one token of every kind from `deployment`: the code flow's and CIBA's through
    /// a device's approval, a host login's grant, a bound token, an unused assertion and a proof.
    private static func tokens(_ deployment: ConfusionDeployment) throws -> Tokens {
        let api = deployment.api
        let device = ApprovingDevice(api: api, key: deployment.laptop, token: deployment.laptopToken)
        var tokens = Tokens()
        tokens.byKind.append(("a device's Bearer access token", deployment.laptopToken))
        tokens.byKind.append(("a device's DPoP-bound access token", try deployment.boundToken()))

        let redeemed = try OpenIDTestAPI.codeFlowTokens(api, device: device, client: try OpenIDTestAPI.addClient(api))
        tokens.byKind.append(
            ("a relying party's access token", try #require(redeemed.json?["access_token"]?.stringValue)))
        tokens.byKind.append(("an ID token", try #require(redeemed.json?["id_token"]?.stringValue)))

        let desk = try api.addClient()
        let started = try api.backchannelAuthorize(
            desk, user: "alice", extra: [("binding_message", "AB12"), ("scope", "openid")])
        let requestID = try #require(started.json?["auth_req_id"]?.stringValue, "\(started.text)")
        try device.answerNewest()
        let polled = try api.poll(desk, id: requestID)
        tokens.byKind.append(("a CIBA client's access token", try #require(polled.json?["access_token"]?.stringValue)))
        tokens.byKind.append(("a CIBA ID token", try #require(polled.json?["id_token"]?.stringValue)))

        let statement: JSONValue = .object(["host": "laptop.example", "service": "sudo", "linux_user": "alice"])
        let hostLogin = try api.login(
            assertion: try api.assertion(deployment.laptop, claims: ["host_login": statement]))
        tokens.byKind.append(("an offline grant", try #require(hostLogin.json?["offline_grant"]?.stringValue)))
        tokens.byKind.append(("an unused device assertion", try api.assertion(deployment.laptop)))
        tokens.byKind.append(("a DPoP proof", try deployment.proof(deployment.laptop, "GET", "/v1/devices")))
        return tokens
    }

    @Test("every token kind the server issues or a device signs is refused where another kind is expected")
    func everyKindAtEveryVerifier() throws {
        try TokenConfusionCase.everyKind.run(on: .sqlite)
    }

    /// Every token `deployment` issues, offered at its peer wherever another kind is taken.
    static func everyKindAtEveryVerifier(_ deployment: ConfusionDeployment) throws {
        let tokens = try Self.tokens(deployment)
        let api = deployment.peer

        for (name, token) in tokens.byKind {
            // Device endpoints: only a device's own token, presented as its binding says.
            let devices = try deployment.devices("Bearer " + token)
            let expected = name == "a device's Bearer access token" ? 200 : 401
            #expect(devices.status == expected, "\(name) at /v1/devices: \(devices.status) \(devices.text)")
            if expected == 401 { #expect(devices.errorCode == "invalid_token", "\(name): \(devices.text)") }
            if name != "a device's DPoP-bound access token" {
                let withProof = try deployment.devices(
                    "DPoP " + token, proof: try deployment.proof(deployment.laptop, "GET", "/v1/devices", token: token))
                #expect(withProof.status == 401, "\(name) as DPoP at /v1/devices: \(withProof.text)")
            }

            // UserInfo: only an access token a client application got for the openid scope.
            let userInfo = try OpenIDTestAPI.userInfo(api, token: token)
            let isClientToken = name == "a relying party's access token" || name == "a CIBA client's access token"
            #expect(userInfo.status == (isClientToken ? 200 : 401), "\(name) at /userinfo: \(userInfo.text)")
            if !isClientToken {
                #expect(userInfo.errorCode == "invalid_token", "\(name) at /userinfo: \(userInfo.text)")
                #expect(userInfo.headers["WWW-Authenticate"]?.contains("invalid_token") == true)
            }
            let posted = try api.send(
                "POST", "/userinfo", headers: ["Content-Type": "application/x-www-form-urlencoded"],
                body: Array("access_token=\(TestAPI.formEncode(token))".utf8))
            #expect(posted.status == (isClientToken ? 200 : 401), "\(name) posted to /userinfo: \(posted.text)")
            // A token in the query (RFC 6750 section 2.3, which leaks it to logs) is no token.
            let queried = try api.send("GET", "/userinfo", query: ["access_token": token])
            #expect(queried.status == 401 && queried.errorCode == nil, "\(name) in the query: \(queried.text)")

            // RP-Initiated Logout: only an ID token as id_token_hint, never a redirect otherwise.
            var browser = OpenIDBrowser(api: api)
            let isIDToken = name == "an ID token" || name == "a CIBA ID token"
            let logout = try browser.get("/end-session", query: [("id_token_hint", token)])
            #expect((logout.status == 400) == !isIDToken, "\(name) at /end-session: \(logout.status)")
            #expect(logout.status < 500)
            let redirected = try browser.get(
                "/end-session",
                query: [("id_token_hint", token), ("post_logout_redirect_uri", "https://wiki.example.org/signed-out")])
            #expect((redirected.headers["Location"] != nil) == (name == "an ID token"), "\(name) redirected")
        }

        // The token endpoint's grants: nothing but a device assertion is one, and nothing is a code
        // or an auth_req_id. The unused assertion goes last, so that it is still unused here.
        let desk = try api.addClient("Kiosk")
        let relyingParty = try OpenIDTestAPI.addClient(api, name: "Blog", redirect: "https://blog.example.org/cb")
        for (name, token) in tokens.byKind where name != "an unused device assertion" {
            let login = try api.login(assertion: token)
            #expect(login.status == 400 && login.errorCode == "invalid_grant", "\(name) as assertion: \(login.text)")
            let poll = try api.poll(desk, id: token)
            #expect(poll.status == 400 && poll.errorCode == "invalid_grant", "\(name) as auth_req_id: \(poll.text)")
            let redeemed = try OpenIDTestAPI.redeem(api, relyingParty, code: token, verifier: try PKCE().verifier)
            #expect(redeemed.status == 400 && redeemed.errorCode == "invalid_grant", "\(name) as code")
            // A token as the DPoP proof of a good login: refused before the assertion is used.
            let proofed = try api.send(
                "POST", "/oauth/token",
                headers: ["Content-Type": "application/x-www-form-urlencoded", "DPoP": token],
                body: Array(
                    "grant_type=\(TestAPI.formEncode(TestAPI.jwtBearer))&assertion=\(TestAPI.formEncode(tokens["an unused device assertion"]))"
                        .utf8))
            #expect(
                proofed.status == 400 && proofed.errorCode == "invalid_dpop_proof", "\(name) as DPoP: \(proofed.text)")
        }
        // Registration's proof of possession is an assertion of the new key: no other token, nor
        // a DPoP proof that key signed (its jwk header names the key, which rule 2 refuses).
        let carol = try ServerTestKeys.key("carol-1")
        let carolsProof = try DPoPProofBuilder(key: carol).proof(method: "POST", url: api.issuer + "/v1/devices")
        for (name, token) in tokens.byKind + [("the new key's DPoP proof", carolsProof)] {
            let registered = try api.register(user: "carol", key: carol, proof: token)
            #expect(registered.status == 400 && registered.errorCode == "invalid_grant", "\(name): \(registered.text)")
        }
        #expect(try api.register(user: "carol", key: carol).status == 201)
        // CIBA takes no id_token_hint, not even an ID token of this server.
        let hinted = try api.backchannelAuthorize(
            desk, user: "alice", extra: [("id_token_hint", tokens["an ID token"])])
        #expect(hinted.status == 400 && hinted.errorCode == "invalid_request", "\(hinted.text)")
        let hintToken = try api.backchannelAuthorize(
            desk, user: "alice", extra: [("login_hint_token", deployment.laptopToken)])
        #expect(hintToken.status == 400 && hintToken.errorCode == "invalid_request", "\(hintToken.text)")
        // The unused assertion still logs in: every refusal above left it alone.
        #expect(try api.login(assertion: tokens["an unused device assertion"]).status == 200)
    }

    @Test("two servers sharing one signing key file refuse each other's tokens, assertions and proofs")
    func anotherIssuer() throws {
        try TokenConfusionCase.anotherIssuer.run(on: .sqlite)
    }

    /// Two deployments on `database` sharing one signing key file: neither takes the other's.
    static func anotherIssuer(on database: ConfusionDeployment.Database) throws {
        let keyDirectory = TemporaryDirectory("keyauth-confusion-key")
        defer { keyDirectory.remove() }
        let keyFile = keyDirectory.path + "/signing.pem"
        try SecureFile.write(try ServerTestKeys.key("signing-key-file").pkcs8PEM(), to: keyFile)
        try ConfusionDeployment.run(on: database, extraArguments: ["--signing-key-file", keyFile]) { first in
            // The same device keys registered at a second server, a deployment of its own.
            try ConfusionDeployment.run(
                on: database, issuer: "http://other.keyauth.test", extraArguments: ["--signing-key-file", keyFile]
            ) { second in
                try Self.anotherIssuer(first, second)
            }
        }
    }

    private static func anotherIssuer(_ first: ConfusionDeployment, _ second: ConfusionDeployment) throws {
        #expect(first.api.issuer != second.peer.issuer)
        for (name, token) in try Self.tokens(first).byKind {
            let devices = try second.devices("Bearer " + token)
            #expect(devices.status == 401 && devices.errorCode == "invalid_token", "\(name): \(devices.text)")
            let userInfo = try OpenIDTestAPI.userInfo(second.peer, token: token)
            #expect(userInfo.status == 401 && userInfo.errorCode == "invalid_token", "\(name): \(userInfo.text)")
            let login = try second.peer.login(assertion: token)
            #expect(login.status == 400 && login.errorCode == "invalid_grant", "\(name): \(login.text)")
            var browser = OpenIDBrowser(api: second.peer)
            let logout = try browser.get("/end-session", query: [("id_token_hint", token)])
            #expect(logout.status == 400, "\(name) at the other server's /end-session")
        }
        // The first server's DPoP proof of a device, for the same path, at the second server.
        let proof = try first.proof(first.laptop, "POST", "/oauth/token")
        let proofed = try second.peer.send(
            "POST", "/oauth/token",
            headers: ["Content-Type": "application/x-www-form-urlencoded", "DPoP": proof],
            body: Array(
                "grant_type=\(TestAPI.formEncode(TestAPI.jwtBearer))&assertion=\(TestAPI.formEncode(try second.peer.assertion(second.laptop)))"
                    .utf8))
        #expect(proofed.status == 400 && proofed.errorCode == "invalid_dpop_proof", "\(proofed.text)")
        #expect(try second.devices("Bearer " + second.laptopToken).status == 200)
    }

    @Test("a device assertion whose kid is not a string is refused, not looked up by sub; extreme claims are no 5xx")
    func assertionHeaderAndClaimTricks() throws {
        try TokenConfusionCase.assertionTricks.run(on: .sqlite)
    }

    static func assertionHeaderAndClaimTricks(_ deployment: ConfusionDeployment) throws {
        let api = deployment.peer
        let laptop = deployment.laptop
        let kid = laptop.publicKey.fingerprint
        let claims = try api.defaultClaims(laptop)
        func login(_ header: JSONValue, _ changes: [String: JSONValue] = [:]) throws -> HTTPResponse {
            try api.login(
                assertion: try api.signed(
                    header: header, payload: .object(claims.merging(changes) { $1 }), key: laptop))
        }
        // PROTOCOL.md section 2, rule 3: by kid, or by sub only when kid is absent.
        for value: JSONValue in [.null, 5, .array([.string(kid)]), .object(["kid": .string(kid)]), ""] {
            let response = try login(
                .object(["alg": "RS256", "typ": "JWT", "kid": value]), ["jti": .string(UUID().uuidString)])
            #expect(
                response.status == 400 && response.errorCode == "invalid_grant",
                "kid \(value.serialized()): \(response.text)")
        }
        // Times and ids at their extremes, each signed by the device key: refused, never a 5xx.
        let now = claims["iat"]?.integerValue ?? 0
        let extremes: [[String: JSONValue]] = [
            ["exp": .integer(Int64.max)], ["exp": .integer(Int64.min)], ["iat": .integer(Int64.min)],
            ["iat": .integer(Int64.max)], ["exp": .integer(Int64.max), "iat": .integer(Int64.min)],
            ["exp": .number(1e300)], ["exp": .string("\(now + 30)")], ["iat": .number(Double(now))],
            ["nbf": .integer(Int64.max)], ["nbf": .string("0")], ["aud": .array([.array([.string(api.issuer)])])],
            ["aud": .array([])], ["sub": .integer(1)], ["jti": .string(String(repeating: "j", count: 257))],
            ["jti": .integer(1)], ["jti": "a\u{7f}b"], ["amr": .array(["swk", "swk"])],
            ["host_login": .string("laptop")], ["cnf": .object(["jkt": "x"]), "amr": .array(["hwk", "swk"])],
        ]
        for changes in extremes {
            let response = try login(
                .object(["alg": "RS256", "typ": "JWT", "kid": .string(kid)]),
                changes.merging(["jti": .string(UUID().uuidString)]) { given, _ in given })
            #expect(response.status == 400 && response.errorCode == "invalid_grant", "\(changes): \(response.text)")
        }
        // The typ of an assertion is not checked (RFC 7523 names none): the device key signed it.
        let typed = try login(
            .object(["alg": "RS256", "typ": "at+jwt", "kid": .string(kid)]), ["jti": .string(UUID().uuidString)])
        #expect(typed.status == 200, "\(typed.text)")
    }

    @Test("one-time codes and ids of one kind are refused as another, and stay usable as what they are")
    func codesOfOneKindAsAnother() throws {
        try TokenConfusionCase.codes.run(on: .sqlite)
    }

    /// Codes and ids `deployment` gives, each offered at its peer as another kind.
    static func codesOfOneKindAsAnother(_ deployment: ConfusionDeployment) throws {
        let origin = deployment.api
        let enrollment = EnrollmentCodes(storage: deployment.storage, now: deployment.environment.clock.closure)
        let bobsCode = try enrollment.issue(for: "bob")
        let alicesCode = try enrollment.issue(for: "alice")
        let made = try origin.send(
            "POST", "/v1/recovery-codes",
            headers: ["Authorization": "Bearer \(deployment.laptopToken)", "Content-Type": "application/json"],
            body: Array(
                JSONValue.object([
                    "assertion": .string(
                        try origin.assertion(
                            deployment.laptop, claims: ["recovery_codes": "alice", "amr": .array(["swk", "pin"])]))
                ]).serialized().utf8))
        let recoveryCode = try #require(made.json?["codes"]?.arrayValue?.first?.stringValue, "\(made.text)")
        // An authorization code not yet redeemed, the browser session it signed in, a pending
        // CIBA request.
        let relyingParty = try OpenIDTestAPI.addClient(origin)
        let pkce = try PKCE()
        var browser = OpenIDBrowser(api: origin)
        let device = ApprovingDevice(api: origin, key: deployment.laptop, token: deployment.laptopToken)
        let done = try OpenIDTestAPI.signIn(
            &browser, device: device, OpenIDTestAPI.authorization(relyingParty, pkce: pkce))
        let code = try #require(try OpenIDTestAPI.redirect(done).parameters["code"])
        let session = try #require(browser.cookies["keyauth-session"])
        let desk = try origin.addClient()
        let requestID = try origin.startSignIn(desk, user: "alice")

        // Each offered at the peer instance (the same server on SQLite).
        let api = deployment.peer
        // Registration codes: an enrollment code is no recovery code, nor the other way round.
        let bobsKey = try ServerTestKeys.key("bob-1")
        let newKey = try ServerTestKeys.key("alice-4")
        func register(_ user: String, _ key: RSAPrivateKey, _ field: String, _ value: String) throws -> HTTPResponse {
            try api.registerBody(
                .object([
                    "user": .string(user), "name": "new laptop", "public_key": .string(key.publicKey.pemRepresentation),
                    "proof": .string(try api.assertion(key)), field: .string(value),
                ]))
        }
        for (user, key, field, value) in [
            ("bob", bobsKey, "recovery_code", bobsCode), ("alice", newKey, "recovery_code", alicesCode),
            ("alice", newKey, "enrollment_code", recoveryCode), ("bob", bobsKey, "enrollment_code", recoveryCode),
            ("alice", newKey, "enrollment_code", code), ("alice", newKey, "recovery_code", requestID),
            ("alice", newKey, "enrollment_code", session),
        ] {
            let response = try register(user, key, field, value)
            #expect(response.status == 403 && response.errorCode == "access_denied", "\(field) \(response.text)")
        }
        // Grants: a code is no auth_req_id, and nothing else is a code.
        for value in [requestID, session, recoveryCode, alicesCode] {
            let redeemed = try OpenIDTestAPI.redeem(api, relyingParty, code: value, verifier: pkce.verifier)
            #expect(redeemed.status == 400 && redeemed.errorCode == "invalid_grant", "\(redeemed.text)")
        }
        for value in [code, session, recoveryCode, alicesCode] {
            let polled = try api.poll(desk, id: value)
            #expect(polled.status == 400 && polled.errorCode == "invalid_grant", "\(polled.text)")
            let answered = try api.checkCode(value, code: "AB12", token: deployment.laptopToken)
            #expect(answered.status == 404 && answered.errorCode == "not_found", "\(answered.text)")
        }
        // None of them is an access token, nor a session cookie.
        for value in [code, session, requestID, recoveryCode] {
            #expect(try deployment.devices("Bearer " + value).status == 401)
            #expect(try OpenIDTestAPI.userInfo(api, token: value).status == 401)
        }
        for value in [code, requestID] {
            var stranger = OpenIDBrowser(api: api)
            stranger.cookies["keyauth-session"] = value
            #expect(try !stranger.get("/account").text.contains("Sign out"))
        }
        // The session is an application's (its approval was a sign-in to the relying party): the
        // account page knows it, and asks for a sign-in of its own.
        var signedIn = OpenIDBrowser(api: api)
        signedIn.cookies["keyauth-session"] = session
        let page = try signedIn.get("/account").text
        let note = "To manage your devices, sign in to the account page"
        #expect(page.contains(note) && !page.contains("Sign out"), "\(page)")
        let record = try #require(try api.storage.browserSession(idHash: try BrowserSessions.hash(session)))
        let laptopKID = deployment.laptop.publicKey.fingerprint
        let revoked = try signedIn.post("/account/devices/\(laptopKID)/revoke", form: [("csrf", record.csrfToken)])
        #expect(revoked.status == 403, "\(revoked.text)")
        #expect(try api.storage.device(kid: laptopKID)?.status == .active)
        // Each still works as what it is.
        #expect(try register("bob", bobsKey, "enrollment_code", bobsCode).status == 201)
        #expect(try register("alice", newKey, "recovery_code", recoveryCode).status == 201)
        #expect(try OpenIDTestAPI.redeem(api, relyingParty, code: code, verifier: pkce.verifier).status == 200)
        #expect(try api.poll(desk, id: requestID).errorCode == "authorization_pending")
    }

    @Test(
        "two Authorization headers, or a token in the header and the form, are invalid_request; odd presentations are refused"
    )
    func oddPresentations() throws {
        try TokenConfusionCase.oddPresentations.run(on: .sqlite)
    }

    static func oddPresentations(_ deployment: ConfusionDeployment) throws {
        let api = deployment.peer
        let bound = try deployment.boundToken()
        let token = deployment.laptopToken
        let proof = try deployment.proof(deployment.laptop, "GET", "/v1/devices", token: bound)
        // Authorization is a singleton field (RFC 9110 section 11.6.2), and RFC 6750 section 3.1
        // makes a request presenting more than one token invalid_request: a proxy in front that
        // checked one of two headers must not see the server act on the other.
        func twice(_ first: String, _ second: String) -> HTTPHeaders {
            var headers = HTTPHeaders()
            headers.add("Authorization", first)
            headers.add("Authorization", second)
            return headers
        }
        for (name, headers) in [
            ("two Bearer headers", twice("Bearer \(token)", "Bearer \(token)")),
            ("Bearer, then DPoP", twice("Bearer \(token)", "DPoP \(bound)")),
            ("DPoP, then Bearer", twice("DPoP \(bound)", "Bearer \(token)")),
            ("Basic, then Bearer", twice("Basic YTpi", "Bearer \(token)")),
        ] {
            var withProof = headers
            withProof.add("DPoP", proof)
            let response = try api.send("GET", "/v1/devices", headers: withProof)
            #expect(response.status == 400 && response.errorCode == "invalid_request", "\(name): \(response.text)")
            let userInfo = try api.send("GET", "/userinfo", headers: headers)
            #expect(userInfo.status == 400 && userInfo.errorCode == "invalid_request", "\(name): \(userInfo.text)")
        }
        // Client authentication too: two clients' credentials at once name no one client.
        let desk = try api.addClient()
        let kiosk = try api.addClient("Kiosk")
        var twoClients = twice(desk.basic, kiosk.basic)
        twoClients.set("Content-Type", "application/x-www-form-urlencoded")
        let started = try api.send(
            "POST", "/bc-authorize", headers: twoClients, body: Array("login_hint=alice&binding_message=AB12".utf8))
        #expect(started.status == 400 && started.errorCode == "invalid_request", "\(started.text)")
        // A token both in the header and in the form (RFC 6750 section 2.2 allows one method).
        let both = try api.send(
            "POST", "/userinfo",
            headers: ["Authorization": "Bearer \(token)", "Content-Type": "application/x-www-form-urlencoded"],
            body: Array("access_token=\(TestAPI.formEncode(token))".utf8))
        #expect(both.status == 400 && both.errorCode == "invalid_request", "\(both.text)")
        // A body the form rules refuse is refused, not skipped for the header's token: a proxy in
        // front may have judged the form's.
        let encoded = TestAPI.formEncode(token)
        for (contentType, body) in [
            ("application/x-www-form-urlencoded", "access_token=\(encoded)&access_token=\(encoded)"),
            ("application/x-www-form-urlencoded", "access_token=\(encoded)%00"),
            ("text/plain", "access_token=\(encoded)"),
        ] {
            let odd = try api.send(
                "POST", "/userinfo", headers: ["Authorization": "Bearer \(token)", "Content-Type": contentType],
                body: Array(body.utf8))
            #expect(odd.status == 400 && odd.errorCode == "invalid_request", "\(body): \(odd.text)")
        }

        let huge = String(repeating: "A", count: 9000)
        let refused: [(String, HTTPHeaders)] = [
            ("an empty DPoP header", ["Authorization": "DPoP \(bound)", "DPoP": ""]),
            ("a huge DPoP header", ["Authorization": "DPoP \(bound)", "DPoP": huge]),
            ("a huge token", ["Authorization": "Bearer \(huge)"]),
            ("Basic", ["Authorization": "Basic \(token)"]),
            ("no scheme", ["Authorization": token]),
            ("scheme only", ["Authorization": "Bearer"]),
            ("a comma list", ["Authorization": "Bearer \(token), DPoP \(bound)"]),
            ("two tokens", ["Authorization": "Bearer \(token) \(token)"]),
        ]
        for (name, headers) in refused {
            let response = try api.send("GET", "/v1/devices", headers: headers)
            #expect((400...401).contains(response.status), "\(name): \(response.status) \(response.text)")
            #expect(
                ["invalid_token", "invalid_request", "invalid_dpop_proof"].contains(response.errorCode ?? ""),
                "\(name): \(response.text)")
        }
        // One header each: the bound token with its proof, the client with its credentials.
        #expect(try deployment.devices("DPoP " + bound, proof: proof).status == 200)
        #expect(try api.backchannelAuthorize(desk, user: "alice", extra: [("binding_message", "AB12")]).status == 200)
    }

    @Test("a DPoP nonce is no attestation nonce and the other way round, under the same signing key")
    func noncesOfOnePurpose() throws {
        let keys = try ServerSigningKeys(fixed: .p256(try P256PrivateKey.generate()))
        let now = ServerClock.now()
        let dpop = ServerNonces(keys: keys)
        let attestation = ServerNonces(keys: keys, purpose: .attestation)
        let dpopNonce = try dpop.issue(now: now)
        let attestationNonce = try attestation.issue(now: now)
        #expect(dpop.isValid(dpopNonce, now: now) && attestation.isValid(attestationNonce, now: now))
        #expect(!attestation.isValid(dpopNonce, now: now))
        #expect(!dpop.isValid(attestationNonce, now: now))
        // Nor is another server's, whatever its purpose.
        let other = ServerNonces(keys: try ServerSigningKeys(fixed: .p256(try P256PrivateKey.generate())))
        #expect(!dpop.isValid(try other.issue(now: now), now: now))
    }

    @Test("approvals take a fresh assertion of the token's own device, never another token or device's")
    func approvalsTakeOnlyTheirAssertion() throws {
        try TokenConfusionCase.approvals.run(on: .sqlite)
    }

    static func approvalsTakeOnlyTheirAssertion(_ deployment: ConfusionDeployment) throws {
        let api = deployment.peer
        let laptop = deployment.laptop
        // Started at one instance, answered at the other.
        let desk = try deployment.api.addClient()
        let requestID = try deployment.api.startSignIn(desk, user: "alice")
        let bindingCode = try api.code(of: requestID)
        let approvalClaims: [String: JSONValue] = [
            "auth_req_id": .string(requestID), "binding_code": .string(bindingCode), "amr": .array(["swk", "pin"]),
        ]
        let serverToken = deployment.phoneToken
        let candidates: [(String, String)] = [
            ("the laptop's access token", deployment.laptopToken),
            ("another device's access token", serverToken),
            ("a DPoP proof", try deployment.proof(laptop, "POST", "/v1/auth-requests/\(requestID)")),
            (
                "the phone's assertion, with the laptop's token",
                try api.assertion(deployment.phone, claims: approvalClaims)
            ),
            (
                "the laptop's assertion naming another request",
                try api.assertion(laptop, claims: approvalClaims.merging(["auth_req_id": "x"]) { $1 })
            ),
            (
                "the laptop's assertion under the phone's kid",
                try api.assertion(laptop, claims: approvalClaims, keyID: deployment.phone.publicKey.fingerprint)
            ),
        ]
        for (name, assertion) in candidates {
            let answer = try api.answer(
                requestID, decision: "approve", assertion: assertion, token: deployment.laptopToken)
            #expect(answer.status == 400 && answer.errorCode == "invalid_grant", "\(name): \(answer.text)")
            let approval = try api.send(
                "POST", "/v1/devices/\(deployment.pendingKID)/approve",
                headers: ["Content-Type": "application/json", "Authorization": "Bearer \(deployment.laptopToken)"],
                body: Array(JSONValue.object(["assertion": .string(assertion)]).serialized().utf8))
            #expect(approval.status == 400 && approval.errorCode == "invalid_grant", "\(name): \(approval.text)")
        }
        // Recovery codes take a statement naming the token's user, with a presence check.
        var refused = candidates
        for (name, claims) in [
            ("naming another user", ["recovery_codes": "bob", "amr": .array(["swk", "pin"])]),
            ("without a presence check", ["recovery_codes": "alice", "amr": .array(["swk"])]),
        ] as [(String, [String: JSONValue])] {
            let assertion = try api.assertion(laptop, claims: claims)
            let made = try api.send(
                "POST", "/v1/recovery-codes",
                headers: ["Content-Type": "application/json", "Authorization": "Bearer \(deployment.laptopToken)"],
                body: Array(JSONValue.object(["assertion": .string(assertion)]).serialized().utf8))
            #expect(made.status == 400 && made.errorCode == "invalid_grant", "\(name): \(made.text)")
            refused.append(("the laptop's recovery-codes assertion \(name)", assertion))
        }
        // A statement the server verified and refused is used up: none of them logs in later
        // (at either instance), whoever saw it.
        for (name, assertion) in refused {
            let login = try deployment.api.login(assertion: assertion)
            #expect(login.status == 400 && login.errorCode == "invalid_grant", "\(name) logs in: \(login.text)")
        }
        // None of it answered the request: the laptop's own assertion still approves it.
        let good = try api.answer(
            requestID, decision: "approve", assertion: try api.assertion(laptop, claims: approvalClaims),
            token: deployment.laptopToken)
        #expect(good.status == 200, "\(good.text)")
    }

    @Test("the server's own tokens with a changed header, claims or proof are refused, under both token keys")
    func changedTokens() throws {
        // ES256 access tokens beside the RS256 key of ID tokens: both kinds of key are published.
        try TokenConfusionCase.changedTokens.run(on: .sqlite)
    }

    static func changedTokens(_ deployment: ConfusionDeployment) throws {
        let api = deployment.peer
        let keySet = try JWKSet(json: try api.send("GET", "/.well-known/jwks.json").body)
        let token = deployment.laptopToken
        let parts = token.split(separator: ".").map(String.init)
        let header = try #require(try JSONValue(parsing: Base64URL.decode(parts[0]) ?? []).objectValue)
        let serverKID = try #require(header["kid"]?.stringValue)
        #expect(header["alg"] == "ES256")
        let rsaKID = try #require(keySet.keys.first { $0.value.algorithm == .rs256 }?.key)
        let rsaKey = try #require(keySet[rsaKID])
        let deviceKID = deployment.laptop.publicKey.fingerprint
        let rsaPEM: String
        if case .rsa(let key) = rsaKey { rsaPEM = key.pemRepresentation } else { rsaPEM = "" }

        /// The token with header `text` over its own payload and signature.
        func relabelled(_ text: String, signature: String? = nil) -> String {
            Base64URL.encode(Array(text.utf8)) + "." + parts[1] + "." + (signature ?? parts[2])
        }
        func hmac(_ text: String, secret: String) throws -> String {
            let input = Base64URL.encode(Array(text.utf8)) + "." + parts[1]
            return input + "."
                + Base64URL.encode(try CryptoPrimitives.hmacSHA256(key: Array(secret.utf8), message: Array(input.utf8)))
        }
        var changed: [(String, String)] = [
            ("typ removed", relabelled(#"{"alg":"ES256","kid":"\#(serverKID)"}"#)),
            ("typ JWT", relabelled(#"{"alg":"ES256","typ":"JWT","kid":"\#(serverKID)"}"#)),
            ("typ AT+JWT", relabelled(#"{"alg":"ES256","typ":"AT+JWT","kid":"\#(serverKID)"}"#)),
            ("typ escaped", relabelled(#"{"alg":"ES256","\u0074yp":"at+jwt","kid":"\#(serverKID)"}"#)),
            ("typ twice", relabelled(#"{"alg":"ES256","typ":"at+jwt","typ":"at+jwt","kid":"\#(serverKID)"}"#)),
            ("spaces", relabelled(#"{ "alg" : "ES256", "typ" : "at+jwt", "kid" : "\#(serverKID)" }"#)),
            ("alg none", relabelled(#"{"alg":"none","typ":"at+jwt","kid":"\#(serverKID)"}"#, signature: "")),
            ("alg none, signed", relabelled(#"{"alg":"none","typ":"at+jwt","kid":"\#(serverKID)"}"#)),
            ("alg RS256 on the EC key", relabelled(#"{"alg":"RS256","typ":"at+jwt","kid":"\#(serverKID)"}"#)),
            ("alg ES256 on the RSA key", relabelled(#"{"alg":"ES256","typ":"at+jwt","kid":"\#(rsaKID)"}"#)),
            ("alg PS256", relabelled(#"{"alg":"PS256","typ":"at+jwt","kid":"\#(rsaKID)"}"#)),
            (
                "HS256 keyed with the RSA key's PEM",
                try hmac(#"{"alg":"HS256","typ":"at+jwt","kid":"\#(rsaKID)"}"#, secret: rsaPEM)
            ),
            ("kid of the device", relabelled(#"{"alg":"ES256","typ":"at+jwt","kid":"\#(deviceKID)"}"#)),
            ("no kid", relabelled(#"{"alg":"ES256","typ":"at+jwt"}"#)),
            (
                "jwk", relabelled(#"{"alg":"ES256","typ":"at+jwt","kid":"\#(serverKID)","jwk":{"kty":"EC"}}"#)
            ),
            (
                "jku",
                relabelled(
                    #"{"alg":"ES256","typ":"at+jwt","kid":"\#(serverKID)","jku":"\#(api.issuer)/.well-known/jwks.json"}"#
                )
            ),
            ("x5u", relabelled(#"{"alg":"ES256","typ":"at+jwt","kid":"\#(serverKID)","x5u":"\#(api.issuer)/x"}"#)),
            ("crit", relabelled(#"{"alg":"ES256","typ":"at+jwt","kid":"\#(serverKID)","crit":["exp"]}"#)),
            ("trailing segment", token + ".e30"),
            ("trailing byte", token + "A"),
            ("padding", token + "="),
        ]
        // The device's key signing an access token of its own making, under every key id.
        for kid in [serverKID, rsaKID, deviceKID] {
            var claims = try JWTClaims(parsingObject: Base64URL.decode(parts[1]) ?? [])
            claims.set("sub", string: "alice")
            changed.append(
                (
                    "signed by the device, kid \(kid == deviceKID ? "device" : "server")",
                    try api.signed(
                        header: .object(["alg": "RS256", "typ": "at+jwt", "kid": .string(kid)]),
                        payload: claims.jsonValue, key: deployment.laptop)
                ))
        }
        // Claims changed under the server's signature: times as strings, another user or device,
        // an array audience.
        let payload = try #require(try JSONValue(parsing: Base64URL.decode(parts[1]) ?? []).objectValue)
        let claimChanges: [(String, JSONValue)] = [
            ("exp", .string("\(payload["exp"]?.integerValue ?? 0)")), ("exp", .number(1e12)),
            ("iat", .string("0")), ("nbf", .integer(Int64.max)), ("aud", .array([.string(api.issuer)])),
            ("sub", "bob"), ("client_id", .string(deployment.phone.publicKey.fingerprint)),
            ("cnf", .object(["jkt": .string(deviceKID)])),
        ]
        for (name, value) in claimChanges {
            var changedPayload = payload
            changedPayload[name] = value
            changed.append(
                (
                    "\(name) changed",
                    parts[0] + "." + Base64URL.encode(Array(JSONValue.object(changedPayload).serialized().utf8)) + "."
                        + parts[2]
                ))
        }
        for (name, variant) in changed {
            for scheme in ["Bearer", "DPoP"] {
                let proof = try deployment.proof(deployment.laptop, "GET", "/v1/devices", token: variant)
                let response = try deployment.devices("\(scheme) \(variant)", proof: scheme == "DPoP" ? proof : nil)
                #expect(response.status == 401, "\(name) as \(scheme): \(response.status) \(response.text)")
                #expect(
                    response.errorCode == "invalid_token" || response.errorCode == "invalid_dpop_proof",
                    "\(name) as \(scheme): \(response.text)")
            }
            let userInfo = try OpenIDTestAPI.userInfo(api, token: variant)
            #expect(userInfo.status == 401 && userInfo.errorCode == "invalid_token", "\(name) at /userinfo")
        }
        // The unchanged token still works: each refusal was the change's.
        #expect(try deployment.devices("Bearer " + token).status == 200)
    }

    @Test("a DPoP-bound token: no Bearer downgrade, and a proof for another request, token or key is refused")
    func boundTokenProofs() throws {
        try TokenConfusionCase.boundTokenProofs.run(on: .sqlite)
    }

    static func boundTokenProofs(_ deployment: ConfusionDeployment) throws {
        let laptop = deployment.laptop
        let bound = try deployment.boundToken()
        let issuer = deployment.api.issuer
        func proof(_ method: String, _ url: String, token: String? = bound, key: RSAPrivateKey? = nil) throws
            -> String
        {
            try DPoPProofBuilder(key: key ?? laptop).proof(method: method, url: url, accessToken: token)
        }
        let refused: [(String, String, String?)] = [
            ("Bearer", "Bearer " + bound, nil),
            ("Bearer with a good proof", "Bearer " + bound, try proof("GET", issuer + "/v1/devices")),
            ("DPoP without a proof", "DPoP " + bound, nil),
            ("htm lower case", "DPoP " + bound, try proof("get", issuer + "/v1/devices")),
            ("htm POST", "DPoP " + bound, try proof("POST", issuer + "/v1/devices")),
            ("htu with a trailing slash", "DPoP " + bound, try proof("GET", issuer + "/v1/devices/")),
            ("htu in another case", "DPoP " + bound, try proof("GET", issuer + "/V1/Devices")),
            ("htu of the token endpoint", "DPoP " + bound, try proof("GET", issuer + "/oauth/token")),
            (
                "htu https", "DPoP " + bound,
                try proof("GET", issuer.replacingOccurrences(of: "http:", with: "https:") + "/v1/devices")
            ),
            (
                "ath of another token", "DPoP " + bound,
                try proof("GET", issuer + "/v1/devices", token: deployment.laptopToken)
            ),
            ("no ath", "DPoP " + bound, try proof("GET", issuer + "/v1/devices", token: nil)),
            ("a proof of the phone", "DPoP " + bound, try proof("GET", issuer + "/v1/devices", key: deployment.phone)),
            (
                "the Bearer token with the DPoP scheme", "DPoP " + deployment.laptopToken,
                try proof("GET", issuer + "/v1/devices", token: deployment.laptopToken)
            ),
        ]
        for (name, authorization, proof) in refused {
            let response = try deployment.devices(authorization, proof: proof)
            #expect(response.status == 401, "\(name): \(response.status) \(response.text)")
            #expect(
                response.errorCode == "invalid_token" || response.errorCode == "invalid_dpop_proof",
                "\(name): \(response.text)")
        }
        // RFC 9449 section 4.3 ignores the query; a proof is still good once only.
        let withQuery = try proof("GET", issuer + "/v1/devices?limit=1")
        #expect(try deployment.devices("DPoP " + bound, proof: withQuery).status == 200)
        let again = try deployment.devices("DPoP " + bound, proof: withQuery)
        #expect(again.status == 401 && again.errorCode == "invalid_dpop_proof")
    }
}

/// The audit's checks that run against a deployment, by name: each runs on SQLite in
/// ``TokenConfusionTests`` and across two instances on PostgreSQL in
/// ``StorageContractTests/TokenConfusionPostgresTests``.
enum TokenConfusionCase: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case everyKind = "every token kind at every verifier"
    case anotherIssuer = "another issuer sharing the signing key file"
    case assertionTricks = "assertion header and claim tricks"
    case codes = "one-time codes of one kind as another"
    case oddPresentations = "odd presentations"
    case approvals = "approvals take only their assertion"
    case changedTokens = "changed tokens under both token keys"
    case boundTokenProofs = "DPoP-bound token proofs"
    case retiredKey = "a retired signing key's tokens"
    case attestation = "TPM attestation endpoints"
    case algorithmRotation = "rotation between signing algorithms"

    var testDescription: String { rawValue }

    /// Runs the check against a fresh deployment on `database`.
    func run(on database: ConfusionDeployment.Database) throws {
        typealias Checks = TokenConfusionTests
        switch self {
        case .everyKind: try ConfusionDeployment.run(on: database, Checks.everyKindAtEveryVerifier)
        case .anotherIssuer: try Checks.anotherIssuer(on: database)
        case .assertionTricks: try ConfusionDeployment.run(on: database, Checks.assertionHeaderAndClaimTricks)
        case .codes: try ConfusionDeployment.run(on: database, Checks.codesOfOneKindAsAnother)
        case .oddPresentations: try ConfusionDeployment.run(on: database, Checks.oddPresentations)
        case .approvals: try ConfusionDeployment.run(on: database, Checks.approvalsTakeOnlyTheirAssertion)
        case .changedTokens:
            try ConfusionDeployment.run(on: database, tokenAlgorithm: "ES256", Checks.changedTokens)
        case .boundTokenProofs: try ConfusionDeployment.run(on: database, Checks.boundTokenProofs)
        case .retiredKey:
            try ConfusionDeployment.run(on: database, extraArguments: Checks.rotationArguments, Checks.retiredKey)
        case .attestation: try Checks.attestationEndpoints(on: database)
        case .algorithmRotation:
            try ConfusionDeployment.run(
                on: database, extraArguments: Checks.rotationArguments, Checks.algorithmRotation)
        }
    }
}
