import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

@testable import KeyAuthServer

extension TokenConfusionTests {
    /// The `serve` options of the rotation check: the shortest token lifetime (so that a previous
    /// key retires about 71 s after the rotation) and a cleanup every second (which publishes
    /// the new key and retires the old one).
    static let rotationArguments = ["--token-lifetime", "60", "--cleanup-interval", "1s"]

    @Test("a retired signing key's tokens and nonces are refused, a previous key's accepted until it retires")
    func retiredSigningKey() async throws {
        // Minutes of waiting for the key to retire: on a thread of its own, not the test pool's.
        try await DedicatedThreadExecutor.run("retired-key") { try TokenConfusionCase.retiredKey.run(on: .sqlite) }
    }

    /// PROTOCOL.md section 3, "Key rotation", on running servers: `keys rotate --delay 0`, then
    /// the old key is previous (published, verifying what it signed) until the cleanup retires
    /// it; from then on nothing it signed is taken, whoever holds its private key. Tokens
    /// naming a key the server has under another key's signature, or a key it never had, are
    /// refused throughout.
    static func retiredKey(_ deployment: ConfusionDeployment) throws {
        let api = deployment.api
        let oldRecord = try #require(try deployment.storage.signingKeys().first)
        let oldKID = oldRecord.kid
        // The old key's private half, as someone who copied it before it retired holds it.
        let oldKey = try JWSPrivateKey(pemRepresentation: oldRecord.privatePEM)
        let stranger = try ServerTestKeys.key("never-a-server-key")
        let device = ApprovingDevice(api: api, key: deployment.laptop, token: deployment.laptopToken)
        let redeemed = try OpenIDTestAPI.codeFlowTokens(api, device: device, client: try OpenIDTestAPI.addClient(api))
        let clientToken = try #require(redeemed.json?["access_token"]?.stringValue)
        let idToken = try #require(redeemed.json?["id_token"]?.stringValue)
        // Issued last before the rotation, so that under load it is still valid (60 s) while the
        // old key is previous.
        deployment.syncClock()
        let laptopToken = try api.accessToken(deployment.laptop)
        #expect(try CompactJWS(parsing: laptopToken).keyID == oldKID)

        let rotated = try KeyAuthServerProcess.runCommand(
            ["keys", "rotate", "--alg", "RS256", "--delay", "0", "--db", deployment.database, "--config", "/dev/null"]
                + ["--token-lifetime", "60"])
        #expect(rotated.status == 0, "\(rotated.error)")
        let newKID = rotated.output.trimmingCharacters(in: .whitespacesAndNewlines)
        try waitUntil("the server signs with the new key") {
            deployment.syncClock()
            return try CompactJWS(parsing: try api.accessToken(deployment.laptop)).keyID == newKID
        }

        /// The checks made while the old key is previous and again once it is retired.
        func offer(retired: Bool) throws {
            deployment.syncClock()
            let now = deployment.environment.clock.now
            let peer = deployment.peer
            // The old key's own tokens; an access token of the old key made now, as a copy of
            // the key makes one; an ID token of it for the end-session endpoint, whose hint may
            // be of any age but must be of a published key (section 10).
            let madeNow = try resigned(laptopToken, kid: oldKID, key: oldKey, type: "at+jwt", now: now)
            let oldKeyTokens = [
                ("the old key's access token", laptopToken), ("the old key's token of a client", clientToken),
                ("an access token the old key signs now", madeNow),
            ]
            for (name, token) in oldKeyTokens {
                // Issued long enough ago to have expired by the time the key retires.
                let expected = retired ? 401 : 200
                let response =
                    token == clientToken
                    ? try OpenIDTestAPI.userInfo(peer, token: token) : try deployment.devices("Bearer " + token)
                #expect(response.status == expected, "\(name), retired \(retired): \(response.text)")
                if retired { #expect(response.errorCode == "invalid_token", "\(name): \(response.text)") }
            }
            var browser = OpenIDBrowser(api: peer)
            let logout = try browser.get("/end-session", query: [("id_token_hint", idToken)])
            #expect(logout.status == (retired ? 400 : 200), "the old key's ID token, retired \(retired)")
            // Whichever key's kid it names, a token another key signed is refused; so is one
            // naming a key this server never had, signed by that key.
            for (name, kid) in [
                ("the current key's kid", newKID), ("the old key's kid", oldKID),
                ("its signer's own kid", stranger.publicKey.fingerprint),
            ] {
                let forged = try resigned(laptopToken, kid: kid, key: stranger, type: "at+jwt", now: now)
                let response = try deployment.devices("Bearer " + forged)
                #expect(response.status == 401 && response.errorCode == "invalid_token", "\(name): \(response.text)")
                let hint = try resigned(idToken, kid: kid, key: stranger, type: "JWT", now: now)
                #expect(try browser.get("/end-session", query: [("id_token_hint", hint)]).status == 400, "\(name)")
            }
            #expect(
                try browser.get(
                    "/end-session",
                    query: [("id_token_hint", try resigned(idToken, kid: newKID, key: oldKey, type: "JWT", now: now))]
                ).status == 400, "the old key signing under the new key's kid")
            // The server's attestation nonces are made under its signing keys too.
            let nonce = try ServerNonces(keys: try ServerSigningKeys(fixed: oldKey), purpose: .attestation)
                .issue(now: now)
            let attested = try attestationNonceRefusal(nonce, at: peer)
            #expect(
                attested.hasPrefix(retired ? "the attestation nonce is not this server's" : "the TPM attestation"),
                "the old key's attestation nonce, retired \(retired): \(attested)")
        }

        // PROTOCOL.md section 3: a previous key verifies until its last token expired. A copy of
        // it therefore signs tokens that are taken until then (THREAT-MODEL.md: a rotation
        // replaces a leaked key "without breaking tokens already issued"): pinned, on purpose.
        try offer(retired: false)
        try waitUntil("the old key is retired on every instance", timeout: 180) {
            try [api, deployment.peer].allSatisfy { try !KeyRotationTests.publishedKeyIDs($0).contains(oldKID) }
        }
        try offer(retired: true)
        deployment.syncClock()
        let fresh = try api.accessToken(deployment.laptop)
        #expect(try deployment.devices("Bearer " + fresh).status == 200, "the new key's token")
    }

    /// `token`'s claims made fresh (issued `now`, for a minute, a new `jti`), signed by `key`
    /// with the header `{"alg", "typ": type, "kid": kid}`.
    static func resigned(
        _ token: String, kid: String, key: some JWSSigner, type: String, now: Int64
    ) throws -> String {
        let parts = token.split(separator: ".").map(String.init)
        var payload = try #require(try JSONValue(parsing: Base64URL.decode(parts[1]) ?? []).objectValue)
        payload["iat"] = .integer(now)
        payload["exp"] = .integer(now + 60)
        payload["jti"] = .string(UUID().uuidString)
        let header: JSONValue = .object([
            "alg": .string(key.algorithm.rawValue), "typ": .string(type), "kid": .string(kid),
        ])
        return try JWTBuilder.sign(
            headerJSON: Array(header.serialized().utf8),
            payloadJSON: Array(JSONValue.object(payload).serialized().utf8),
            key: key)
    }

    /// What a registration with attestation `nonce` and evidence that holds nothing gets: the
    /// nonce is checked first, so the description says whether the nonce or the evidence failed.
    private static func attestationNonceRefusal(_ nonce: String, at api: TestAPI) throws -> String {
        let key = try ServerTestKeys.key("carol-1")
        let attestation: JSONValue = .object([
            "nonce": .string(nonce),
            "ek_public": .string(try ServerTestKeys.key("carol-2").publicKey.pemRepresentation),
            "ak_public": "AQ", "key_public": "AQ", "certify_info": "AQ", "signature": "AQ",
        ])
        let response = try api.registerBody(
            .object([
                "user": "carol", "name": "tpm laptop", "public_key": .string(key.publicKey.pemRepresentation),
                "proof": .string(try api.assertion(key)), "attestation": attestation,
            ]))
        #expect(response.status == 400 && response.errorCode == "invalid_request", "\(response.text)")
        return response.errorDescription ?? response.text
    }

    /// Polls `condition` every half second until it holds, failing after `timeout` seconds.
    static func waitUntil(_ what: String, timeout: TimeInterval = 30, _ condition: () throws -> Bool) throws {
        let deadline = Date().addingTimeInterval(timeout)
        while try !condition() {
            guard Date() < deadline else { throw TestFailure("\(what): not within \(Int(timeout)) s") }
            usleep(500_000)
        }
    }
}
