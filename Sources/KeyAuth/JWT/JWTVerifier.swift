/// The checks of PROTOCOL.md section 2 as settings, and the verification they drive: what the
/// public presets are made of.
///
/// ``DeviceAssertionVerifier`` is the public preset for device assertions; the server checks its
/// own access tokens with another set of rules here until the tokens issue gives them a public
/// preset of their own (`AccessTokenVerifier`), kept apart from this one so that neither kind of
/// token can pass for the other.
package struct JWTVerifier: Sendable {
    /// What the verifier requires beyond the signature.
    package struct Rules: Sendable {
        /// The required `aud`; nil skips the check.
        package var audience: String?
        /// Clock skew tolerated on `exp` and `iat`, in seconds.
        package var leeway: Int64 = 10
        /// The longest `exp - iat` accepted, in seconds.
        package var maximumLifetime: Int64 = 300
        /// Whether `jti` must be present and printable.
        package var requireJWTID: Bool = true
        /// Device assertions: `sub` and `iss` must equal the key id.
        package var subjectIsKeyID: Bool = true
        /// Whether `iat` must be present (always for keyauth tokens; RFC 7519 makes it optional).
        package var requireIssuedAt: Bool = true
        /// The `iss` required, when set.
        package var expectedIssuer: String?
        /// The `typ` header values accepted, when set (`at+jwt` for access tokens).
        package var expectedTypes: Set<String>?
        /// The `alg` values accepted; each key still verifies only its own algorithm.
        package var algorithms: Set<JWSAlgorithm> = [.rs256]
        /// Whether `sub` must be a non-empty string (access tokens name their user there).
        package var requireSubject: Bool = false

        package init(
            audience: String? = nil, leeway: Int64 = 10, maximumLifetime: Int64 = 300, requireJWTID: Bool = true,
            subjectIsKeyID: Bool = true, requireIssuedAt: Bool = true, expectedIssuer: String? = nil,
            expectedTypes: Set<String>? = nil, algorithms: Set<JWSAlgorithm> = [.rs256], requireSubject: Bool = false
        ) {
            self.audience = audience
            self.leeway = leeway
            self.maximumLifetime = maximumLifetime
            self.requireJWTID = requireJWTID
            self.subjectIsKeyID = subjectIsKeyID
            self.requireIssuedAt = requireIssuedAt
            self.expectedIssuer = expectedIssuer
            self.expectedTypes = expectedTypes
            self.algorithms = algorithms
            self.requireSubject = requireSubject
        }
    }

    /// A token split, decoded and checked up to the point where its key is needed.
    package struct Parsed: Sendable {
        /// The compact JWS.
        package let jws: CompactJWS
        /// Its claims.
        package let claims: JWTClaims
    }

    /// The description shared by unknown keys and bad signatures, so neither can be probed.
    package static let uniformFailure = "the assertion is not valid"

    package let rules: Rules
    package let clock: KeyAuthClock

    package init(rules: Rules, clock: KeyAuthClock = .system) {
        self.rules = rules
        self.clock = clock
    }

    /// Rules 1 and 2 and the `typ` rule: structure, encoding, algorithm, header members, and a
    /// payload that is a JSON object.
    ///
    /// - Throws: `.tokenMalformed` for structure and encoding, `.claimInvalid` for a refused
    ///   algorithm, header member or type.
    package func parse(_ token: String) throws(KeyAuthError) -> Parsed {
        let jws = try CompactJWS(parsing: token, algorithms: rules.algorithms)
        if let expectedTypes = rules.expectedTypes,
            !expectedTypes.contains(jws.headerValue("typ")?.stringValue ?? "")
        {
            throw KeyAuthError(
                .claimInvalid, "the token type must be \(expectedTypes.sorted().joined(separator: " or "))")
        }
        return Parsed(jws: jws, claims: try jws.claimSet())
    }

    /// The signature (rule 4) with `key`, then the claims (rules 3, 5, 6 and the presence part
    /// of 7) for `keyID`.
    ///
    /// - Throws: `.signatureInvalid` with ``uniformFailure``, or `.claimInvalid` naming the rule.
    package func verify(_ parsed: Parsed, keyID: String, key: RSAPublicKey) throws(KeyAuthError) -> JWTClaims {
        try verify(parsed, keyID: keyID, key: .rsa(key))
    }

    /// The signature with `key`, which must be for the token's own `alg` (a token whose `alg`
    /// is not the key's gets the uniform failure), then the claims for `keyID`.
    ///
    /// - Throws: `.signatureInvalid` with ``uniformFailure``, or `.claimInvalid` naming the rule.
    package func verify(_ parsed: Parsed, keyID: String, key: JWSPublicKey) throws(KeyAuthError) -> JWTClaims {
        guard parsed.jws.isSignatureValid(with: key) else {
            throw KeyAuthError(.signatureInvalid, Self.uniformFailure)
        }
        try checkClaims(parsed.claims, keyID: keyID)
        return parsed.claims
    }

    /// Parses and verifies `token` against one trusted key, whatever its `kid` says: for tokens
    /// from a single issuer (a published vector, a service checking its own tokens).
    package func verify(_ token: String, key: RSAPublicKey) throws(KeyAuthError) -> JWTClaims {
        let parsed = try parse(token)
        return try verify(parsed, keyID: parsed.jws.keyID ?? key.fingerprint, key: key)
    }

    /// The claim rules (3, 5, 6 and the presence part of 7), after the signature verified.
    package func checkClaims(_ claims: JWTClaims, keyID: String) throws(KeyAuthError) {
        if rules.subjectIsKeyID {
            guard claims["sub"]?.stringValue == keyID, claims["iss"]?.stringValue == keyID else {
                throw KeyAuthError(.claimInvalid, "sub and iss must equal the key fingerprint")
            }
        }
        if rules.requireSubject {
            guard let subject = claims["sub"]?.stringValue, !subject.isEmpty else {
                throw KeyAuthError(.claimInvalid, "the token has no sub")
            }
        }
        if let issuer = rules.expectedIssuer, claims["iss"]?.stringValue != issuer {
            throw KeyAuthError(.claimInvalid, "the token issuer is not accepted")
        }
        if let audience = rules.audience {
            let matches: Bool
            switch claims["aud"] {
            case .string(let value)?: matches = value == audience
            case .array(let values)?: matches = values.contains(.string(audience))
            default: matches = false
            }
            guard matches else { throw KeyAuthError(.claimInvalid, "the token audience is not this server") }
        }
        try checkTimes(claims: claims)
        if rules.requireJWTID {
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

    /// Rule 6: integer `exp` and `iat`, not expired, not issued in the future, lifetime bounded;
    /// and an `nbf`, when present, an integer that has passed (RFC 7519 section 4.1.5).
    package func checkTimes(claims: JWTClaims) throws(KeyAuthError) {
        guard let expiresAt = claims["exp"]?.integerValue else {
            throw KeyAuthError(.claimInvalid, "exp must be an integer")
        }
        let current = clock.seconds
        guard expiresAt > current - rules.leeway else { throw KeyAuthError(.claimInvalid, "the token has expired") }
        if claims.contains("nbf") {
            guard let notBefore = claims["nbf"]?.integerValue else {
                throw KeyAuthError(.claimInvalid, "nbf must be an integer")
            }
            guard notBefore <= current + rules.leeway else {
                throw KeyAuthError(.claimInvalid, "the token is not valid yet (nbf)")
            }
        }
        guard let issuedAt = claims["iat"]?.integerValue else {
            if !claims.contains("iat") && !rules.requireIssuedAt { return }
            throw KeyAuthError(.claimInvalid, "iat must be an integer")
        }
        guard issuedAt <= current + rules.leeway else {
            throw KeyAuthError(.claimInvalid, "the token was issued in the future")
        }
        // exp = Int64.max with iat = Int64.min overflows; iat already passed the check above, so
        // an overflow can only mean a lifetime far too long (found by the fuzzer, Fuzz/README.md).
        let (lifetime, overflow) = expiresAt.subtractingReportingOverflow(issuedAt)
        guard !overflow, lifetime <= rules.maximumLifetime else {
            throw KeyAuthError(.claimInvalid, "the token lifetime exceeds \(rules.maximumLifetime) seconds")
        }
    }
}
