import Foundation

/// Builds and signs RS256 JWTs: device assertions by default, any token with overrides.
///
/// TouchIDAuth's `jwtPayload` hook survives as `claims` overrides; what it lacked (a key-bound
/// `sub`, an audience, a short `exp`, and a `jti` for replay protection) is added by default.
public struct JWTBuilder: Sendable {
    /// The default lifetime of a device assertion, in seconds (PROTOCOL.md section 2).
    public static let defaultLifetime: Int64 = 30

    /// The signing key.
    public let key: RSAPrivateKey
    /// The `aud` claim; the server's issuer URL for device assertions.
    public var audience: String?
    /// `exp - iat`, in seconds.
    public var lifetime: Int64
    private let now: @Sendable () -> Int64

    /// - Parameters:
    ///   - key: the private key that signs.
    ///   - audience: the `aud` claim, omitted when nil.
    ///   - lifetime: seconds from `iat` to `exp`.
    ///   - now: the clock, in seconds since 1970.
    public init(
        key: RSAPrivateKey, audience: String? = nil, lifetime: Int64 = defaultLifetime,
        now: @escaping @Sendable () -> Int64 = { Int64(Date().timeIntervalSince1970) }
    ) {
        self.key = key
        self.audience = audience
        self.lifetime = lifetime
        self.now = now
    }

    /// The default claims: `iss` = `sub` = fingerprint, `aud`, `iat`, `exp`, and a 128-bit `jti`.
    public func defaultClaims() throws(KeyAuthError) -> [String: JSONValue] {
        let fingerprint = key.publicKey.fingerprint
        let issuedAt = now()
        var claims: [String: JSONValue] = [
            "iss": .string(fingerprint), "sub": .string(fingerprint), "iat": .integer(issuedAt),
            "exp": .integer(issuedAt + lifetime), "jti": .string(Base64URL.encode(try Crypto.randomBytes(count: 16))),
        ]
        if let audience { claims["aud"] = .string(audience) }
        return claims
    }

    /// Signs a token.
    ///
    /// - Parameters:
    ///   - claims: added to, or replacing, the default claims.
    ///   - type: the `typ` header (`JWT`, or `at+jwt` for access tokens).
    ///   - keyID: the `kid` header; the key's fingerprint by default.
    /// - Returns: the compact JWS.
    public func sign(claims: [String: JSONValue] = [:], type: String = "JWT", keyID: String? = nil) throws(KeyAuthError)
        -> String
    {
        var payload = try defaultClaims()
        payload.merge(claims) { _, override in override }
        let header: JSONValue = .object([
            "alg": "RS256", "typ": .string(type), "kid": .string(keyID ?? key.publicKey.fingerprint),
        ])
        return try Self.sign(
            headerJSON: Array(header.serialized(leadingKeys: ["alg", "typ", "kid"]).utf8),
            payloadJSON: Array(JSONValue.object(payload).serialized(leadingKeys: ["iss", "sub", "aud"]).utf8),
            key: key)
    }

    /// Signs exact header and payload bytes (for known-answer vectors such as RFC 7515 A.2).
    public static func sign(headerJSON: [UInt8], payloadJSON: [UInt8], key: RSAPrivateKey) throws(KeyAuthError)
        -> String
    {
        let signingInput = Base64URL.encode(headerJSON) + "." + Base64URL.encode(payloadJSON)
        let signature = try key.signature(for: Array(signingInput.utf8))
        return signingInput + "." + Base64URL.encode(signature)
    }
}
