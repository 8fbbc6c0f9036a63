import KeyAuth
import KeyAuthServer
import KeyAuthTestSupport
import Testing

@Suite("Login at /oauth/token")
struct LoginTests {
    @Test("a valid assertion of an active device gets a Bearer token that expires in 900 s, not cached")
    func success() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI()
        let key = try ServerTestKeys.key("alice-1")
        #expect(try api.register(user: "alice", key: key).status == 201)
        let response = try api.login(key)
        #expect(response.status == 200)
        #expect(response.json?["token_type"]?.stringValue == "Bearer")
        #expect(response.json?["expires_in"]?.integerValue == 900)
        #expect(response.json?["access_token"]?.stringValue?.isEmpty == false)
        #expect(response.headers["Cache-Control"] == "no-store")
        #expect(try api.storage.device(kid: key.publicKey.fingerprint)?.lastLoginAt == environment.clock.now)
    }

    @Test("the access token's header and claims are written in their fixed order, byte for byte")
    func accessTokenBytes() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI()
        let key = try ServerTestKeys.key("alice-1")
        let token = try api.activeDevice(user: "alice", key: key)
        let parts = token.split(separator: ".").map { String(decoding: Base64URL.decode($0) ?? [], as: UTF8.self) }
        #expect(parts.count == 3)
        let serverKID = try ServerTestKeys.key("server").publicKey.fingerprint
        #expect(parts[0] == "{\"alg\":\"RS256\",\"typ\":\"at+jwt\",\"kid\":\"\(serverKID)\"}")
        let now = environment.clock.now
        let issuer = TestEnvironment.issuer
        let prefix =
            "{\"iss\":\"\(issuer)\",\"sub\":\"alice\",\"aud\":\"\(issuer)\",\"amr\":[\"swk\"],"
            + "\"client_id\":\"\(key.publicKey.fingerprint)\",\"device_tier\":\"software\",\"exp\":\(now + 900),"
            + "\"iat\":\(now),\"jti\":\""
        #expect(parts[1].hasPrefix(prefix), "\(parts[1])")
        #expect(parts[1].hasSuffix("\"}") && parts[1].count == prefix.count + 22 + 2)
    }

    @Test("the access token verifies with the JWKS key and carries iss, sub, aud, exp, jti and client_id, no cnf")
    func accessTokenVerifiesWithJWKS() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI()
        let key = try ServerTestKeys.key("alice-1")
        let token = try api.activeDevice(user: "alice", key: key)

        let jwks = try api.send("GET", "/.well-known/jwks.json")
        #expect(jwks.status == 200)
        let jwk = try #require(jwks.json?["keys"]?.arrayValue?.first)
        #expect(jwk["alg"]?.stringValue == "RS256")
        #expect(jwk["use"]?.stringValue == "sig")
        #expect(jwk["kty"]?.stringValue == "RSA")
        let serverKey = try RSAPublicKey(
            jwk: JWK(modulus: try #require(jwk["n"]?.stringValue), exponent: try #require(jwk["e"]?.stringValue)))
        let kid = try #require(jwk["kid"]?.stringValue)
        #expect(kid == serverKey.fingerprint)

        let verified = try CheckedAccessToken(
            token, issuer: TestEnvironment.issuer, keys: [kid: .rsa(serverKey)], clock: environment.clock.clock)
        #expect(verified.subject == "alice")
        #expect(verified.header["typ"]?.stringValue == "at+jwt")
        #expect(verified.header["kid"]?.stringValue == kid)
        // A token asked for without a DPoP proof is a Bearer token: client_id names the device,
        // and no cnf claims a binding that resource servers would enforce (RFC 9449 section 7.1).
        #expect(verified.claims["client_id"]?.stringValue == key.publicKey.fingerprint)
        #expect(verified.claims["cnf"] == nil)
        #expect(verified.expiresAt - verified.issuedAt == 900)
        #expect(verified.jwtID.isEmpty == false)
    }

    @Test("every hostile assertion is refused with 400 invalid_grant", arguments: HostileAssertion.allCases)
    func hostileAssertions(_ hostile: HostileAssertion) throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI()
        let key = try ServerTestKeys.key("alice-1")
        #expect(try api.register(user: "alice", key: key).status == 201)
        let assertion = try hostile.make(api: api, key: key, other: try ServerTestKeys.key("stranger"))
        let response = try api.login(assertion: assertion)
        #expect(response.status == 400)
        #expect(response.errorCode == "invalid_grant")
        #expect(response.json?["access_token"] == nil)
        // Descriptions never echo the token.
        #expect(!(response.errorDescription ?? "").contains(assertion.prefix(20)))
    }

    @Test("an audience array that contains the issuer is accepted")
    func audienceArray() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI()
        let key = try ServerTestKeys.key("alice-1")
        #expect(try api.register(user: "alice", key: key).status == 201)
        let assertion = try api.assertion(key, claims: ["aud": .array(["https://other.example", .string(api.issuer)])])
        #expect(try api.login(assertion: assertion).status == 200)
    }

    @Test("a replayed assertion is refused")
    func replay() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI()
        let key = try ServerTestKeys.key("alice-1")
        #expect(try api.register(user: "alice", key: key).status == 201)
        let assertion = try api.assertion(key)
        #expect(try api.login(assertion: assertion).status == 200)
        let replayed = try api.login(assertion: assertion)
        #expect(replayed.status == 400)
        #expect(replayed.errorCode == "invalid_grant")
    }

    @Test("unknown key, bad signature and revoked key get the same error and description")
    func uniformFailures() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI()
        let key = try ServerTestKeys.key("alice-1")
        let revoked = try ServerTestKeys.key("alice-2")
        let token = try api.activeDevice(user: "alice", key: key)
        #expect(try api.register(user: "alice", key: revoked).status == 202)
        #expect(
            try api.approveDevice(revoked.publicKey.fingerprint, approver: key, token: token).status
                == 200)
        #expect(
            try api.authorized("DELETE", "/v1/devices/\(revoked.publicKey.fingerprint)", token: token).status == 204)

        let other = try ServerTestKeys.key("stranger")
        let unknown = try api.login(assertion: try api.assertion(other))
        let badSignature = try api.login(
            assertion: try HostileAssertion.signedByAnotherKey.make(api: api, key: key, other: other))
        let revokedLogin = try api.login(revoked)
        for response in [unknown, badSignature, revokedLogin] {
            #expect(response.status == 400)
            #expect(response.errorCode == "invalid_grant")
            #expect(response.body == unknown.body)
        }
    }

    @Test("a grant type other than the JWT bearer grant gets unsupported_grant_type")
    func unsupportedGrant() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI()
        for form in ["grant_type=password&username=a&password=b", "grant_type=client_credentials"] {
            let response = try api.token(form: form)
            #expect(response.status == 400)
            #expect(response.errorCode == "unsupported_grant_type")
        }
    }

    @Test(
        "missing parameters, repeated parameters and a wrong content type get invalid_request",
        arguments: [
            ("assertion=abc", "application/x-www-form-urlencoded"),
            ("grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer", "application/x-www-form-urlencoded"),
            (
                "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion=",
                "application/x-www-form-urlencoded"
            ),
            ("grant_type=a&grant_type=b&assertion=x", "application/x-www-form-urlencoded"),
            ("grant_type=%zz", "application/x-www-form-urlencoded"),
            ("{\"grant_type\":\"urn:ietf:params:oauth:grant-type:jwt-bearer\"}", "application/json"),
        ])
    func invalidRequests(_ form: String, _ contentType: String) throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI()
        let response = try api.token(form: form, contentType: contentType)
        #expect(response.status == 400)
        #expect(response.errorCode == "invalid_request")
    }

    @Test("a device whose stored key cannot be read gives 500 server_error without detail")
    func serverError() throws {
        let environment = TestEnvironment()
        let api = try environment.directAPI()
        let key = try ServerTestKeys.key("alice-1")
        _ = try api.storage.insertDevice(
            DeviceRecord(
                kid: key.publicKey.fingerprint, user: "alice", name: "broken", publicKeyPEM: "garbage", status: .active,
                createdAt: environment.clock.now))
        let response = try api.login(key)
        #expect(response.status == 500)
        #expect(response.errorCode == "server_error")
        #expect(response.errorDescription == "internal server error")
    }
}
