import KeyAuth

/// Signs the offline grants of host logins (PROTOCOL.md section 7.2, "Offline grants"): the
/// server's permission for one device to log one Linux user in to one host without reaching the
/// server, until the grant expires.
///
/// Signed with the key that signs access tokens at that moment, so grants rotate with the
/// server's keys and verify with the published JWK set, which the host caches with the grant.
/// The header's `typ` is ``OfflineGrantFormat/type`` and the grant has no `aud` nor
/// `client_id`: an access token's checks refuse it, and the host's checks refuse an access
/// token.
struct OfflineGrants: Sendable {
    let keys: ServerSigningKeys
    let issuer: String
    /// Seconds from `iat` to `exp` (`--offline-grant-lifetime`).
    let lifetime: Int64
    let clock: KeyAuthClock

    /// A grant for `user`'s device `deviceKID` on the host and Linux user of `statement`: `iss`,
    /// `sub` (the keyauth user), `host`, `linux_user`, `cnf.jkt` (the device key's thumbprint,
    /// which the host checks a fresh signature against), `iat`, `exp`, `jti`.
    ///
    /// - Throws: `KeyAuthError` when no key signs now or signing fails.
    func issue(user: String, deviceKID: String, statement: HostLoginStatement) throws(KeyAuthError) -> String {
        let key = try keys.current(at: clock.seconds)
        var claims = JWTClaims()
        claims.set("iss", string: issuer)
        claims.set("sub", string: user)
        claims.set(OfflineGrantFormat.hostClaim, string: statement.host)
        claims.set(OfflineGrantFormat.linuxUserClaim, string: statement.linuxUser)
        claims["cnf"] = .object(["jkt": .string(deviceKID)])
        return try JWTBuilder(key: key.signer, lifetime: lifetime, clock: clock).sign(
            claims: claims, type: OfflineGrantFormat.type, keyID: key.kid)
    }
}
