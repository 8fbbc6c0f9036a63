/// What a verified keyauth access token says (PROTOCOL.md section 3), read once when it is
/// verified, so that a service never looks at an unverified claim.
public struct AccessTokenClaims: Sendable {
    /// `sub`: the user who logged in.
    public let user: String
    /// `client_id` (RFC 9068): for keyauth's device login, the device key's thumbprint.
    public let clientID: String
    /// `cnf.jkt` (RFC 9449 section 6.1): the thumbprint of the device key the token is bound to;
    /// nil for a Bearer token. A bound token is accepted only with a DPoP proof of that key.
    public let deviceKeyThumbprint: String?
    /// `amr` (RFC 8176): how the user authenticated (`swk`: a key file's signature, `hwk`: a
    /// TPM's, as the device states it); empty when the token has none.
    public let amr: [String]
    /// `device_tier`: where the server established at registration that the device key lives
    /// (`attested`, `tpm-unverified` or `software`); nil when the token has none (tokens of servers
    /// older than TPM attestation). Unlike `amr`, the server vouches for it.
    public let deviceTier: String?
    /// `scope`, split on spaces (RFC 9068 section 2.2.3); empty when the token has none.
    public let scopes: [String]
    /// `iat`, in seconds since 1970.
    public let issuedAt: Int64
    /// `exp`, in seconds since 1970.
    public let expiresAt: Int64
    /// `jti`.
    public let jwtID: String
    /// The `kid` of the issuer's key that signed it.
    public let signingKeyID: String
    /// Every claim, for those a service reads itself.
    public let claims: JWTClaims

    /// Whether the token is bound to a device key (DPoP) rather than a Bearer token.
    public var isDPoPBound: Bool { deviceKeyThumbprint != nil }

    /// The device that logged in: the key the token is bound to, or for a Bearer token its
    /// `client_id`.
    public var deviceKeyID: String { deviceKeyThumbprint ?? clientID }

    /// - Throws: `.claimInvalid` when `sub`, `client_id`, `iat`, `exp` or `jti` is missing or of
    ///   the wrong type, or `cnf`, `amr`, `scope` or `device_tier` has the wrong shape.
    init(claims: JWTClaims, signingKeyID: String) throws(KeyAuthError) {
        self.claims = claims
        self.signingKeyID = signingKeyID
        user = try claims.string("sub")
        clientID = try claims.string("client_id")
        issuedAt = try claims.integer("iat")
        expiresAt = try claims.integer("exp")
        jwtID = try claims.string("jti")
        if let confirmation = claims["cnf"] {
            guard let jkt = confirmation["jkt"]?.stringValue, !jkt.isEmpty else {
                throw KeyAuthError(.claimInvalid, "the claim \"cnf\" must hold a jkt string")
            }
            deviceKeyThumbprint = jkt
        } else {
            deviceKeyThumbprint = nil
        }
        amr = claims.contains("amr") ? try claims.strings("amr") : []
        deviceTier = claims.contains("device_tier") ? try claims.string("device_tier") : nil
        scopes = claims.contains("scope") ? try claims.string("scope").split(separator: " ").map(String.init) : []
        guard !user.isEmpty, !clientID.isEmpty else {
            throw KeyAuthError(.claimInvalid, "the claims \"sub\" and \"client_id\" must not be empty")
        }
    }
}
