import KeyAuth

/// The caller an access token names: the user and the device that logged in.
struct AccessTokenSubject: Sendable, Equatable {
    /// `sub`: the user.
    let user: String
    /// `cnf.jkt`: the fingerprint of the device key that logged in (RFC 7800).
    let deviceKID: String
}

/// Issues and verifies the server's access tokens (PROTOCOL.md section 3).
///
/// Verification uses the library's claim rules with the access-token settings (`typ` `at+jwt`,
/// `iss` and `aud` the issuer, `sub` a user); a public preset for other services to check these
/// tokens belongs with the tokens issue (`AccessTokenVerifier`), apart from
/// ``DeviceAssertionVerifier`` so that neither kind of token passes for the other.
struct AccessTokens: Sendable {
    let keys: ServerSigningKeys
    let issuer: String
    let lifetime: Int64
    /// Signs with the oldest key, `iat` from the server's clock.
    private let builder: JWTBuilder
    /// The access-token rules, made once.
    private let verifier: JWTVerifier

    init(keys: ServerSigningKeys, issuer: String, lifetime: Int64, clock: KeyAuthClock) {
        self.keys = keys
        self.issuer = issuer
        self.lifetime = lifetime
        builder = JWTBuilder(key: keys.signingKey, audience: issuer, lifetime: lifetime, clock: clock)
        verifier = JWTVerifier(
            rules: JWTVerifier.Rules(
                audience: issuer, leeway: DeviceAssertionVerifier.leeway, maximumLifetime: lifetime,
                requireJWTID: true, subjectIsKeyID: false, expectedIssuer: issuer, expectedType: "at+jwt"),
            clock: clock)
    }

    /// A signed `at+jwt` for `user`, bound to the device `deviceKID` through `cnf.jkt`: `iss`,
    /// `sub`, `aud`, then `cnf`, `exp`, `iat` and `jti`, in the order ``JWTBuilder`` writes.
    ///
    /// - Parameter extra: claims added or replaced (a CIBA token's `aud`, `client_id`, `acr`,
    ///   `amr`); a token whose `aud` is not the issuer is not accepted by ``verify(_:)``.
    func issue(user: String, deviceKID: String, extra: JWTClaims = JWTClaims()) throws(KeyAuthError) -> String {
        var claims = JWTClaims()
        claims.set("iss", string: issuer)
        claims.set("sub", string: user)
        claims["cnf"] = .object(["jkt": .string(deviceKID)])
        claims.merge(extra)
        return try builder.sign(claims: claims, type: "at+jwt", keyID: keys.signingKeyID)
    }

    /// Checks a Bearer token with the same strictness as assertions: RS256 only, our keys only,
    /// `typ` `at+jwt`, `iss` and `aud` equal to the issuer, unexpired, lifetime bounded.
    ///
    /// - Throws: ``ServiceError`` `.invalidToken` for any failure, never saying which check
    ///   failed beyond a generic text.
    func verify(_ token: String) throws(ServiceError) -> AccessTokenSubject {
        let invalid = ServiceError(.invalidToken, "the access token is not valid")
        do {
            let parsed = try verifier.parse(token)
            guard let keyID = parsed.jws.keyID ?? parsed.claims["sub"]?.stringValue,
                let key = keys.publicKey(forKeyID: keyID)
            else { throw invalid }
            let claims = try verifier.verify(parsed, keyID: keyID, key: key)
            let user = try claims.string("sub")
            guard let deviceKID = claims["cnf"]?["jkt"]?.stringValue, !deviceKID.isEmpty, !user.isEmpty else {
                throw invalid
            }
            return AccessTokenSubject(user: user, deviceKID: deviceKID)
        } catch {
            throw invalid
        }
    }
}
