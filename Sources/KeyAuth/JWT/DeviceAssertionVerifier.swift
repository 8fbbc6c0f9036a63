/// Verifies device assertions with every rule of PROTOCOL.md section 2: the preset a server (or
/// any Linux service) uses to let a device key log in.
///
/// RS256 only; `aud` must be the issuer; `iss` and `sub` must be the key id; `iat` and `exp` are
/// integers, with 10 s of leeway and at most 300 s apart; `jti` is present and printable; the
/// key comes only from the caller (a token's `jwk`, `jku` or `x5c` is refused). Access tokens are
/// not device assertions and are never accepted here.
///
/// Two ways to use it: ``parse(_:)`` then ``verify(_:key:)``, for a server that looks the key up
/// itself between the two (and claims the `jti` itself after), or the one call
/// ``verify(_:keys:replayCache:)`` for a service with a key directory and a replay cache.
/// Signing and verifying are synchronous; only the one-call form waits, on its directory and
/// cache.
public struct DeviceAssertionVerifier: Sendable {
    /// Clock skew tolerated on `exp` and `iat`, in seconds.
    public static let leeway: Int64 = 10
    /// The longest `exp - iat` accepted, in seconds.
    public static let maximumLifetime: Int64 = 300
    /// The signature lengths that keys of 2048 to 8192 bits make; any other is refused before
    /// a key is looked up.
    public static let signatureLengths = 256...1024
    /// The description shared by unknown keys and bad signatures, so neither can be probed.
    public static let uniformFailure = JWTVerifier.uniformFailure

    /// The issuer URL assertions must name as `aud`.
    public let audience: String
    private let verifier: JWTVerifier

    /// - Parameters:
    ///   - audience: the server's issuer URL.
    ///   - clock: the time source; tests pass a fixed one to check published vectors.
    public init(audience: String, clock: KeyAuthClock = .system) {
        self.audience = audience
        verifier = JWTVerifier(
            rules: JWTVerifier.Rules(
                audience: audience, leeway: Self.leeway, maximumLifetime: Self.maximumLifetime, requireJWTID: true,
                subjectIsKeyID: true, requireIssuedAt: true),
            clock: clock)
    }

    /// Checks what can be checked without a key (rules 1 and 2, and the first part of rule 4):
    /// the structure, encoding, algorithm and header members, the payload, and the signature's
    /// length, which no allowed key makes when it is under 256 or over 1024 bytes; such a
    /// signature is refused with the unknown key's answer before any key is looked up, so that
    /// its cost depends on nothing registered.
    ///
    /// - Returns: the assertion, with the key id to look up: its `kid`, or its `sub` when it has
    ///   no `kid` member at all. A `kid` that is not a string is refused rather than read as
    ///   absent: a header naming its key as `null`, a number or a list means different keys to
    ///   different parsers, and rule 3 lets only an absent `kid` defer to `sub`.
    /// - Throws: `.tokenMalformed` for structure and encoding; `.claimInvalid` for a refused
    ///   algorithm or header member, a `kid` that is not a string, or an assertion that names no
    ///   key; `.signatureInvalid`
    ///   with ``uniformFailure`` for a signature of a length no allowed key makes, or a key id
    ///   that is not a fingerprint (43 characters of base64url), under which no key is registered.
    public func parse(_ token: String) throws(KeyAuthError) -> ParsedDeviceAssertion {
        let parsed = try verifier.parse(token)
        guard Self.signatureLengths.contains(parsed.jws.signature.count) else {
            throw KeyAuthError(.signatureInvalid, Self.uniformFailure)
        }
        if parsed.jws.headerValue("kid") != nil, parsed.jws.keyID == nil {
            throw KeyAuthError(.claimInvalid, "the token's kid must be a string")
        }
        guard let keyID = parsed.jws.keyID ?? parsed.claims["sub"]?.stringValue, !keyID.isEmpty else {
            throw KeyAuthError(.claimInvalid, "the token names no key (kid or sub)")
        }
        // Only a fingerprint's spelling is looked up: a key id with more (a NUL, which a C string
        // ends at) could find a registered key under another spelling of its id, and claim one
        // `jti` once per spelling. No key is registered under such an id: the unknown key's answer.
        guard InputRules.isValidKeyID(keyID) else { throw KeyAuthError(.signatureInvalid, Self.uniformFailure) }
        return ParsedDeviceAssertion(keyID: keyID, parsed: parsed)
    }

    /// Verifies the signature of `assertion` with `key`, the key registered under its key id,
    /// then its claims.
    ///
    /// The `jti` is not claimed here: replay protection is the caller's next step (or
    /// ``verify(_:keys:replayCache:)``'s).
    /// - Throws: `.signatureInvalid` with ``uniformFailure``; `.claimInvalid` naming the rule.
    public func verify(_ assertion: ParsedDeviceAssertion, key: RSAPublicKey) throws(KeyAuthError) -> VerifiedJWT {
        let claims = try verifier.verify(assertion.parsed, keyID: assertion.keyID, key: key)
        return try VerifiedJWT(keyID: assertion.keyID, key: key, claims: claims)
    }

    /// Parses, looks the key up in `keys`, verifies, and claims the `jti` in `replayCache`: the
    /// whole of PROTOCOL.md section 2 in one call.
    ///
    /// An unknown key gets the same error and text as a bad signature.
    /// - Throws: as ``parse(_:)`` and ``verify(_:key:)``; `.claimInvalid` for a replay; the
    ///   directory's and the cache's own errors unchanged (a storage failure is not the
    ///   caller's fault and must not be reported as a bad token).
    public func verify(
        _ token: String, keys: some DeviceKeyDirectory, replayCache: some JWTReplayCache
    ) async throws(KeyAuthError) -> VerifiedJWT {
        let assertion = try parse(token)
        guard let key = try await keys.publicKey(forKeyID: assertion.keyID) else {
            throw KeyAuthError(.signatureInvalid, Self.uniformFailure)
        }
        let verified = try verify(assertion, key: key)
        // The verifier accepts the token until exp + leeway, so its jti is kept that long.
        guard
            try await replayCache.claim(
                jwtID: verified.jwtID, keyID: verified.keyID,
                expiresAt: verified.expiresAt.addingSaturating(Self.leeway))
        else { throw KeyAuthError(.claimInvalid, "the assertion was already used") }
        return verified
    }
}

/// A device assertion that passed the checks that need no key: what a server looks up, and what
/// it verifies once it has the key.
public struct ParsedDeviceAssertion: Sendable {
    /// The key id to look up: the `kid` header, or `sub` when there is none.
    public let keyID: String
    let parsed: JWTVerifier.Parsed

    /// The decoded signature: its length tells which size of key could have made it.
    public var signature: [UInt8] { parsed.jws.signature }
}

/// Where a service finds the public key registered under a key id.
///
/// The verifier asks only this, never the token, so a forger cannot bring their own key.
public protocol DeviceKeyDirectory: Sendable {
    /// The key registered under `keyID`, or nil when there is none (or it must not be used).
    ///
    /// - Throws: ``KeyAuthError`` when the directory cannot answer (`.storageFailed` with the
    ///   cause underneath), which the verifier passes on unchanged.
    func publicKey(forKeyID keyID: String) async throws(KeyAuthError) -> RSAPublicKey?
}

/// Remembers which `jti` values were accepted, so that a captured assertion cannot be replayed.
public protocol JWTReplayCache: Sendable {
    /// Records `jwtID` for `keyID` until `expiresAt`; returns false when it was already recorded.
    ///
    /// Implementations must make check-and-record one atomic step (a unique constraint, not a
    /// read followed by a write), or two concurrent replays could both pass.
    func claim(jwtID: String, keyID: String, expiresAt: Int64) async throws(KeyAuthError) -> Bool
}
