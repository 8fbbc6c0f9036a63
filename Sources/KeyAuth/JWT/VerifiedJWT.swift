/// A device assertion whose signature and claims passed every check.
///
/// Its registered claims are read once, when it is made, so a verified token always has them:
/// no accessor returns an empty string for a claim that was missing.
public struct VerifiedJWT: Sendable {
    /// The key id the token was verified under.
    public let keyID: String
    /// The key that verified the signature.
    public let key: RSAPublicKey
    /// `sub`.
    public let subject: String
    /// `iat`, in seconds since 1970.
    public let issuedAt: Int64
    /// `exp`, in seconds since 1970.
    public let expiresAt: Int64
    /// `jti`.
    public let jwtID: String
    /// Every claim, including those the application added.
    public let claims: JWTClaims

    /// - Throws: `.claimInvalid` when `sub`, `iat`, `exp` or `jti` is missing or of the wrong type.
    init(keyID: String, key: RSAPublicKey, claims: JWTClaims) throws(KeyAuthError) {
        self.keyID = keyID
        self.key = key
        self.claims = claims
        subject = try claims.string("sub")
        issuedAt = try claims.integer("iat")
        expiresAt = try claims.integer("exp")
        jwtID = try claims.string("jti")
    }
}
