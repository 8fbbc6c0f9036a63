/// TPM attestation as ``KeyAuthClient`` performs it outside registration (PROTOCOL.md section 4,
/// "Attest a registered device"): the server's nonce, and the attestation of a device that is
/// already registered.
extension KeyAuthClient {
    /// A fresh attestation nonce (`POST /v1/attestation-nonces`): its text, and its bytes for
    /// the TPM to sign into its statement.
    ///
    /// - Returns: nil from a server older than attestation (404).
    /// - Throws: `.serverRejected` for an answer without a usable nonce; the request's errors.
    func attestationNonce() async throws(KeyAuthError) -> (text: String, bytes: [UInt8])? {
        let reply = try await send("POST", "/v1/attestation-nonces")
        if reply.status == 404 { return nil }
        let answer = try expectObject(reply, success: [200], operation: "attestation nonce")
        guard let nonce = answer["nonce"]?.stringValue, let bytes = Base64URL.decode(nonce),
            (1...TPMKeyCertification.maximumNonceBytes).contains(bytes.count)
        else { throw KeyAuthError(.serverRejected, "the server's attestation nonce is not base64url of 1 to 64 bytes") }
        return (nonce, bytes)
    }

    /// Attests a registered device's TPM key again (`POST /v1/devices/attestation`), so that
    /// the server can raise its tier without a new registration: after the operator configured
    /// the TPM maker's root, or for a device registered before attestation.
    ///
    /// Two requests, as an attested registration makes: the evidence, answered by a credential
    /// challenge, then the same evidence with the TPM's answer. Each carries a fresh assertion
    /// of the device key, which authenticates it (a device the device policy refuses has no
    /// access token).
    ///
    /// - Parameters:
    ///   - key: the device's TPM key, with its PIN.
    ///   - makeAssertion: signs a device assertion with the key; called for each request.
    /// - Returns: the server's answer: the tier it records now, before, and what this
    ///   attestation showed.
    /// - Throws: `.serverRejected` for a server without attestation (its nonce route answers
    ///   404), with `invalid_request` naming the check the attestation failed, or `invalid_grant`
    ///   for a device the server does not know or revoked; the TPM's errors.
    package func attestDevice(
        key: TPMSigningKey, makeAssertion: AuthenticatorHooks<AccessToken>.ProofMaker
    ) async throws(KeyAuthError) -> DeviceAttestationResponse {
        guard let (nonce, nonceBytes) = try await attestationNonce() else {
            throw KeyAuthError(
                .serverRejected, "\(serverURL) does not take TPM attestations: it is older than attestation")
        }
        let evidence = try await BlockingWork.run { () throws(KeyAuthError) in try key.attestation(nonce: nonceBytes) }
        var request = DeviceAttestationRequest(
            assertion: try await makeAssertion(), attestation: RegistrationAttestation(nonce: nonce, evidence: evidence)
        )
        let first = try await postAttestation(request, key: key)
        guard case .challenge(let challenge) = first else {
            throw KeyAuthError(.serverRejected, "the server answered the attestation without challenging the TPM")
        }
        request.attestation.activationSecret = try await BlockingWork.run { () throws(KeyAuthError) in
            try key.activateCredential(challenge.credential)
        }
        request.assertion = try await makeAssertion()
        guard case .answer(let answer) = try await postAttestation(request, key: key) else {
            throw KeyAuthError(.serverRejected, "the server challenged the TPM again after it answered")
        }
        return answer
    }

    /// What the attestation route answered.
    private enum AttestationReply {
        case challenge(ActivationChallenge)
        case answer(DeviceAttestationResponse)
    }

    private func postAttestation(
        _ request: DeviceAttestationRequest, key: TPMSigningKey
    ) async throws(KeyAuthError) -> AttestationReply {
        let reply = try await send(
            "POST", "/v1/devices/attestation", body: request.jsonBody, contentType: "application/json")
        let object = try expectObject(reply, success: [200, 202], operation: "attestation")
        guard object["kid"]?.stringValue == key.publicKey.fingerprint else {
            throw KeyAuthError(.serverRejected, "the server answered for a key id that is not this key's fingerprint")
        }
        if reply.status == 202, let challenge = ActivationChallenge(jsonValue: .object(object)) {
            return .challenge(challenge)
        }
        return .answer(try read(object, "the attestation answer", DeviceAttestationResponse.init(jsonValue:)))
    }
}
