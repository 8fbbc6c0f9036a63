import KeyAuth

/// An access token verified as a relying party would: with the server's published keys by
/// `kid`, the issuer as `iss` and `aud`, `typ` `at+jwt`, and its lifetime bounded (PROTOCOL.md
/// section 3). The library's claim rules do the checking; a public access-token verifier comes
/// with the tokens issue.
struct CheckedAccessToken {
    /// The header members.
    let header: [String: JSONValue]
    /// The claims.
    let claims: JWTClaims
    /// `sub`: the user.
    let subject: String
    /// `iat`.
    let issuedAt: Int64
    /// `exp`.
    let expiresAt: Int64
    /// `jti`.
    let jwtID: String

    /// - Throws: ``KeyAuthError`` for a token that fails any check, or whose `kid` is not in
    ///   `keys`.
    init(
        _ token: String, issuer: String, keys: [String: JWSPublicKey], lifetime: Int64 = 900,
        clock: KeyAuthClock = .system
    ) throws {
        let verifier = JWTVerifier(
            rules: JWTVerifier.Rules(
                audience: issuer, maximumLifetime: lifetime, requireJWTID: true, subjectIsKeyID: false,
                expectedIssuer: issuer, expectedTypes: ["at+jwt"],
                algorithms: Set(JWSAlgorithm.allCases)),
            clock: clock)
        let parsed = try verifier.parse(token)
        guard let keyID = parsed.jws.keyID, let key = keys[keyID] else {
            throw KeyAuthError(.signatureInvalid, "the token's key is not published")
        }
        claims = try verifier.verify(parsed, keyID: keyID, key: key)
        header = parsed.jws.header
        subject = try claims.string("sub")
        issuedAt = try claims.integer("iat")
        expiresAt = try claims.integer("exp")
        jwtID = try claims.string("jti")
    }
}
