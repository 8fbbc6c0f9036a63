import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

@testable import KeyAuthServer

extension TokenConfusionTests {
    @Test("TPM attestation: no other token, nonce or answer stands in for its own, and no assertion it saw logs in")
    func attestationEndpoints() throws {
        try TokenConfusionCase.attestation.run(on: .sqlite)
    }

    /// Runs ``attestationEndpoints(_:tpm:)`` against servers on `database` that trust a new
    /// software TPM's maker (`--tpm-ca`, its root and intermediate in one file) and hand out
    /// DPoP nonces (`--dpop-nonce`), so that both kinds of server nonce are at hand.
    static func attestationEndpoints(on database: ConfusionDeployment.Database) throws {
        let tpm = try SoftwareTPM(endorsementCertificates: true)
        defer { withExtendedLifetime(tpm) {} }
        let roots = TemporaryDirectory("keyauth-confusion-tpm-ca")
        defer { roots.remove() }
        var pem: [UInt8] = []
        for path in [tpm.endorsementRootCertificatePath, tpm.endorsementIntermediateCertificatePath] {
            pem += Array(try Data(contentsOf: URL(fileURLWithPath: try #require(path))))
        }
        try Data(pem).write(to: URL(fileURLWithPath: roots.path + "/roots.pem"))
        try ConfusionDeployment.run(
            on: database, extraArguments: ["--tpm-ca", roots.path + "/roots.pem", "--dpop-nonce"]
        ) { deployment in
            try attestationEndpoints(deployment, tpm: tpm)
        }
    }

    /// PROTOCOL.md section 4, "Register with TPM attestation" and "Attest a registered device":
    /// each request made at ``ConfusionDeployment/api``, its answer sent to the peer instance.
    static func attestationEndpoints(_ deployment: ConfusionDeployment, tpm: SoftwareTPM) throws {
        let api = deployment.api
        let peer = deployment.peer
        let dave = AttestedClient(api: api, tpm: tpm, key: try TPMKey.generate(bits: 2048, on: try tpm.connection))
        let erin = AttestedClient(api: api, tpm: tpm, key: try TPMKey.generate(bits: 2048, on: try tpm.connection))
        let others = try otherKinds(deployment)

        // Dave's registration, challenged at one instance.
        var attestation = try dave.attestation(nonce: try dave.nonce())
        let firstProof = try dave.proof()
        let challenged = try api.registerBody(dave.body(user: "dave", attestation: attestation, proof: firstProof))
        #expect(challenged.status == 202, "\(challenged.text)")
        let challenge = try #require(challenged.json.flatMap(ActivationChallenge.init(jsonValue:)))
        let secret = try dave.signer.activateCredential(challenge.credential)
        // Erin's, on the same TPM (the same endorsement and attestation keys), challenged too.
        var erinsAttestation = try erin.attestation(nonce: try erin.nonce())
        let erinsChallenge = try api.registerBody(
            erin.body(user: "erin", attestation: erinsAttestation, proof: try erin.proof()))
        let erinsSecret = try erin.signer.activateCredential(
            try #require(erinsChallenge.json.flatMap(ActivationChallenge.init(jsonValue:))).credential)

        // In place of the activation secret: the other registration's, the nonces, the challenge.
        let notSecrets: [(String, [UInt8])] = [
            ("erin's activation secret", erinsSecret),
            ("the attestation nonce", Base64URL.decode(attestation.nonce) ?? []),
            ("a DPoP nonce", Base64URL.decode(others.dpopNonce) ?? []),
            ("the credential blob", challenge.credential.credentialBlob),
            ("the encrypted secret", challenge.credential.encryptedSecret),
        ]
        for (name, value) in notSecrets {
            var answered = attestation
            answered.activationSecret = value
            let response = try peer.registerBody(
                dave.body(user: "dave", attestation: answered, proof: try dave.proof()))
            #expect(response.status == 400 && response.errorCode == "invalid_request", "\(name): \(response.text)")
        }
        // In place of the nonce: a DPoP nonce the TPM certified as it would the server's, and
        // tokens and codes of other kinds.
        var dpopNonced = try dave.attestation(nonce: others.dpopNonce)
        dpopNonced.activationSecret = secret
        let dpopRefused = try peer.registerBody(
            dave.body(user: "dave", attestation: dpopNonced, proof: try dave.proof()))
        #expect(dpopRefused.status == 400, "\(dpopRefused.text)")
        #expect(dpopRefused.errorDescription?.hasPrefix("the attestation nonce is not this server's") == true)
        for (name, token) in others.tokens {
            var tokenNonced = attestation
            tokenNonced.nonce = token
            tokenNonced.activationSecret = secret
            let response = try peer.registerBody(
                dave.body(user: "dave", attestation: tokenNonced, proof: try dave.proof()))
            #expect(response.status == 400 && response.errorCode == "invalid_request", "\(name) as nonce")
        }
        // Erin's answer to erin's challenge, with dave's evidence or for dave's key.
        var erinsAnswer = erinsAttestation
        erinsAnswer.activationSecret = erinsSecret
        for (name, body) in [
            (
                "dave's evidence",
                erin.body(user: "erin", attestation: answered(attestation, with: secret), proof: try erin.proof())
            ),
            ("dave's key", dave.body(user: "dave", attestation: erinsAnswer, proof: try dave.proof())),
        ] {
            let response = try peer.registerBody(body)
            #expect(response.status == 400 && response.errorCode == "invalid_request", "\(name): \(response.text)")
        }
        // In place of the proof: every other kind of token, with the right answer.
        attestation.activationSecret = secret
        for (name, token) in others.tokens {
            let response = try peer.registerBody(dave.body(user: "dave", attestation: attestation, proof: token))
            #expect(response.status == 400 && response.errorCode == "invalid_grant", "\(name) as proof")
        }
        #expect(try api.storage.device(kid: dave.key.publicKey.fingerprint) == nil, "nothing above registered dave")

        // The proof of the challenged request was not used by it, and must not log in once the
        // answered request (with a fresh proof, as keyauth signs) has stored the device.
        let registered = try peer.registerBody(
            dave.body(user: "dave", attestation: attestation, proof: try dave.proof()))
        #expect(registered.status == 201 && registered.json?["tier"] == "attested", "\(registered.text)")
        let stale = try peer.login(assertion: firstProof)
        #expect(stale.status == 400 && stale.errorCode == "invalid_grant", "the first proof logs in: \(stale.text)")
        erinsAttestation.activationSecret = erinsSecret
        #expect(
            try peer.registerBody(erin.body(user: "erin", attestation: erinsAttestation, proof: try erin.proof()))
                .status == 201)

        try attestRegistered(deployment, dave, registration: attestation, others: others)
        try dpopNonceIsNoAttestationNonce(deployment, attestationNonce: try dave.nonce(), others: others)
    }

    /// `evidence`'s attestation answered with `secret`.
    private static func answered(_ evidence: RegistrationAttestation, with secret: [UInt8]) -> RegistrationAttestation {
        var answered = evidence
        answered.activationSecret = secret
        return answered
    }

    /// `POST /v1/devices/attestation` for dave's registered key.
    private static func attestRegistered(
        _ deployment: ConfusionDeployment, _ dave: AttestedClient, registration: RegistrationAttestation,
        others: OtherKinds
    ) throws {
        func post(_ at: TestAPI, _ assertion: String, _ attestation: RegistrationAttestation) throws -> HTTPResponse {
            try at.send(
                "POST", "/v1/devices/attestation", headers: ["Content-Type": "application/json"],
                body: DeviceAttestationRequest(assertion: assertion, attestation: attestation).jsonBody)
        }
        let fresh = try dave.attestation(nonce: try dave.nonce())
        // In place of the device's assertion: every other kind of token; another registered
        // device's assertion authenticates that device, whose key is not the certified one.
        for (name, token) in others.tokens {
            let response = try post(deployment.peer, token, fresh)
            let expected = name == "another device's assertion" ? "invalid_request" : "invalid_grant"
            #expect(response.status == 400 && response.errorCode == expected, "\(name): \(response.text)")
        }
        // The challenged request's assertion is not used up by it, and must not log in.
        let firstAssertion = try dave.proof()
        let challenged = try post(deployment.api, firstAssertion, fresh)
        #expect(challenged.status == 202, "\(challenged.text)")
        let stale = try deployment.peer.login(assertion: firstAssertion)
        #expect(stale.status == 400 && stale.errorCode == "invalid_grant", "the first assertion logs in: \(stale.text)")
        // The registration's answer, still within its nonce's 300 s, attests the same key again:
        // the secret is bound to the nonce, the attestation key, the device key and the
        // endorsement key, not to the endpoint, and proves here what it proved there; the tier
        // can only rise to what that evidence shows. Accepted on purpose.
        let replayed = try post(deployment.peer, try dave.proof(), registration)
        #expect(replayed.status == 200 && replayed.json?["attestation_tier"] == "attested", "\(replayed.text)")
        var answered = fresh
        answered.activationSecret = try dave.signer.activateCredential(
            try #require(challenged.json.flatMap(ActivationChallenge.init(jsonValue:))).credential)
        #expect(try post(deployment.peer, try dave.proof(), answered).status == 200)
    }

    /// A DPoP proof whose nonce is an attestation nonce is refused as one without a nonce, and
    /// leaves the login's assertion unused.
    private static func dpopNonceIsNoAttestationNonce(
        _ deployment: ConfusionDeployment, attestationNonce: String, others: OtherKinds
    ) throws {
        let assertion = try deployment.api.assertion(deployment.laptop)
        func login(nonce: String) throws -> HTTPResponse {
            let proof = try DPoPProofBuilder(key: deployment.laptop).proof(
                method: "POST", url: deployment.api.issuer + "/oauth/token", nonce: nonce)
            return try deployment.peer.send(
                "POST", "/oauth/token",
                headers: ["Content-Type": "application/x-www-form-urlencoded", "DPoP": proof],
                body: Array(
                    "grant_type=\(TestAPI.formEncode(TestAPI.jwtBearer))&assertion=\(TestAPI.formEncode(assertion))"
                        .utf8))
        }
        let refused = try login(nonce: attestationNonce)
        #expect(refused.status == 400 && refused.errorCode == "use_dpop_nonce", "\(refused.text)")
        #expect(try login(nonce: others.dpopNonce).status == 200)
    }

    /// Tokens of kinds no attestation request takes, and a DPoP nonce of the server.
    struct OtherKinds {
        var tokens: [(String, String)]
        var dpopNonce: String
    }

    /// The other kinds from `deployment`'s first instance: the devices' access tokens, a relying
    /// party's access and ID tokens, an offline grant, a DPoP proof, an assertion of another
    /// registered device; and the DPoP nonce the token endpoint hands out.
    private static func otherKinds(_ deployment: ConfusionDeployment) throws -> OtherKinds {
        let api = deployment.api
        let device = ApprovingDevice(api: api, key: deployment.laptop, token: deployment.laptopToken)
        let redeemed = try OpenIDTestAPI.codeFlowTokens(api, device: device, client: try OpenIDTestAPI.addClient(api))
        let statement: JSONValue = .object(["host": "laptop.example", "service": "sudo", "linux_user": "alice"])
        let hostLogin = try api.login(
            assertion: try api.assertion(deployment.laptop, claims: ["host_login": statement]))
        let unnonced = try api.send(
            "POST", "/oauth/token",
            headers: [
                "Content-Type": "application/x-www-form-urlencoded",
                "DPoP": try deployment.proof(deployment.laptop, "POST", "/oauth/token"),
            ],
            body: Array(
                "grant_type=\(TestAPI.formEncode(TestAPI.jwtBearer))&assertion=\(TestAPI.formEncode(try api.assertion(deployment.laptop)))"
                    .utf8))
        return OtherKinds(
            tokens: [
                ("a device's access token", deployment.laptopToken), ("another device's", deployment.phoneToken),
                ("a relying party's access token", try #require(redeemed.json?["access_token"]?.stringValue)),
                ("an ID token", try #require(redeemed.json?["id_token"]?.stringValue)),
                ("an offline grant", try #require(hostLogin.json?["offline_grant"]?.stringValue)),
                ("a DPoP proof", try deployment.proof(deployment.laptop, "POST", "/v1/devices")),
                ("another device's assertion", try api.assertion(deployment.laptop)),
            ],
            dpopNonce: try #require(unnonced.headers["DPoP-Nonce"], "\(unnonced.status) \(unnonced.text)"))
    }
}
