import KeyAuth

/// What the provider answers about a signed-in user after the code flow: UserInfo and
/// RP-Initiated Logout.
extension OpenIDProvider {
    /// The claims of an access token presented at UserInfo (OpenID Connect Core section 5.3):
    /// issued to a client that still exists, not revoked by a reused code, and presented as it
    /// must be (a DPoP-bound token only with a proof of its key for this request, RFC 9449
    /// section 7).
    ///
    /// - Throws: ``ServiceError`` `.invalidToken`, `.invalidDPoPProof` or `.useDPoPNonce`;
    ///   ``StorageError``.
    func userInfo(
        token: String, scheme: AccessTokenRules.Scheme, proof: String?, method: String, path: String
    ) throws -> AccessTokenClaims {
        let claims = try clientAccessToken(token)
        try service.checkPresentation(
            of: claims, token: token, scheme: scheme, proof: proof, method: method, path: path,
            rules: service.tokens.clientTokenRules)
        return claims
    }

    /// The client and user of an `id_token_hint`: an ID token of ours (never an access token,
    /// ``IDTokens/hint(_:)``) issued to a client that is still registered; nil for anything
    /// else.
    func logoutHint(_ hint: String) throws -> IDTokens.LogoutHint? {
        guard let token = try? idTokens.hint(hint), try client(id: token.clientID) != nil else { return nil }
        return token
    }

    /// The client `clientID` when `uri` is one of its registered post-logout redirect URIs
    /// (byte for byte), or nil.
    func postLogoutClient(_ clientID: String, redirectURI uri: String) throws -> ClientRecord? {
        guard let client = try client(id: clientID),
            client.postLogoutRedirectURIs.contains(where: { $0.isSameBytes(as: uri) })
        else { return nil }
        return client
    }

    /// Ends a browser session at a relying party's request, and records it for `clientID` in the
    /// audit trail.
    func endSession(_ session: BrowserSessions.Presented, clientID: String?) throws {
        try BrowserSessions(service: service).end(session)
        try AuditTrail(storage: storage, now: now).record(
            .endSession, by: .accountPage(approvedBy: session.record.approvingKID ?? "-"),
            user: session.record.user, subject: clientID)
    }
}
