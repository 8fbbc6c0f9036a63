import KeyAuth

/// What a relying party collects for an authorization code.
struct AuthorizationGrant: Sendable {
    /// The `at+jwt` access token, `aud` the client.
    let accessToken: String
    /// The RS256 ID token.
    let idToken: String
    /// The access token's lifetime in seconds.
    let expiresIn: Int64
    /// `Bearer`, or `DPoP` for a token bound to the key of the request's DPoP proof.
    let tokenType: String
    /// The scope granted.
    let scope: String
    /// The user signed in and the device that approved, for the request log.
    var user: String? = nil
    var deviceKID: String? = nil
}

extension OpenIDProvider {
    /// Issues a one-time authorization code for `request`, answered by the signed-in `session`
    /// (PROTOCOL.md section 10, "Authorization codes"), whose sign-in achieved `acr`
    /// (``achievedContext(of:for:)``).
    ///
    /// - Returns: the code: 256 random bits, base64url; only its SHA-256 is stored.
    /// - Throws: ``StorageError``; `KeyAuthError` when the random generator fails.
    func issueAuthorizationCode(
        for request: PendingAuthorizationRecord, session: BrowserSessionRecord, acr: String
    ) throws -> String {
        let code = Base64URL.encode(try CryptoPrimitives.randomBytes(count: 32))
        let time = now()
        try storage.insertAuthorizationCode(
            AuthorizationCodeRecord(
                codeHash: try CryptoPrimitives.sha256(Array(code.utf8)), clientID: request.clientID,
                redirectURI: request.redirectURI, codeChallenge: request.codeChallenge, nonce: request.nonce,
                scope: request.scope, user: session.user, approvingKID: session.approvingKID ?? "",
                authTime: session.signedInAt ?? time, methods: session.methods,
                sessionID: BrowserSessions.sessionID(of: session), expiresAt: time + Self.authorizationCodeLifetime,
                acr: acr))
        try AuditTrail(storage: storage, now: now).record(
            .issueCode, by: .accountPage(approvedBy: session.approvingKID ?? "-"), user: session.user,
            subject: request.clientID)
        return code
    }

    /// Redeems an authorization code at the token endpoint (`grant_type=authorization_code`).
    ///
    /// Every check is made before the code is marked redeemed, and the redemption is one
    /// conditional update recording the new access token's `jti`. A code that comes again (or
    /// loses a race) is refused and the token its first redemption issued is revoked (RFC 6749
    /// section 4.1.2: the code may have been stolen).
    ///
    /// - Throws: ``ServiceError`` `.invalidGrant` for an unknown, expired, already redeemed or
    ///   another client's code, a `redirect_uri` that is not the authorization request's, a
    ///   `code_verifier` that does not match the challenge, or an approving device revoked since;
    ///   `.invalidRequest` for a missing `code`, `redirect_uri` or `code_verifier`;
    ///   ``StorageError``; `KeyAuthError` when signing fails.
    ///
    /// With a DPoP proof (already checked by ``KeyAuthService/checkTokenRequestProof(_:)``), the access token is
    /// bound to the proof's key (`cnf.jkt`, RFC 9449 section 6) and `/userinfo` then takes it
    /// only with a proof of that key.
    func redeemAuthorizationCode(
        _ code: String, redirectURI: String?, verifier: String?, client: ClientRecord,
        proof: VerifiedDPoPProof? = nil
    ) throws -> AuthorizationGrant {
        guard let redirectURI, !redirectURI.isEmpty else {
            throw ServiceError(.invalidRequest, "redirect_uri is missing")
        }
        guard let verifier, !verifier.isEmpty else {
            throw ServiceError(.invalidRequest, "code_verifier is missing (PKCE is required)")
        }
        let invalid = ServiceError(.invalidGrant, "the authorization code is not valid")
        let codeHash = try CryptoPrimitives.sha256(Array(code.utf8))
        guard code.utf8.count == 43, let record = try storage.authorizationCode(codeHash: codeHash) else {
            throw invalid
        }
        guard record.clientID == client.id else { throw invalid }
        guard record.redirectURI.isSameBytes(as: redirectURI) else {
            throw ServiceError(.invalidGrant, "redirect_uri is not the one of the authorization request")
        }
        guard Self.isValidCodeVerifier(verifier),
            CryptoPrimitives.constantTimeEquals(
                Array(try Self.codeChallenge(for: verifier).utf8), Array(record.codeChallenge.utf8))
        else { throw ServiceError(.invalidGrant, "the code_verifier does not match the code_challenge") }
        // A second redemption by the client the code was issued to, with its verifier: the code
        // leaked (RFC 6749 section 4.1.2), and the first redemption's tokens go. Anyone else who
        // merely saw the code (browser history, a Referer, a log) cannot pass the checks above,
        // and so cannot revoke the client's tokens by presenting it.
        if record.redeemedAt != nil {
            try revokeFirstRedemption(of: record)
            throw ServiceError(.invalidGrant, "the authorization code was already used; its tokens are revoked")
        }
        guard now() < record.expiresAt else { throw invalid }
        guard let device = try storage.device(kid: record.approvingKID), device.status == .active,
            device.user == record.user
        else { throw ServiceError(.invalidGrant, "the device that approved the sign-in was revoked") }

        if let proof { try service.claimProof(proof, atResource: false) }
        let jti = Base64URL.encode(try CryptoPrimitives.randomBytes(count: 16))
        let acr = record.acr ?? AuthenticationContextClass.stated(for: record.methods).rawValue
        var claims = JWTClaims()
        if let proof { claims["cnf"] = .object(["jkt": .string(proof.keyThumbprint)]) }
        claims.set("aud", string: client.id)
        claims.set("client_id", string: client.id)
        claims.set("acr", string: acr)
        claims.set("amr", strings: record.methods)
        claims.set("device_tier", string: device.tier.rawValue)
        claims.set("scope", string: record.scope)
        claims.set("device_jkt", string: device.kid)
        claims.set("auth_time", integer: record.authTime)
        claims.set("jti", string: jti)
        let accessToken = try service.tokens.issue(
            user: record.user, deviceKID: device.kid, bound: false, extra: claims)
        // Signed before the code is used up: a signature that fails after it would leave the
        // client a code that is only refused, and the user a sign-in to start again.
        let idToken = try idTokens.sign(
            IDTokens.Subject(
                user: record.user, clientID: client.id, nonce: record.nonce, authTime: record.authTime, acr: acr,
                methods: record.methods, sessionID: record.sessionID, accessToken: accessToken))
        let time = now()
        let audit = AuditEvent(
            time: time, action: .redeemCode, actor: AuditActor.client(id: client.id).description, user: record.user,
            subject: device.kid, detail: nil)
        switch try storage.redeemAuthorizationCode(
            codeHash: codeHash, at: time, accessTokenJTI: jti,
            accessTokenExpiresAt: time + service.settings.accessTokenLifetime, audit: audit
        )
        {
        case .redeemed:
            break
        case .alreadyRedeemed(let current):
            try revokeFirstRedemption(of: current)
            throw ServiceError(.invalidGrant, "the authorization code was already used; its tokens are revoked")
        case .unknown:
            throw invalid
        case .approverInactive:
            // Revoked between the check above and the redemption.
            throw ServiceError(.invalidGrant, "the device that approved the sign-in was revoked")
        }
        return AuthorizationGrant(
            accessToken: accessToken, idToken: idToken, expiresIn: service.settings.accessTokenLifetime,
            tokenType: proof != nil ? TokenResponse.dpop : TokenResponse.bearer, scope: record.scope,
            user: record.user, deviceKID: device.kid)
    }

    /// The ID token of an approved CIBA request whose scope asks for `openid` (CIBA Core 1.0
    /// section 10.1.1, which answers as OpenID Connect Core section 3.1.3.3), or nil: signed as
    /// the code flow's, with `auth_time` the approval, `at_hash` of `accessToken` and the request's
    /// id in ``IDTokens/authRequestIDClaim``, and the `acr` the approval achieved; no `nonce` and
    /// no `sid`, since the request had no nonce and no browser.
    ///
    /// - Throws: `KeyAuthError` when no RS256 key can sign it (`/bc-authorize` refuses such a
    ///   request before the user is asked, ``canSignIDTokens``).
    func backchannelIDToken(
        for request: SignInRequestRecord, client: ClientRecord, accessToken: String, acr: String
    ) throws(KeyAuthError) -> String? {
        guard Self.asksForOpenID(request.scope) else { return nil }
        return try idTokens.sign(
            IDTokens.Subject(
                user: request.user, clientID: client.id, nonce: nil, authTime: request.answeredAt ?? now(), acr: acr,
                methods: request.methods, sessionID: nil, accessToken: accessToken, authRequestID: request.id))
    }

    /// Revokes the access token a code's first redemption issued, and records the reuse.
    private func revokeFirstRedemption(of record: AuthorizationCodeRecord) throws {
        if let jti = record.accessTokenJTI {
            try storage.revokeAccessToken(
                jti: jti, expiresAt: record.accessTokenExpiresAt ?? now() + service.settings.accessTokenLifetime)
        }
        try AuditTrail(storage: storage, now: now).record(
            .reuseCode, by: .client(id: record.clientID), user: record.user, subject: record.accessTokenJTI)
    }

    /// The user an access token issued to a client names, for `/userinfo`: our keys, `aud` its
    /// `client_id`, a client that still exists, not revoked by a reused code, and the device that
    /// approved the sign-in (`device_jkt`) still active and the user's.
    ///
    /// A revoked device loses its browser sessions and its unredeemed codes at once; without the
    /// last check, the tokens it approved went on naming the user here (a deleted one too) until
    /// they expired.
    ///
    /// - Throws: ``ServiceError`` `.invalidToken`; ``StorageError``.
    func clientAccessToken(_ token: String) throws -> AccessTokenClaims {
        let claims = try service.tokens.verifyIssuedToClient(token)
        guard try storage.client(id: claims.clientID) != nil, try !storage.isAccessTokenRevoked(jti: claims.jwtID),
            let kid = claims.claims["device_jkt"]?.stringValue, let device = try storage.device(kid: kid),
            device.status == .active, device.user == claims.user
        else { throw ServiceError(.invalidToken, "the access token is not valid") }
        return claims
    }

    /// The S256 challenge of `verifier` (RFC 7636 section 4.2).
    static func codeChallenge(for verifier: String) throws(KeyAuthError) -> String {
        Base64URL.encode(try CryptoPrimitives.sha256(Array(verifier.utf8)))
    }

    /// RFC 7636 section 4.1: 43 to 128 characters of `[A-Z] / [a-z] / [0-9] / "-" / "." / "_" / "~"`.
    static func isValidCodeVerifier(_ text: String) -> Bool {
        (43...128).contains(text.utf8.count)
            && text.utf8.allSatisfy { byte in
                (0x41...0x5a).contains(byte) || (0x61...0x7a).contains(byte) || (0x30...0x39).contains(byte)
                    || byte == 0x2d || byte == 0x2e || byte == 0x5f || byte == 0x7e
            }
    }
}
