import Foundation
import KeyAuth
import KeyAuthTestSupport
import Synchronization
import Testing

/// ``AccessTokenVerifier`` against an issuer played by a fake fetcher: the token and binding
/// rules, and the JWK set's cache (max-age, unknown kid, failures, the hard limit).
@Suite("AccessTokenVerifier")
struct AccessTokenVerifierTests {
    static let issuer = "https://auth.example.test"
    static let start: Int64 = 1_800_000_000

    /// Serves the discovery document and a JWK set, counting fetches; can fail on demand.
    final class FakeIssuer: KeySetFetcher {
        let keys = Mutex<[(kid: String, key: JWSPublicKey)]>([])
        let fetches = Mutex(0)
        /// Every fetch asked for, failed ones included.
        let attempts = Mutex(0)
        let failing = Mutex(false)
        let cacheControl: String?
        let discoveredIssuer: String

        init(cacheControl: String? = "public, max-age=300", discoveredIssuer: String = AccessTokenVerifierTests.issuer)
        {
            self.cacheControl = cacheControl
            self.discoveredIssuer = discoveredIssuer
        }

        func publish(_ key: JWSPublicKey) {
            keys.withLock { $0.append((key.thumbprint, key)) }
        }

        func fetch(_ url: String) async throws(KeyAuthError) -> KeySetDocument {
            attempts.withLock { $0 += 1 }
            if failing.withLock({ $0 }) { throw KeyAuthError(.transportFailed, "the issuer is down") }
            if url == AccessTokenVerifierTests.issuer + "/.well-known/openid-configuration" {
                let document =
                    #"{"issuer":"\#(discoveredIssuer)","jwks_uri":"\#(AccessTokenVerifierTests.issuer)/jwks"}"#
                return KeySetDocument(body: Array(document.utf8))
            }
            fetches.withLock { $0 += 1 }
            let entries = keys.withLock { keys in
                keys.map { entry in
                    var text = entry.key.jwk.canonicalJSON
                    text.removeLast()
                    return text + #","kid":"\#(entry.kid)","alg":"\#(entry.key.algorithm.rawValue)","use":"sig"}"#
                }
            }
            return KeySetDocument(
                body: Array(#"{"keys":[\#(entries.joined(separator: ","))]}"#.utf8), cacheControl: cacheControl)
        }
    }

    let clock = TestClock(start)
    let serverKey: P256PrivateKey
    let device = TestKeys.first

    init() throws {
        serverKey = try P256PrivateKey.generate()
    }

    func token(
        signer: (any JWSSigner)? = nil, typ: String = "at+jwt", claims extra: [String: JSONValue] = [:],
        bound: Bool = false,
        lifetime: Int64 = 900
    ) throws -> String {
        let signer = signer ?? serverKey
        var claims = JWTClaims()
        claims.set("iss", string: Self.issuer)
        claims.set("sub", string: "alice")
        claims.set("client_id", string: device.publicKey.fingerprint)
        claims.set("amr", strings: ["swk"])
        if bound { claims.setJSONValue("cnf", .object(["jkt": .string(device.publicKey.fingerprint)])) }
        for (name, value) in extra { claims.setJSONValue(name, value) }
        return try JWTBuilder(key: signer, audience: Self.issuer, lifetime: lifetime, clock: clock.clock).sign(
            claims: claims, type: typ, keyID: signer.keyID)
    }

    func verifier(_ issuer: FakeIssuer, requireDPoP: Bool = false, requirement: DeviceRequirement = .any) throws
        -> AccessTokenVerifier
    {
        try AccessTokenVerifier(
            issuer: Self.issuer, requireDPoP: requireDPoP, requirement: requirement, fetcher: issuer,
            clock: clock.clock)
    }

    func proof(_ token: String, method: String = "GET", url: String = "https://api.example.test/items?page=2") throws
        -> String
    {
        try DPoPProofBuilder(key: device, clock: clock.clock).proof(method: method, url: url, accessToken: token)
    }

    @Test("a Bearer token verifies, with typed claims")
    func verifiesBearer() async throws {
        let issuer = FakeIssuer()
        issuer.publish(.p256(serverKey.publicKey))
        let verifier = try verifier(issuer)
        let claims = try await verifier.verify(
            authorization: "Bearer " + (try token(claims: ["scope": "read write"])), dpopProof: nil, method: "GET",
            url: "https://api.example.test/items")
        #expect(claims.user == "alice")
        #expect(claims.clientID == device.publicKey.fingerprint)
        #expect(claims.deviceKeyID == device.publicKey.fingerprint)
        #expect(claims.deviceKeyThumbprint == nil && !claims.isDPoPBound)
        #expect(claims.amr == ["swk"])
        #expect(claims.scopes == ["read", "write"])
        #expect(claims.expiresAt - claims.issuedAt == 900)
        #expect(claims.signingKeyID == serverKey.keyID)
        // The synchronous form over a fetched set agrees.
        let set = try await verifier.keySet()
        #expect(try verifier.verify(try token(), keySet: set).user == "alice")
    }

    @Test("a device requirement refuses key files' tokens and those without the claims; the default takes them")
    func deviceRequirement() async throws {
        let issuer = FakeIssuer()
        issuer.publish(.p256(serverKey.publicKey))
        let set = try await verifier(issuer).keySet()
        func code(_ requirement: DeviceRequirement, amr: [String], tier: String?) throws -> KeyAuthError.Code? {
            var claims: [String: JSONValue] = ["amr": .array(amr.map(JSONValue.string))]
            if let tier { claims["device_tier"] = .string(tier) }
            let signed = try token(claims: claims)
            let verifier = try verifier(issuer, requirement: requirement)
            do {
                let verified = try verifier.verify(signed, keySet: set)
                #expect(verified.deviceTier == tier)
                return nil
            } catch { return error.code }
        }
        let refused = KeyAuthError.Code.insufficientUserAuthentication
        #expect(refused.rawValue == "insufficient_user_authentication")
        // The default is unchanged: a key file's token, and one of a server without tiers, pass.
        #expect(try code(.any, amr: ["swk"], tier: "software") == nil)
        #expect(try code(.any, amr: ["swk"], tier: nil) == nil)
        #expect(try verifier(issuer).requirement == .any)

        #expect(try code(.hardwareKey, amr: ["swk", "pin"], tier: "software") == refused)
        #expect(try code(.hardwareKey, amr: ["swk"], tier: "attested") == refused, "the device says key file")
        #expect(try code(.hardwareKey, amr: ["hwk"], tier: "software") == refused, "the server says key file")
        #expect(try code(.hardwareKey, amr: ["hwk"], tier: nil) == refused)
        #expect(try code(.hardwareKey, amr: [], tier: "attested") == refused)
        #expect(try code(.hardwareKey, amr: ["hwk", "pin"], tier: "tpm-unverified") == nil)
        #expect(try code(.hardwareKey, amr: ["hwk"], tier: "attested") == nil)
        #expect(try code(.attested, amr: ["hwk", "pin"], tier: "tpm-unverified") == refused)
        #expect(try code(.attested, amr: ["hwk", "pin"], tier: "a-future-tier") == refused)
        #expect(try code(.attested, amr: ["hwk", "pin"], tier: "attested") == nil)
        #expect(DeviceRequirement.hardwareKey.description == "hardware-key")

        // A device_tier of the wrong type is a malformed token, whatever the requirement.
        #expect(
            throws: KeyAuthError.self,
            performing: { try verifier(issuer).verify(try token(claims: ["device_tier": .integer(2)]), keySet: set) })
        // The asynchronous path refuses the same, with the message a service can log.
        let strict = try verifier(issuer, requirement: .attested)
        let error = await #expect(throws: KeyAuthError.self) {
            try await strict.verify(
                authorization: "Bearer " + (try token(claims: ["device_tier": "software"])), dpopProof: nil,
                method: "GET", url: "https://api.example.test/items")
        }
        #expect(error?.code == refused)
        #expect(error?.message.contains("tier software") == true)
    }

    @Test("the token rules: typ, iss, aud, times, lifetime, kid, algorithm of the key, none and HMAC")
    func tokenRules() async throws {
        let issuer = FakeIssuer()
        issuer.publish(.p256(serverKey.publicKey))
        let rsa = TestKeys.second
        issuer.publish(.rsa(rsa.publicKey))
        let verifier = try verifier(issuer)
        let set = try await verifier.keySet()
        func code(_ token: String) -> KeyAuthError.Code? {
            do {
                _ = try verifier.verify(token, keySet: set)
                return nil
            } catch { return error.code }
        }
        #expect(code(try token(typ: "application/at+jwt")) == nil)
        #expect(code(try token(signer: rsa)) == nil)
        #expect(code(try token(typ: "JWT")) == .claimInvalid)
        #expect(code(try token(claims: ["iss": "https://evil.test"])) == .claimInvalid)
        #expect(code(try token(claims: ["aud": "https://other.test"])) == .claimInvalid)
        #expect(code(try token(claims: ["exp": .integer(Self.start - 11)])) == .claimInvalid)
        #expect(code(try token(claims: ["exp": .integer(Self.start - 9)])) == nil)
        #expect(code(try token(claims: ["nbf": .integer(Self.start + 11)])) == .claimInvalid)
        #expect(code(try token(claims: ["iat": .integer(Self.start + 11)])) == .claimInvalid)
        #expect(code(try token(claims: ["client_id": .null])) == .claimInvalid)
        #expect(code(try token(claims: ["cnf": .object(["jkt": .integer(1)])])) == .claimInvalid)
        #expect(code(try token(lifetime: 86_401)) == .claimInvalid)
        // A key the issuer does not publish, and a published RSA key's kid on an ES256 signature.
        #expect(code(try token(signer: try P256PrivateKey.generate())) == .signatureInvalid)
        let parts = try token().split(separator: ".")
        let relabelled =
            Base64URL.encode(Array(#"{"alg":"ES256","typ":"at+jwt","kid":"\#(rsa.publicKey.fingerprint)"}"#.utf8))
            + "." + parts[1] + "." + parts[2]
        #expect(code(relabelled) == .signatureInvalid)
        let none = Base64URL.encode(Array(#"{"alg":"none","typ":"at+jwt","kid":"\#(serverKey.keyID)"}"#.utf8))
        #expect(code(none + "." + parts[1] + ".") == .tokenMalformed)
        let hmac = Base64URL.encode(Array(#"{"alg":"HS256","typ":"at+jwt","kid":"\#(serverKey.keyID)"}"#.utf8))
        #expect(code(hmac + "." + parts[1] + "." + parts[2]) == .claimInvalid)
    }

    @Test("a bound token needs the DPoP scheme and a proof of its key for this request, used once")
    func binding() async throws {
        let issuer = FakeIssuer()
        issuer.publish(.p256(serverKey.publicKey))
        let verifier = try verifier(issuer)
        let bound = try token(bound: true)
        let url = "https://API.example.test:443/items"
        let proof = try proof(bound)
        let claims = try await verifier.verify(
            authorization: "DPoP " + bound, dpopProof: proof, method: "GET", url: url)
        #expect(claims.deviceKeyThumbprint == device.publicKey.fingerprint)
        func refusal(_ authorization: String, _ proof: String?, method: String = "GET", url: String = url) async
            -> KeyAuthError.Code?
        {
            do {
                _ = try await verifier.verify(authorization: authorization, dpopProof: proof, method: method, url: url)
                return nil
            } catch { return error.code }
        }
        #expect(await refusal("DPoP " + bound, proof) == .dpopProofInvalid)  // replayed
        #expect(await refusal("Bearer " + bound, try self.proof(bound)) == .claimInvalid)
        #expect(await refusal("DPoP " + bound, nil) == .dpopProofInvalid)
        #expect(await refusal("DPoP " + bound, try self.proof(bound), method: "POST") == .dpopProofInvalid)
        #expect(
            await refusal("DPoP " + bound, try self.proof(bound), url: "https://api.example.test/other")
                == .dpopProofInvalid)
        let foreign = try DPoPProofBuilder(key: TestKeys.second, clock: clock.clock).proof(
            method: "GET", url: url, accessToken: bound)
        #expect(await refusal("DPoP " + bound, foreign) == .dpopProofInvalid)
        let unbound = try token()
        #expect(await refusal("DPoP " + unbound, try self.proof(unbound)) == .claimInvalid)
        #expect(await refusal("Basic abc", nil) == .tokenMalformed)
        let strict = try self.verifier(issuer, requireDPoP: true)
        await #expect(throws: KeyAuthError.self) {
            try await strict.verify(authorization: "Bearer " + unbound, dpopProof: nil, method: "GET", url: url)
        }
        clock.advance(by: DPoPProofVerifier.defaultWindow + 1)
        let stale = try DPoPProofBuilder(key: device, clock: .fixed(seconds: Self.start)).proof(
            method: "GET", url: url, accessToken: bound)
        #expect(await refusal("DPoP " + bound, stale) == .dpopProofInvalid)
    }

    @Test(
        "htu and the request URL are compared after RFC 3986 normalization",
        arguments: [
            ("https://API.Example.test:443/items", "https://api.example.test/items"),
            ("HTTP://api.example.test:80", "http://api.example.test/"),
            ("http://api.example.test:8080/a?q=1#f", "http://api.example.test:8080/a"),
            ("https://api.example.test/%7euser/%2fx/%e2%82%ac", "https://api.example.test/~user/%2Fx/%E2%82%AC"),
            ("https://api.example.test/a/./b/../c/", "https://api.example.test/a/c/"),
            ("https://api.example.test/a/%2E%2E/b", "https://api.example.test/b"),
            ("https://api.example.test/..", "https://api.example.test/"),
            ("https://[::1]:8443/x", "https://[::1]:8443/x"),
        ])
    func urlNormalization(_ written: String, _ normalized: String) {
        #expect(DPoPProofVerifier.normalizedURL(written) == normalized)
    }

    @Test(
        "what is not an absolute http(s) URL has no normal form",
        arguments: [
            "/items", "ftp://api.example.test/x", "https://user:pw@api.example.test/x",
        ])
    func urlNormalizationRefuses(_ written: String) {
        #expect(DPoPProofVerifier.normalizedURL(written) == nil)
    }

    @Test("a proof signed for one URL spelling passes for another spelling of it, and not for another token")
    func proofURLSpellingAndTokenHash() async throws {
        let issuer = FakeIssuer()
        issuer.publish(.p256(serverKey.publicKey))
        let verifier = try verifier(issuer)
        let bound = try token(bound: true)
        let proof = try DPoPProofBuilder(key: device, clock: clock.clock).proof(
            method: "GET", url: "https://api.example.test/%7Ealice/./orders", accessToken: bound)
        let claims = try await verifier.verify(
            authorization: "DPoP " + bound, dpopProof: proof, method: "GET",
            url: "https://API.example.test:443/~alice/orders?page=2")
        #expect(claims.user == "alice")
        let other = try token(bound: true)
        let forOther = try DPoPProofBuilder(key: device, clock: clock.clock).proof(
            method: "GET", url: "https://api.example.test/orders", accessToken: other)
        await #expect {
            try await verifier.verify(
                authorization: "DPoP " + bound, dpopProof: forOther, method: "GET",
                url: "https://api.example.test/orders")
        } throws: { ($0 as? KeyAuthError)?.code == .dpopProofInvalid }
    }

    @Test("the JWK set is cached for max-age, fetched again for an unknown kid at most every 30 s")
    func caching() async throws {
        let issuer = FakeIssuer(cacheControl: "max-age=120")
        issuer.publish(.p256(serverKey.publicKey))
        let verifier = try verifier(issuer)
        _ = try await verifier.verify(try token())
        _ = try await verifier.verify(try token())
        #expect(issuer.fetches.withLock { $0 } == 1)
        clock.advance(by: 120)
        _ = try await verifier.verify(try token())
        #expect(issuer.fetches.withLock { $0 } == 2)

        // A rotation: the new kid makes the verifier fetch at once, but not again within 30 s.
        clock.advance(by: 30)
        let rotated = try Ed25519PrivateKey.generate()
        issuer.publish(.ed25519(rotated.publicKey))
        #expect(try await verifier.verify(try token(signer: rotated)).signingKeyID == rotated.keyID)
        #expect(issuer.fetches.withLock { $0 } == 3)
        let unknown = try P256PrivateKey.generate()
        await #expect(throws: KeyAuthError.self) { try await verifier.verify(try token(signer: unknown)) }
        await #expect(throws: KeyAuthError.self) { try await verifier.verify(try token(signer: unknown)) }
        #expect(issuer.fetches.withLock { $0 } == 3)
        #expect(KeySetDocument(body: []).cacheControl == nil)
    }

    @Test(
        "Cache-Control max-age is kept within 60 s and 24 h, 300 s without one, the shortest for no-store",
        arguments: [
            ("max-age=5", 60), ("public, max-age=999999", 86_400), (nil, 300), ("public, max-age=abc", 300),
            ("no-store, max-age=3600", 60), ("max-age=3600, no-cache", 60), ("max-age=900", 900),
        ] as [(String?, Int64)])
    func maxAgeBounds(_ cacheControl: String?, _ freshFor: Int64) async throws {
        let issuer = FakeIssuer(cacheControl: cacheControl)
        issuer.publish(.p256(serverKey.publicKey))
        let verifier = try verifier(issuer)
        _ = try await verifier.verify(try token())
        clock.advance(by: freshFor - 1)
        _ = try await verifier.verify(try token(lifetime: 86_400))
        #expect(issuer.fetches.withLock { $0 } == 1)
        clock.advance(by: 1)
        _ = try await verifier.verify(try token(lifetime: 86_400))
        #expect(issuer.fetches.withLock { $0 } == 2)
    }

    @Test("an issuer down with no set cached is asked at most every 30 s, not by every verification")
    func failedFetchesAreSpaced() async throws {
        let issuer = FakeIssuer()
        issuer.publish(.p256(serverKey.publicKey))
        issuer.failing.withLock { $0 = true }
        let verifier = try verifier(issuer)
        for _ in 0..<5 {
            await #expect {
                try await verifier.verify(try token())
            } throws: { ($0 as? KeyAuthError)?.code == .keySetUnavailable }
        }
        #expect(issuer.attempts.withLock { $0 } == 1)
        clock.advance(by: 29)
        await #expect(throws: KeyAuthError.self) { try await verifier.verify(try token()) }
        #expect(issuer.attempts.withLock { $0 } == 1)
        clock.advance(by: 1)
        issuer.failing.withLock { $0 = false }
        #expect(try await verifier.verify(try token()).user == "alice")
        #expect(issuer.attempts.withLock { $0 } == 3)
    }

    @Test("a clock set back after a failed fetch asks the issuer again instead of waiting out the step")
    func failedFetchAndAClockSetBack() async throws {
        let issuer = FakeIssuer()
        issuer.publish(.p256(serverKey.publicKey))
        issuer.failing.withLock { $0 = true }
        let verifier = try verifier(issuer)
        await #expect(throws: KeyAuthError.self) { try await verifier.verify(try token()) }
        issuer.failing.withLock { $0 = false }
        clock.advance(by: -3600)
        #expect(try await verifier.verify(try token()).user == "alice")
    }

    @Test("a clock set back after a fetch takes the set as due, and an unknown kid as due for a fetch")
    func fetchedSetAndAClockSetBack() async throws {
        let issuer = FakeIssuer(cacheControl: "max-age=3600")
        issuer.publish(.p256(serverKey.publicKey))
        let verifier = try verifier(issuer)
        _ = try await verifier.verify(try token())
        #expect(issuer.fetches.withLock { $0 } == 1)
        // Fetched again, though the token's key is known: the issuer may have changed its set
        // since (a key withdrawn), and waiting out the step would keep the old one that long.
        clock.advance(by: -600)
        _ = try await verifier.verify(try token())
        #expect(issuer.fetches.withLock { $0 } == 2)
        _ = try await verifier.verify(try token())
        #expect(issuer.fetches.withLock { $0 } == 2, "once")

        // A failed attempt for an unknown kid, which a step back then puts in the future: the
        // issuer's new key is fetched at once, not 30 s after that attempt's time.
        clock.advance(by: 31)
        issuer.failing.withLock { $0 = true }
        let rotated = try Ed25519PrivateKey.generate()
        await #expect(throws: KeyAuthError.self) { try await verifier.verify(try token(signer: rotated)) }
        issuer.failing.withLock { $0 = false }
        issuer.publish(.ed25519(rotated.publicKey))
        clock.advance(by: -10)
        #expect(try await verifier.verify(try token(signer: rotated)).signingKeyID == rotated.keyID)
    }

    @Test("when the issuer is down the cached set keeps serving for 24 h, then verification fails closed")
    func failsClosed() async throws {
        let issuer = FakeIssuer(cacheControl: "max-age=60")
        issuer.publish(.p256(serverKey.publicKey))
        let verifier = try verifier(issuer)
        _ = try await verifier.verify(try token())
        issuer.failing.withLock { $0 = true }
        clock.advance(by: 86_399)
        #expect(try await verifier.verify(try token()).user == "alice")
        clock.advance(by: 1)
        await #expect {
            try await verifier.verify(try token())
        } throws: { ($0 as? KeyAuthError)?.code == .keySetUnavailable }
        issuer.failing.withLock { $0 = false }
        clock.advance(by: 30)
        #expect(try await verifier.verify(try token()).user == "alice")
    }

    @Test("a discovery document naming another issuer is refused")
    func discoveryIssuerMismatch() async throws {
        let issuer = FakeIssuer(discoveredIssuer: "https://evil.test")
        issuer.publish(.p256(serverKey.publicKey))
        let verifier = try verifier(issuer)
        await #expect {
            try await verifier.verify(try token())
        } throws: { ($0 as? KeyAuthError)?.code == .keySetUnavailable }
        #expect(throws: KeyAuthError.self) { try AccessTokenVerifier(issuer: "http://auth.example.test") }
    }
}

extension JWTClaims {
    /// Sets a claim to any JSON value; `.null` removes it.
    fileprivate mutating func setJSONValue(_ name: String, _ value: JSONValue) {
        if value == .null { remove(name) } else { try? setJSON(name, json: value.serialized()) }
    }
}
