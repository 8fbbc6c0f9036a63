import KeyAuth

/// The caller an access token names: the user and the device that logged in.
struct AccessTokenSubject: Sendable, Equatable {
    /// `sub`: the user.
    let user: String
    /// `cnf.jkt`: the fingerprint of the device key that logged in (RFC 7800).
    let deviceKID: String
}

/// Issues and verifies the server's access tokens (PROTOCOL.md section 3).
struct AccessTokens: Sendable {
    let keys: ServerSigningKeys
    let issuer: String
    let lifetime: Int64
    let leeway: Int64
    let now: @Sendable () -> Int64
    /// `{"alg":"RS256","typ":"at+jwt","kid":"<signing key>"}`, the same for every token.
    private let headerJSON: [UInt8]
    /// The issuer as a JSON string literal, escaped once.
    private let issuerJSON: [UInt8]

    init(keys: ServerSigningKeys, issuer: String, lifetime: Int64, leeway: Int64, now: @escaping @Sendable () -> Int64)
    {
        self.keys = keys
        self.issuer = issuer
        self.lifetime = lifetime
        self.leeway = leeway
        self.now = now
        let header: JSONValue = .object(["alg": "RS256", "typ": "at+jwt", "kid": .string(keys.signingKeyID)])
        headerJSON = Array(header.serialized(leadingKeys: ["alg", "typ", "kid"]).utf8)
        var issuerJSON: [UInt8] = []
        JSONText.appendString(issuer, to: &issuerJSON)
        self.issuerJSON = issuerJSON
    }

    /// A signed `at+jwt` for `user`, bound to the device `deviceKID` through `cnf.jkt`.
    ///
    /// The claims are `iss`, `sub`, `aud`, then `cnf`, `exp`, `iat` and `jti` (the order
    /// `JWTBuilder` writes), assembled directly: after RSA, building them through `JSONValue`
    /// was the largest cost of a login.
    func issue(user: String, deviceKID: String) throws(KeyAuthError) -> String {
        let issuedAt = now()
        let jwtID = Base64URL.encode(try Crypto.randomBytes(count: 16))
        var payload: [UInt8] = []
        payload.reserveCapacity(192 + 2 * issuerJSON.count + user.utf8.count)
        JSONText.appendRaw("{\"iss\":", to: &payload)
        payload.append(contentsOf: issuerJSON)
        JSONText.appendRaw(",\"sub\":", to: &payload)
        JSONText.appendString(user, to: &payload)
        JSONText.appendRaw(",\"aud\":", to: &payload)
        payload.append(contentsOf: issuerJSON)
        JSONText.appendRaw(",\"cnf\":{\"jkt\":", to: &payload)
        JSONText.appendString(deviceKID, to: &payload)
        JSONText.appendRaw("},\"exp\":", to: &payload)
        JSONText.appendInteger(issuedAt + lifetime, to: &payload)
        JSONText.appendRaw(",\"iat\":", to: &payload)
        JSONText.appendInteger(issuedAt, to: &payload)
        JSONText.appendRaw(",\"jti\":", to: &payload)
        JSONText.appendString(jwtID, to: &payload)
        JSONText.appendRaw("}", to: &payload)
        return try JWTBuilder.sign(headerJSON: headerJSON, payloadJSON: payload, key: keys.signingKey)
    }

    /// Checks a Bearer token with the same strictness as assertions: RS256 only, our keys only,
    /// `typ` `at+jwt`, `iss` and `aud` equal to the issuer, unexpired, lifetime bounded.
    ///
    /// - Throws: ``ServiceError`` `.invalidToken` for any failure, never saying which check
    ///   failed beyond a generic text.
    func verify(_ token: String) throws(ServiceError) -> AccessTokenSubject {
        let verifier = JWTVerifier(
            options: .init(
                audience: issuer, leeway: leeway, maximumLifetime: lifetime, requireJWTID: true,
                subjectIsKeyFingerprint: false, expectedIssuer: issuer, expectedType: "at+jwt"),
            now: now)
        let verified: VerifiedJWT
        do {
            verified = try verifier.verify(token, resolver: keys, replayCache: nil)
        } catch {
            throw ServiceError(.invalidToken, "the access token is not valid")
        }
        guard let deviceKID = verified.claims["cnf"]?["jkt"]?.stringValue, !deviceKID.isEmpty,
            !verified.subject.isEmpty
        else { throw ServiceError(.invalidToken, "the access token is not valid") }
        return AccessTokenSubject(user: verified.subject, deviceKID: deviceKID)
    }
}
