import Foundation
import KeyAuth
import KeyAuthServer
import KeyAuthTestSupport
import Testing

/// One TPM key's attested registration, request by request, as a client performs it.
struct AttestedClient {
    let api: TestAPI
    let tpm: SoftwareTPM
    let key: TPMKey

    var signer: TPMSigningKey {
        get throws { TPMSigningKey(key: key, pin: nil, on: try tpm.connection) }
    }

    /// `POST /v1/attestation-nonces`.
    func nonce() throws -> String {
        let answer = try api.send("POST", "/v1/attestation-nonces")
        guard answer.status == 200, let nonce = answer.json?["nonce"]?.stringValue else {
            throw TestFailure("no nonce: \(answer.status) \(answer.text)")
        }
        return nonce
    }

    /// A proof of possession signed by the TPM.
    func proof() throws -> String {
        try JWTBuilder(key: try signer, audience: api.issuer, clock: api.clock.clock).sign()
    }

    /// The registration body with `attestation`.
    func body(user: String, attestation: RegistrationAttestation, proof: String) -> JSONValue {
        .object([
            "user": .string(user), "name": "tpm-laptop", "public_key": .string(key.publicKey.pemRepresentation),
            "proof": .string(proof), "attestation": attestation.jsonValue,
        ])
    }

    /// The TPM's evidence for `nonce`.
    func attestation(nonce: String) throws -> RegistrationAttestation {
        let bytes = try #require(Base64URL.decode(nonce))
        return RegistrationAttestation(
            nonce: nonce, evidence: try key.attestation(nonce: bytes, on: try tpm.connection))
    }

    /// The whole round trip, each request with a fresh proof (each uses its proof up); `answer`
    /// may replace the TPM's answer to the challenge.
    func register(
        user: String, change: (inout RegistrationAttestation) throws -> Void = { _ in },
        answer: ((TPMCredential) throws -> [UInt8])? = nil
    ) throws -> (challenge: HTTPResponse, final: HTTPResponse) {
        var attestation = try attestation(nonce: try nonce())
        try change(&attestation)
        let challenge = try api.registerBody(body(user: user, attestation: attestation, proof: try proof()))
        guard challenge.status == 202, let parsed = challenge.json.flatMap(ActivationChallenge.init(jsonValue:)) else {
            return (challenge, challenge)
        }
        attestation.activationSecret =
            try answer?(parsed.credential) ?? (try signer.activateCredential(parsed.credential))
        return (challenge, try api.registerBody(body(user: user, attestation: attestation, proof: try proof())))
    }
}

extension AttestedClient {
    /// A new software TPM with an endorsement key certificate, a server trusting its local CA,
    /// and a 2048-bit key in the TPM: the start of an attested registration. The client keeps the
    /// TPM running.
    static func trusted() throws -> (environment: TestEnvironment, client: AttestedClient) {
        let tpm = try SoftwareTPM(endorsementCertificates: true)
        // After the TPM: its certificate is valid from when swtpm_setup made it.
        let environment = TestEnvironment(clockStart: Int64(Date().timeIntervalSince1970))
        let api = try AttestedRegistrationTests.api(environment, trusting: tpm)
        let key = try TPMKey.generate(bits: 2048, on: try tpm.connection)
        return (environment, AttestedClient(api: api, tpm: tpm, key: key))
    }
}

/// Registration with TPM attestation against software TPMs: the tiers, and the refusals a
/// forged or replayed attestation meets.
@Suite("Attested registration", .timeLimit(.minutes(10)))
struct AttestedRegistrationTests {
    /// A server trusting `tpm`'s local CA (root and intermediate) when `trusting`.
    static func api(
        _ environment: TestEnvironment, trusting tpm: SoftwareTPM?
    ) throws -> TestAPI {
        let roots = try tpm.map { tpm in
            let root = try Data(contentsOf: URL(fileURLWithPath: try #require(tpm.endorsementRootCertificatePath)))
            let intermediate = try Data(
                contentsOf: URL(fileURLWithPath: try #require(tpm.endorsementIntermediateCertificatePath)))
            return try TPMEndorsementRoots(pem: Array(root) + Array(intermediate))
        }
        return try environment.directAPI { configuration in
            if let roots {
                configuration.tpmRoots = roots
                configuration.tpmCA = "test roots"
            }
        }
    }

    @Test("a TPM made with a certificate of a trusted CA registers as attested after answering the challenge")
    func attested() throws {
        let (environment, client) = try AttestedClient.trusted()
        let api = client.api

        let nonceAnswer = try api.send("POST", "/v1/attestation-nonces")
        #expect(nonceAnswer.status == 200)
        #expect(nonceAnswer.headers["Cache-Control"] == "no-store")
        #expect(nonceAnswer.json?["expires_in"] == .integer(300))

        let (challenge, final) = try client.register(user: "alice")
        #expect(challenge.status == 202, "\(challenge.text)")
        #expect(challenge.json?["status"]?.stringValue == "activation_required")
        #expect(challenge.headers["Cache-Control"] == "no-store")
        #expect(final.status == 201, "\(final.text)")
        #expect(final.json?["tier"]?.stringValue == "attested")
        #expect(final.json?["status"]?.stringValue == "active")
        let stored = try #require(try api.storage.device(kid: client.key.publicKey.fingerprint))
        #expect(stored.tier == .attested)
        // A login's token says what the server established, whatever the device states.
        let login = try api.login(assertion: try client.proof())
        #expect(login.status == 200, "\(login.text)")
        let token = try #require(login.json?["access_token"]?.stringValue)
        #expect(try CompactJWS(parsing: token).claims()["device_tier"] == .string("attested"))
        let file = try ServerTestKeys.key("alice-1")
        _ = try api.register(user: "bob", key: file)
        let fileToken = try api.accessToken(file)
        #expect(try CompactJWS(parsing: fileToken).claims()["device_tier"] == .string("software"))
        // The same key again, attested again: the existing record.
        let again = try client.register(user: "alice").final
        #expect(again.status == 200, "\(again.text)")
        #expect(again.json?["tier"]?.stringValue == "attested")
    }

    @Test("without the CA configured the same TPM registers as tpm-unverified, and a key file as software")
    func unverifiedAndSoftware() throws {
        let tpm = try SoftwareTPM(endorsementCertificates: true)
        defer { withExtendedLifetime(tpm) {} }
        // After the TPM: its certificate is valid from when swtpm_setup made it.
        let environment = TestEnvironment(clockStart: Int64(Date().timeIntervalSince1970))
        let api = try Self.api(environment, trusting: nil)
        let client = AttestedClient(api: api, tpm: tpm, key: try TPMKey.generate(bits: 2048, on: try tpm.connection))
        let (_, final) = try client.register(user: "alice")
        #expect(final.status == 201, "\(final.text)")
        #expect(final.json?["tier"]?.stringValue == "tpm-unverified")

        let file = try api.register(user: "bob", key: try ServerTestKeys.key("alice-1"))
        #expect(file.status == 201)
        #expect(file.json?["tier"]?.stringValue == "software")
        #expect(try api.storage.device(kid: try ServerTestKeys.key("alice-1").publicKey.fingerprint)?.tier == .software)
    }

    @Test("an answer counts only for the endorsement key it was challenged under, not for a certificate sent with it")
    func answerBoundToTheChallengedKey() throws {
        let tpm = try SoftwareTPM(endorsementCertificates: true)
        let other = try SoftwareTPM()
        defer { withExtendedLifetime((tpm, other)) {} }
        let environment = TestEnvironment(clockStart: Int64(Date().timeIntervalSince1970))
        let api = try Self.api(environment, trusting: tpm)
        let victim = AttestedClient(api: api, tpm: tpm, key: try TPMKey.generate(bits: 2048, on: try tpm.connection))
        // Certificates are public: any TPM's is read from its NV without authorization.
        let certificate = try victim.attestation(nonce: try victim.nonce()).evidence.endorsementCertificates
        let intruder = AttestedClient(
            api: api, tpm: other, key: try TPMKey.generate(bits: 2048, on: try other.connection))

        // Challenged under the intruder's own endorsement key, which it can answer (so could
        // software, with a key it made), ...
        var attestation = try intruder.attestation(nonce: try intruder.nonce())
        let challenge = try api.registerBody(
            intruder.body(user: "mallory", attestation: attestation, proof: try intruder.proof()))
        #expect(challenge.status == 202, "\(challenge.text)")
        let parsed = try #require(challenge.json.flatMap(ActivationChallenge.init(jsonValue:)))
        attestation.activationSecret = try intruder.signer.activateCredential(parsed.credential)
        // ... then answering with the trusted TPM's certificate in its place.
        var swapped = attestation
        swapped.evidence.endorsementCertificates = certificate
        swapped.evidence.endorsementKey = nil
        let final = try api.registerBody(
            intruder.body(user: "mallory", attestation: swapped, proof: try intruder.proof()))
        #expect(final.status == 400, "\(final.text)")
        #expect(final.errorDescription?.contains("credential activation failed") == true)
        #expect(try api.storage.allDevices().isEmpty)

        // The same answer with the evidence it was challenged under is what it is: unverified.
        let honest = try api.registerBody(
            intruder.body(user: "mallory", attestation: attestation, proof: try intruder.proof()))
        #expect(honest.status == 201, "\(honest.text)")
        #expect(honest.json?["tier"]?.stringValue == "tpm-unverified")
    }

    @Test("a wrong answer, another TPM's key under this TPM's certificate, an old nonce and a forged nonce are refused")
    func hostile() throws {
        let tpm = try SoftwareTPM(endorsementCertificates: true)
        let other = try SoftwareTPM()
        defer { withExtendedLifetime((tpm, other)) {} }
        // After the TPM: its certificate is valid from when swtpm_setup made it.
        let environment = TestEnvironment(clockStart: Int64(Date().timeIntervalSince1970))
        let api = try Self.api(environment, trusting: tpm)
        let client = AttestedClient(api: api, tpm: tpm, key: try TPMKey.generate(bits: 2048, on: try tpm.connection))

        let wrong = try client.register(user: "alice", answer: { _ in [UInt8](repeating: 7, count: 32) }).final
        #expect(wrong.status == 400)
        #expect(wrong.errorCode == "invalid_request")
        #expect(wrong.errorDescription?.contains("credential activation failed") == true)
        #expect(try api.storage.allDevices().isEmpty)

        // A second TPM's key and attestation key, with the first TPM's certificate: the server
        // encrypts the challenge to the certified EK, which the second TPM does not hold.
        let intruder = AttestedClient(
            api: api, tpm: other, key: try TPMKey.generate(bits: 2048, on: try other.connection))
        let certificate = try client.attestation(nonce: try client.nonce()).evidence.endorsementCertificates
        let (challenge, _) = try intruder.register(
            user: "mallory",
            change: { attestation in
                attestation.evidence.endorsementCertificates = certificate
                attestation.evidence.endorsementKey = nil
            },
            answer: { credential in
                // The second TPM cannot recover the secret. libtpms 0.9.2 (swtpm 0.7.1) answers a
                // seed encrypted to another EK by entering failure mode (TPM_RC_FAILURE), as it
                // does for tpm2-tools' tpm2_activatecredential; a hardware TPM answers an error
                // code. Either way no secret comes out.
                let refused = try #require(throws: KeyAuthError.self) {
                    try other.connection.activateCredential(
                        credential.credentialBlob, encryptedSecret: credential.encryptedSecret)
                }
                #expect([.keyCorrupt, .tpmUnavailable].contains(refused.code), "\(refused.message)")
                return [UInt8](repeating: 0, count: 32)
            })
        #expect(challenge.status == 202, "the evidence itself holds; the challenge is what fails")
        #expect(try api.storage.allDevices().isEmpty)

        // An attestation made for a nonce older than 300 seconds.
        let old = try client.attestation(nonce: try client.nonce())
        environment.clock.advance(by: 301)
        let replayed = try api.registerBody(client.body(user: "alice", attestation: old, proof: try client.proof()))
        #expect(replayed.status == 400)
        #expect(replayed.errorDescription?.contains("nonce") == true)

        // A nonce the server did not make, signed into a statement by the TPM all the same.
        let forged = Base64URL.encode([UInt8](repeating: 1, count: 24))
        let made = try client.attestation(nonce: forged)
        let refused = try api.registerBody(client.body(user: "alice", attestation: made, proof: try client.proof()))
        #expect(refused.status == 400)
        #expect(refused.errorDescription?.contains("nonce") == true)

        // The statement of one nonce sent with another: the verifier's refusal reaches the client.
        var mixed = try client.attestation(nonce: try client.nonce())
        environment.clock.advance(by: 1)
        mixed.nonce = try client.nonce()
        let mismatch = try api.registerBody(client.body(user: "alice", attestation: mixed, proof: try client.proof()))
        #expect(mismatch.status == 400)
        #expect(mismatch.errorDescription?.hasPrefix("the TPM attestation is refused") == true, "\(mismatch.text)")
        #expect(try api.storage.allDevices().isEmpty)
    }
}
