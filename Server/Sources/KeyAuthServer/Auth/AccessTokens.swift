import KeyAuth

/// Issues and verifies the server's access tokens (PROTOCOL.md section 3) with the library's
/// access-token rules (``AccessTokenRules``), the same ones ``AccessTokenVerifier`` applies in
/// other services, here over the server's own keys.
struct AccessTokens: Sendable {
    /// The `typ` of every access token (RFC 9068).
    static let type = "at+jwt"

    let keys: ServerSigningKeys
    let issuer: String
    let lifetime: Int64
    let clock: KeyAuthClock
    /// The token and binding rules, made once.
    let rules: AccessTokenRules
    /// The same rules without the audience: a token issued to a relying party names it as `aud`
    /// (``verifyIssuedToClient(_:)`` checks that against `client_id`).
    let clientTokenRules: AccessTokenRules

    init(keys: ServerSigningKeys, issuer: String, lifetime: Int64, requireDPoP: Bool = false, clock: KeyAuthClock) {
        self.keys = keys
        self.issuer = issuer
        self.lifetime = lifetime
        self.clock = clock
        rules = AccessTokenRules(
            issuer: issuer, audience: issuer, leeway: DeviceAssertionVerifier.leeway, maximumLifetime: lifetime,
            requireDPoP: requireDPoP, proofs: DPoPProofVerifier(clock: clock), clock: clock)
        clientTokenRules = AccessTokenRules(
            issuer: issuer, audience: nil, leeway: DeviceAssertionVerifier.leeway, maximumLifetime: lifetime,
            requireDPoP: false, proofs: DPoPProofVerifier(clock: clock), clock: clock)
    }

    /// A signed `at+jwt` for `user` logged in with the device `deviceKID`, signed by the key that
    /// is current now: `iss`, `sub`, `aud`, then `amr`, `client_id` (the device), `cnf.jkt` when
    /// `bound` (a DPoP-bound token), `exp`, `iat` and `jti`, in the order ``JWTBuilder`` writes.
    ///
    /// - Parameter extra: claims added or replaced (a CIBA token's `aud`, `client_id`, `acr`,
    ///   `amr`); a token whose `aud` is not the issuer is not accepted by ``verify(_:)``.
    func issue(user: String, deviceKID: String, bound: Bool, extra: JWTClaims = JWTClaims()) throws(KeyAuthError)
        -> String
    {
        let key = try keys.current(at: clock.seconds)
        var claims = JWTClaims()
        claims.set("iss", string: issuer)
        claims.set("sub", string: user)
        claims.set("client_id", string: deviceKID)
        claims.set("amr", strings: Self.defaultMethods)
        if bound { claims["cnf"] = .object(["jkt": .string(deviceKID)]) }
        claims.merge(extra)
        return try JWTBuilder(key: key.signer, audience: issuer, lifetime: lifetime, clock: clock).sign(
            claims: claims, encodedHeader: key.signer.accessTokenHeader)
    }

    /// `amr` when the device states none. RFC 8176: proof of possession of a (software-held, as
    /// far as the server can tell) key.
    static let defaultMethods = ["swk"]

    /// A device login's token: what ``issue(user:deviceKID:bound:extra:)`` signs with `amr` and
    /// `device_tier` as its extra claims, byte for byte, written without a claim set
    /// (``LoginTokenPayload``): every login signs one.
    func issueForLogin(user: String, deviceKID: String, bound: Bool, methods: [String], deviceTier: String)
        throws(KeyAuthError) -> String
    {
        let issuedAt = clock.seconds
        let key = try keys.current(at: issuedAt)
        let payload = LoginTokenPayload(
            issuer: issuer, user: user, deviceKID: deviceKID, methods: methods, bound: bound, deviceTier: deviceTier,
            issuedAt: issuedAt, lifetime: lifetime, tokenID: try TokenIdentifiers.shared.next())
        return try JWTBuilder.sign(
            encodedHeader: key.signer.accessTokenHeader, payloadJSON: payload.jsonBytes(), key: key.signer)
    }

    /// Checks a token issued to a client application (the code flow's, or CIBA's): our keys, and
    /// an `aud` that is its `client_id`. Such a token is never accepted by ``verify(_:)``, whose
    /// audience is the issuer.
    ///
    /// - Throws: ``ServiceError`` `.invalidToken` for any failure; a valid device token (``issue(user:deviceKID:bound:extra:)``,
    ///   `aud` the issuer) is told apart, since a developer who tries one at UserInfo otherwise
    ///   cannot see why a token the server just issued is refused.
    func verifyIssuedToClient(_ token: String) throws(ServiceError) -> AccessTokenClaims {
        let claims: AccessTokenClaims
        do {
            let (parsed, keyID) = try clientTokenRules.parse(token)
            claims = try clientTokenRules.verify(
                parsed, keyID: keyID, key: keys.publicKey(forKeyID: keyID, now: clock.seconds))
        } catch {
            throw ServiceError(.invalidToken, "the access token is not valid")
        }
        guard claims.claims["aud"]?.stringValue == claims.clientID, claims.clientID != issuer else {
            // Said only of a token whose signature and times were checked: it tells its holder
            // what they already hold, never whether a forged token came close.
            if claims.claims["aud"]?.stringValue == issuer {
                throw ServiceError(.invalidToken, Self.deviceTokenRefusal)
            }
            throw ServiceError(.invalidToken, "the access token is not valid")
        }
        return claims
    }

    /// Why UserInfo refuses a device's own token (PROTOCOL.md section 10).
    static let deviceTokenRefusal =
        "a device token is not an OpenID access token; UserInfo takes the access token a client "
        + "application got from the authorization code flow or CIBA for the openid scope"

    /// Checks a token with our published keys only, each with its own algorithm.
    ///
    /// - Throws: ``ServiceError`` `.invalidToken` for any failure, never saying which check
    ///   failed beyond a generic text.
    func verify(_ token: String) throws(ServiceError) -> AccessTokenClaims {
        do {
            let (parsed, keyID) = try rules.parse(token)
            return try rules.verify(parsed, keyID: keyID, key: keys.publicKey(forKeyID: keyID, now: clock.seconds))
        } catch {
            throw ServiceError(.invalidToken, "the access token is not valid")
        }
    }
}
