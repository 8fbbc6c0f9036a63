/// What the OpenID Connect provider keeps (PROTOCOL.md section 10): authorization codes and the
/// access tokens revoked because their code came twice. (Pending authorization requests are not
/// stored: they travel sealed in the page, ``SealedAuthorizations``.)
/// Part of ``ServerStorage``.
///
/// A code is redeemed by one conditional update, so of two redemptions at once exactly one
/// succeeds and the other learns which token to revoke.
package protocol AuthorizationStorage: Sendable {
    /// Stores a new code.
    func insertAuthorizationCode(_ record: AuthorizationCodeRecord) throws(StorageError)

    /// The code whose hash is `codeHash`, in any state.
    func authorizationCode(codeHash: [UInt8]) throws(StorageError) -> AuthorizationCodeRecord?

    /// Marks the code redeemed at `time` by the access token `accessTokenJTI`, unless it was
    /// redeemed already or has expired, in one conditional update, and only while the device that
    /// approved the sign-in is still the user's and active: its row is locked until the commit
    /// (as for ``SignInStorage/markSignInRequestIssued(id:expiringAfter:)``), so a revocation
    /// either comes before and refuses the code, or waits until its token is recorded.
    ///
    /// A redemption records `audit` in the same transaction: an audit write that failed after the
    /// code was used up answered 503, and the client's retry was refused as a second use, so the
    /// user had to sign in again.
    func redeemAuthorizationCode(
        codeHash: [UInt8], at time: Int64, accessTokenJTI: String, accessTokenExpiresAt: Int64, audit: AuditEvent?
    ) throws(StorageError) -> AuthorizationCodeRedemption

    /// Refuses the access token `jti` from now until `expiresAt` (its expiry).
    func revokeAccessToken(jti: String, expiresAt: Int64) throws(StorageError)

    /// Whether the access token `jti` was revoked.
    func isAccessTokenRevoked(jti: String) throws(StorageError) -> Bool

    /// Deletes codes past their use at `now` (a redeemed code is kept until its access token
    /// expires, so that a second use can still revoke it) and revoked tokens past their expiry;
    /// returns how many rows.
    @discardableResult
    func purgeAuthorizations(now: Int64) throws(StorageError) -> Int
}

extension AuthorizationStorage {
    /// A redemption without an audit entry, for tests of the storage.
    package func redeemAuthorizationCode(
        codeHash: [UInt8], at time: Int64, accessTokenJTI: String, accessTokenExpiresAt: Int64
    ) throws(StorageError) -> AuthorizationCodeRedemption {
        try redeemAuthorizationCode(
            codeHash: codeHash, at: time, accessTokenJTI: accessTokenJTI, accessTokenExpiresAt: accessTokenExpiresAt,
            audit: nil)
    }
}
