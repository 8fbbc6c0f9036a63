import KeyAuth

/// What attested registration needs (`--tpm-ca`, PROTOCOL.md section 4, "Register with TPM
/// attestation"): the nonces TPMs sign into their statements, and the roots their endorsement
/// key certificates must chain to.
struct AttestationSettings: Sendable {
    /// Stateless, like DPoP nonces, so that any instance accepts another's.
    var nonces: ServerNonces
    var verifier: TPMAttestationVerifier
}

/// Where an attested registration stands after its attestation was checked.
enum AttestationStep: Sendable, Equatable {
    /// The evidence holds; the client must answer this credential challenge.
    case challenge(ActivationChallenge)
    /// The TPM answered the challenge: the device may be stored with this tier.
    case passed(DeviceTier, endorsementProblem: String?)
}

extension KeyAuthService {
    /// A fresh attestation nonce (`POST /v1/attestation-nonces`) and its lifetime in seconds.
    ///
    /// - Throws: `KeyAuthError` when no signing key is loaded.
    func attestationNonce() throws -> (nonce: String, lifetime: Int64) {
        guard let attestation = settings.attestation else {
            throw ServiceError(.invalidRequest, "this server does not take TPM attestations")
        }
        return (try attestation.nonces.issue(now: now()), ServerNonces.lifetime)
    }

    /// Checks a registration's attestation for `key`, and either challenges the TPM or, when the
    /// challenge is answered, gives the device's tier.
    ///
    /// The challenge's secret is not stored: it is an HMAC, under the secret of the signing key
    /// that made the nonce, of the nonce, the attestation key's name, the device key and the
    /// endorsement key it is encrypted to, so the answer is checked by deriving it again, on any
    /// instance. Only the TPM holding the endorsement key can recover it, and only with that
    /// attestation key loaded beside it. The endorsement key is in the HMAC because the answer
    /// comes in a request of its own, whose evidence decides the tier: without it, a client could
    /// be challenged under an endorsement key it made itself and answer under another TPM's
    /// certificate (certificates are public), and a key file would pass as `attested`.
    ///
    /// - Throws: ``ServiceError`` `.invalidRequest` saying which check failed: a nonce that is
    ///   not this server's or expired, evidence the verifier refuses, a wrong activation secret.
    func checkAttestation(_ attestation: RegistrationAttestation, key: RSAPublicKey) throws -> AttestationStep {
        guard let settings = settings.attestation else {
            throw ServiceError(.invalidRequest, "this server does not take TPM attestations")
        }
        guard let nonceKey = settings.nonces.secret(of: attestation.nonce, now: now()),
            let nonce = Base64URL.decode(attestation.nonce)
        else {
            throw ServiceError(
                .invalidRequest, "the attestation nonce is not this server's or has expired; get a new one")
        }
        let verified: VerifiedTPMAttestation
        do {
            verified = try settings.verifier.verify(attestation.evidence, key: key, nonce: nonce, at: now())
        } catch {
            throw ServiceError(.invalidRequest, "the TPM attestation is refused: \(error.message)")
        }
        let expected = Array(
            try CryptoPrimitives.hmacSHA256(
                key: nonceKey,
                message: Array("tpm-activation".utf8) + nonce + verified.attestationKeyName + key.derRepresentation
                    + verified.endorsementKey.derRepresentation
            ).prefix(32))
        guard let answer = attestation.activationSecret else {
            let credential: TPMCredential
            do {
                credential = try TPMCredential.make(
                    secret: expected, for: verified.attestationKeyName, endorsementKey: verified.endorsementKey)
            } catch {
                // The EK is the client's: a key OpenSSL cannot encrypt to is a bad request.
                throw ServiceError(.invalidRequest, "the TPM attestation is refused: \(error.message)")
            }
            return .challenge(ActivationChallenge(keyID: key.fingerprint, credential: credential))
        }
        guard CryptoPrimitives.constantTimeEquals(answer, expected) else {
            throw ServiceError(
                .invalidRequest,
                "the credential activation failed: the attestation key is not in the TPM of that endorsement key")
        }
        let tier: DeviceTier = verified.endorsementProblem == nil ? .attested : .tpmUnverified
        return .passed(tier, endorsementProblem: verified.endorsementProblem)
    }
}
