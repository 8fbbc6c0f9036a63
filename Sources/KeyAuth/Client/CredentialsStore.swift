/// Keeps access tokens between runs, one per account.
///
/// The device key replaces a refresh token: when the stored token is about to expire, the flow
/// logs in again with the key, so a store only ever holds short-lived access tokens. Stores must
/// be safe to call from several tasks; they need not coordinate between processes, because two
/// processes that both log in just store two valid tokens.
public protocol CredentialsStore: Sendable {
    /// The stored token of `account`, or nil when there is none (or it cannot be used any more).
    ///
    /// - Throws: `.keyUnprotected` when the storage is readable by others; `.storageFailed`.
    func loadToken(account: String) throws(KeyAuthError) -> AccessToken?

    /// Stores `token` for `account`, replacing the previous one.
    ///
    /// - Throws: `.storageFailed`.
    func saveToken(_ token: AccessToken, account: String) throws(KeyAuthError)

    /// Forgets the token of `account`; a missing token is not an error.
    ///
    /// - Throws: `.storageFailed`.
    func deleteToken(account: String) throws(KeyAuthError)
}
