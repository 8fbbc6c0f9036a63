import Foundation
import KeyAuth
import KeyAuthTestSupport
import Synchronization
import Testing

/// A token-confusion audit of the library's verifiers: every kind of token keyauth signs, and
/// hand-made variants of their headers and claims, each signed correctly by a key the verifier
/// trusts, so that what refuses them is the rule under test and never a broken signature.
///
/// The issuer's keys here are the test's own (an RSA and a P-256 key in one JWK set), so a
/// token can say anything an issuer could sign; `TokenConfusionTests` of the server does the same
/// against a running `keyauth-server` with the tokens it really issues.
@Suite("Token confusion: the library's verifiers")
struct TokenConfusionTests {
    static let issuer = "https://auth.example.test"
    static let now: Int64 = 1_800_000_000
    static let resource = "https://api.example.test/items"

    let serverRSA = TestKeys.second
    let serverEC: P256PrivateKey
    let device = TestKeys.first
    let keySet: JWKSet
    let verifier: AccessTokenVerifier

    init() throws {
        serverEC = try P256PrivateKey.generate()
        keySet = JWKSet(keys: [serverRSA.keyID: .rsa(serverRSA.publicKey), serverEC.keyID: .p256(serverEC.publicKey)])
        verifier = try AccessTokenVerifier(
            issuer: Self.issuer, fetcher: Issuer(keys: [.rsa(serverRSA.publicKey), .p256(serverEC.publicKey)]),
            clock: .fixed(seconds: Self.now))
    }

    /// Serves the discovery document and the two server keys, for the asynchronous path.
    struct Issuer: KeySetFetcher {
        let keys: [JWSPublicKey]

        func fetch(_ url: String) async throws(KeyAuthError) -> KeySetDocument {
            if url.hasSuffix("/.well-known/openid-configuration") {
                let document =
                    #"{"issuer":"\#(TokenConfusionTests.issuer)","jwks_uri":"\#(TokenConfusionTests.issuer)/jwks"}"#
                return KeySetDocument(body: Array(document.utf8))
            }
            let entries = keys.map { key in
                var text = key.jwk.canonicalJSON
                text.removeLast()
                return text + #","kid":"\#(key.thumbprint)","alg":"\#(key.algorithm.rawValue)","use":"sig"}"#
            }
            return KeySetDocument(body: Array(#"{"keys":[\#(entries.joined(separator: ","))]}"#.utf8))
        }
    }

    // MARK: Tokens

    /// A compact JWS of exactly `header` (JSON text, written as is) and `payload`, signed by `key`
    /// with its own algorithm, whatever `header` says.
    func jws(_ header: String, _ payload: [String: JSONValue], key: any JWSSigner) throws -> String {
        try JWTBuilder.sign(
            headerJSON: Array(header.utf8), payloadJSON: Array(JSONValue.object(payload).serialized().utf8), key: key)
    }

    /// An access token's claims as the server writes them, with `changes` (`.null` removes).
    func accessClaims(_ changes: [String: JSONValue] = [:]) -> [String: JSONValue] {
        var claims: [String: JSONValue] = [
            "iss": .string(Self.issuer), "sub": "alice", "aud": .string(Self.issuer),
            "client_id": .string(device.keyID), "amr": .array(["swk"]), "iat": .integer(Self.now),
            "exp": .integer(Self.now + 900), "jti": "token-1",
        ]
        for (name, value) in changes { claims[name] = value == .null ? nil : value }
        return claims
    }

    /// The header of a server access token signed by `key`.
    func accessHeader(_ key: any JWSSigner, typ: String = "at+jwt") -> String {
        #"{"alg":"\#(key.algorithm.rawValue)","typ":"\#(typ)","kid":"\#(key.keyID)"}"#
    }

    /// The code ``AccessTokenVerifier`` refuses `token` with (presented without a scheme), or
    /// nil when it passes.
    func refusal(_ token: String, proof: String? = nil, method: String = "GET", url: String = resource)
        -> KeyAuthError.Code?
    {
        do {
            _ = try verifier.verify(token, keySet: keySet, dpopProof: proof, method: method, url: url)
            return nil
        } catch { return error.code }
    }

    /// Every code a refused token gets maps to 401 `invalid_token` (PROTOCOL.md section 6).
    static let tokenRefusals: Set<KeyAuthError.Code> = [.tokenMalformed, .claimInvalid, .signatureInvalid]

    @Test("the control: an access token of each server key verifies")
    func control() throws {
        for key in [serverRSA, serverEC] as [any JWSSigner] {
            #expect(refusal(try jws(accessHeader(key), accessClaims(), key: key)) == nil)
        }
    }

    @Test("an ID token, an offline grant, a device assertion or a DPoP proof is no access token")
    func otherKindsAsAccessToken() throws {
        // An ID token as the server signs one: same RS256 key, typ JWT, aud and azp the client.
        let idToken = try jws(
            #"{"alg":"RS256","typ":"JWT","kid":"\#(serverRSA.keyID)"}"#,
            [
                "iss": .string(Self.issuer), "sub": "alice", "aud": "client-1", "azp": "client-1",
                "iat": .integer(Self.now), "exp": .integer(Self.now + 900), "auth_time": .integer(Self.now),
                "at_hash": "x", "nonce": "n",
            ], key: serverRSA)
        #expect(refusal(idToken) == .claimInvalid)
        // The same with every access-token claim added: typ alone still refuses it.
        let idShaped = try jws(
            #"{"alg":"RS256","typ":"JWT","kid":"\#(serverRSA.keyID)"}"#, accessClaims(["azp": "client-1"]),
            key: serverRSA)
        #expect(refusal(idShaped) == .claimInvalid)
        // An offline grant of a host login: its own typ, no aud, no client_id.
        let grant = try jws(
            accessHeader(serverEC, typ: "keyauth-offline-grant+jwt"),
            [
                "iss": .string(Self.issuer), "sub": "alice", "host": "laptop", "linux_user": "alice",
                "cnf": .object(["jkt": .string(device.keyID)]), "iat": .integer(Self.now),
                "exp": .integer(Self.now + 3600),
                "jti": "g",
            ], key: serverEC)
        #expect(refusal(grant) == .claimInvalid)
        // A device assertion: the device's own key, which the issuer does not publish.
        let assertion = try JWTBuilder(key: device, audience: Self.issuer, clock: .fixed(seconds: Self.now)).sign()
        #expect(Self.tokenRefusals.contains(refusal(assertion) ?? .cancelled))
        // A device's assertion labelled as an access token, with every access-token claim.
        let forged = try jws(accessHeader(device), accessClaims(), key: device)
        #expect(refusal(forged) == .signatureInvalid)
        // A DPoP proof (typ dpop+jwt, a jwk header) carrying access-token claims.
        let proofShaped = try jws(
            #"{"alg":"RS256","typ":"dpop+jwt","jwk":\#(device.publicKey.jwk.canonicalJSON)}"#, accessClaims(),
            key: device)
        #expect(refusal(proofShaped) == .claimInvalid)
        // A token the server issued to a client application (CIBA, the code flow): aud the client.
        let clientToken = try jws(
            accessHeader(serverRSA), accessClaims(["aud": "client-1", "client_id": "client-1"]), key: serverRSA)
        #expect(refusal(clientToken) == .claimInvalid)
    }

    @Test(
        "typ must be at+jwt or application/at+jwt exactly: case variants, spaces, other types and none are refused",
        arguments: [
            #""typ":"AT+JWT","#, #""typ":"At+Jwt","#, #""typ":"application/AT+JWT","#, #""typ":"at+jwt ","#,
            #""typ":" at+jwt","#, #""typ":"at+JWT","#, #""typ":"jwt","#, #""typ":"JWT","#, #""typ":"","#,
            #""typ":"dpop+jwt","#, #""typ":"keyauth-offline-grant+jwt","#, #""typ":"at+jwt\u0000","#,
            #""typ":["at+jwt"],"#, #""typ":null,"#, #""typ":1,"#, "", #""cty":"at+jwt","#,
        ])
    func typeVariants(_ member: String) throws {
        let header = #"{"alg":"ES256",\#(member)"kid":"\#(serverEC.keyID)"}"#
        #expect(refusal(try jws(header, accessClaims(), key: serverEC)) == .claimInvalid, "\(member)")
    }

    @Test("header spellings: a repeated member is refused however it is escaped; an escaped name is that name")
    func headerSpellings() throws {
        let kid = serverEC.keyID
        let refusedHeaders = [
            #"{"alg":"ES256","typ":"JWT","typ":"at+jwt","kid":"\#(kid)"}"#,
            #"{"alg":"ES256","typ":"at+jwt","typ":"JWT","kid":"\#(kid)"}"#,
            #"{"alg":"ES256","typ":"at+jwt","\u0074yp":"JWT","kid":"\#(kid)"}"#,
            #"{"alg":"ES256","\u0074yp":"JWT","typ":"at+jwt","kid":"\#(kid)"}"#,
            #"{"alg":"none","alg":"ES256","typ":"at+jwt","kid":"\#(kid)"}"#,
            #"{"alg":"ES256","typ":"at+jwt","kid":"someone-else","kid":"\#(kid)"}"#,
            #"{"alg":"ES256","typ":"at+jwt","kid":"\#(kid)"} x"#,
            #"{"alg":"ES256","typ":"at+jwt","kid":"\#(kid)"}{}"#,
            #"["alg","ES256"]"#,
        ]
        for header in refusedHeaders {
            let code = refusal(try jws(header, accessClaims(), key: serverEC))
            #expect(code == .tokenMalformed || code == .claimInvalid, "\(header): \(String(describing: code))")
        }
        // One member whose name is escaped is that member: the same header to every JSON parser.
        // The signature covers the bytes as sent, so only the issuer can write either spelling.
        let escaped = #"{"\u0061lg":"ES256","\u0074yp":"at+jwt","k\u0069d":"\#(kid)"}"#
        #expect(refusal(try jws(escaped, accessClaims(), key: serverEC)) == nil)
        let spaced = " {\n\t\"alg\" : \"ES256\" , \"typ\":\"at+jwt\",\"kid\":\"\(kid)\"\r\n} "
        #expect(refusal(try jws(spaced, accessClaims(), key: serverEC)) == nil)
        // Escapes in a value are decoded too, so `at\u002bjwt` is at+jwt and `at+jwt` spelled with
        // a NUL or another character is not.
        let escapedValue = #"{"alg":"ES256","typ":"at\u002bjwt","kid":"\#(kid)"}"#
        #expect(refusal(try jws(escapedValue, accessClaims(), key: serverEC)) == nil)
    }

    @Test("header members that would choose the key or add semantics are refused on a validly signed token")
    func keyChoosingHeaders() throws {
        let kid = serverEC.keyID
        let jwk = JWSPublicKey.p256(serverEC.publicKey).jwk.canonicalJSON
        for member in [
            #""jwk":\#(jwk)"#, #""jku":"https://auth.example.test/.well-known/jwks.json""#,
            #""x5u":"https://auth.example.test/cert.pem""#, #""x5c":["MIIB"]"#, #""crit":["exp"]"#,
            #""crit":[]"#,
        ] {
            let header = #"{"alg":"ES256","typ":"at+jwt","kid":"\#(kid)",\#(member)}"#
            #expect(refusal(try jws(header, accessClaims(), key: serverEC)) == .claimInvalid, "\(member)")
        }
    }

    @Test("alg: none, HMAC under the public key, PS256 and RS384, and another key type's algorithm are refused")
    func algorithmSwaps() throws {
        let rsaKID = serverRSA.keyID
        let ecKID = serverEC.keyID
        let payload = Base64URL.encode(Array(JSONValue.object(accessClaims()).serialized().utf8))
        func unsigned(_ header: String, signature: String) -> String {
            Base64URL.encode(Array(header.utf8)) + "." + payload + "." + signature
        }
        for alg in ["none", "None", "NONE", ""] {
            let header = #"{"alg":"\#(alg)","typ":"at+jwt","kid":"\#(rsaKID)"}"#
            #expect(refusal(unsigned(header, signature: "")) == .tokenMalformed, "\(alg), empty signature")
            #expect(refusal(unsigned(header, signature: "AA")) == .claimInvalid, "\(alg)")
        }
        // HS256 keyed with every public spelling of the RSA key a forger could try.
        let secrets: [[UInt8]] = [
            Array(serverRSA.publicKey.pemRepresentation.utf8), serverRSA.publicKey.derRepresentation,
            Array(serverRSA.publicKey.jwk.canonicalJSON.utf8),
        ]
        for secret in secrets {
            for alg in ["HS256", "HS384", "HS512"] {
                let header = #"{"alg":"\#(alg)","typ":"at+jwt","kid":"\#(rsaKID)"}"#
                let input = Base64URL.encode(Array(header.utf8)) + "." + payload
                let tag = try CryptoPrimitives.hmacSHA256(key: secret, message: Array(input.utf8))
                #expect(refusal(input + "." + Base64URL.encode(tag)) == .claimInvalid, "\(alg)")
            }
        }
        // Algorithms keyauth does not take, signed by the RSA key (the signature is RS256's).
        for alg in ["PS256", "RS384", "RS512", "ES384", "ES512", "Ed25519", "rs256", "RSA-OAEP"] {
            let header = #"{"alg":"\#(alg)","typ":"at+jwt","kid":"\#(rsaKID)"}"#
            #expect(refusal(try jws(header, accessClaims(), key: serverRSA)) == .claimInvalid, "\(alg)")
        }
        // RS256 <-> ES256 <-> EdDSA: each kid verifies only its own key's algorithm.
        let swaps: [(String, String, any JWSSigner)] = [
            ("ES256", rsaKID, serverEC), ("RS256", ecKID, serverRSA), ("EdDSA", rsaKID, serverRSA),
            ("EdDSA", ecKID, serverEC), ("ES256", rsaKID, serverRSA), ("RS256", ecKID, serverEC),
        ]
        for (alg, kid, signer) in swaps {
            let header = #"{"alg":"\#(alg)","typ":"at+jwt","kid":"\#(kid)"}"#
            #expect(refusal(try jws(header, accessClaims(), key: signer)) == .signatureInvalid, "\(alg) on \(kid)")
        }
    }

    @Test("a key set after rotations between algorithms: each kid verifies only its own key's algorithm")
    func rotatedKeySet() async throws {
        // What the JWK set holds after `keys rotate --alg ES256` and `--alg EdDSA`: the RSA key
        // that signs ID tokens, the previous P-256 key and the current Ed25519 key.
        let serverEd = try Ed25519PrivateKey.generate()
        let signers: [any JWSSigner] = [serverRSA, serverEC, serverEd]
        let publicKeys: [JWSPublicKey] = [
            .rsa(serverRSA.publicKey), .p256(serverEC.publicKey), .ed25519(serverEd.publicKey),
        ]
        let rotatedSet = JWKSet(keys: Dictionary(uniqueKeysWithValues: publicKeys.map { ($0.thumbprint, $0) }))
        let rotated = try AccessTokenVerifier(
            issuer: Self.issuer, fetcher: Issuer(keys: publicKeys), clock: .fixed(seconds: Self.now))
        func refusal(_ token: String) async -> KeyAuthError.Code? {
            do {
                _ = try rotated.verify(token, keySet: rotatedSet)
            } catch { return error.code }
            // The fetched set must agree with the given one.
            do {
                _ = try await rotated.verify(token)
                return nil
            } catch { return error.code }
        }
        let payload = Base64URL.encode(Array(JSONValue.object(accessClaims()).serialized().utf8))
        for key in publicKeys {
            let kid = key.thumbprint
            let own = try #require(signers.first { $0.keyID == kid })
            #expect(await refusal(try jws(accessHeader(own), accessClaims(), key: own)) == nil, "\(kid)")
            for alg in ["RS256", "ES256", "EdDSA"] where alg != key.algorithm.rawValue {
                // Signed by every key, its own included: the header's alg never chooses.
                for signer in signers {
                    let header = #"{"alg":"\#(alg)","typ":"at+jwt","kid":"\#(kid)"}"#
                    let code = await refusal(try jws(header, accessClaims(), key: signer))
                    #expect(
                        code.map(Self.tokenRefusals.contains) == true,
                        "\(alg) on \(key.algorithm.rawValue): \(code as Any)")
                }
            }
            var secrets = [Array(key.jwk.canonicalJSON.utf8)]
            switch key {
            case .rsa(let rsa): secrets += [Array(rsa.pemRepresentation.utf8), rsa.derRepresentation]
            case .p256(let ec): secrets.append(try ec.derRepresentation)
            case .ed25519: break
            }
            for secret in secrets {
                let header = #"{"alg":"HS256","typ":"at+jwt","kid":"\#(kid)"}"#
                let input = Base64URL.encode(Array(header.utf8)) + "." + payload
                let tag = try CryptoPrimitives.hmacSHA256(key: secret, message: Array(input.utf8))
                let code = await refusal(input + "." + Base64URL.encode(tag))
                #expect(code.map(Self.tokenRefusals.contains) == true, "HS256 on \(key.algorithm.rawValue)")
            }
            let none = Base64URL.encode(Array(#"{"alg":"none","typ":"at+jwt","kid":"\#(kid)"}"#.utf8))
            for signature in ["", "AA"] {
                let code = await refusal(none + "." + payload + "." + signature)
                #expect(code.map(Self.tokenRefusals.contains) == true, "none on \(key.algorithm.rawValue)")
            }
        }
    }

    @Test("kid: the device's, a retired key's, none, empty, or not a string is no key of the issuer")
    func keyIDs() throws {
        let retired = try P256PrivateKey.generate()
        let cases: [(String, any JWSSigner, KeyAuthError.Code)] = [
            (#""kid":"\#(device.keyID)""#, device, .signatureInvalid),
            (#""kid":"\#(device.keyID)""#, serverRSA, .signatureInvalid),
            (#""kid":"\#(retired.keyID)""#, retired, .signatureInvalid),
            (#""kid":"\#(serverRSA.keyID) ""#, serverRSA, .signatureInvalid),
            (#""kid":"\#(serverRSA.keyID.lowercased())""#, serverRSA, .signatureInvalid),
            (#""kid":"""#, serverRSA, .claimInvalid),
            (#""kid":1"#, serverRSA, .claimInvalid),
            (#""kid":["\#(serverRSA.keyID)"]"#, serverRSA, .claimInvalid),
            (#""x":1"#, serverRSA, .claimInvalid),
        ]
        for (member, signer, expected) in cases {
            let header = #"{"alg":"\#(signer.algorithm.rawValue)","typ":"at+jwt",\#(member)}"#
            #expect(refusal(try jws(header, accessClaims(), key: signer)) == expected, "\(member)")
        }
    }

    @Test(
        "times must be integers in range: strings, floats, exponents, huge and negative values are refused",
        arguments: ["exp", "iat", "nbf"])
    func timeClaims(_ name: String) throws {
        let current = Self.now
        let values: [JSONValue] = [
            .string("\(current + 60)"), .number(Double(current + 60)), .number(1.8e9), .number(1e30),
            .number(-1), .integer(Int64.min), .integer(Int64.max), .bool(true), .array([.integer(current)]),
            .object([:]),
        ]
        for value in values {
            // nbf in the past or far future only fails as a non-integer or an integer too late;
            // Int64.min for nbf is an integer that has passed, and is allowed (RFC 7519 4.1.5).
            if name == "nbf", value == .integer(Int64.min) { continue }
            let token = try jws(accessHeader(serverEC), accessClaims([name: value]), key: serverEC)
            #expect(refusal(token) == .claimInvalid, "\(name) = \(value.serialized())")
        }
        // Written as digits too long for 64 bits: a number, not an integer.
        let header = Base64URL.encode(Array(accessHeader(serverEC).utf8))
        let text = JSONValue.object(accessClaims([name: .integer(7)])).serialized()
            .replacingOccurrences(of: #""\#(name)":7"#, with: #""\#(name)":99999999999999999999"#)
        let input = header + "." + Base64URL.encode(Array(text.utf8))
        let token = input + "." + Base64URL.encode(try serverEC.signature(for: Array(input.utf8)))
        #expect(refusal(token) == .claimInvalid, "\(name) past 64 bits")
        if name != "nbf" {
            let missing = try jws(accessHeader(serverEC), accessClaims([name: .null]), key: serverEC)
            #expect(refusal(missing) == .claimInvalid, "\(name) missing")
        }
    }

    @Test("aud, iss, sub, client_id and jti of the wrong shape or value are refused")
    func identityClaims() throws {
        let cases: [(String, JSONValue)] = [
            ("aud", .null), ("aud", "https://auth.example.test/"), ("aud", "HTTPS://auth.example.test"),
            ("aud", .array([])), ("aud", .array(["client-1"])), ("aud", .integer(1)),
            ("aud", .object(["aud": .string(Self.issuer)])), ("iss", .null), ("iss", .array([.string(Self.issuer)])),
            ("iss", "https://auth.example.test/"), ("sub", .null), ("sub", ""), ("sub", .integer(1)),
            ("sub", .array(["alice"])), ("client_id", .null), ("client_id", ""), ("client_id", .integer(1)),
            ("jti", .null), ("jti", ""), ("jti", .integer(1)), ("jti", "a b"), ("cnf", "jkt"),
            ("cnf", .object([:])), ("cnf", .object(["jkt": ""])), ("cnf", .object(["jkt": .array([])])),
            ("amr", .array([.integer(1)])), ("scope", .array(["openid"])), ("device_tier", .integer(1)),
        ]
        for (name, value) in cases {
            let token = try jws(accessHeader(serverEC), accessClaims([name: value]), key: serverEC)
            #expect(refusal(token) == .claimInvalid, "\(name) = \(value.serialized())")
        }
        // An array naming the issuer is an audience that contains it (RFC 7519 section 4.1.3).
        let listed = try jws(
            accessHeader(serverEC), accessClaims(["aud": .array([.string(Self.issuer), "other"])]), key: serverEC)
        #expect(refusal(listed) == nil)
        // A token of another device is that device's: the verifier names it, never the caller's.
        let other = try jws(accessHeader(serverEC), accessClaims(["client_id": "another-device"]), key: serverEC)
        #expect(try verifier.verify(other, keySet: keySet).deviceKeyID == "another-device")
    }

    @Test("trailing data, padding and a changed byte anywhere make the token unusable")
    func tamperedBytes() throws {
        let token = try jws(accessHeader(serverRSA), accessClaims(), key: serverRSA)
        let parts = token.split(separator: ".").map(String.init)
        for variant in [
            token + ".", token + ".x", token + "=", token + " ", " " + token, token + "\n", token + "\u{0}",
            parts[0] + "=." + parts[1] + "." + parts[2], parts[0] + "." + parts[1] + "." + parts[2] + "AA",
            parts[0] + ".." + parts[2], "." + parts[1] + "." + parts[2],
            parts[0] + "." + parts[1] + "." + String(parts[2].dropLast()),
        ] {
            #expect(Self.tokenRefusals.contains(refusal(variant) ?? .cancelled), "\(variant.suffix(8))")
        }
    }

    // MARK: Binding

    @Test("a bound token: no Bearer downgrade, and a proof for another method, URL, token or key is refused")
    func binding() async throws {
        let bound = try jws(
            accessHeader(serverEC), accessClaims(["cnf": .object(["jkt": .string(device.keyID)])]), key: serverEC)
        let builder = DPoPProofBuilder(key: device, clock: .fixed(seconds: Self.now))
        func presented(_ header: String, proof: String?, method: String = "GET", url: String = Self.resource)
            async -> KeyAuthError.Code?
        {
            do {
                _ = try await verifier.verify(authorization: header, dpopProof: proof, method: method, url: url)
                return nil
            } catch { return error.code }
        }
        // Presented as Bearer, with or without a proof: refused (RFC 9449 section 7.2).
        let good = try builder.proof(method: "GET", url: Self.resource, accessToken: bound)
        #expect(await presented("Bearer " + bound, proof: good) == .claimInvalid)
        #expect(await presented("bearer " + bound, proof: nil) == .claimInvalid)
        #expect(refusal(bound) == .dpopProofInvalid, "no scheme and no proof")
        // Wrong method spelling, URL spelling, token hash, and a proof of another key.
        let otherKey = DPoPProofBuilder(key: serverRSA, clock: .fixed(seconds: Self.now))
        let wrong: [(String, String)] = [
            ("htm lower case", try builder.proof(method: "get", url: Self.resource, accessToken: bound)),
            ("htm POST", try builder.proof(method: "POST", url: Self.resource, accessToken: bound)),
            ("trailing slash", try builder.proof(method: "GET", url: Self.resource + "/", accessToken: bound)),
            ("path case", try builder.proof(method: "GET", url: "https://api.example.test/Items", accessToken: bound)),
            ("scheme", try builder.proof(method: "GET", url: "http://api.example.test/items", accessToken: bound)),
            ("port", try builder.proof(method: "GET", url: "https://api.example.test:8443/items", accessToken: bound)),
            ("host", try builder.proof(method: "GET", url: "https://auth.example.test/items", accessToken: bound)),
            ("another token's ath", try builder.proof(method: "GET", url: Self.resource, accessToken: bound + "x")),
            ("no ath", try builder.proof(method: "GET", url: Self.resource)),
            ("another key", try otherKey.proof(method: "GET", url: Self.resource, accessToken: bound)),
        ]
        for (name, proof) in wrong {
            #expect(await presented("DPoP " + bound, proof: proof) == .dpopProofInvalid, "\(name)")
        }
        // Spellings RFC 9449 section 4.3 treats as the same URL: host case, default port, query.
        for url in [
            "https://API.EXAMPLE.TEST/items", "https://api.example.test:443/items",
            "https://api.example.test/items?page=1", "https://api.example.test/items#top",
        ] {
            let proof = try builder.proof(method: "GET", url: url, accessToken: bound)
            #expect(await presented("DPoP " + bound, proof: proof) == nil, "\(url)")
        }
        // An unbound token may not borrow the DPoP scheme.
        let bearer = try jws(accessHeader(serverEC), accessClaims(), key: serverEC)
        let proof = try builder.proof(method: "GET", url: Self.resource, accessToken: bearer)
        #expect(await presented("DPoP " + bearer, proof: proof) == .claimInvalid)
    }

    @Test("DPoP proofs: an access token, an assertion, or a proof with a changed typ, htm or key is no proof")
    func proofConfusion() throws {
        let proofs = DPoPProofVerifier(clock: .fixed(seconds: Self.now))
        func refusal(_ proof: String, method: String = "POST", url: String = "https://auth.example.test/oauth/token")
            -> KeyAuthError.Code?
        {
            do {
                _ = try proofs.verify(proof, method: method, url: url)
                return nil
            } catch { return error.code }
        }
        let jwk = device.publicKey.jwk.canonicalJSON
        let claims: [String: JSONValue] = [
            "htm": "POST", "htu": "https://auth.example.test/oauth/token", "iat": .integer(Self.now), "jti": "p-1",
        ]
        #expect(refusal(try jws(#"{"alg":"RS256","typ":"dpop+jwt","jwk":\#(jwk)}"#, claims, key: device)) == nil)
        let refused: [(String, [String: JSONValue])] = [
            (#"{"alg":"RS256","typ":"DPOP+JWT","jwk":\#(jwk)}"#, claims),
            (#"{"alg":"RS256","typ":"application/dpop+jwt","jwk":\#(jwk)}"#, claims),
            (#"{"alg":"RS256","typ":"at+jwt","jwk":\#(jwk)}"#, claims),
            (#"{"alg":"RS256","jwk":\#(jwk)}"#, claims),
            (#"{"alg":"RS256","typ":"dpop+jwt","kid":"\#(device.keyID)"}"#, claims),
            (#"{"alg":"ES256","typ":"dpop+jwt","jwk":\#(jwk)}"#, claims),
            (
                #"{"alg":"RS256","typ":"dpop+jwt","jwk":\#(JWSPublicKey.p256(serverEC.publicKey).jwk.canonicalJSON)}"#,
                claims
            ),
            (#"{"alg":"RS256","typ":"dpop+jwt","jwk":\#(jwk),"jku":"https://x.test/k"}"#, claims),
            (#"{"alg":"RS256","typ":"dpop+jwt","jwk":\#(jwk),"typ":"dpop+jwt"}"#, claims),
            (#"{"alg":"RS256","typ":"dpop+jwt","jwk":\#(jwk)}"#, claims.merging(["htm": "post"]) { $1 }),
            (#"{"alg":"RS256","typ":"dpop+jwt","jwk":\#(jwk)}"#, claims.merging(["htm": .null]) { $1 }),
            (#"{"alg":"RS256","typ":"dpop+jwt","jwk":\#(jwk)}"#, claims.merging(["iat": "1800000000"]) { $1 }),
            (#"{"alg":"RS256","typ":"dpop+jwt","jwk":\#(jwk)}"#, claims.merging(["iat": .number(1.8e9)]) { $1 }),
            (
                #"{"alg":"RS256","typ":"dpop+jwt","jwk":\#(jwk)}"#,
                claims.merging(["htu": "https://auth.example.test/oauth/token/"]) { $1 }
            ),
            (
                #"{"alg":"RS256","typ":"dpop+jwt","jwk":\#(jwk)}"#,
                claims.merging(["htu": "https://auth.example.test/OAuth/token"]) { $1 }
            ),
            (#"{"alg":"RS256","typ":"dpop+jwt","jwk":\#(jwk)}"#, claims.merging(["jti": .integer(1)]) { $1 }),
        ]
        for (header, payload) in refused {
            #expect(refusal(try jws(header, payload, key: device)) == .dpopProofInvalid, "\(header) \(payload)")
        }
        // A server access token and a device assertion, as proofs.
        let token = try jws(accessHeader(serverRSA), accessClaims(), key: serverRSA)
        #expect(refusal(token) == .dpopProofInvalid)
        let assertion = try JWTBuilder(key: device, audience: Self.issuer, clock: .fixed(seconds: Self.now)).sign()
        #expect(refusal(assertion) == .dpopProofInvalid)
    }

    @Test("DPoP proofs: an RSA jwk outside the device-key policy is refused before its signature is checked")
    func proofKeyPolicy() throws {
        let proofs = DPoPProofVerifier(clock: .fixed(seconds: Self.now))
        let claims: JSONValue = .object([
            "htm": "POST", "htu": "https://auth.example.test/oauth/token", "iat": .integer(Self.now), "jti": "p-2",
        ])
        func message(modulus: [UInt8], exponent: [UInt8]) -> String? {
            let jwk = JWK(keyType: "RSA", modulus: Base64URL.encode(modulus), exponent: Base64URL.encode(exponent))
            let header = #"{"alg":"RS256","typ":"dpop+jwt","jwk":\#(jwk.canonicalJSON)}"#
            // A signature of the modulus's size that verifies under nothing: only the key is judged.
            let proof =
                [header, claims.serialized()].map { Base64URL.encode(Array($0.utf8)) }.joined(separator: ".")
                + "." + Base64URL.encode([UInt8](repeating: 0x5A, count: modulus.count))
            do {
                _ = try proofs.verify(proof, method: "POST", url: "https://auth.example.test/oauth/token")
                return nil
            } catch { return error.code == .dpopProofInvalid ? error.message : "\(error.code)" }
        }
        var modulus = [UInt8](repeating: 0xC3, count: 384)
        modulus[383] = 0x01
        // An exponent almost the modulus's size: a full 3072-bit exponentiation per failed check.
        let huge = message(modulus: modulus, exponent: [UInt8](repeating: 0x7F, count: 383))
        #expect(huge?.contains("not a usable device key") == true, "\(huge ?? "accepted")")
        let three = message(modulus: modulus, exponent: [0x03])
        #expect(three?.contains("exponent 65537") == true, "\(three ?? "accepted")")
        let small = message(modulus: Array(modulus.prefix(128)), exponent: [0x01, 0x00, 0x01])
        #expect(small?.contains("2048 to 8192 bits") == true, "\(small ?? "accepted")")
        // The policy's own keys still reach the signature check.
        let fine = message(modulus: device.publicKey.modulus, exponent: [0x01, 0x00, 0x01])
        #expect(fine?.contains("signature does not verify") == true, "\(fine ?? "accepted")")
    }

    @Test("DPoP proofs: a proof sent again in its last second is refused by a cache whose clock reads the next")
    func proofReplayAtTheWindowsEnd() throws {
        let end = Self.now + 60
        let verifier = DPoPProofVerifier(clock: .fixed(seconds: end))
        let proof = try DPoPProofBuilder(key: device, clock: .fixed(seconds: Self.now)).proof(
            method: "POST", url: "https://auth.example.test/oauth/token")
        let verified = try verifier.verify(proof, method: "POST", url: "https://auth.example.test/oauth/token")
        let cacheTime = Mutex(end)
        let cache = InMemoryDPoPReplayCache(clock: .seconds { cacheTime.withLock { $0 } })
        #expect(
            try cache.claim(
                jwtID: verified.jwtID, keyThumbprint: verified.keyThumbprint, expiresAt: verified.replayExpiresAt))
        // The same proof again, verified in the same second, the cache's clock a second on.
        cacheTime.withLock { $0 = end + 1 }
        let again = try verifier.verify(proof, method: "POST", url: "https://auth.example.test/oauth/token")
        #expect(
            try !cache.claim(jwtID: again.jwtID, keyThumbprint: again.keyThumbprint, expiresAt: again.replayExpiresAt),
            "the replay was accepted")
    }

    @Test("device assertions: an access token, an ID token, a grant or a DPoP proof is no assertion")
    func assertionConfusion() async throws {
        let assertions = DeviceAssertionVerifier(audience: Self.issuer, clock: .fixed(seconds: Self.now))
        let directory = MemoryKeyDirectory(device.publicKey)
        func refusal(_ token: String) async -> KeyAuthError.Code? {
            do {
                _ = try await assertions.verify(token, keys: directory, replayCache: MemoryReplayCache())
                return nil
            } catch { return error.code }
        }
        let assertionClaims: [String: JSONValue] = [
            "iss": .string(device.keyID), "sub": .string(device.keyID), "aud": .string(Self.issuer),
            "iat": .integer(Self.now), "exp": .integer(Self.now + 30), "jti": "a-1",
        ]
        let kid = device.keyID
        // Server-signed tokens of every kind, even with an assertion's claims: not the device's key.
        let serverSigned: [String] = [
            try jws(accessHeader(serverRSA), accessClaims(), key: serverRSA),
            try jws(#"{"alg":"RS256","typ":"JWT","kid":"\#(kid)"}"#, assertionClaims, key: serverRSA),
            try jws(#"{"alg":"RS256","typ":"at+jwt","kid":"\#(kid)"}"#, assertionClaims, key: serverRSA),
            try jws(#"{"alg":"ES256","typ":"JWT","kid":"\#(kid)"}"#, assertionClaims, key: serverEC),
        ]
        for token in serverSigned {
            let code = await refusal(token)
            #expect(code == .signatureInvalid || code == .claimInvalid, "\(String(describing: code))")
        }
        // The device's own access-token-shaped token: sub is a user, iss the issuer.
        #expect(await refusal(try jws(accessHeader(device), accessClaims(), key: device)) == .claimInvalid)
        // A DPoP proof of the device with every assertion claim: its jwk header refuses it.
        let proofLike = try jws(
            #"{"alg":"RS256","typ":"dpop+jwt","jwk":\#(device.publicKey.jwk.canonicalJSON)}"#,
            assertionClaims.merging(["htm": "POST", "htu": "https://auth.example.test/oauth/token"]) { $1 },
            key: device)
        #expect(await refusal(proofLike) == .claimInvalid)
        // A proof of the device as the device's own code signs it.
        let realProof = try DPoPProofBuilder(key: device, clock: .fixed(seconds: Self.now)).proof(
            method: "POST", url: Self.issuer + "/oauth/token")
        #expect(await refusal(realProof) == .claimInvalid)
        // kid of another kind of key than a fingerprint, an assertion of another device.
        let other = TestKeys.second
        let stranger = try jws(
            #"{"alg":"RS256","typ":"JWT","kid":"\#(kid)"}"#,
            assertionClaims.merging(["iss": .string(other.keyID), "sub": .string(other.keyID)]) { $1 }, key: device)
        #expect(await refusal(stranger) == .claimInvalid)
        #expect(
            await refusal(try jws(#"{"alg":"RS256","typ":"JWT","kid":"\#(kid)"}"#, assertionClaims, key: device)) == nil
        )
        // A kid that is present is the key id, whatever its type: only an absent kid lets sub
        // name the key (PROTOCOL.md section 2, rule 3), so a kid of null, a number, a list or an
        // object is no key id, not a missing one.
        for member in [#""kid":null"#, #""kid":5"#, #""kid":["\#(kid)"]"#, #""kid":{"kid":"\#(kid)"}"#, #""kid":"""#] {
            let token = try jws(#"{"alg":"RS256","typ":"JWT",\#(member)}"#, assertionClaims, key: device)
            #expect(await refusal(token) == .claimInvalid, "\(member)")
        }
        #expect(await refusal(try jws(#"{"alg":"RS256","typ":"JWT"}"#, assertionClaims, key: device)) == nil)
    }
}
