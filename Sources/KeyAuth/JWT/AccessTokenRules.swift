/// The checks of a keyauth access token and of its binding, in one place for the server's own
/// endpoints and for ``AccessTokenVerifier`` in other services (PROTOCOL.md section 3).
///
/// The token: a compact JWS with `typ` `at+jwt` (or `application/at+jwt`, RFC 9068 section 4),
/// signed by a key of the issuer found by `kid` with that key's own algorithm, `iss` the issuer,
/// `aud` the audience, `exp`, `nbf` and `iat` within the leeway, a bounded lifetime, `sub`,
/// `client_id` and `jti`. The binding (RFC 9449 section 7): a token with `cnf.jkt` only with the
/// DPoP scheme and a proof of that key for this request; a token without it only as Bearer.
package struct AccessTokenRules: Sendable {
    /// How the token was presented.
    package enum Scheme: Sendable, Equatable {
        /// `Authorization: Bearer`.
        case bearer
        /// `Authorization: DPoP`.
        case dpop
        /// Not said (a token handed over without its header): a bound token still needs its proof.
        case unspecified
    }

    /// The token's checks.
    package let verifier: JWTVerifier
    /// The proofs' checks.
    package let proofs: DPoPProofVerifier
    /// Whether Bearer tokens are refused.
    package let requireDPoP: Bool

    /// - Parameters:
    ///   - issuer: `iss`.
    ///   - audience: `aud`; keyauth's tokens name the issuer. Nil skips the check, for the server's
    ///     tokens issued to a client application, whose caller checks `aud` itself.
    ///   - leeway: clock skew tolerated on `exp`, `nbf` and `iat`.
    ///   - maximumLifetime: the longest `exp - iat` accepted.
    ///   - requireDPoP: refuse tokens that are not DPoP-bound.
    ///   - proofs: the DPoP proof checker.
    package init(
        issuer: String, audience: String?, leeway: Int64, maximumLifetime: Int64, requireDPoP: Bool,
        proofs: DPoPProofVerifier, clock: KeyAuthClock
    ) {
        verifier = JWTVerifier(
            rules: JWTVerifier.Rules(
                audience: audience, leeway: leeway, maximumLifetime: maximumLifetime, requireJWTID: true,
                subjectIsKeyID: false, requireIssuedAt: true, expectedIssuer: issuer,
                expectedTypes: ["at+jwt", "application/at+jwt"], algorithms: Set(JWSAlgorithm.allCases),
                requireSubject: true),
            clock: clock)
        self.proofs = proofs
        self.requireDPoP = requireDPoP
    }

    /// Splits and decodes the token and checks its header; returns it with the `kid` to look up.
    ///
    /// - Throws: `.tokenMalformed`, or `.claimInvalid` for a refused `typ`, `alg` or header, or a
    ///   token without `kid`.
    package func parse(_ token: String) throws(KeyAuthError) -> (parsed: JWTVerifier.Parsed, keyID: String) {
        let parsed = try verifier.parse(token)
        guard let keyID = parsed.jws.keyID, !keyID.isEmpty else {
            throw KeyAuthError(.claimInvalid, "the access token names no key (kid)")
        }
        return (parsed, keyID)
    }

    /// Verifies the signature with `key` (nil: the issuer publishes no such key) and the claims.
    ///
    /// - Throws: `.signatureInvalid` for an unknown key or a bad signature; `.claimInvalid`
    ///   naming the failed claim.
    package func verify(_ parsed: JWTVerifier.Parsed, keyID: String, key: JWSPublicKey?) throws(KeyAuthError)
        -> AccessTokenClaims
    {
        guard let key else {
            throw KeyAuthError(.signatureInvalid, "the access token's key is not one the issuer publishes")
        }
        let claims = try verifier.verify(parsed, keyID: keyID, key: key)
        return try AccessTokenClaims(claims: claims, signingKeyID: keyID)
    }

    /// Checks how the token was presented against its binding, and its DPoP proof.
    ///
    /// - Returns: the verified proof of a bound token, whose `jti` the caller claims in its
    ///   replay cache; nil for a Bearer token.
    /// - Throws: `.claimInvalid` for a bound token sent as Bearer, an unbound one sent with the
    ///   DPoP scheme or refused by ``requireDPoP``; `.dpopProofInvalid` for a missing proof, a
    ///   proof that fails ``DPoPProofVerifier``, or one signed by another key than `cnf.jkt`.
    package func checkBinding(
        _ claims: AccessTokenClaims, token: String, scheme: Scheme, proof: String?, method: String?, url: String?
    ) throws(KeyAuthError) -> VerifiedDPoPProof? {
        guard let boundKey = claims.deviceKeyThumbprint else {
            if scheme == .dpop {
                throw KeyAuthError(.claimInvalid, "the access token is not DPoP-bound: present it as Bearer")
            }
            if requireDPoP {
                throw KeyAuthError(.claimInvalid, "only DPoP-bound access tokens are accepted")
            }
            return nil
        }
        if scheme == .bearer {
            throw KeyAuthError(
                .claimInvalid, "the access token is DPoP-bound: present it with the DPoP scheme and a proof")
        }
        guard let proof, !proof.isEmpty else {
            throw KeyAuthError(.dpopProofInvalid, "a DPoP proof is required with this access token")
        }
        guard let method, let url else {
            throw KeyAuthError(.invalidArgument, "checking a DPoP proof needs the request's method and URL")
        }
        let verified = try proofs.verify(proof, method: method, url: url, accessToken: token)
        guard verified.keyThumbprint == boundKey else {
            throw KeyAuthError(.dpopProofInvalid, "the DPoP proof is not signed by the key the token is bound to")
        }
        return verified
    }

    /// The scheme and token of an `Authorization` header (`Bearer` or `DPoP`, in any case).
    ///
    /// - Throws: `.tokenMalformed` for anything else.
    package static func credentials(fromAuthorization header: String) throws(KeyAuthError) -> (
        scheme: Scheme, token: String
    ) {
        let parts = header.split(separator: " ", maxSplits: 1, omittingEmptySubsequences: true)
        let token = parts.count == 2 ? parts[1].trimmingCharacters(in: " \t") : ""
        switch parts.first?.lowercased() {
        case "bearer"? where !token.isEmpty: return (.bearer, token)
        case "dpop"? where !token.isEmpty: return (.dpop, token)
        default:
            throw KeyAuthError(.tokenMalformed, "the Authorization header must be Bearer or DPoP with an access token")
        }
    }
}

extension Substring {
    /// The text without leading and trailing characters of `set`.
    fileprivate func trimmingCharacters(in set: String) -> String {
        var text = self
        while let first = text.first, set.contains(first) { text.removeFirst() }
        while let last = text.last, set.contains(last) { text.removeLast() }
        return String(text)
    }
}
