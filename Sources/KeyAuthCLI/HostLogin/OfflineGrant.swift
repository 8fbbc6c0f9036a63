import KeyAuth

/// An offline grant checked the way `keyauth-pam-helper` checks one before an offline login
/// (PROTOCOL.md section 7.2, "Offline grants"): signed by one of the server keys cached with it,
/// with that key's own algorithm, by this issuer, not expired, and for this host, this Linux user
/// and this keyauth user.
///
/// What is left for the caller is the device: ``deviceKeyID`` is the thumbprint of the only key
/// whose fresh signature may use the grant, so the PIN (and for a TPM key the TPM) is still
/// checked at every offline login.
struct OfflineGrant: Equatable, Sendable {
    /// The keyauth user (`sub`).
    let keyauthUser: String
    let linuxUser: String
    let host: String
    /// The device key's RFC 7638 thumbprint (`cnf.jkt`).
    let deviceKeyID: String
    /// `exp`, in seconds since 1970.
    let expiresAt: Int64

    /// How far `iat` may be ahead of this host's clock: a grant from the future means a clock far
    /// off, on which no expiry can be trusted.
    static let leeway: Int64 = 300

    /// Checks `token` against `keySet` and the login it is asked to allow.
    ///
    /// - Parameters:
    ///   - issuer: the account's issuer URL, which `iss` must equal.
    ///   - host, linuxUser, keyauthUser: the login; each must equal the grant's.
    ///   - now: seconds since 1970.
    /// - Throws: `.tokenMalformed`, `.signatureInvalid` or `.claimInvalid` saying which check failed;
    ///   the grant is not secret, and the reason goes to root's journal.
    init(
        verifying token: String, keySet: JWKSet, issuer: String, host: String, linuxUser: String, keyauthUser: String,
        now: Int64
    ) throws(KeyAuthError) {
        let jws = try CompactJWS(parsing: token, algorithms: OfflineGrantFormat.algorithms)
        guard jws.headerValue("typ")?.stringValue == OfflineGrantFormat.type else {
            throw KeyAuthError(.claimInvalid, "the token is not an offline grant (typ)")
        }
        guard let kid = jws.keyID, let key = keySet[kid] else {
            throw KeyAuthError(.signatureInvalid, "the grant's key is not among the server keys cached with it")
        }
        // The algorithm is the key's, never the token's choice.
        guard key.algorithm == jws.algorithm, jws.isSignatureValid(with: key) else {
            throw KeyAuthError(.signatureInvalid, "the grant's signature does not verify")
        }
        let claims = try jws.claims()
        guard claims["iss"]?.stringValue == issuer else {
            throw KeyAuthError(.claimInvalid, "the grant is from another issuer")
        }
        guard let expiresAt = claims["exp"]?.integerValue, let issuedAt = claims["iat"]?.integerValue else {
            throw KeyAuthError(.claimInvalid, "the grant has no exp or iat")
        }
        guard now < expiresAt else { throw KeyAuthError(.claimInvalid, "the grant expired") }
        guard issuedAt <= now || issuedAt - now <= Self.leeway else {
            throw KeyAuthError(.claimInvalid, "the grant was issued in the future: this host's clock is far off")
        }
        guard let sub = claims["sub"]?.stringValue, let grantHost = claims[OfflineGrantFormat.hostClaim]?.stringValue,
            let grantLinuxUser = claims[OfflineGrantFormat.linuxUserClaim]?.stringValue,
            let deviceKeyID = claims["cnf"]?["jkt"]?.stringValue
        else { throw KeyAuthError(.claimInvalid, "the grant lacks sub, host, linux_user or cnf.jkt") }
        guard grantHost == host else { throw KeyAuthError(.claimInvalid, "the grant is for host \(grantHost)") }
        guard grantLinuxUser == linuxUser, sub == keyauthUser else {
            throw KeyAuthError(.claimInvalid, "the grant is for another user")
        }
        self.keyauthUser = sub
        self.linuxUser = grantLinuxUser
        self.host = grantHost
        self.deviceKeyID = deviceKeyID
        self.expiresAt = expiresAt
    }
}
