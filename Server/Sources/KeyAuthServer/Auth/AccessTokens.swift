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
    let clock: KeyAuthClock
    /// The access-token rules, made once.
    private let verifier: JWTVerifier

    init(keys: ServerSigningKeys, issuer: String, lifetime: Int64, clock: KeyAuthClock) {
        self.keys = keys
        self.issuer = issuer
        self.lifetime = lifetime
        self.clock = clock
        verifier = JWTVerifier(
            rules: JWTVerifier.Rules(
                audience: issuer, leeway: DeviceAssertionVerifier.leeway, maximumLifetime: lifetime,
                requireJWTID: true, subjectIsKeyID: false, expectedIssuer: issuer, expectedTypes: ["at+jwt"],
                algorithms: Set(JWSAlgorithm.allCases)),
            clock: clock)
    }

    /// A signed `at+jwt` for `user`, bound to the device `deviceKID` through `cnf.jkt`, signed
    /// by the key that is current now: `iss`, `sub`, `aud`, then `cnf`, `exp`, `iat` and `jti`,
    /// in the order ``JWTBuilder`` writes.
    func issue(user: String, deviceKID: String) throws(KeyAuthError) -> String {
        let key = try keys.current(at: clock.seconds)
        var claims = JWTClaims()
        claims.set("iss", string: issuer)
        claims.set("sub", string: user)
        claims["cnf"] = .object(["jkt": .string(deviceKID)])
        return try JWTBuilder(key: key.signer, audience: issuer, lifetime: lifetime, clock: clock).sign(
            claims: claims, type: "at+jwt", keyID: key.kid)
    }

    /// Checks a Bearer token with the same strictness as assertions: our published keys only,
    /// each with its own algorithm, `typ` `at+jwt`, `iss` and `aud` equal to the issuer,
    /// unexpired, lifetime bounded.
    ///
    /// - Throws: ``ServiceError`` `.invalidToken` for any failure, never saying which check
    ///   failed beyond a generic text.
    func verify(_ token: String) throws(ServiceError) -> AccessTokenSubject {
        let invalid = ServiceError(.invalidToken, "the access token is not valid")
        do {
            let parsed = try verifier.parse(token)
            guard let keyID = parsed.jws.keyID, let key = keys.publicKey(forKeyID: keyID, now: clock.seconds) else {
                throw invalid
            }
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
