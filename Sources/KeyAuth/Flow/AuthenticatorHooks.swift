/// The application's side of the ``Authenticator`` flow, as in TouchIDAuth.
///
/// The library owns the key, the presence check and the JWT; the application owns the server
/// conversation. Every hook is `async` because each one normally talks to a server.
public struct AuthenticatorHooks<Session: Sendable>: Sendable {
    /// Sends a newly generated public key to the server, with `proof`: an assertion signed by
    /// the new key that proves possession of the private half.
    public var registerPublicKey:
        @Sendable (_ publicKey: RSAPublicKey, _ proof: String) async throws -> RegistrationStatus
    /// Registers a new key given whole, for registrations that need more than its public half
    /// (a TPM key's attestation); when set, used instead of ``registerPublicKey``.
    /// It gets a proof maker rather than a proof, to sign a fresh one for each request it sends.
    package var registerDeviceKey:
        (@Sendable (_ key: DeviceKey, _ makeProof: @escaping ProofMaker) async throws -> RegistrationStatus)?
    /// Signs a proof of possession with the new key, as registration sends it.
    package typealias ProofMaker = @Sendable () async throws(KeyAuthError) -> String
    /// Extra claims for each assertion (TouchIDAuth's `jwtPayload`); they may override defaults.
    public var jwtPayload: @Sendable () async throws -> JWTClaims
    /// Logs in with a signed assertion and returns the application's session (an access token).
    ///
    /// Throw a ``KeyAuthError`` with code `.approvalPending` while the server still waits for
    /// another device to approve this one; the authenticator then polls.
    public var authenticate: @Sendable (_ assertion: String) async throws -> Session
    /// Logs in like ``authenticate``, with the device key's DPoP proof builder as well, so that
    /// the session can be bound to the key (RFC 9449); when set, the authenticator calls it
    /// instead of ``authenticate``.
    public var authenticateWithProofs:
        (@Sendable (_ assertion: String, _ proofs: DPoPProofBuilder) async throws -> Session)?
    /// Called once with every error that ends a flow.
    public var onError: @Sendable (_ error: KeyAuthError) -> Void
    /// Called by ``Authenticator/reset(force:)`` before the key is deleted, to revoke it on the server.
    public var revoke: (@Sendable (_ publicKey: RSAPublicKey) async throws -> Void)?

    public init(
        registerPublicKey: @escaping @Sendable (RSAPublicKey, String) async throws -> RegistrationStatus,
        jwtPayload: @escaping @Sendable () async throws -> JWTClaims = { JWTClaims() },
        authenticate: @escaping @Sendable (String) async throws -> Session,
        onError: @escaping @Sendable (KeyAuthError) -> Void = { _ in },
        revoke: (@Sendable (RSAPublicKey) async throws -> Void)? = nil,
        authenticateWithProofs: (@Sendable (String, DPoPProofBuilder) async throws -> Session)? = nil
    ) {
        self.registerPublicKey = registerPublicKey
        self.jwtPayload = jwtPayload
        self.authenticate = authenticate
        self.authenticateWithProofs = authenticateWithProofs
        self.onError = onError
        self.revoke = revoke
    }
}
