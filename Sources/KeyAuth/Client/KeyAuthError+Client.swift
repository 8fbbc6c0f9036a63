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
