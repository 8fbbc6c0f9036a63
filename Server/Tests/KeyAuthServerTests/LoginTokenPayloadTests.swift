import Foundation
import KeyAuth
import Testing

@testable import KeyAuthServer

/// A login's access token is written without a claim set (``LoginTokenPayload``); these check
/// that its bytes are the ones the general path (``AccessTokens/issue(user:deviceKID:bound:extra:)``)
/// writes, and that the token verifies.
@Suite("Login: the access token's claims, written directly")
struct LoginTokenPayloadTests {
    private static let issuer = "https://auth.example"
    private static let now: Int64 = 1_790_000_000

    private static func tokens() throws -> AccessTokens {
        AccessTokens(
            keys: try ServerSigningKeys(fixed: .p256(try P256PrivateKey.generate())), issuer: issuer, lifetime: 300,
            clock: .fixed(seconds: now))
    }

    /// The payload part of a compact JWS, decoded.
    private static func payload(of token: String) throws -> [UInt8] {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        try #require(parts.count == 3)
        return try #require(Base64URL.decode(parts[1]))
    }

    struct Case: Sendable, CustomTestStringConvertible {
        let user: String
        let methods: [String]
        let bound: Bool
        let tier: String
        var testDescription: String { "\(user.debugDescription) \(methods) bound: \(bound) \(tier)" }
    }

    static let cases: [Case] = [
        Case(user: "alice", methods: ["swk"], bound: false, tier: "software"),
        Case(user: "alice", methods: ["swk"], bound: true, tier: "software"),
        Case(user: "bob@example.com", methods: ["hwk", "pin"], bound: false, tier: "tpm-attested"),
        Case(user: "b\"o\\b\n\u{1}é😀", methods: ["hwk", "user"], bound: true, tier: "tpm"),
    ]

    @Test("the bytes are the general path's", arguments: cases)
    func sameBytes(_ example: Case) throws {
        let tokens = try Self.tokens()
        let deviceKID = Base64URL.encode(try CryptoPrimitives.randomBytes(count: 32))
        var extra = JWTClaims()
        extra.set("amr", strings: example.methods)
        extra.set("device_tier", string: example.tier)
        let general = try Self.payload(
            of: tokens.issue(user: example.user, deviceKID: deviceKID, bound: example.bound, extra: extra))
        // The same claims with the general token's random jti.
        let jti = try JWTClaims(parsingObject: general).string("jti")
        let direct = LoginTokenPayload(
            issuer: Self.issuer, user: example.user, deviceKID: deviceKID, methods: example.methods,
            bound: example.bound, deviceTier: example.tier, issuedAt: Self.now, lifetime: 300,
            tokenID: try #require(Base64URL.decode(jti)))
        #expect(String(decoding: direct.jsonBytes(), as: UTF8.self) == String(decoding: general, as: UTF8.self))
    }

    @Test("the token verifies with the server's keys and says what the login established", arguments: cases)
    func verifies(_ example: Case) throws {
        let tokens = try Self.tokens()
        let deviceKID = Base64URL.encode(try CryptoPrimitives.randomBytes(count: 32))
        let token = try tokens.issueForLogin(
            user: example.user, deviceKID: deviceKID, bound: example.bound, methods: example.methods,
            deviceTier: example.tier)
        let claims = try tokens.verify(token)
        #expect(claims.user == example.user)
        #expect(claims.clientID == deviceKID)
        #expect(claims.amr == example.methods)
        #expect(claims.deviceTier == example.tier)
        #expect(claims.deviceKeyThumbprint == (example.bound ? deviceKID : nil))
        let payload = try JWTClaims(parsingObject: Self.payload(of: token))
        #expect(try payload.integer("exp") == Self.now + 300)
        #expect(try payload.integer("iat") == Self.now)
        #expect(try Base64URL.decode(payload.string("jti"))?.count == 16)
        // Two tokens never share a jti.
        let other = try JWTClaims(
            parsingObject: Self.payload(
                of: tokens.issueForLogin(
                    user: example.user, deviceKID: deviceKID, bound: example.bound, methods: example.methods,
                    deviceTier: example.tier)))
        #expect(try other.string("jti") != payload.string("jti"))
    }
}
