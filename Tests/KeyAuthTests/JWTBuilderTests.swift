import KeyAuth
import KeyAuthTestSupport
import Testing

@Suite("JWT builder")
struct JWTBuilderTests {
    static let now: Int64 = 1_800_000_000
    static let audience = "https://auth.example.test"
    let key = TestKeys.first
    var kid: String { key.publicKey.fingerprint }

    private func token(claims: JWTClaims = JWTClaims(), type: String = "JWT") throws -> String {
        try JWTBuilder(key: key, audience: Self.audience, clock: .fixed(seconds: Self.now)).sign(
            claims: claims, type: type)
    }

    @Test("a built assertion has the protocol's header and default claims")
    func builderShape() throws {
        let token = try self.token()
        let jws = try CompactJWS(parsing: token)
        #expect(jws.header == ["alg": "RS256", "typ": "JWT", "kid": .string(kid)])
        let headerText = String(decoding: Base64URL.decode(token.split(separator: ".")[0]) ?? [], as: UTF8.self)
        #expect(headerText == "{\"alg\":\"RS256\",\"typ\":\"JWT\",\"kid\":\"\(kid)\"}")
        let claims = try jws.claims()
        #expect(claims["iss"] == .string(kid))
        #expect(claims["sub"] == .string(kid))
        #expect(claims["aud"] == .string(Self.audience))
        #expect(claims["iat"] == .integer(Self.now))
        #expect(claims["exp"] == .integer(Self.now + 30))
        let jti = try #require(claims["jti"]?.stringValue)
        #expect(Base64URL.decode(jti)?.count == 16)
        #expect(kid.count == 43)
    }
}
