import Foundation
import KeyAuth
import KeyAuthServer
import KeyAuthTestSupport
import Testing

/// `POST /v1/devices/attestation` against software TPMs: a registered device's tier rises when
/// its TPM attests again, and each forged, replayed or unauthenticated attestation is refused.
@Suite("Attesting a registered device", .timeLimit(.minutes(10)))
struct DeviceAttestationTests {
    /// The round trip for `client`'s key: nonce, evidence (`change` may alter it), the challenge
    /// answered by the TPM (or by `answer`), each request with a fresh assertion from `assertion`.
    private func attest(
        _ client: AttestedClient, on api: TestAPI, assertion: (() throws -> String)? = nil,
        change: (inout RegistrationAttestation) throws -> Void = { _ in },
        answer: ((TPMCredential) throws -> [UInt8])? = nil
    ) throws -> (challenge: HTTPResponse, final: HTTPResponse) {
        var attestation = try client.attestation(
            nonce: try AttestedClient(api: api, tpm: client.tpm, key: client.key).nonce())
        try change(&attestation)
        func post() throws -> HTTPResponse {
            let body = DeviceAttestationRequest(
                assertion: try (assertion ?? client.proof)(), attestation: attestation)
            return try api.send(
                "POST", "/v1/devices/attestation", headers: ["Content-Type": "application/json"], body: body.jsonBody)
        }
        let challenge = try post()
        guard challenge.status == 202, let parsed = challenge.json.flatMap(ActivationChallenge.init(jsonValue:)) else {
            return (challenge, challenge)
        }
        attestation.activationSecret =
            try answer?(parsed.credential) ?? (try client.signer.activateCredential(parsed.credential))
        return (challenge, try post())
    }

    @Test(
        "a tpm-unverified device becomes attested once the maker's root is trusted; forgeries and replays are refused")
    func raisesAndRefuses() throws {
        let tpm = try SoftwareTPM(endorsementCertificates: true)
        defer { withExtendedLifetime(tpm) {} }
        let environment = TestEnvironment(clockStart: Int64(Date().timeIntervalSince1970))
        let untrusting = try environment.directAPI()
        let key = try TPMKey.generate(bits: 2048, on: try tpm.connection)
        let registered = try AttestedClient(api: untrusting, tpm: tpm, key: key).register(user: "alice")
        #expect(registered.final.json?["tier"]?.stringValue == "tpm-unverified")
        let fileKey = try ServerTestKeys.key("alice-2")
        #expect(try untrusting.register(user: "bob", key: fileKey).status == 201)

        let authority = try #require(tpm.endorsementCA).path
        let roots =
            try TPMEndorsementRoots.load(path: authority + "/swtpm-localca-rootca-cert.pem").certificates
            + TPMEndorsementRoots.load(path: authority + "/issuercert.pem").certificates
        let api = try environment.directAPI { configuration in
            configuration.tpmRoots = TPMEndorsementRoots(certificates: roots)
            configuration.tpmCA = "test roots"
        }
        let client = AttestedClient(api: api, tpm: tpm, key: key)
        let kid = key.publicKey.fingerprint
        func storedTier() throws -> String? { try api.storage.device(kid: kid)?.tier.rawValue }

        // A key file's device presenting this TPM's attestation: the certified key is not its key.
        let keyFile = try attest(client, on: api, assertion: { try api.assertion(fileKey) })
        #expect(keyFile.final.status == 400)
        #expect(keyFile.final.errorCode == "invalid_request")
        #expect(keyFile.final.errorDescription?.contains("the certified key is not the key being registered") == true)
        // A wrong answer to the challenge, and an assertion of a key nobody registered.
        let wrong = try attest(client, on: api, answer: { _ in Array(repeating: 7, count: 32) })
        #expect(wrong.challenge.status == 202)
        #expect(wrong.final.status == 400)
        #expect(wrong.final.errorDescription?.hasPrefix("the credential activation failed") == true)
        let stranger = try ServerTestKeys.key("alice-3")
        let unknown = try attest(client, on: api, assertion: { try api.assertion(stranger) })
        #expect(unknown.final.status == 400)
        #expect(unknown.final.errorCode == "invalid_grant")
        #expect(try storedTier() == "tpm-unverified", "nothing refused changed the tier")

        // The genuine round trip raises the tier, audited; its assertion cannot be used again.
        var used: String?
        let genuine = try attest(
            client, on: api,
            assertion: {
                let assertion = try client.proof()
                used = assertion
                return assertion
            })
        #expect(genuine.challenge.status == 202)
        #expect(genuine.challenge.headers["Cache-Control"] == "no-store")
        #expect(genuine.final.status == 200, "\(genuine.final.text)")
        let answer = try DeviceAttestationResponse(jsonValue: try #require(genuine.final.json))
        #expect(
            answer
                == DeviceAttestationResponse(
                    keyID: kid, tier: .attested, previousTier: .tpmUnverified, attestationTier: .attested,
                    endorsementProblem: nil))
        #expect(try storedTier() == "attested")
        let audit = try api.storage.auditEvents(since: 0).filter { $0.action == .attestDevice }
        #expect(audit.map(\.detail) == ["tpm-unverified -> attested"])
        let replay = try attest(client, on: api, assertion: { try #require(used) })
        #expect(replay.final.status == 400)
        #expect(replay.final.errorCode == "invalid_grant")

        // Without the root the TPM shows less, and the stored tier stays.
        let lower = try attest(AttestedClient(api: untrusting, tpm: tpm, key: key), on: untrusting)
        let kept = try DeviceAttestationResponse(jsonValue: try #require(lower.final.json))
        #expect(kept.tier == .attested)
        #expect(kept.attestationTier == .tpmUnverified)
        #expect(kept.endorsementProblem?.contains("no TPM root certificate is configured") == true)
        #expect(try storedTier() == "attested")
        #expect(try api.storage.auditEvents(since: 0).filter { $0.action == .attestDevice }.count == 1)

        // A revoked device cannot attest.
        #expect(try api.storage.updateStatus(kid: kid, from: .active, to: .revoked, at: api.clock.now))
        let revoked = try attest(client, on: api)
        #expect(revoked.final.status == 400)
        #expect(revoked.final.errorCode == "invalid_grant")
    }
}
