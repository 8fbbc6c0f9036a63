extension KeyAuthError.Code {
    /// No account of that name exists under the keyauth home.
    public static let accountNotFound = KeyAuthError.Code(rawValue: "account_not_found")
    /// An account file is not valid: truncated, not JSON, or missing a member.
    public static let accountCorrupt = KeyAuthError.Code(rawValue: "account_corrupt")
}

extension KeyAuthError {
    /// The server's RFC 6749 error behind this one, when the server answered with one.
    ///
    /// It tells apart the refusals that share `.serverRejected`: `access_denied` (the pending
    /// device was denied), `expired_token` (nobody approved it in time), `invalid_grant` (an
    /// unknown or revoked key).
    public var oauthError: OAuthError? {
        underlying as? OAuthError
    }
}
