import KeyAuth

/// A successful login.
struct LoginResult: Sendable {
    /// The `at+jwt` access token.
    let accessToken: String
    /// Its lifetime in seconds.
    let expiresIn: Int64
}

extension KeyAuthService {
    /// The only grant accepted at `/oauth/token` (RFC 7523).
    static let jwtBearerGrant = "urn:ietf:params:oauth:grant-type:jwt-bearer"

    /// Logs in with a device assertion (PROTOCOL.md sections 2 and 4, "Log in").
    ///
    /// Rules 1 to 7 are the verifier's, with a resolver that hides revoked devices; rule 8 (the
    /// device's state) is checked after the signature, so that pending and denied answers go
    /// only to the key's holder.
    func login(assertion: String) throws -> LoginResult {
        let lookup = DeviceKeyLookup(storage: storage, keys: deviceKeys)
        _ = try verifyAssertion(assertion, resolver: lookup)
        guard let device = lookup.device else {
            throw ServiceError(.invalidGrant, JWTVerifier.uniformFailure)
        }
        switch device.status {
        case .active:
            break
        case .pending:
            if isExpiredPending(device) {
                throw ServiceError(.expiredToken, "the registration expired before it was approved")
            }
            throw ServiceError(.authorizationPending, "the device waits for approval from another device")
        case .denied:
            throw ServiceError(.deviceDenied, "the device was denied")
        case .revoked:
            throw ServiceError(.invalidGrant, JWTVerifier.uniformFailure)
        }
        let token = try tokens.issue(user: device.user, deviceKID: device.kid)
        try storage.recordLogin(kid: device.kid, at: now())
        return LoginResult(accessToken: token, expiresIn: settings.accessTokenLifetime)
    }
}
