import Foundation

/// Enrollment and login as ``KeyAuthClient`` performs them (PROTOCOL.md section 4): registering a
/// device key with proof of possession, deciding whether a login binds its token with DPoP, and
/// the JWT bearer grant that turns a device assertion into an access token.
extension KeyAuthClient {
    /// Registers a public key with proof of possession (`POST /v1/devices`).
    ///
    /// - Parameters:
    ///   - publicKey: the new key; only its SPKI PEM is sent.
    ///   - proof: an assertion signed by the new key (PROTOCOL.md section 2).
    ///   - enrollment: the user, the device name and an optional enrollment code.
    /// - Returns: the server's record: 201 active, 202 pending, 200 an existing registration.
    /// - Throws: `.serverRejected` (`invalid_request` for a bad user or key, 409 for a key of
    ///   another user, `access_denied` for a missing or wrong enrollment code), `.transportFailed`.
    public func registerDevice(
        publicKey: RSAPublicKey, proof: String, enrollment: DeviceEnrollment
    ) async throws(KeyAuthError) -> DeviceRegistration {
        let request = RegistrationRequest(
            user: enrollment.user, name: enrollment.deviceName, publicKeyPEM: publicKey.pemRepresentation,
            proof: proof, enrollmentCode: enrollment.enrollmentCode, recoveryCode: enrollment.recoveryCode,
            keyProtection: enrollment.keyProtection)
        return try await postRegistration(request, publicKey: publicKey).registration
    }

    /// Registers a TPM key with its attestation (PROTOCOL.md section 4, "Register with TPM
    /// attestation"): a nonce from the server, the TPM's certification of the key with it, the
    /// server's credential challenge answered by the TPM, and only then the device stored.
    ///
    /// A server older than attestation (no `/v1/attestation-nonces`) gets the plain
    /// registration, as before.
    ///
    /// - Parameters:
    ///   - key: the TPM key, with its PIN, which certifying needs.
    ///   - makeProof: signs an assertion with the key; called before each request, since each
    ///     uses its proof up and the TPM's work between them can outlast one proof's lifetime.
    ///   - enrollment: the user, the device name and an optional enrollment code.
    /// - Throws: as ``registerDevice(publicKey:proof:enrollment:)``; `.serverRejected` with
    ///   `invalid_request` naming the check the attestation failed; the TPM's errors (`.keyCorrupt`
    ///   when it cannot answer the challenge).
    package func registerAttestedDevice(
        key: TPMSigningKey, makeProof: AuthenticatorHooks<AccessToken>.ProofMaker, enrollment: DeviceEnrollment
    ) async throws(KeyAuthError) -> DeviceRegistration {
        guard let (nonce, nonceBytes) = try await attestationNonce() else {
            return try await registerDevice(
                publicKey: key.publicKey, proof: try await makeProof(), enrollment: enrollment)
        }
        let evidence = try await BlockingWork.run { () throws(KeyAuthError) in try key.attestation(nonce: nonceBytes) }
        var request = RegistrationRequest(
            user: enrollment.user, name: enrollment.deviceName, publicKeyPEM: key.publicKey.pemRepresentation,
            proof: try await makeProof(), enrollmentCode: enrollment.enrollmentCode,
            recoveryCode: enrollment.recoveryCode,
            attestation: RegistrationAttestation(nonce: nonce, evidence: evidence),
            keyProtection: enrollment.keyProtection)
        let first = try await postRegistration(request, publicKey: key.publicKey)
        guard let challenge = first.challenge else { return first.registration }
        request.attestation?.activationSecret = try await BlockingWork.run { () throws(KeyAuthError) in
            try key.activateCredential(challenge.credential)
        }
        request.proof = try await makeProof()
        let second = try await postRegistration(request, publicKey: key.publicKey)
        guard second.challenge == nil else {
            throw KeyAuthError(.serverRejected, "the server challenged the TPM again after it answered")
        }
        return second.registration
    }

    /// Sends a registration and reads the answer: a device record (201, 202, 200), or a
    /// credential challenge (202 `activation_required`).
    private func postRegistration(
        _ request: RegistrationRequest, publicKey: RSAPublicKey
    ) async throws(KeyAuthError) -> (registration: DeviceRegistration, challenge: ActivationChallenge?) {
        let reply = try await send("POST", "/v1/devices", body: request.jsonBody, contentType: "application/json")
        let object = try expectObject(reply, success: [200, 201, 202], operation: "registration")
        let keyID = object["kid"]?.stringValue
        guard keyID == publicKey.fingerprint else {
            throw KeyAuthError(.serverRejected, "the server recorded a key id that is not this key's fingerprint")
        }
        if request.attestation != nil, let challenge = ActivationChallenge(jsonValue: .object(object)) {
            let registration = DeviceRegistration(
                keyID: challenge.keyID, user: request.user, name: request.name, status: DeviceStatus(rawValue: ""),
                isNew: true)
            return (registration, challenge)
        }
        let answer = try read(object, "the registration answer", RegistrationResponse.init(jsonValue:))
        var registration = DeviceRegistration(
            keyID: answer.keyID, user: answer.user ?? request.user, name: answer.name ?? request.name,
            status: answer.status, isNew: reply.status != 200)
        registration.tier = answer.tier
        return (registration, nil)
    }

    /// Whether a login under `policy` binds its token, from the server's discovery document
    /// (read once per client).
    ///
    /// - Throws: as ``discover()``, except for a server whose document cannot be read, which is
    ///   taken as one without DPoP.
    public func shouldBindTokens(_ policy: DPoPPolicy) async throws(KeyAuthError) -> Bool {
        guard policy != .never else { return false }
        let metadata: ServerMetadata?
        if let known = dpopState.metadata {
            metadata = known
        } else {
            do {
                metadata = try await discover()
            } catch {
                guard error.code == .serverRejected else { throw error }
                metadata = nil
            }
            dpopState.metadata = metadata
        }
        guard let metadata, metadata.supportsDPoP else { return false }
        return policy == .whenSupported || metadata.dpopRequired
    }

    /// The longest a stored access token is taken to live, whatever the answer says.
    static let longestTokenLifetime: TimeInterval = 86_400

    /// Logs in with a device assertion (`POST /oauth/token`, RFC 7523 JWT bearer grant), with a
    /// DPoP proof of `proofs`' key when given, which binds the token to that key.
    ///
    /// A server that answers `use_dpop_nonce` gets the same assertion once more, with a proof that
    /// carries the nonce it sent.
    /// - Parameters:
    ///   - assertion: the device assertion (PROTOCOL.md section 2).
    ///   - proofs: the device key's proof builder; nil for a Bearer token.
    /// - Throws: `.approvalPending` while the device waits for approval (`authorization_pending`);
    ///   `.serverRejected` with the ``OAuthError`` for `access_denied`, `expired_token`,
    ///   `invalid_grant`, `invalid_dpop_proof` and the rest; `.transportFailed`.
    public func requestToken(assertion: String, proofs: DPoPProofBuilder? = nil) async throws(KeyAuthError)
        -> AccessToken
    {
        let body = FormURLEncoding.encode(["grant_type": OAuthGrantType.jwtBearer.rawValue, "assertion": assertion])
        let sentAt = clock.now
        let reply = try await sendRetryingNonce(proofs: proofs) { (proof) throws(KeyAuthError) in
            try await send(
                "POST", "/oauth/token", body: Array(body.utf8), contentType: "application/x-www-form-urlencoded",
                proof: proof, proofAccessToken: nil)
        }
        let object = try expectObject(reply, success: [200], operation: "login")
        let answer = try read(object, "the token answer", TokenResponse.init(jsonValue:))
        let value = answer.accessToken
        let tokenType: String
        switch answer.tokenType.lowercased() {
        case TokenResponse.bearer.lowercased(): tokenType = TokenResponse.bearer
        case TokenResponse.dpop.lowercased() where proofs != nil: tokenType = TokenResponse.dpop
        default:
            throw KeyAuthError(
                .serverRejected, "the server issued a \(answer.tokenType) token, which this login did not ask for")
        }
        var lifetime: TimeInterval
        if let expiresIn = answer.expiresIn {
            lifetime = TimeInterval(expiresIn)
        } else if let exp = (try? CompactJWS(parsing: value).claims())?["exp"]?.integerValue {
            lifetime = TimeInterval(exp) - sentAt.timeIntervalSince1970
        } else {
            // Without either, assume the shortest lifetime that still saves a login per command.
            lifetime = 60
        }
        // No server issues tokens for longer than a day (PROTOCOL.md section 4): a longer one is
        // kept for a day, and the next command logs in again a little early.
        lifetime = min(max(lifetime, 0), Self.longestTokenLifetime)
        // Counting from when the request left keeps the expiry on the safe side of the server's.
        var token = AccessToken(value: value, tokenType: tokenType, expiresAt: sentAt.addingTimeInterval(lifetime))
        token.offlineGrant = answer.offlineGrant
        return token
    }
}
