import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

@testable import KeyAuthServer

extension TokenConfusionTests {
    @Test("rotating RS256 to ES256 to EdDSA and back: each key verifies its own algorithm only, until it retires")
    func algorithmRotation() async throws {
        // Minutes of waiting for keys to retire: on a thread of its own, not the test pool's.
        try await DedicatedThreadExecutor.run("algorithm-rotation") {
            try TokenConfusionCase.algorithmRotation.run(on: .sqlite)
        }
    }

    /// One signing key of the rotation: its id, its algorithm and its private half, as someone
    /// who copied it holds it.
    private struct RotatedKey {
        let kid: String
        let signer: JWSPrivateKey
        var algorithm: JWSAlgorithm { signer.algorithm }
    }

    /// PROTOCOL.md section 3, "Key rotation" and "Signing algorithms", on running servers:
    /// `keys rotate --alg ES256`, then `--alg EdDSA`, then `--alg RS256`, each with no delay. The
    /// JWK set describes each key by its type; the first RS256 key keeps signing ID tokens
    /// (`id-tokens`) after the access tokens move to ES256, is not retired while it does, and
    /// retires only after the next RS256 key took over. Throughout, a token naming one key with
    /// another algorithm (`none`, HMAC keyed with the public key, another key type's) is refused
    /// as an access token and as an `id_token_hint`, and an ID token of a key that is not RS256
    /// is no ID token, even signed by a published key.
    static func algorithmRotation(_ deployment: ConfusionDeployment) throws {
        let api = deployment.api
        let peer = deployment.peer
        let client = try OpenIDTestAPI.addClient(api)
        let first = try #require(try deployment.storage.signingKeys().first)
        var keys = [RotatedKey(kid: first.kid, signer: try JWSPrivateKey(pemRepresentation: first.privatePEM))]
        #expect(keys[0].algorithm == .rs256)

        /// A device's access token, a client's access token and an ID token from ``api`` now.
        /// A browser's sign-ins are 5 an hour per address, so at most that many code flows run;
        /// the checks re-sign these tokens' claims with each key.
        var last: (device: String, client: String, id: String)?
        func issue(codeFlow: Bool = true) throws -> (device: String, client: String, id: String) {
            deployment.syncClock()
            let deviceToken = try api.accessToken(deployment.laptop)
            if !codeFlow, let last { return (deviceToken, last.client, last.id) }
            let device = ApprovingDevice(api: api, key: deployment.laptop, token: deviceToken)
            let redeemed = try OpenIDTestAPI.codeFlowTokens(api, device: device, client: client)
            let issued = (
                deviceToken, try #require(redeemed.json?["access_token"]?.stringValue),
                try #require(redeemed.json?["id_token"]?.stringValue)
            )
            last = issued
            return issued
        }
        func keyID(_ token: String) throws -> String? {
            try CompactJWS(parsing: token, algorithms: Set(JWSAlgorithm.allCases)).keyID
        }
        /// `keys rotate --alg` with no delay; returns once ``api`` signs access tokens with it.
        func rotate(to algorithm: JWSAlgorithm) throws {
            let rotated = try KeyAuthServerProcess.runCommand(
                ["keys", "rotate", "--alg", algorithm.rawValue, "--delay", "0", "--db", deployment.database]
                    + ["--config", "/dev/null", "--token-lifetime", "60"])
            #expect(rotated.status == 0, "\(rotated.error)")
            let kid = rotated.output.trimmingCharacters(in: .whitespacesAndNewlines)
            let record = try #require(try deployment.storage.signingKeys().first { $0.kid == kid })
            keys.append(RotatedKey(kid: kid, signer: try JWSPrivateKey(pemRepresentation: record.privatePEM)))
            try waitUntil("the server signs with the \(algorithm.rawValue) key") {
                deployment.syncClock()
                return try keyID(try api.accessToken(deployment.laptop)) == kid
            }
        }
        /// The JWK set at both instances: exactly `published`, each described by its type. The
        /// other instance reads new and retired keys at its next cleanup (a second here), so the
        /// set is awaited there first.
        func expectPublished(_ published: [RotatedKey], _ when: String) throws {
            func jwkSet(at instance: TestAPI) throws -> [JSONValue] {
                try #require(try instance.send("GET", "/.well-known/jwks.json").json?["keys"]?.arrayValue)
            }
            for instance in [api, peer] {
                try? waitUntil("\(when): the JWK set of each instance is the rotated one", timeout: 10) {
                    Set(try jwkSet(at: instance).compactMap { $0["kid"]?.stringValue }) == Set(published.map(\.kid))
                }
                let entries = try jwkSet(at: instance)
                #expect(Set(entries.compactMap { $0["kid"]?.stringValue }) == Set(published.map(\.kid)), "\(when)")
                for key in published {
                    let entry = try #require(entries.first { $0["kid"]?.stringValue == key.kid }, "\(when)")
                    let expected: [JWSAlgorithm: (String, String?)] = [
                        .rs256: ("RSA", nil), .es256: ("EC", "P-256"), .edDSA: ("OKP", "Ed25519"),
                    ]
                    #expect(entry["alg"]?.stringValue == key.algorithm.rawValue, "\(when): \(entry)")
                    #expect(entry["kty"]?.stringValue == expected[key.algorithm]?.0, "\(when): \(entry)")
                    #expect(entry["crv"]?.stringValue == expected[key.algorithm]?.1, "\(when): \(entry)")
                    #expect(entry["use"] == "sig" && entry["d"] == nil, "\(when): \(entry)")
                    #expect(try JWSPublicKey(jwk: JWK(jsonValue: entry)).thumbprint == key.kid, "\(when)")
                }
            }
        }
        func endSession(_ hint: String) throws -> Int {
            var browser = OpenIDBrowser(api: peer)
            return try browser.get("/end-session", query: [("id_token_hint", hint)]).status
        }
        /// Tokens of every live key, fresh and signed now by a copy of it, and each relabelled.
        func offer(_ tokens: (device: String, client: String, id: String), live: [RotatedKey], gone: [RotatedKey])
            throws
        {
            deployment.syncClock()
            let now = deployment.environment.clock.now
            for key in live + gone {
                let accepted = live.contains { $0.kid == key.kid }
                let access = try resigned(tokens.device, kid: key.kid, key: key.signer, type: "at+jwt", now: now)
                let status = try deployment.devices("Bearer " + access).status
                #expect(status == (accepted ? 200 : 401), "\(key.algorithm.rawValue) key's access token: \(status)")
                let forClient = try resigned(tokens.client, kid: key.kid, key: key.signer, type: "at+jwt", now: now)
                let userInfo = try OpenIDTestAPI.userInfo(peer, token: forClient).status
                #expect(userInfo == (accepted ? 200 : 401), "\(key.algorithm.rawValue) key's client token")
                // An ID token is RS256: one signed by another published key is no ID token.
                let hint = try resigned(tokens.id, kid: key.kid, key: key.signer, type: "JWT", now: now)
                let expected = accepted && key.algorithm == .rs256 ? 200 : 400
                #expect(try endSession(hint) == expected, "\(key.algorithm.rawValue) key's ID token")
                // The key's id with every other algorithm, over the key's own signature, or
                // over an HMAC keyed with the key's public spellings, or none.
                for header in mislabelled(kid: key.kid, as: key.algorithm) {
                    for (token, type) in [(access, "at+jwt"), (hint, "JWT")] {
                        let forged = try relabel(token, header: header.replacing("TYP", with: type), with: key)
                        if type == "JWT" {
                            #expect(try endSession(forged) == 400, "\(header) as id_token_hint")
                        } else {
                            let refused = try deployment.devices("Bearer " + forged)
                            #expect(refused.status == 401 && refused.errorCode == "invalid_token", "\(header)")
                            #expect(try OpenIDTestAPI.userInfo(peer, token: forged).status == 401, "\(header)")
                        }
                    }
                }
            }
        }

        // RS256 only; then ES256 access tokens, the RS256 key signing ID tokens.
        var tokens = try issue()
        try rotate(to: .es256)
        let afterES256 = try issue()
        #expect(try keyID(afterES256.id) == keys[0].kid, "ID tokens stay with the RS256 key")
        #expect(try keyID(afterES256.client) == keys[1].kid)
        try expectPublished(keys, "after --alg ES256")
        try offer(tokens, live: keys, gone: [])
        #expect(try endSession(tokens.id) == 200 && endSession(afterES256.id) == 200)
        try rotate(to: .edDSA)
        tokens = try issue(codeFlow: false)
        try expectPublished(keys, "after --alg EdDSA")
        try offer(tokens, live: keys, gone: [])
        // The ES256 key retires; the first RS256 key, still signing ID tokens, does not.
        try waitUntil("the ES256 key is retired on every instance", timeout: 180) {
            try [api, peer].allSatisfy { try !KeyRotationTests.publishedKeyIDs($0).contains(keys[1].kid) }
        }
        let listed = try KeyAuthServerProcess.runCommand(
            ["keys", "list", "--db", deployment.database, "--config", "/dev/null", "--token-lifetime", "60"])
        let firstLine = listed.output.split(separator: "\n").first { $0.hasPrefix(keys[0].kid) } ?? ""
        #expect(firstLine.contains("id-tokens"), "\(listed.output)")
        try expectPublished([keys[0], keys[2]], "after the ES256 key retired")
        let whileIDTokens = try issue()
        #expect(try keyID(whileIDTokens.id) == keys[0].kid, "ID tokens stay with the id-tokens key")
        try offer(whileIDTokens, live: [keys[0], keys[2]], gone: [keys[1]])
        #expect(try endSession(afterES256.id) == 200, "an ID token of the id-tokens key")
        // Back to RS256: the new key signs both, and the first retires from the time it stopped
        // signing ID tokens, with the EdDSA key.
        try rotate(to: .rs256)
        tokens = try issue()
        #expect(try keyID(tokens.id) == keys[3].kid)
        try expectPublished([keys[0], keys[2], keys[3]], "after --alg RS256")
        try waitUntil("the first RS256 key and the EdDSA key are retired", timeout: 180) {
            try [api, peer].allSatisfy { instance in
                let published = try KeyRotationTests.publishedKeyIDs(instance)
                return !published.contains(keys[0].kid) && !published.contains(keys[2].kid)
            }
        }
        try expectPublished([keys[3]], "after the rotation back to RS256")
        try offer(try issue(codeFlow: false), live: [keys[3]], gone: [keys[0], keys[1], keys[2]])
        #expect(try endSession(afterES256.id) == 400, "an ID token of the retired id-tokens key")
    }

    /// Headers naming `kid` with each algorithm other than `algorithm`, `TYP` standing for the
    /// `typ`; `HS256` marks the ones that ``relabel(_:header:with:)`` signs with an HMAC.
    private static func mislabelled(kid: String, as algorithm: JWSAlgorithm) -> [String] {
        let others = ["RS256", "ES256", "EdDSA"].filter { $0 != algorithm.rawValue }
        return (others + ["HS256", "none", "PS256"]).map { #"{"alg":"\#($0)","typ":"TYP","kid":"\#(kid)"}"# }
            + [#"{"alg":"HS256","typ":"TYP","kid":"\#(kid)","k":"jwk"}"#]
    }

    /// `token` under `header`: with its own signature, or for HS256 an HMAC keyed with `key`'s
    /// public PEM for an RSA key, else (or when the header has the marker member `k`, removed
    /// here) its JWK's JSON.
    private static func relabel(_ token: String, header: String, with key: RotatedKey) throws -> String {
        let parts = token.split(separator: ".").map(String.init)
        guard header.contains(#""HS256""#) else {
            let signature = header.contains(#""none""#) ? "" : parts[2]
            return Base64URL.encode(Array(header.utf8)) + "." + parts[1] + "." + signature
        }
        let usesJWK = header.contains(#","k":"jwk""#)
        let plain = header.replacing(#","k":"jwk""#, with: "")
        let secret: String
        if !usesJWK, case .rsa(let rsa) = key.signer.publicKey {
            secret = rsa.pemRepresentation
        } else {
            secret = key.signer.publicKey.jwk.canonicalJSON
        }
        let input = Base64URL.encode(Array(plain.utf8)) + "." + parts[1]
        let tag = try CryptoPrimitives.hmacSHA256(key: Array(secret.utf8), message: Array(input.utf8))
        return input + "." + Base64URL.encode(tag)
    }
}
