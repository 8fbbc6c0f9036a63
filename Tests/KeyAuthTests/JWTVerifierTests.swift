import KeyAuth
import KeyAuthTestSupport
import Testing

/// The claim rules behind the presets, with the settings the server checks its access tokens by
/// (the device assertion preset has its own suite).
@Suite("JWT claim rules")
struct JWTVerifierTests {
    static let now: Int64 = 1_800_000_000
    let key = TestKeys.first
    var kid: String { key.publicKey.fingerprint }

    private func token() throws -> String {
        try JWTBuilder(key: key, audience: "https://auth.example.test", clock: .fixed(seconds: Self.now)).sign()
    }

    @Test("access tokens: typ at+jwt, issuer and audience required, sub is the user")
    func accessTokens() throws {
        let issuer = "https://auth.example.test"
        let server = JWTBuilder(key: TestKeys.second, audience: issuer, lifetime: 900, clock: .fixed(seconds: Self.now))
        var claims = JWTClaims()
        claims.set("iss", string: issuer)
        claims.set("sub", string: "alice")
        try claims.setJSON("cnf", json: "{\"jkt\":\"\(kid)\"}")
        let token = try server.sign(claims: claims, type: "at+jwt")
        let rules = JWTVerifier.Rules(
            audience: issuer, maximumLifetime: 3600, requireJWTID: false, subjectIsKeyID: false,
            expectedIssuer: issuer, expectedTypes: ["at+jwt"])
        let accessVerifier = JWTVerifier(rules: rules, clock: .fixed(seconds: Self.now + 100))
        let verified = try accessVerifier.verify(token, key: TestKeys.second.publicKey)
        #expect(try verified.string("sub") == "alice")
        #expect(verified["cnf"]?["jkt"] == .string(kid))
        #expect(throws: KeyAuthError.self) { try accessVerifier.verify(try self.token(), key: key.publicKey) }
        let late = JWTVerifier(rules: rules, clock: .fixed(seconds: Self.now + 911))
        #expect(throws: KeyAuthError.self) { try late.verify(token, key: TestKeys.second.publicKey) }
    }
}
