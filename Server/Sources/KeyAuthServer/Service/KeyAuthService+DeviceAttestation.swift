import KeyAuth

/// What an attestation of a registered device did (`POST /v1/devices/attestation`).
enum DeviceAttestationOutcome: Sendable, Equatable {
    /// The evidence holds; the TPM must answer this challenge (202). Nothing changed.
    case activationRequired(ActivationChallenge)
    /// The TPM answered: the device as it was found, its tiers before and after, and what the
    /// attestation showed.
    case attested(DeviceRecord, DeviceAttestationResponse)
}

extension KeyAuthService {
    /// Attests a registered device again (PROTOCOL.md section 4, "Attest a registered device"):
    /// the same evidence and credential challenge as an attested registration, for a device
    /// that registered as `software` (a client older than attestation) or `tpm-unverified` (a
    /// server without the TPM maker's root then), so that it reaches the tier a stricter
    /// `--device-policy` asks for without registering a new key.
    ///
    /// The device authenticates with a fresh assertion, checked as a login's is (decoy included,
    /// so an unknown key costs what a known one does) but not refused by the device policy,
    /// which this request exists to satisfy. Its `jti` is used up by each of the two requests,
    /// as an attested registration's proof is, so each needs a fresh assertion.
    ///
    /// The tier only rises: a device that showed `attested` once keeps it when a later
    /// attestation shows less (a root taken out of `--tpm-ca`, an expired certificate); the
    /// answer says what this attestation showed, and the audit trail records each rise
    /// (`attest-device`, detail `software -> attested`).
    ///
    /// - Throws: ``ServiceError`` `.invalidGrant` for an assertion that does not verify or a
    ///   revoked device, `.expiredToken` and `.deviceDenied` for a pending registration that
    ///   expired or a denied one, `.invalidRequest` naming the check an attestation failed.
    func attestDevice(_ request: DeviceAttestationRequest) throws -> DeviceAttestationOutcome {
        let parsed = try parseAssertion(request.assertion)
        let stored = try storage.device(kid: parsed.keyID)
        let (key, found) = try loginKeys.key(for: stored, signature: parsed.signature)
        let verified = try verifyAssertion(parsed, key: key)
        guard let device = found else { throw ServiceError(.invalidGrant, DeviceAssertionVerifier.uniformFailure) }
        switch device.status {
        case .active:
            break
        case .pending:
            if isExpiredPending(device) {
                throw ServiceError(.expiredToken, "the registration expired before it was approved")
            }
        case .denied:
            throw ServiceError(.deviceDenied, "the device was denied")
        case .revoked:
            throw ServiceError(.invalidGrant, DeviceAssertionVerifier.uniformFailure)
        }
        // Used up by each request before its attestation is checked: an assertion the server saw
        // and left unused (a challenge, a refused attestation) would log the device in.
        try claimJWTID(of: verified)
        let (shown, problem): (DeviceTier, String?)
        switch try checkAttestation(request.attestation, key: key) {
        case .challenge(let challenge):
            return .activationRequired(challenge)
        case .passed(let tier, let endorsementProblem):
            (shown, problem) = (tier, endorsementProblem)
        }
        var tier = device.tier
        if shown.rank > device.tier.rank {
            // Compared and set in one statement: of two attestations at once, each rises from
            // what it read or not at all.
            guard try storage.raiseTier(kid: device.kid, from: device.tier, to: shown) else {
                throw ServiceError(.invalidRequest, "the device changed during the attestation; attest again")
            }
            tier = shown
            try AuditTrail(storage: storage, now: now).record(
                .attestDevice, by: .device(kid: device.kid), user: device.user, subject: device.kid,
                detail: "\(device.tier.rawValue) -> \(shown.rawValue)" + (problem.map { ": \($0)" } ?? ""))
        }
        return .attested(
            device,
            DeviceAttestationResponse(
                keyID: device.kid, tier: tier, previousTier: device.tier, attestationTier: shown,
                endorsementProblem: problem))
    }
}
