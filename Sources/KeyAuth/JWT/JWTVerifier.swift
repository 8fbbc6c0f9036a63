import Foundation

/// Finds the public key for a `kid` in a registry the verifier trusts.
///
/// The verifier asks only this, never the token: a token's `jwk`, `jku` or `x5c` is refused, so
/// a forger cannot bring their own key (the TouchIDAuth server never checked a signature at all).
public protocol JWTKeyResolver: Sendable {
    /// The key registered under `keyID`, or nil when there is none (or it must not be used).
    func publicKey(forKeyID keyID: String) throws -> RSAPublicKey?
}

/// Remembers which `jti` values were accepted, so that a captured assertion cannot be replayed.
public protocol JWTReplayCache: Sendable {
    /// Records `jwtID` for `keyID` until `expiresAt`; returns false when it was already recorded.
    ///
    /// Implementations must make check-and-record one atomic step (a unique constraint, not a
    /// read followed by a write), or two concurrent replays could both pass.
    func claim(jwtID: String, keyID: String, expiresAt: Int64) throws -> Bool
}

/// A resolver that knows one key: for registration proofs and for a server's own tokens.
public struct SingleKeyResolver: JWTKeyResolver {
    /// The only key this resolver returns.
    public let key: RSAPublicKey
    private let keyID: String

    public init(key: RSAPublicKey, keyID: String? = nil) {
        self.key = key
        self.keyID = keyID ?? key.fingerprint
    }

    public func publicKey(forKeyID keyID: String) -> RSAPublicKey? {
        keyID == self.keyID ? key : nil
    }
}

/// A token whose signature and claims passed every check.
public struct VerifiedJWT: Sendable {
    /// The header members.
    public let header: [String: JSONValue]
    /// The claims, including any the application added.
    public let claims: [String: JSONValue]
    /// The key id the token was verified under.
    public let keyID: String
    /// The key that verified the signature.
    public let key: RSAPublicKey
    /// The `sub` claim.
    public var subject: String { claims["sub"]?.stringValue ?? "" }
    /// The `exp` claim.
    public var expiresAt: Int64 { claims["exp"]?.integerValue ?? 0 }
    /// The `iat` claim.
    public var issuedAt: Int64 { claims["iat"]?.integerValue ?? 0 }
    /// The `jti` claim, when present.
    public var jwtID: String? { claims["jti"]?.stringValue }
}

/// Verifies RS256 JWTs with every rule of PROTOCOL.md section 2.
///
/// Public so that Linux services can check device assertions (or keyauth access tokens) without
/// running `keyauth-server`. Verification is synchronous: it waits only on the resolver and
/// replay cache, which servers typically back with a local database on their own threads.
public struct JWTVerifier: Sendable {
    /// What the verifier requires beyond the signature.
    public struct Options: Sendable {
        /// The required `aud` (the issuer URL for device assertions); nil skips the check.
        public var audience: String?
        /// Clock skew tolerated on `exp` and `iat`, in seconds.
        public var leeway: Int64 = 10
        /// The longest `exp - iat` accepted, in seconds.
        public var maximumLifetime: Int64 = 300
        /// Whether `jti` must be present (always with a replay cache).
        public var requireJWTID: Bool = true
        /// Device assertions: `sub` and `iss` must equal the key fingerprint (the `kid`).
        public var subjectIsKeyFingerprint: Bool = true
        /// Whether `iat` must be present (always for keyauth tokens; RFC 7519 makes it optional).
        public var requireIssuedAt: Bool = true
        /// Access tokens: the `iss` required, when set.
        public var expectedIssuer: String?
        /// The `typ` header required, when set (`at+jwt` for access tokens).
        public var expectedType: String?

        public init(
            audience: String? = nil, leeway: Int64 = 10, maximumLifetime: Int64 = 300, requireJWTID: Bool = true,
            subjectIsKeyFingerprint: Bool = true, requireIssuedAt: Bool = true, expectedIssuer: String? = nil,
            expectedType: String? = nil
        ) {
            self.requireIssuedAt = requireIssuedAt
            self.audience = audience
            self.leeway = leeway
            self.maximumLifetime = maximumLifetime
            self.requireJWTID = requireJWTID
            self.subjectIsKeyFingerprint = subjectIsKeyFingerprint
            self.expectedIssuer = expectedIssuer
            self.expectedType = expectedType
        }
    }

    /// The description shared by unknown keys and bad signatures, so neither can be probed.
    public static let uniformFailure = "the assertion is not valid"

    public let options: Options
    private let now: @Sendable () -> Int64

    /// - Parameters:
    ///   - options: the checks beyond the signature.
    ///   - now: the clock, in seconds since 1970; injected so tests can use fixed vectors.
    public init(options: Options, now: @escaping @Sendable () -> Int64 = { Int64(Date().timeIntervalSince1970) }) {
        self.options = options
        self.now = now
    }

    /// Verifies `token` (rules 1 to 7 of PROTOCOL.md section 2).
    ///
    /// - Parameters:
    ///   - resolver: the registry that holds the keys; only it supplies keys.
    ///   - replayCache: where accepted `jti` values are recorded; nil skips replay protection.
    /// - Throws: `.tokenMalformed`, `.signatureInvalid` (unknown key or bad signature, with the
    ///   same message), `.claimInvalid` (header, time, audience, subject, replay), or whatever the
    ///   resolver or cache throws (a storage failure is not the caller's fault and must not be
    ///   reported as a bad token).
    public func verify(
        _ token: String, resolver: some JWTKeyResolver, replayCache: (any JWTReplayCache)? = nil
    ) throws -> VerifiedJWT {
        try verify(token, replayCache: replayCache) { keyID in
            guard let keyID, !keyID.isEmpty else {
                throw KeyAuthError(.claimInvalid, "the token names no key (kid or sub)")
            }
            return try resolver.publicKey(forKeyID: keyID).map { (keyID, $0) }
        }
    }

    private func verify(
        _ token: String, replayCache: (any JWTReplayCache)?, resolveKey: (String?) throws -> (String, RSAPublicKey)?
    ) throws -> VerifiedJWT {
        let jws = try CompactJWS(parsing: token)
        if let expectedType = options.expectedType, jws.header["typ"]?.stringValue != expectedType {
            throw KeyAuthError(.claimInvalid, "the token type must be \(expectedType)")
        }
        let claims = try jws.claims()
        guard let (keyID, key) = try resolveKey(jws.keyID ?? claims["sub"]?.stringValue) else {
            throw KeyAuthError(.signatureInvalid, Self.uniformFailure)
        }
        guard jws.isSignatureValid(with: key) else {
            throw KeyAuthError(.signatureInvalid, Self.uniformFailure)
        }
        try checkClaims(claims, keyID: keyID)
        if let replayCache {
            guard let jwtID = claims["jti"]?.stringValue,
                try replayCache.claim(jwtID: jwtID, keyID: keyID, expiresAt: claims["exp"]?.integerValue ?? 0)
            else { throw KeyAuthError(.claimInvalid, "the assertion was already used") }
        }
        return VerifiedJWT(header: jws.header, claims: claims, keyID: keyID, key: key)
    }

    /// Verifies `token` against one trusted key, whatever its `kid` says: for tokens from a single
    /// issuer (a service checking its own tokens, a published vector).
    public func verify(_ token: String, key: RSAPublicKey, replayCache: (any JWTReplayCache)? = nil) throws
        -> VerifiedJWT
    {
        try verify(token, replayCache: replayCache) { keyID in (keyID ?? key.fingerprint, key) }
    }

    /// The claim rules (3, 5, 6 and the presence part of 7), after the signature verified.
    func checkClaims(_ claims: [String: JSONValue], keyID: String) throws(KeyAuthError) {
        if options.subjectIsKeyFingerprint {
            guard claims["sub"]?.stringValue == keyID, claims["iss"]?.stringValue == keyID else {
                throw KeyAuthError(.claimInvalid, "sub and iss must equal the key fingerprint")
            }
        }
        if let issuer = options.expectedIssuer, claims["iss"]?.stringValue != issuer {
            throw KeyAuthError(.claimInvalid, "the token issuer is not accepted")
        }
        if let audience = options.audience {
            let matches: Bool
            switch claims["aud"] {
            case .string(let value): matches = value == audience
            case .array(let values): matches = values.contains(.string(audience))
            default: matches = false
            }
            guard matches else { throw KeyAuthError(.claimInvalid, "the token audience is not this server") }
        }
        try checkTimes(claims: claims)
        if options.requireJWTID {
            guard let jwtID = claims["jti"]?.stringValue, !jwtID.isEmpty else {
                throw KeyAuthError(.claimInvalid, "the token has no jti")
            }
            // Printable ASCII only (base64url in keyauth's own tokens): a NUL or control byte
            // would otherwise reach the replay cache, where some databases cannot store it.
            guard jwtID.utf8.count <= 256, jwtID.utf8.allSatisfy({ (0x21...0x7E).contains($0) }) else {
                throw KeyAuthError(.claimInvalid, "the token jti must be at most 256 printable ASCII characters")
            }
        }
    }

    /// Rule 6: integer `exp` and `iat`, not expired, not issued in the future, lifetime bounded.
    package func checkTimes(claims: [String: JSONValue]) throws(KeyAuthError) {
        guard let expiresAt = claims["exp"]?.integerValue else {
            throw KeyAuthError(.claimInvalid, "exp must be an integer")
        }
        let current = now()
        guard expiresAt > current - options.leeway else { throw KeyAuthError(.claimInvalid, "the token has expired") }
        guard let issuedAt = claims["iat"]?.integerValue else {
            if claims["iat"] == nil && !options.requireIssuedAt { return }
            throw KeyAuthError(.claimInvalid, "iat must be an integer")
        }
        guard issuedAt <= current + options.leeway else {
            throw KeyAuthError(.claimInvalid, "the token was issued in the future")
        }
        // exp = Int64.max with iat = Int64.min overflows; iat already passed the check above, so
        // an overflow can only mean a lifetime far too long (found by the fuzzer, Fuzz/README.md).
        let (lifetime, overflow) = expiresAt.subtractingReportingOverflow(issuedAt)
        guard !overflow, lifetime <= options.maximumLifetime else {
            throw KeyAuthError(.claimInvalid, "the token lifetime exceeds \(options.maximumLifetime) seconds")
        }
    }
}
