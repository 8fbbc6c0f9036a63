import KeyAuth

/// Signs the provider's ID tokens (OpenID Connect Core section 2, PROTOCOL.md section 10) and
/// reads them back as `id_token_hint`.
///
/// Always RS256, which OpenID Connect requires every provider to support, with the server's
/// RS256 key (``ServerSigningKeys/currentRS256(at:)``): published in the same JWK set, rotated
/// and retired by the same schedule as the access-token keys.
struct IDTokens: Sendable {
    let keys: ServerSigningKeys
    let issuer: String
    /// Seconds from `iat` to `exp`; the access token's lifetime.
    let lifetime: Int64
    let clock: KeyAuthClock

    /// The header's `typ` of an ID token; access tokens have `at+jwt` (RFC 9068), which is how
    /// ``hint(_:)`` tells the two apart.
    static let type = "JWT"

    /// What an ID token states about a sign-in.
    struct Subject: Sendable {
        var user: String
        var clientID: String
        var nonce: String?
        var authTime: Int64
        /// The authentication context class the sign-in achieved (section 8, "Authentication
        /// context").
        var acr: String
        var methods: [String]
        /// The browser session's `sid`; nil for a CIBA sign-in, which has no browser.
        var sessionID: String?
        var accessToken: String
        /// The CIBA request's `auth_req_id`, for the claim ``authRequestIDClaim``; nil in the code
        /// flow.
        var authRequestID: String? = nil
    }

    /// CIBA Core 1.0's claim naming the request an ID token answers (section 10.3.1 requires it
    /// in push mode; in poll mode it binds the token to the request just the same).
    static let authRequestIDClaim = "urn:openid:params:jwt:claim:auth_req_id"

    /// A signed ID token: `iss`, `sub`, `aud` and `azp` (the client), `exp`, `iat`, `auth_time`,
    /// `nonce` exactly as the client sent it, `acr` and `amr` as in the CIBA token, `at_hash` of
    /// the access token issued with it, `sid` or the CIBA request's id; header `typ` `JWT` and
    /// `kid`.
    func sign(_ subject: Subject) throws(KeyAuthError) -> String {
        let key = try keys.currentRS256(at: clock.seconds)
        var claims = JWTClaims()
        claims.set("iss", string: issuer)
        claims.set("sub", string: subject.user)
        claims.set("aud", string: subject.clientID)
        claims.set("azp", string: subject.clientID)
        claims.set("auth_time", integer: subject.authTime)
        if let nonce = subject.nonce { claims.set("nonce", string: nonce) }
        claims.set("acr", string: subject.acr)
        claims.set("amr", strings: subject.methods)
        claims.set("at_hash", string: try Self.accessTokenHash(subject.accessToken))
        if let sessionID = subject.sessionID { claims.set("sid", string: sessionID) }
        if let id = subject.authRequestID { claims.set(Self.authRequestIDClaim, string: id) }
        return try JWTBuilder(key: key.signer, lifetime: lifetime, clock: clock).sign(
            claims: claims, type: Self.type, keyID: key.kid)
    }

    /// `at_hash` for RS256 (Core section 3.1.3.6): the left half of the SHA-256 of the token's
    /// ASCII, base64url.
    static func accessTokenHash(_ accessToken: String) throws(KeyAuthError) -> String {
        Base64URL.encode(Array(try CryptoPrimitives.sha256(Array(accessToken.utf8)).prefix(16)))
    }

    /// The client (`aud`), user (`sub`) and session (`sid`) of an ID token this server signed,
    /// whatever its age:
    /// RP-Initiated Logout 1.0 section 2 accepts an expired `id_token_hint`.
    ///
    /// Only an ID token: access tokens are signed with the same keys and reach resource servers,
    /// and one must neither sign its user out unasked nor choose the client whose post-logout
    /// URI is used. So the header's `typ` must be `JWT`, `aud` a single string other than the
    /// issuer (a device's token names the issuer) and equal to `azp`, and the token must carry
    /// neither `scope` nor `client_id`, which every access token of this server has. The caller
    /// checks that `aud` is a registered client.
    ///
    /// - Throws: ``ServiceError`` `.invalidRequest` when the token does not parse, is not
    ///   signed by one of our published keys, names another issuer, or is not shaped as an ID
    ///   token.
    func hint(_ token: String) throws(ServiceError) -> LogoutHint {
        guard let jws = try? CompactJWS(parsing: token, algorithms: [.rs256]),
            jws.headerValue("typ") == .string(Self.type),
            let kid = jws.keyID, let key = keys.publicKey(forKeyID: kid, now: clock.seconds),
            jws.isSignatureValid(with: key), let claims = try? jws.claims(), claims["iss"]?.stringValue == issuer,
            let user = claims["sub"]?.stringValue, let audience = claims["aud"]?.stringValue, audience != issuer,
            claims["azp"]?.stringValue == audience, claims["scope"] == nil, claims["client_id"] == nil
        else { throw ServiceError(.invalidRequest, "the id_token_hint is not an ID token of this server") }
        return LogoutHint(clientID: audience, user: user, sessionID: claims["sid"]?.stringValue)
    }

    /// What an `id_token_hint` says: the client (`aud`), the user (`sub`), and the browser
    /// session whose sign-in issued it (`sid`; nil for a CIBA sign-in, which has none).
    struct LogoutHint: Sendable {
        let clientID: String
        let user: String
        let sessionID: String?
    }
}
