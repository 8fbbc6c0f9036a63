import KeyAuth

/// A successful login.
struct LoginResult: Sendable {
    /// The `at+jwt` access token.
    let accessToken: String
    /// Its lifetime in seconds.
    let expiresIn: Int64
}

extension KeyAuthService {
    /// Logs in with a device assertion (PROTOCOL.md sections 2 and 4, "Log in").
    ///
    /// Rules 1 to 7 are the verifier's, with a resolver that hides revoked devices; rule 8 (the
    /// device's state) is checked after the signature, so that pending and denied answers go
    /// only to the key's holder.
    ///
    /// A signature of a length that no allowed key makes (allowed keys make 256 to 1024 bytes)
    /// is refused first, before any lookup, with the description an unknown key gets: it could
    /// verify under no registered key, and refusing it before the registry is consulted keeps
    /// its cost free of anything the registry holds.
    func login(assertion: String) throws -> LoginResult {
        let signature = Self.signature(ofCompactJWS: assertion)
        if let signature, !Self.allowedSignatureLengths.contains(signature.count) {
            throw ServiceError(.invalidGrant, JWTVerifier.uniformFailure)
        }
        // An unreadable signature segment makes the verifier refuse the token before it looks
        // any key up, saying what is malformed.
        let lookup = DeviceKeyLookup(storage: storage, keys: deviceKeys, signature: signature ?? [])
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

    /// Signature lengths in bytes that keys of ``allowedKeyBits`` make.
    static let allowedSignatureLengths = (allowedKeyBits.lowerBound + 7) / 8...(allowedKeyBits.upperBound + 7) / 8

    /// The decoded third segment of a compact JWS, or nil when there is no canonical base64url
    /// segment after the last dot.
    static func signature(ofCompactJWS token: String) -> [UInt8]? {
        let bytes = Array(token.utf8)
        guard bytes.count <= CompactJWS.maximumLength, let dot = bytes.lastIndex(of: UInt8(ascii: ".")) else {
            return nil
        }
        return Base64URL.decode(utf8: bytes[(dot + 1)...])
    }
}
