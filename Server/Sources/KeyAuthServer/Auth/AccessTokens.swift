import KeyAuth

/// The caller an access token names: the user and the device that logged in.
struct AccessTokenSubject: Sendable, Equatable {
    /// `sub`: the user.
    let user: String
    /// `cnf.jkt`: the fingerprint of the device key that logged in (RFC 7800).
    let deviceKID: String
}

/// Issues and verifies the server's access tokens (PROTOCOL.md section 3).
struct AccessTokens: Sendable {
    let keys: ServerSigningKeys
    let issuer: String
    let lifetime: Int64
    let leeway: Int64
    let now: @Sendable () -> Int64

    /// A signed `at+jwt` for `user`, bound to the device `deviceKID` through `cnf.jkt`.
    func issue(user: String, deviceKID: String) throws(KeyAuthError) -> String {
        let builder = JWTBuilder(key: keys.signingKey, audience: issuer, lifetime: lifetime, now: now)
        return try builder.sign(
            claims: ["iss": .string(issuer), "sub": .string(user), "cnf": .object(["jkt": .string(deviceKID)])],
            type: "at+jwt", keyID: keys.signingKeyID)
    }

    /// Checks a Bearer token with the same strictness as assertions: RS256 only, our keys only,
    /// `typ` `at+jwt`, `iss` and `aud` equal to the issuer, unexpired, lifetime bounded.
    ///
    /// - Throws: ``ServiceError`` `.invalidToken` for any failure, never saying which check
    ///   failed beyond a generic text.
    func verify(_ token: String) throws(ServiceError) -> AccessTokenSubject {
        let verifier = JWTVerifier(
            options: .init(
                audience: issuer, leeway: leeway, maximumLifetime: lifetime, requireJWTID: true,
                subjectIsKeyFingerprint: false, expectedIssuer: issuer, expectedType: "at+jwt"),
            now: now)
        let verified: VerifiedJWT
        do {
            verified = try verifier.verify(token, resolver: keys, replayCache: nil)
        } catch {
            throw ServiceError(.invalidToken, "the access token is not valid")
        }
        guard let deviceKID = verified.claims["cnf"]?["jkt"]?.stringValue, !deviceKID.isEmpty,
            !verified.subject.isEmpty
        else { throw ServiceError(.invalidToken, "the access token is not valid") }
        return AccessTokenSubject(user: verified.subject, deviceKID: deviceKID)
    }
}
