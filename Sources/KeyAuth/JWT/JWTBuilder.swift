/// Builds and signs JWTs: device assertions by default, any token with overrides.
///
/// TouchIDAuth's `jwtPayload` hook survives as `claims` overrides; what it lacked (a key-bound
/// `sub`, an audience, a short `exp`, and a `jti` for replay protection) is added by default.
/// The server signs its access tokens here too, so both sides write claims one way.
public struct JWTBuilder: Sendable {
    /// The default lifetime of a device assertion, in seconds (PROTOCOL.md section 2).
    public static let defaultLifetime: Int64 = 30

    /// The signing key; its algorithm is the token's `alg`.
    public let key: any JWSSigner
    /// The `aud` claim; the server's issuer URL for device assertions.
    public var audience: String?
    /// `exp - iat`, in seconds.
    public var lifetime: Int64
    /// The clock that sets `iat`.
    public let clock: KeyAuthClock
    /// The key's fingerprint, computed once: `iss`, `sub` and `kid` of an assertion.
    private let fingerprint: String

    /// - Parameters:
    ///   - key: the private key that signs (a device key, or a server's token key).
    ///   - audience: the `aud` claim, omitted when nil.
    ///   - lifetime: seconds from `iat` to `exp`.
    ///   - clock: the time source; tests pass a fixed one.
    public init(
        key: any JWSSigner, audience: String? = nil, lifetime: Int64 = defaultLifetime, clock: KeyAuthClock = .system
    ) {
        self.key = key
        self.audience = audience
        self.lifetime = lifetime
        self.clock = clock
        self.fingerprint = key.keyID
    }

    /// The default claims: `iss` = `sub` = fingerprint, `aud`, `iat`, `exp`, and a 128-bit `jti`.
    public func defaultClaims() throws(KeyAuthError) -> JWTClaims {
        let issuedAt = clock.seconds
        var claims = JWTClaims()
        claims.set("iss", string: fingerprint)
        claims.set("sub", string: fingerprint)
        if let audience { claims.set("aud", string: audience) }
        // In writing order (exp before iat), so that each is appended.
        claims.set("exp", integer: issuedAt + lifetime)
        claims.set("iat", integer: issuedAt)
        claims.set("jti", string: Base64URL.encode(try CryptoPrimitives.randomBytes(count: 16)))
        return claims
    }

    /// Signs a token.
    ///
    /// - Parameters:
    ///   - claims: added to, or replacing, the default claims.
    ///   - type: the `typ` header (`JWT`, or `at+jwt` for access tokens).
    ///   - keyID: the `kid` header; the key's fingerprint by default.
    /// - Returns: the compact JWS.
    public func sign(claims: JWTClaims = JWTClaims(), type: String = "JWT", keyID: String? = nil) throws(KeyAuthError)
        -> String
    {
        try sign(
            claims: claims,
            encodedHeader: Base64URL.encode(
                Self.header(algorithm: key.algorithm, type: type, keyID: keyID ?? fingerprint)))
    }

    /// Signs a token under a header already base64url-encoded: a server that signs many tokens
    /// with one key encodes their header once.
    package func sign(claims: JWTClaims, encodedHeader: String) throws(KeyAuthError) -> String {
        var payload = try defaultClaims()
        payload.merge(claims)
        return try Self.sign(encodedHeader: encodedHeader, payloadJSON: payload.serializedBytes(), key: key)
    }

    /// `{"alg":...,"typ":...,"kid":...}`.
    package static func header(algorithm: JWSAlgorithm = .rs256, type: String, keyID: String) -> [UInt8] {
        var header: [UInt8] = []
        JSONText.appendRaw("{\"alg\":\"\(algorithm.rawValue)\",\"typ\":", to: &header)
        JSONText.appendString(type, to: &header)
        JSONText.appendRaw(",\"kid\":", to: &header)
        JSONText.appendString(keyID, to: &header)
        JSONText.appendRaw("}", to: &header)
        return header
    }

    /// Signs exact header and payload bytes (for known-answer vectors such as RFC 7515 A.2, and
    /// for tests that need a token no builder would make).
    package static func sign(headerJSON: [UInt8], payloadJSON: [UInt8], key: any JWSSigner) throws(KeyAuthError)
        -> String
    {
        try sign(encodedHeader: Base64URL.encode(headerJSON), payloadJSON: payloadJSON, key: key)
    }

    /// Signs `payloadJSON` under a header already base64url-encoded: for a server that writes a
    /// token's claims itself.
    package static func sign(encodedHeader: String, payloadJSON: [UInt8], key: any JWSSigner) throws(KeyAuthError)
        -> String
    {
        // One buffer for the whole token, big enough for an RSA-2048 signature's text.
        var token: [UInt8] = []
        token.reserveCapacity(encodedHeader.utf8.count + (payloadJSON.count * 4 + 2) / 3 + 2 + 342)
        token.append(contentsOf: encodedHeader.utf8)
        token.append(UInt8(ascii: "."))
        Base64URL.encode(payloadJSON, appendingTo: &token)
        let signature = try key.signature(for: token)
        token.append(UInt8(ascii: "."))
        Base64URL.encode(signature, appendingTo: &token)
        return String(decoding: token, as: UTF8.self)
    }
}
