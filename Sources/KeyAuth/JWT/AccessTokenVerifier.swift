/// Verifies keyauth access tokens in a service that receives them (a resource server), DPoP-bound
/// or not: the counterpart of ``DeviceAssertionVerifier`` for the tokens the server issues.
///
/// Configured with the issuer URL and the expected audience, it finds the issuer's JWK set
/// through discovery (`/.well-known/openid-configuration`, then `jwks_uri`), caches it for the
/// answer's `max-age` (60 s to 24 h), fetches it again when a token names an unknown `kid`
/// (at most every 30 s), and keeps using the last set when a fetch fails, for up to 24 hours
/// after it was fetched; then it fails closed with `.keySetUnavailable`.
///
/// ```swift
/// let verifier = try AccessTokenVerifier(issuer: "https://auth.example.com")
/// let url = try AccessTokenVerifier.requestURL(origin: "https://api.example.com", target: request.target)
/// let claims = try await verifier.verify(
///     authorization: request.header("Authorization"), dpopProof: request.header("DPoP"),
///     method: request.method, url: url)
/// print(claims.user, claims.deviceKeyID)
/// ```
///
/// Each token must be a JWT with `typ` `at+jwt`, signed by a published key with that key's own
/// algorithm (RS256 for RSA, ES256 for P-256, EdDSA for Ed25519; never `none` or HMAC), with
/// `iss` the issuer, `aud` the audience, `exp`, `nbf` and `iat` within the leeway, `sub`,
/// `client_id` and `jti`. A token bound to a device key (`cnf.jkt`) is accepted only with the
/// DPoP scheme and a proof (RFC 9449) of that key for this very request: its method, its URL
/// (without query), the token's hash (`ath`), a fresh `iat`, and a `jti` not seen before. With a
/// ``DeviceRequirement`` (`requirement: .hardwareKey` or `.attested`), a token whose device key is
/// not held by such a TPM is refused too, so that a key file's token never passes.
///
/// - Warning: the default replay cache lives in this process's memory; several instances of a
///   service behind one load balancer need a shared ``DPoPReplayCache``, or a proof replayed to
///   another instance within its 60 s would pass there.
public final class AccessTokenVerifier: Sendable {
    /// The issuer tokens must name as `iss`.
    public let issuer: String
    /// The audience tokens must name in `aud`.
    public let audience: String
    /// What the device behind a token must be; ``DeviceRequirement/any`` by default.
    public let requirement: DeviceRequirement
    private let rules: AccessTokenRules
    private let keySets: KeySetCache
    private let replayCache: any DPoPReplayCache

    /// - Parameters:
    ///   - issuer: the keyauth server's issuer URL (`https`, or `http` to a loopback host unless
    ///     `allowInsecureHTTP`).
    ///   - audience: the `aud` required; keyauth's tokens name the issuer, the default.
    ///   - requireDPoP: refuse Bearer tokens: only DPoP-bound tokens with their proof pass.
    ///   - requirement: refuse tokens whose device key is not held by a TPM (`.hardwareKey`) or by
    ///     a TPM of a maker the server trusts (`.attested`); every valid token passes by default.
    ///   - leeway: clock skew tolerated on `exp`, `nbf` and `iat`, in seconds.
    ///   - maximumLifetime: the longest `exp - iat` accepted (the server allows 86400 s at most).
    ///   - replayCache: where proofs' `jti` are kept; one in memory by default.
    ///   - fetcher: how documents are fetched; HTTP without redirects by default.
    ///   - allowInsecureHTTP: accept plain `http` to a host that is not loopback.
    ///   - clock: the time source.
    /// - Throws: `.invalidArgument` for an issuer URL that is not acceptable.
    public init(
        issuer: String, audience: String? = nil, requireDPoP: Bool = false, requirement: DeviceRequirement = .any,
        leeway: Int64 = 10, maximumLifetime: Int64 = 86_400, replayCache: (any DPoPReplayCache)? = nil,
        fetcher: (any KeySetFetcher)? = nil, allowInsecureHTTP: Bool = false, clock: KeyAuthClock = .system
    ) throws(KeyAuthError) {
        _ = try KeyAuthClient.normalizedServerURL(issuer, allowInsecureHTTP: allowInsecureHTTP)
        self.issuer = issuer
        self.audience = audience ?? issuer
        self.requirement = requirement
        rules = AccessTokenRules(
            issuer: issuer, audience: audience ?? issuer, leeway: leeway, maximumLifetime: maximumLifetime,
            requireDPoP: requireDPoP, proofs: DPoPProofVerifier(clock: clock), clock: clock)
        keySets = KeySetCache(
            issuer: issuer, fetcher: fetcher ?? HTTPKeySetFetcher(), clock: clock, allowInsecureHTTP: allowInsecureHTTP)
        self.replayCache = replayCache ?? InMemoryDPoPReplayCache(clock: clock)
    }

    /// Verifies the `Authorization` header of a request (`Bearer TOKEN` or `DPoP TOKEN`) with its
    /// `DPoP` header, for a request of `method` to `url` (the URL the client used: the
    /// service's configured origin and the request's path, as ``requestURL(origin:target:)``
    /// joins them; its query is ignored).
    ///
    /// - Throws: `.tokenMalformed`, `.signatureInvalid` or `.claimInvalid` for the token (answer
    ///   401 `invalid_token`), `.dpopProofInvalid` for the proof (401 `invalid_dpop_proof`),
    ///   `.insufficientUserAuthentication` for a valid token whose device does not meet
    ///   ``requirement`` (401 `insufficient_user_authentication`, RFC 9470),
    ///   `.keySetUnavailable` when the issuer's keys cannot be had (503).
    public func verify(authorization: String?, dpopProof: String?, method: String, url: String)
        async throws(KeyAuthError) -> AccessTokenClaims
    {
        guard let authorization else {
            throw KeyAuthError(.tokenMalformed, "the request has no Authorization header")
        }
        let (scheme, token) = try AccessTokenRules.credentials(fromAuthorization: authorization)
        return try await verify(token, scheme: scheme, dpopProof: dpopProof, method: method, url: url)
    }

    /// Verifies `token`, and for a DPoP-bound token its proof `dpopProof` for a request of
    /// `method` to `url`.
    ///
    /// - Throws: as ``verify(authorization:dpopProof:method:url:)``.
    public func verify(_ token: String, dpopProof: String? = nil, method: String? = nil, url: String? = nil)
        async throws(KeyAuthError) -> AccessTokenClaims
    {
        try await verify(token, scheme: .unspecified, dpopProof: dpopProof, method: method, url: url)
    }

    /// The synchronous form, over a JWK set the caller fetched (``keySet()``) or holds.
    ///
    /// - Throws: as ``verify(authorization:dpopProof:method:url:)``.
    public func verify(
        _ token: String, keySet: JWKSet, dpopProof: String? = nil, method: String? = nil, url: String? = nil
    ) throws(KeyAuthError) -> AccessTokenClaims {
        let (parsed, keyID) = try rules.parse(token)
        let claims = try rules.verify(parsed, keyID: keyID, key: keySet[keyID])
        try requirement.check(claims)
        try checkBinding(claims, token: token, scheme: .unspecified, proof: dpopProof, method: method, url: url)
        return claims
    }

    /// The issuer's JWK set, from the cache or fetched.
    ///
    /// - Throws: `.keySetUnavailable`.
    public func keySet() async throws(KeyAuthError) -> JWKSet {
        try await keySets.keySet()
    }

    private func verify(
        _ token: String, scheme: AccessTokenRules.Scheme, dpopProof: String?, method: String?, url: String?
    ) async throws(KeyAuthError) -> AccessTokenClaims {
        let (parsed, keyID) = try rules.parse(token)
        let key = try await keySets.key(for: keyID)
        let claims = try rules.verify(parsed, keyID: keyID, key: key)
        // Before the proof's replay check: a token refused here does not use up its proof.
        try requirement.check(claims)
        try checkBinding(claims, token: token, scheme: scheme, proof: dpopProof, method: method, url: url)
        return claims
    }

    private func checkBinding(
        _ claims: AccessTokenClaims, token: String, scheme: AccessTokenRules.Scheme, proof: String?,
        method: String?, url: String?
    ) throws(KeyAuthError) {
        guard
            let verified = try rules.checkBinding(
                claims, token: token, scheme: scheme, proof: proof, method: method, url: url)
        else { return }
        guard
            try replayCache.claim(
                jwtID: verified.jwtID, keyThumbprint: verified.keyThumbprint, expiresAt: verified.replayExpiresAt)
        else { throw KeyAuthError(.dpopProofInvalid, "the DPoP proof was already used") }
    }
}
