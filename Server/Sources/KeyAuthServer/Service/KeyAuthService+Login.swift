import KeyAuth

/// A successful login.
struct LoginResult: Sendable {
    /// The `at+jwt` access token.
    let accessToken: String
    /// Its lifetime in seconds.
    let expiresIn: Int64
    /// `DPoP` for a token bound to the device key, `Bearer` otherwise.
    let tokenType: String
    /// The user and device that logged in, for the request log (nil for a client's CIBA token,
    /// whose log line names no device).
    let user: String?
    let deviceKID: String?
    /// A host login's offline grant (``OfflineGrants``), nil for every other login.
    var offlineGrant: String? = nil
}

extension KeyAuthService {
    /// Logs in with a device assertion (PROTOCOL.md sections 2 and 4, "Log in"), in the order
    /// the protocol gives: parse, look the device up, verify against its key (or a decoy),
    /// claim the `jti`, check the device's state, issue the token.
    ///
    /// A signature of a length that no allowed key makes is refused while parsing, before any
    /// lookup, with the description an unknown key gets: it could verify under no registered
    /// key, and refusing it before the registry is consulted keeps its cost free of anything
    /// the registry holds. The state (rule 8) is checked after the signature, so that pending
    /// and denied answers go only to the key's holder.
    ///
    /// With a DPoP proof (already checked by ``checkTokenRequestProof(_:)``), the proof's key
    /// must be the assertion's, and the token is bound to it (`cnf.jkt`, `token_type` `DPoP`).
    ///
    /// An assertion may state how the device checked its user (`amr`, as an approval does); the
    /// token then carries that statement instead of `["swk"]`, so that a service can tell a login
    /// after a PIN from one with the key alone. The server cannot check what a device says, as
    /// for approvals; a malformed statement is refused rather than dropped. A host login's
    /// statement (`host_login`, ``HostLoginStatement``) is written to the audit trail, and the
    /// answer carries the host's renewed offline grant (``OfflineGrants``).
    func login(assertion: String, proof: VerifiedDPoPProof? = nil) throws -> LoginResult {
        let parsed = try parseAssertion(assertion)
        let stored = try storage.loginDevice(kid: parsed.keyID)
        let (key, device) = try loginKeys.key(for: stored, signature: parsed.signature)
        let verified = try verifyAssertion(parsed, key: key)
        // Only a device's own key returns one; a decoy verifies nothing.
        guard let device else { throw ServiceError(.invalidGrant, DeviceAssertionVerifier.uniformFailure) }
        var methods = AccessTokens.defaultMethods
        if verified.claims.contains("amr") {
            guard let stated = try? verified.claims.strings("amr"), AuthenticationMethod.isValidStatement(stated)
            else {
                throw ServiceError(
                    .invalidGrant, "the assertion's amr must state hwk or swk, and at most one of pin or user")
            }
            methods = stated
        }
        let hostLogin = try HostLoginStatement(verified.claims)
        if let proof, proof.keyThumbprint != device.kid {
            throw ServiceError(
                .invalidDPoPProof(atResource: false), "the DPoP proof is not signed by the assertion's device key")
        }
        try claimJWTID(of: verified)
        if let proof { try claimProof(proof, atResource: false) }
        try checkCanLogIn(device)
        try hostLogin?.checkUser(of: device)
        // A host login stands in for a password: a key that signs without a PIN (as made, as its
        // approver's allowed, or as nobody said) is as good as whatever runs as the user, who
        // may since have put a PIN of their own on it.
        if hostLogin != nil, !device.mayStandInForPassword {
            throw ServiceError(
                .accessDenied,
                "this device key was not registered as protected by a PIN (or was approved by one that was not), "
                    + "so it cannot log in to a host; register a device with a PIN")
        }
        if let id = hostLogin?.hostClient { try HostClients.checkAllowed(device.user, atClientID: id, in: storage) }
        try applyDevicePolicy(device.tier, at: "login", kid: device.kid, user: device.user)
        // device_tier: what the server established at registration, unlike amr, which the device
        // states.
        let token = try tokens.issueForLogin(
            user: device.user, deviceKID: device.kid, bound: proof != nil, methods: methods,
            deviceTier: device.tier.rawValue)
        try storage.recordLogin(kid: device.kid, at: now())
        var offlineGrant: String?
        if let hostLogin {
            try AuditTrail(storage: storage, now: now).record(
                .hostLogin, by: .device(kid: device.kid), user: device.user, subject: hostLogin.host,
                detail: hostLogin.detail)
        }
        // Renewed by every online host login, so a host that goes offline has the latest one;
        // none while the notice of a recovery code's enrolment is open, since a grant would let
        // the device in offline after a denial revoked it (the host's stored grant is cleared).
        if let hostLogin, try openNotice(of: device) == nil {
            offlineGrant = try OfflineGrants(
                keys: tokens.keys, issuer: settings.issuer, lifetime: settings.offlineGrantLifetime, clock: tokens.clock
            ).issue(user: device.user, deviceKID: device.kid, statement: hostLogin)
        }
        return LoginResult(
            accessToken: token, expiresIn: settings.accessTokenLifetime,
            tokenType: proof != nil ? TokenResponse.dpop : TokenResponse.bearer, user: device.user,
            deviceKID: device.kid, offlineGrant: offlineGrant)
    }

    /// Rule 8: only an active device logs in; the others learn why.
    private func checkCanLogIn(_ device: DeviceRecord) throws(ServiceError) {
        switch device.status {
        case .active:
            return
        case .pending:
            if isExpiredPending(device) {
                throw ServiceError(.expiredToken, "the registration expired before it was approved")
            }
            throw ServiceError(.authorizationPending, "the device waits for approval from another device")
        case .denied:
            throw ServiceError(.deviceDenied, "the device was denied")
        case .revoked:
            throw ServiceError(.invalidGrant, DeviceAssertionVerifier.uniformFailure)
        }
    }
}
