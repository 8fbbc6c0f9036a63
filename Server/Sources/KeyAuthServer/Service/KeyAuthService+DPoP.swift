import KeyAuth

/// The server's DPoP settings (`--dpop`, `--dpop-nonce`).
struct DPoPSettings: Sendable {
    /// Whether tokens must be bound.
    var mode: DPoPMode = .optional
    /// The nonces proofs must carry, when `--dpop-nonce` is on.
    var nonces: ServerNonces?
}

/// DPoP (RFC 9449) in the service: the proof of a token request, the proof and binding of a
/// resource request, the server's nonces, and the replay cache of proofs.
extension KeyAuthService {
    /// The URL of a request to `path` as clients address it: under the issuer.
    func publicURL(path: String) -> String {
        (settings.issuer.hasSuffix("/") ? String(settings.issuer.dropLast()) : settings.issuer) + path
    }

    /// Checks the proof of a token request (`POST /oauth/token`), before the assertion is looked
    /// at, so that a refused proof (or a missing nonce) leaves the assertion unused for a retry.
    ///
    /// - Returns: the proof, or nil for a request without one where proofs are optional.
    /// - Throws: ``ServiceError`` `.invalidDPoPProof` (400), `.useDPoPNonce` with a fresh nonce.
    func checkTokenRequestProof(_ proof: String?) throws(ServiceError) -> VerifiedDPoPProof? {
        guard let proof else {
            guard settings.dpop.mode == .required else { return nil }
            throw ServiceError(
                .invalidDPoPProof(atResource: false),
                "a DPoP proof is required: this server issues only DPoP-bound tokens")
        }
        let verified: VerifiedDPoPProof
        do {
            verified = try tokens.rules.proofs.verify(proof, method: "POST", url: publicURL(path: "/oauth/token"))
        } catch {
            throw ServiceError(.invalidDPoPProof(atResource: false), error.message)
        }
        try checkNonce(of: verified, atResource: false)
        return verified
    }

    /// Records a proof's `jti` in the replay cache (``ReplayGuard``), until the proof is too old
    /// anyway.
    ///
    /// The cache is the assertions', under the key `dpop ` + the proof key's thumbprint, which
    /// no device key id can equal; in database mode one atomic insert into `used_jtis`, shared by
    /// every instance and purged with it.
    /// - Throws: `.invalidDPoPProof` for a replay or a proof issued before a restart after a
    ///   crash; ``StorageError``.
    func claimProof(_ proof: VerifiedDPoPProof, atResource: Bool) throws {
        let time = now()
        let claim = try replay.claim(
            keyID: "dpop " + proof.keyThumbprint, jti: proof.jwtID, issuedAt: proof.issuedAt,
            expiresAt: proof.replayExpiresAt, storage: storage, now: time)
        switch claim {
        case .accepted:
            return
        case .replayed:
            throw ServiceError(.invalidDPoPProof(atResource: atResource), "the DPoP proof was already used")
        case .issuedBeforeRestart:
            throw ServiceError(.invalidDPoPProof(atResource: atResource), restartRefusal("DPoP proof", now: time))
        case .forgotten:
            throw ServiceError(.invalidDPoPProof(atResource: atResource), forgottenRefusal("DPoP proof"))
        }
    }

    /// A fresh nonce for a response's `DPoP-Nonce` header, when nonces are on.
    func freshNonce() -> String? {
        try? settings.dpop.nonces?.issue(now: now())
    }

    /// Checks the access token of a resource request and how it is presented: a DPoP-bound token
    /// only with the DPoP scheme and a proof of its key for this request (method, URL, `ath`,
    /// nonce when required, not replayed); a Bearer token only where proofs are optional.
    ///
    /// - Returns: the token's claims.
    /// - Throws: ``ServiceError`` `.invalidToken`, `.invalidDPoPProof` or `.useDPoPNonce` (401).
    func checkAccessToken(authorization: String?, proof: String?, method: String, path: String) throws
        -> AccessTokenClaims
    {
        guard let authorization else { throw ServiceError(.invalidToken, "an access token is required") }
        let credentials: (scheme: AccessTokenRules.Scheme, token: String)
        do {
            credentials = try AccessTokenRules.credentials(fromAuthorization: authorization)
        } catch {
            throw ServiceError(.invalidToken, "a Bearer or DPoP access token is required")
        }
        let claims = try tokens.verify(credentials.token)
        try checkPresentation(
            of: claims, token: credentials.token, scheme: credentials.scheme, proof: proof, method: method, path: path,
            rules: tokens.rules)
        return claims
    }

    /// Checks how a verified token was presented at a resource (`rules`' binding check): a bound
    /// token only with the DPoP scheme and a fresh proof of its key for this request, which is
    /// then claimed against replay; an unbound one as `rules` allow.
    ///
    /// - Throws: ``ServiceError`` `.invalidToken`, `.invalidDPoPProof` or `.useDPoPNonce` (401).
    func checkPresentation(
        of claims: AccessTokenClaims, token: String, scheme: AccessTokenRules.Scheme, proof: String?, method: String,
        path: String, rules: AccessTokenRules
    ) throws {
        let verified: VerifiedDPoPProof?
        do {
            verified = try rules.checkBinding(
                claims, token: token, scheme: scheme, proof: proof, method: method, url: publicURL(path: path))
        } catch {
            if error.code == .dpopProofInvalid {
                throw ServiceError(.invalidDPoPProof(atResource: true), error.message)
            }
            throw ServiceError(.invalidToken, error.message)
        }
        if let verified {
            try checkNonce(of: verified, atResource: true)
            try claimProof(verified, atResource: true)
        }
    }

    private func checkNonce(of proof: VerifiedDPoPProof, atResource: Bool) throws(ServiceError) {
        guard let nonces = settings.dpop.nonces else { return }
        if let nonce = proof.nonce, nonces.isValid(nonce, now: now()) { return }
        guard let fresh = freshNonce() else {
            throw ServiceError(.invalidDPoPProof(atResource: atResource), "no DPoP nonce can be made")
        }
        throw ServiceError(
            .useDPoPNonce(nonce: fresh, atResource: atResource),
            "the DPoP proof must carry the nonce of the DPoP-Nonce header")
    }
}
