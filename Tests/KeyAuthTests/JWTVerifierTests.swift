import Foundation
import KeyAuth
import KeyAuthTestSupport
import Synchronization
import Testing

/// An in-memory replay cache; the server's durable ones are tested with the server.
final class MemoryReplayCache: JWTReplayCache {
    private let seen = Mutex(Set<String>())

    func claim(jwtID: String, keyID: String, expiresAt: Int64) -> Bool {
        seen.withLock { $0.insert(keyID + " " + jwtID).inserted }
    }
}

@Suite("JWT builder and verifier")
struct JWTVerifierTests {
    static let now: Int64 = 1_800_000_000
    static let audience = "https://auth.example.test"
    let key = TestKeys.first
    var kid: String { key.publicKey.fingerprint }
    var resolver: SingleKeyResolver { SingleKeyResolver(key: key.publicKey) }
    var verifier: JWTVerifier {
        JWTVerifier(options: JWTVerifier.Options(audience: Self.audience), now: { 1_800_000_000 })
    }

    private func token(claims: [String: JSONValue] = [:], type: String = "JWT") throws -> String {
        try JWTBuilder(key: key, audience: Self.audience, now: { Self.now }).sign(claims: claims, type: type)
    }

    /// Signs arbitrary header and payload JSON with the test key.
    private func raw(header: String, payload: String, signer: RSAPrivateKey? = nil) throws -> String {
        try JWTBuilder.sign(headerJSON: Array(header.utf8), payloadJSON: Array(payload.utf8), key: signer ?? key)
    }

    private func defaultPayload(_ overrides: [String: JSONValue] = [:], removing: [String] = []) -> String {
        var claims: [String: JSONValue] = [
            "iss": .string(kid), "sub": .string(kid), "aud": .string(Self.audience), "iat": .integer(Self.now),
            "exp": .integer(Self.now + 30), "jti": "abc123",
        ]
        claims.merge(overrides) { _, new in new }
        for name in removing { claims[name] = nil }
        return JSONValue.object(claims).serialized()
    }

    private func failure(_ token: String, cache: (any JWTReplayCache)? = nil) -> KeyAuthError.Code? {
        do {
            _ = try verifier.verify(token, resolver: resolver, replayCache: cache)
            return nil
        } catch {
            return (error as? KeyAuthError)?.code
        }
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

    @Test("extra claims are carried and may override defaults")
    func payloadHook() throws {
        let token = try self.token(claims: ["scope": "admin", "exp": .integer(Self.now + 60)])
        let verified = try verifier.verify(token, resolver: resolver)
        #expect(verified.claims["scope"] == "admin")
        #expect(verified.expiresAt == Self.now + 60)
    }

    @Test("a fresh assertion verifies and a replay of it is refused")
    func replay() throws {
        let cache = MemoryReplayCache()
        let token = try self.token()
        #expect(failure(token, cache: cache) == nil)
        #expect(failure(token, cache: cache) == .claimInvalid)
        #expect(failure(try self.token(), cache: cache) == nil)
    }

    @Test("alg none, HS256 signed with the public key, and other algorithms are refused")
    func algorithms() throws {
        let payload = Base64URL.encode(Array(defaultPayload().utf8))
        let none = Base64URL.encode(Array("{\"alg\":\"none\",\"kid\":\"\(kid)\"}".utf8)) + "." + payload + "."
        #expect(failure(none) == .tokenMalformed)
        let noneWithSignature =
            Base64URL.encode(Array("{\"alg\":\"none\",\"kid\":\"\(kid)\"}".utf8)) + "." + payload + ".AAAA"
        #expect(failure(noneWithSignature) == .claimInvalid)
        // HS256 with the public key PEM as the HMAC secret: the classic key-confusion attack.
        let header = Base64URL.encode(Array("{\"alg\":\"HS256\",\"typ\":\"JWT\",\"kid\":\"\(kid)\"}".utf8))
        let input = header + "." + payload
        let mac = hmacSHA256(key: Array(key.publicKey.pemRepresentation.utf8), message: Array(input.utf8))
        #expect(failure(input + "." + Base64URL.encode(mac)) == .claimInvalid)
        for alg in ["RS384", "PS256", "ES256", "rs256", "RS256 "] {
            let token = try raw(header: "{\"alg\":\"\(alg)\",\"kid\":\"\(kid)\"}", payload: defaultPayload())
            #expect(failure(token) == .claimInvalid, "alg \(alg)")
        }
    }

    @Test("the test HMAC that forges HS256 tokens matches RFC 4231 test case 2")
    func hmacKnownAnswer() {
        let mac = hmacSHA256(key: Array("Jefe".utf8), message: Array("what do ya want for nothing?".utf8))
        #expect(hexString(mac) == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
    }

    @Test("crit, jwk, jku, x5u and x5c headers are refused even with a valid signature")
    func forbiddenHeaders() throws {
        for member in ["crit", "jwk", "jku", "x5u", "x5c"] {
            let token = try raw(
                header: "{\"alg\":\"RS256\",\"kid\":\"\(kid)\",\"\(member)\":[]}", payload: defaultPayload())
            #expect(failure(token) == .claimInvalid, "header \(member)")
        }
    }

    @Test("a token signed by another key, or naming an unknown key, fails with one uniform error")
    func wrongKeys() throws {
        let signedByOther = try raw(
            header: "{\"alg\":\"RS256\",\"kid\":\"\(kid)\"}", payload: defaultPayload(), signer: TestKeys.second)
        let unknownKid = try raw(header: "{\"alg\":\"RS256\",\"kid\":\"nobody\"}", payload: defaultPayload())
        var messages: [String] = []
        for token in [signedByOther, unknownKid] {
            do {
                _ = try verifier.verify(token, resolver: resolver)
                Issue.record("accepted")
            } catch {
                let error = try #require(error as? KeyAuthError)
                #expect(error.code == .signatureInvalid)
                messages.append(error.message)
            }
        }
        #expect(messages.count == 2 && messages[0] == messages[1])
    }

    @Test("a tampered payload fails the signature")
    func tampered() throws {
        let parts = try self.token().split(separator: ".").map(String.init)
        let forged = Base64URL.encode(Array(defaultPayload(["sub": "someone-else"]).utf8))
        #expect(failure(parts[0] + "." + forged + "." + parts[2]) == .signatureInvalid)
    }

    @Test("sub or iss that is not the key fingerprint is refused")
    func subjectBinding() throws {
        let header = "{\"alg\":\"RS256\",\"kid\":\"\(kid)\"}"
        #expect(failure(try raw(header: header, payload: defaultPayload(["sub": "alice"]))) == .claimInvalid)
        #expect(failure(try raw(header: header, payload: defaultPayload(["iss": "alice"]))) == .claimInvalid)
        // Without kid, the key is found by sub.
        #expect(failure(try raw(header: "{\"alg\":\"RS256\"}", payload: defaultPayload())) == nil)
    }

    @Test("time rules: expired, issued in the future, too long, non-integer, with leeway")
    func times() throws {
        let header = "{\"alg\":\"RS256\",\"kid\":\"\(kid)\"}"
        func check(_ overrides: [String: JSONValue], removing: [String] = []) throws -> KeyAuthError.Code? {
            failure(try raw(header: header, payload: defaultPayload(overrides, removing: removing)))
        }
        #expect(try check(["iat": .integer(Self.now - 100), "exp": .integer(Self.now - 10)]) == .claimInvalid)
        #expect(try check(["iat": .integer(Self.now - 100), "exp": .integer(Self.now - 9)]) == nil)
        #expect(try check(["iat": .integer(Self.now + 11), "exp": .integer(Self.now + 40)]) == .claimInvalid)
        #expect(try check(["iat": .integer(Self.now + 10), "exp": .integer(Self.now + 40)]) == nil)
        #expect(try check(["exp": .integer(Self.now + 301)]) == .claimInvalid)
        #expect(try check(["exp": .integer(Self.now + 300)]) == nil)
        #expect(try check(["exp": .number(1_800_000_030.5)]) == .claimInvalid)
        #expect(try check(["exp": .string("1800000030")]) == .claimInvalid)
        #expect(try check([:], removing: ["iat"]) == .claimInvalid)
        // Fuzz/findings/lifetime-overflow: exp - iat overflowed Int64 and trapped.
        #expect(try check(["iat": .integer(.min), "exp": .integer(.max)]) == .claimInvalid)
        #expect(try check(["iat": .integer(.min), "exp": .integer(Self.now + 30)]) == .claimInvalid)
        #expect(try check([:], removing: ["exp"]) == .claimInvalid)
        let floatText = defaultPayload().replacingOccurrences(of: "\"iat\":\(Self.now)", with: "\"iat\":\(Self.now).0")
        #expect(failure(try raw(header: header, payload: floatText)) == .claimInvalid)
    }

    @Test("audience: missing or wrong is refused, an array containing it is accepted")
    func audience() throws {
        let header = "{\"alg\":\"RS256\",\"kid\":\"\(kid)\"}"
        #expect(
            failure(try raw(header: header, payload: defaultPayload(["aud": "https://evil.test"]))) == .claimInvalid)
        #expect(failure(try raw(header: header, payload: defaultPayload(removing: ["aud"]))) == .claimInvalid)
        let array: JSONValue = .array(["https://other.test", .string(Self.audience)])
        #expect(failure(try raw(header: header, payload: defaultPayload(["aud": array]))) == nil)
    }

    @Test("a missing jti is refused")
    func missingJWTID() throws {
        let header = "{\"alg\":\"RS256\",\"kid\":\"\(kid)\"}"
        #expect(failure(try raw(header: header, payload: defaultPayload(removing: ["jti"]))) == .claimInvalid)
        #expect(failure(try raw(header: header, payload: defaultPayload(["jti": ""]))) == .claimInvalid)
        #expect(failure(try raw(header: header, payload: defaultPayload(["jti": "a\u{0}b"]))) == .claimInvalid)
        #expect(failure(try raw(header: header, payload: defaultPayload(["jti": "a b"]))) == .claimInvalid)
        let long = String(repeating: "a", count: 257)
        #expect(failure(try raw(header: header, payload: defaultPayload(["jti": .string(long)]))) == .claimInvalid)
        #expect(failure(try raw(header: header, payload: defaultPayload(["jti": "uuid-like-0f8fad5b-d9cb"]))) == nil)
    }

    @Test("structure: segment counts, padding, foreign characters, non-JSON, duplicates, size")
    func structure() throws {
        let good = try self.token()
        let parts = good.split(separator: ".").map(String.init)
        #expect(failure(parts[0] + "." + parts[1]) == .tokenMalformed)
        #expect(failure(good + ".AAAA") == .tokenMalformed)
        #expect(failure(parts[0] + "=." + parts[1] + "." + parts[2]) == .tokenMalformed)
        #expect(failure(parts[0] + "." + parts[1] + "." + parts[2] + "==") == .tokenMalformed)
        let standardAlphabet = parts[2].replacingOccurrences(of: "-", with: "+").replacingOccurrences(
            of: "_", with: "/")
        if standardAlphabet != parts[2] {
            #expect(failure(parts[0] + "." + parts[1] + "." + standardAlphabet) == .tokenMalformed)
        }
        #expect(failure(parts[0] + ". " + parts[1] + "." + parts[2]) == .tokenMalformed)
        let notJSON = Base64URL.encode(Array("hello".utf8))
        #expect(failure(notJSON + "." + parts[1] + "." + parts[2]) == .tokenMalformed)
        #expect(failure(try raw(header: "{\"alg\":\"RS256\",\"kid\":\"\(kid)\"}", payload: "[1,2]")) == .tokenMalformed)
        let duplicate = "{\"alg\":\"RS256\",\"kid\":\"\(kid)\",\"alg\":\"RS256\"}"
        #expect(failure(try raw(header: duplicate, payload: defaultPayload())) == .tokenMalformed)
        #expect(failure(String(repeating: "A", count: 9000) + "." + parts[1] + "." + parts[2]) == .tokenMalformed)
        #expect(failure("") == .tokenMalformed)
    }

    @Test("access tokens: typ at+jwt, issuer and audience required, sub is the user")
    func accessTokens() throws {
        let issuer = "https://auth.example.test"
        let server = JWTBuilder(key: TestKeys.second, audience: issuer, lifetime: 900, now: { Self.now })
        let token = try server.sign(
            claims: ["iss": .string(issuer), "sub": "alice", "cnf": .object(["jkt": .string(kid)])], type: "at+jwt")
        let options = JWTVerifier.Options(
            audience: issuer, maximumLifetime: 3600, requireJWTID: false, subjectIsKeyFingerprint: false,
            expectedIssuer: issuer, expectedType: "at+jwt")
        let accessVerifier = JWTVerifier(options: options, now: { Self.now + 100 })
        let verified = try accessVerifier.verify(token, key: TestKeys.second.publicKey)
        #expect(verified.subject == "alice")
        #expect(verified.claims["cnf"]?["jkt"] == .string(kid))
        #expect(throws: KeyAuthError.self) { try accessVerifier.verify(try self.token(), key: key.publicKey) }
        let late = JWTVerifier(options: options, now: { Self.now + 911 })
        #expect(throws: KeyAuthError.self) { try late.verify(token, key: TestKeys.second.publicKey) }
    }
}
