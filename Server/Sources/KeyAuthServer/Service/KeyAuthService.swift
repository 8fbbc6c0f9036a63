import KeyAuth

/// The server's behaviour, free of HTTP: registration, login and device management.
///
/// Each operation takes parsed input and returns a result or throws ``ServiceError`` (the
/// client's problem), ``StorageError`` (503) or anything else (500). The responder turns those
/// into HTTP; tests may call the operations directly.
struct KeyAuthService: Sendable {
    /// The settings the operations depend on.
    struct Settings: Sendable {
        var issuer: String
        var enrollment: EnrollmentMode
        var pendingLifetime: Int64
        var maximumPendingDevices: Int
        var deviceRetention: Int64
        var leeway: Int64
        var maximumAssertionLifetime: Int64
        var accessTokenLifetime: Int64
    }

    let settings: Settings
    let storage: any ServerStorage
    let tokens: AccessTokens
    let enrollmentCodes: EnrollmentCodes
    let now: @Sendable () -> Int64
    /// Parsed device keys, shared by every login.
    let deviceKeys = DeviceKeyCache()

    /// The assertion checks of PROTOCOL.md section 2 for logins and registration proofs.
    var assertionVerifier: JWTVerifier {
        JWTVerifier(
            options: .init(
                audience: settings.issuer, leeway: settings.leeway, maximumLifetime: settings.maximumAssertionLifetime,
                requireJWTID: true, subjectIsKeyFingerprint: true),
            now: now)
    }

    /// Where accepted assertion `jti`s are remembered.
    var replayCache: StorageReplayCache {
        StorageReplayCache(storage: storage, leeway: settings.leeway)
    }

    /// Whether a pending device has waited longer than the pending lifetime.
    func isExpiredPending(_ device: DeviceRecord) -> Bool {
        device.status == .pending && now() >= device.createdAt + settings.pendingLifetime
    }

    /// The state a client sees: `expired` for a pending device past its lifetime.
    func visibleStatus(_ device: DeviceRecord) -> String {
        isExpiredPending(device) ? "expired" : device.status.rawValue
    }

    /// Verifies an assertion, turning every verification failure into `invalid_grant`.
    ///
    /// Unknown key, bad signature and revoked key share one description (the verifier's
    /// uniform text); other failures say which rule failed, never echoing the token.
    /// Storage failures and unreadable stored keys pass through unchanged.
    func verifyAssertion(_ assertion: String, resolver: some JWTKeyResolver) throws -> VerifiedJWT {
        do {
            return try assertionVerifier.verify(assertion, resolver: resolver, replayCache: replayCache)
        } catch let error as KeyAuthError {
            let description =
                error.code == .signatureInvalid
                ? JWTVerifier.uniformFailure : "the assertion is not valid: \(error.message)"
            throw ServiceError(.invalidGrant, description)
        }
    }
}
