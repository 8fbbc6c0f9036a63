import Foundation
import KeyAuth
import KeyAuthTestSupport
import Synchronization
import Testing

/// An in-memory replay cache; the server's durable ones are tested with the server.
final class MemoryReplayCache: JWTReplayCache {
    private let seen = Mutex(Set<String>())

    func claim(jwtID: String, keyID: String, expiresAt: Int64) async throws(KeyAuthError) -> Bool {
        seen.withLock { $0.insert(keyID + " " + jwtID).inserted }
    }
}

/// A key directory that knows the keys it was given, by key id.
struct MemoryKeyDirectory: DeviceKeyDirectory {
    let keys: [String: RSAPublicKey]

    init(_ keys: RSAPublicKey...) {
        self.keys = Dictionary(uniqueKeysWithValues: keys.map { ($0.fingerprint, $0) })
    }

    func publicKey(forKeyID keyID: String) async throws(KeyAuthError) -> RSAPublicKey? {
        keys[keyID]
    }
}

@Suite("Device assertion verifier")
struct DeviceAssertionVerifierTests {
    static let now: Int64 = 1_800_000_000
    static let audience = "https://auth.example.test"
    let key = TestKeys.first
    var kid: String { key.publicKey.fingerprint }
    var directory: MemoryKeyDirectory { MemoryKeyDirectory(key.publicKey) }
    var verifier: DeviceAssertionVerifier {
        DeviceAssertionVerifier(audience: Self.audience, clock: .fixed(seconds: 1_800_000_000))
    }

    private func token(claims: JWTClaims = JWTClaims(), type: String = "JWT") throws -> String {
        try JWTBuilder(key: key, audience: Self.audience, clock: .fixed(seconds: Self.now)).sign(
            claims: claims, type: type)
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

    /// The code `token` fails with, or nil when it verifies; a fresh replay cache unless one is
    /// given.
    private func failure(_ token: String, cache: MemoryReplayCache = MemoryReplayCache()) async -> KeyAuthError.Code? {
        do {
            _ = try await verifier.verify(token, keys: directory, replayCache: cache)
            return nil
        } catch {
            return error.code
        }
    }

    @Test("extra claims are carried and may override defaults")
    func payloadHook() async throws {
        var claims = JWTClaims()
        claims.set("scope", string: "admin")
        claims.set("exp", integer: Self.now + 60)
        let token = try self.token(claims: claims)
        let verified = try await verifier.verify(token, keys: directory, replayCache: MemoryReplayCache())
        #expect(try verified.claims.string("scope") == "admin")
        #expect(verified.expiresAt == Self.now + 60)
    }

    @Test("a fresh assertion verifies and a replay of it is refused")
    func replay() async throws {
        let cache = MemoryReplayCache()
        let token = try self.token()
        #expect(await failure(token, cache: cache) == nil)
        #expect(await failure(token, cache: cache) == .claimInvalid)
        #expect(await failure(try self.token(), cache: cache) == nil)
    }

    @Test("alg none, HS256 signed with the public key, and other algorithms are refused")
    func algorithms() async throws {
        let payload = Base64URL.encode(Array(defaultPayload().utf8))
        let none = Base64URL.encode(Array("{\"alg\":\"none\",\"kid\":\"\(kid)\"}".utf8)) + "." + payload + "."
        #expect(await failure(none) == .tokenMalformed)
        let noneWithSignature =
            Base64URL.encode(Array("{\"alg\":\"none\",\"kid\":\"\(kid)\"}".utf8)) + "." + payload + ".AAAA"
        #expect(await failure(noneWithSignature) == .claimInvalid)
        // HS256 with the public key PEM as the HMAC secret: the classic key-confusion attack.
        let header = Base64URL.encode(Array("{\"alg\":\"HS256\",\"typ\":\"JWT\",\"kid\":\"\(kid)\"}".utf8))
        let input = header + "." + payload
        let mac = try hmacSHA256(key: Array(key.publicKey.pemRepresentation.utf8), message: Array(input.utf8))
        #expect(await failure(input + "." + Base64URL.encode(mac)) == .claimInvalid)
        for alg in ["RS384", "PS256", "ES256", "rs256", "RS256 "] {
            let token = try raw(header: "{\"alg\":\"\(alg)\",\"kid\":\"\(kid)\"}", payload: defaultPayload())
            #expect(await failure(token) == .claimInvalid, "alg \(alg)")
        }
    }

    @Test("the test HMAC that forges HS256 tokens matches RFC 4231 test case 2")
    func hmacKnownAnswer() throws {
        let mac = try hmacSHA256(key: Array("Jefe".utf8), message: Array("what do ya want for nothing?".utf8))
        #expect(hexString(mac) == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
    }

    @Test("crit, jwk, jku, x5u and x5c headers are refused even with a valid signature")
    func forbiddenHeaders() async throws {
        for member in ["crit", "jwk", "jku", "x5u", "x5c"] {
            let token = try raw(
                header: "{\"alg\":\"RS256\",\"kid\":\"\(kid)\",\"\(member)\":[]}", payload: defaultPayload())
            #expect(await failure(token) == .claimInvalid, "header \(member)")
        }
    }

    @Test("a token signed by another key, or naming an unknown key, fails with one uniform error")
    func wrongKeys() async throws {
        let signedByOther = try raw(
            header: "{\"alg\":\"RS256\",\"kid\":\"\(kid)\"}", payload: defaultPayload(), signer: TestKeys.second)
        let unknownKid = try raw(header: "{\"alg\":\"RS256\",\"kid\":\"nobody\"}", payload: defaultPayload())
        var messages: [String] = []
        for token in [signedByOther, unknownKid] {
            do {
                _ = try await verifier.verify(token, keys: directory, replayCache: MemoryReplayCache())
                Issue.record("accepted")
            } catch {
                #expect(error.code == .signatureInvalid)
                messages.append(error.message)
            }
        }
        #expect(messages.count == 2 && messages[0] == messages[1])
    }

    @Test("a tampered payload fails the signature")
    func tampered() async throws {
        let parts = try self.token().split(separator: ".").map(String.init)
        let forged = Base64URL.encode(Array(defaultPayload(["sub": "someone-else"]).utf8))
        #expect(await failure(parts[0] + "." + forged + "." + parts[2]) == .signatureInvalid)
    }

    @Test("sub or iss that is not the key fingerprint is refused")
    func subjectBinding() async throws {
        let header = "{\"alg\":\"RS256\",\"kid\":\"\(kid)\"}"
        #expect(await failure(try raw(header: header, payload: defaultPayload(["sub": "alice"]))) == .claimInvalid)
        #expect(await failure(try raw(header: header, payload: defaultPayload(["iss": "alice"]))) == .claimInvalid)
        // Without kid, the key is found by sub.
        #expect(await failure(try raw(header: "{\"alg\":\"RS256\"}", payload: defaultPayload())) == nil)
    }

    @Test("time rules: expired, issued in the future, too long, non-integer, with leeway")
    func times() async throws {
        let header = "{\"alg\":\"RS256\",\"kid\":\"\(kid)\"}"
        func check(_ overrides: [String: JSONValue], removing: [String] = []) async throws -> KeyAuthError.Code? {
            await failure(try raw(header: header, payload: defaultPayload(overrides, removing: removing)))
        }
        #expect(try await check(["iat": .integer(Self.now - 100), "exp": .integer(Self.now - 10)]) == .claimInvalid)
        #expect(try await check(["iat": .integer(Self.now - 100), "exp": .integer(Self.now - 9)]) == nil)
        #expect(try await check(["iat": .integer(Self.now + 11), "exp": .integer(Self.now + 40)]) == .claimInvalid)
        #expect(try await check(["iat": .integer(Self.now + 10), "exp": .integer(Self.now + 40)]) == nil)
        #expect(try await check(["exp": .integer(Self.now + 301)]) == .claimInvalid)
        #expect(try await check(["exp": .integer(Self.now + 300)]) == nil)
        #expect(try await check(["exp": .number(1_800_000_030.5)]) == .claimInvalid)
        #expect(try await check(["exp": .string("1800000030")]) == .claimInvalid)
        #expect(try await check([:], removing: ["iat"]) == .claimInvalid)
        // Fuzz/findings/lifetime-overflow: exp - iat overflowed Int64 and trapped.
        #expect(try await check(["iat": .integer(.min), "exp": .integer(.max)]) == .claimInvalid)
        #expect(try await check(["iat": .integer(.min), "exp": .integer(Self.now + 30)]) == .claimInvalid)
        #expect(try await check([:], removing: ["exp"]) == .claimInvalid)
        let floatText = defaultPayload().replacingOccurrences(of: "\"iat\":\(Self.now)", with: "\"iat\":\(Self.now).0")
        #expect(await failure(try raw(header: header, payload: floatText)) == .claimInvalid)
    }

    @Test("audience: missing or wrong is refused, an array containing it is accepted")
    func audience() async throws {
        let header = "{\"alg\":\"RS256\",\"kid\":\"\(kid)\"}"
        #expect(
            await failure(try raw(header: header, payload: defaultPayload(["aud": "https://evil.test"])))
                == .claimInvalid)
        #expect(await failure(try raw(header: header, payload: defaultPayload(removing: ["aud"]))) == .claimInvalid)
        let array: JSONValue = .array(["https://other.test", .string(Self.audience)])
        #expect(await failure(try raw(header: header, payload: defaultPayload(["aud": array]))) == nil)
    }

    @Test("a missing jti is refused")
    func missingJWTID() async throws {
        let header = "{\"alg\":\"RS256\",\"kid\":\"\(kid)\"}"
        #expect(await failure(try raw(header: header, payload: defaultPayload(removing: ["jti"]))) == .claimInvalid)
        #expect(await failure(try raw(header: header, payload: defaultPayload(["jti": ""]))) == .claimInvalid)
        #expect(await failure(try raw(header: header, payload: defaultPayload(["jti": "a\u{0}b"]))) == .claimInvalid)
        #expect(await failure(try raw(header: header, payload: defaultPayload(["jti": "a b"]))) == .claimInvalid)
        let long = String(repeating: "a", count: 257)
        #expect(
            await failure(try raw(header: header, payload: defaultPayload(["jti": .string(long)]))) == .claimInvalid)
        #expect(
            await failure(try raw(header: header, payload: defaultPayload(["jti": "uuid-like-0f8fad5b-d9cb"]))) == nil)
    }

    @Test("structure: segment counts, padding, foreign characters, non-JSON, duplicates, size")
    func structure() async throws {
        let good = try self.token()
        let parts = good.split(separator: ".").map(String.init)
        #expect(await failure(parts[0] + "." + parts[1]) == .tokenMalformed)
        #expect(await failure(good + ".AAAA") == .tokenMalformed)
        #expect(await failure(parts[0] + "=." + parts[1] + "." + parts[2]) == .tokenMalformed)
        #expect(await failure(parts[0] + "." + parts[1] + "." + parts[2] + "==") == .tokenMalformed)
        let standardAlphabet = parts[2].replacingOccurrences(of: "-", with: "+").replacingOccurrences(
            of: "_", with: "/")
        if standardAlphabet != parts[2] {
            #expect(await failure(parts[0] + "." + parts[1] + "." + standardAlphabet) == .tokenMalformed)
        }
        #expect(await failure(parts[0] + ". " + parts[1] + "." + parts[2]) == .tokenMalformed)
        let notJSON = Base64URL.encode(Array("hello".utf8))
        #expect(await failure(notJSON + "." + parts[1] + "." + parts[2]) == .tokenMalformed)
        #expect(
            await failure(try raw(header: "{\"alg\":\"RS256\",\"kid\":\"\(kid)\"}", payload: "[1,2]"))
                == .tokenMalformed)
        let duplicate = "{\"alg\":\"RS256\",\"kid\":\"\(kid)\",\"alg\":\"RS256\"}"
        #expect(await failure(try raw(header: duplicate, payload: defaultPayload())) == .tokenMalformed)
        #expect(await failure(String(repeating: "A", count: 9000) + "." + parts[1] + "." + parts[2]) == .tokenMalformed)
        #expect(await failure("") == .tokenMalformed)
    }
}
