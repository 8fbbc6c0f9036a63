import KeyAuth

/// What an application collects for an approved sign-in request.
struct SignInGrant: Sendable {
    /// The `at+jwt` access token.
    let accessToken: String
    /// Its lifetime in seconds.
    let expiresIn: Int64
    /// The RS256 ID token, when the request's scope has `openid`.
    var idToken: String? = nil
    /// The request's `scope`, as sent.
    var scope: String? = nil
    /// The user signed in and the device that approved, for the request log.
    var user: String? = nil
    var deviceKID: String? = nil
}

extension KeyAuthService {
    /// The `acr` of a token whose user approved on a device with a presence check (a PIN or a
    /// PAM conversation) besides the device key.
    static let keyAndPresenceACR = AuthenticationContextClass.deviceKeyAndPresence.rawValue
    /// The `acr` when the device says it checked nothing but holding its key.
    static let keyOnlyACR = AuthenticationContextClass.deviceKey.rawValue

    /// Checks a code the user typed on an approving device against the request's, before the
    /// device asks for its PIN (PROTOCOL.md section 8, "Code").
    ///
    /// A device whose tier cannot meet the request's `acr_values` learns it here, before its user
    /// types a PIN for an approval that would be refused; the code is not counted then.
    ///
    /// A recovery notice has no code to check: it is never approved, and three wrong codes would
    /// close it as denied without the revocation a denial makes, so the device the notice names
    /// could dismiss the one alarm about itself.
    ///
    /// - Returns: the request, when the code is right.
    /// - Throws: ``ServiceError`` `.wrongCode` with the attempts left; `.deviceDenied` when that
    ///   was the last attempt (the request is denied now); `.accessDenied` when the device was
    ///   registered without a PIN and the request is a login to a host, or when the device's tier
    ///   cannot meet the request's `acr_values`; `.invalidRequest` for a recovery notice; what
    ///   ``openRequest(id:of:)`` throws.
    func checkSignInCode(id: String, code: String, by actor: DeviceRecord) throws -> SignInRequestRecord {
        let request = try openRequest(id: id, of: actor.user, approving: true)
        guard request.kind != .recovery else {
            throw ServiceError(
                .invalidRequest,
                "a recovery notice has no code: leave it to expire, or deny it to revoke the device it names")
        }
        let context = RequestedAuthenticationContext(stored: request.acrValues)
        guard context.isReachable(by: actor.tier) else {
            throw ServiceError(.accessDenied, context.refusal(tier: actor.tier))
        }
        // Before the code is typed: a device that cannot approve a login to a host says so first,
        // as does one a recovery code enrolled while its notice is open.
        if !actor.mayStandInForPassword, try isHostLogin(request) { throw Self.unprotectedHostApprover }
        try refuseWhileAnnounced(actor, approving: request)
        guard SignInRequests.isCode(code, of: request) else { throw try wrongCode(for: request, by: actor) }
        return request
    }

    /// Answers a sign-in request of the caller's user from the caller's device (PROTOCOL.md
    /// section 8, "Answer").
    ///
    /// An approval needs a fresh device assertion of the caller's own device, checked exactly as
    /// a login's (section 2, its `jti` claimed in the same replay cache), carrying `auth_req_id`
    /// equal to the request, `amr` saying how the device checked the user, and `binding_code`,
    /// the code the user typed from the screen that started the sign-in: an access token alone
    /// can never approve, and neither can a device the user did not read the code into. A
    /// request of kind `device` also needs a presence check in `amr` (`pin` or `user`), and
    /// activates the pending device it names. A request that asked for `acr_values` is approved
    /// only by a device that meets one of them (its tier and its statement); another device's
    /// approval is refused and the request stays open for one that does. A denial needs only the
    /// token. The answer is one conditional update, so a request is answered once, whichever
    /// device is first; the audit trail records it.
    ///
    /// - Throws: ``ServiceError`` `.unknownSignInRequest` for an unknown id or another user's
    ///   request; `.alreadyAnswered`; `.expiredToken`; `.invalidRequest` for an approval without
    ///   an assertion; `.invalidGrant` for an assertion that fails a check, is replayed, names
    ///   another request or another device, or states no valid `amr`; `.wrongCode` and
    ///   `.deviceDenied` for a wrong code; `.accessDenied` for an approval that does not meet the
    ///   request's `acr_values`; ``StorageError``.
    func answerSignInRequest(
        id: String, decision: SignInDecision, assertion: String?, by actor: DeviceRecord
    ) throws -> SignInRequestRecord {
        let request = try openRequest(id: id, of: actor.user, approving: decision == .approve)
        var methods: [String] = []
        var pendingDevice: DeviceRecord?
        if decision == .approve {
            guard request.kind != .recovery else {
                throw ServiceError(
                    .invalidRequest,
                    "a recovery notice is not approved: leave it to expire, or deny it to revoke the device it names")
            }
            // The account page's requests make what outlives the approving device.
            try refuseWhileAnnounced(actor, approving: request)
            guard let assertion, !assertion.isEmpty else {
                throw ServiceError(.invalidRequest, "an approval needs a device assertion naming the request")
            }
            // A host's push login stands in for a password, as a host login with the device key
            // does (``login(assertion:proof:)``): it needs the PIN, and a key that had none.
            let logsInToHost = try isHostLogin(request)
            if logsInToHost, !actor.mayStandInForPassword { throw Self.unprotectedHostApprover }
            let statement = try deviceStatement(
                assertion, by: actor, naming: (AuthenticationMethod.requestClaim, request.id),
                requiringPresence: request.kind == .device || request.kind == .recoveryCodes || logsInToHost)
            guard let typed = try? statement.claims.string(AuthenticationMethod.codeClaim),
                SignInRequests.isCode(typed, of: request)
            else { throw try wrongCode(for: request, by: actor) }
            methods = statement.methods
            let context = RequestedAuthenticationContext(stored: request.acrValues)
            guard context.achieved(tier: actor.tier, methods: methods) != nil else {
                throw ServiceError(.accessDenied, context.refusal(tier: actor.tier, methods: methods))
            }
            if request.kind == .device { pendingDevice = try pendingSubject(of: request) }
        }
        // Denying the account page's requests is refused to such a device as approving them is:
        // it would keep the user from replacing the codes, or adding the device, that undo it.
        if decision == .deny, request.kind == .device || request.kind == .recoveryCodes {
            try refuseWhileAnnounced(actor, "deny a request to add a device or make recovery codes")
        }
        if decision == .deny, request.kind == .recovery, let kid = request.subject {
            // "This was not me": the device the recovery code enrolled goes, with its sessions.
            // Before the notice is closed, so that a failure on the way leaves it open, to deny
            // again, rather than closed over a device still active. A device under a notice of
            // its own revokes no other device this way either.
            try revoke(kid: kid, ownedBy: actor.user, by: .device(kid: actor.kid))
        }
        let status: SignInRequestStatus = decision == .approve ? .approved : .denied
        // The asking session was checked above; the answer checks it again in its own
        // transaction, for a sign-out or a revocation that ended it since.
        let askingSession =
            decision == .approve && SignInRequests.answersAskingSession(request) ? request.askingSessionHash : nil
        if let pendingDevice {
            try approveDevice(pendingDevice, on: request, by: actor, methods: methods, askingSession: askingSession)
        } else {
            guard
                try storage.answerSignInRequest(
                    id: id, status: status, answeringKID: actor.kid, methods: methods, at: now(),
                    askingSession: askingSession)
            else { throw try answeredMeanwhile(request, by: actor, approving: decision == .approve) }
            try auditAnswer(request, approved: decision == .approve, by: actor, detail: nil)
        }
        var answered = request
        answered.status = status
        answered.answeringKID = actor.kid
        answered.methods = methods
        return answered
    }

    /// The error for an answer that found the request closed: another device answered first, it
    /// expired meanwhile, or its session ended; says which.
    func answeredMeanwhile(_ request: SignInRequestRecord, by actor: DeviceRecord, approving: Bool) throws
        -> ServiceError
    {
        _ = try openRequest(id: request.id, of: actor.user, approving: approving)
        return ServiceError(.alreadyAnswered, "the sign-in request was already answered")
    }

    /// Whether `request` is a host client's push login (PROTOCOL.md section 7.2).
    private func isHostLogin(_ request: SignInRequestRecord) throws -> Bool {
        guard request.kind == .backchannel, let id = request.clientID else { return false }
        return try storage.client(id: id)?.kind == .host
    }

    private static let unprotectedHostApprover = ServiceError(
        .accessDenied,
        "this device key was not registered as protected by a PIN (or was approved by one that was not), so it "
            + "cannot approve a login to a host; approve on a device with a PIN")

    /// Counts a wrong code and says what the device must do: try again, or accept that the
    /// request is denied now.
    private func wrongCode(for request: SignInRequestRecord, by actor: DeviceRecord) throws -> ServiceError {
        let attempts = signIn.settings.maximumCodeAttempts
        switch try storage.recordWrongCode(
            id: request.id, maximumAttempts: attempts, answeringKID: actor.kid, at: now())
        {
        case .tryAgain(let left):
            return ServiceError(
                .wrongCode(attemptsLeft: left),
                "that is not the code shown where the sign-in started; \(left) attempt\(left == 1 ? "" : "s") left")
        case .denied:
            try auditAnswer(request, approved: false, by: actor, detail: "\(attempts) wrong codes")
            return ServiceError(.deviceDenied, "the sign-in request was denied after \(attempts) wrong codes")
        case .closed:
            _ = try openRequest(id: request.id, of: actor.user)
            return ServiceError(.alreadyAnswered, "the sign-in request was already answered")
        }
    }

    /// Records an answer in the audit trail: which device, for which client (or the account
    /// page, or the device approved), which user, and where the request came from.
    func auditAnswer(
        _ request: SignInRequestRecord, approved: Bool, by actor: DeviceRecord, detail extra: String?
    ) throws(StorageError) {
        let subject: String =
            switch request.kind {
            case .backchannel, .authorization: "client:" + (request.clientID ?? "-")
            case .account: "account-page"
            case .device, .recovery: "device:" + (request.subject ?? "-")
            case .recoveryCodes: "recovery-codes"
            }
        var detail = "\(request.kind.rawValue) request from \(request.requestedFrom ?? "an unknown address")"
        if let extra { detail += ", " + extra }
        try AuditTrail(storage: storage, now: now).record(
            approved ? .approveSignIn : .denySignIn, by: .device(kid: actor.kid), user: request.user,
            subject: subject, detail: detail)
    }

    /// The request `id` of `user`, still open.
    ///
    /// An account page's request (a device approval, new recovery codes) is open to `approving`
    /// only while the page's session that made it is (``SignInRequests/isAskingSessionLive(_:)``): ending the
    /// session withdraws its requests, and this also covers one that merely idled out. A denial
    /// of it changes nothing and is let through.
    ///
    /// - Throws: `.unknownSignInRequest`, `.alreadyAnswered`, `.expiredToken`.
    private func openRequest(id: String, of user: String, approving: Bool = false) throws -> SignInRequestRecord {
        guard InputRules.isValidSignInRequestID(id), let request = try storage.signInRequest(id: id),
            request.user == user
        else { throw ServiceError(.unknownSignInRequest, "no such sign-in request") }
        guard request.status == .pending else {
            throw ServiceError(.alreadyAnswered, "the sign-in request was already answered")
        }
        guard !signIn.isExpired(request) else {
            throw ServiceError(.expiredToken, "the sign-in request expired")
        }
        if approving, SignInRequests.answersAskingSession(request), try !signIn.isAskingSessionLive(request) {
            throw ServiceError(
                .expiredToken,
                "the account page that asked for this was signed out or ended; ask again from a signed-in page")
        }
        return request
    }

    /// A client's poll of the token endpoint for its request (CIBA section 10 and 11).
    ///
    /// The expiry ends the wait for an answer, not the answer: a device answers only a live
    /// request (one conditional update), and what it was told is what the client collects for
    /// ``SignInRequests/answerGrace`` past the expiry, however late its next poll within that.
    /// After it, the answer is as expired as an unanswered request (CIBA's `expired_token`), so
    /// that an approval nobody collected is not usable for the hour the request is kept.
    ///
    /// - Returns: the token, once: the request is marked issued in the same step, which also
    ///   checks the grace.
    /// - Throws: ``ServiceError`` `.invalidGrant` for an unknown id, another client's request or
    ///   one already collected; `.pollTooFast` (400 `slow_down`, and the interval grows by 5 s);
    ///   `.expiredToken` for a request left unanswered past its expiry, or answered and not
    ///   collected within the grace; `.authorizationPending`; `.deviceDenied` (`access_denied`)
    ///   when the user denied it, the approving device was revoked since, or it no longer meets
    ///   the request's `acr_values`; ``StorageError``.
    func collectSignIn(authReqID id: String, client: ClientRecord) throws -> SignInGrant {
        let unknown = ServiceError(.invalidGrant, "the auth_req_id is not valid")
        // Ownership first: another client's poll must not touch the request, not even its interval.
        guard InputRules.isValidSignInRequestID(id), let owned = try storage.signInRequest(id: id),
            owned.kind == .backchannel, owned.clientID == client.id
        else { throw unknown }
        let polledAt = now()
        guard
            let (request, tooEarly) = try storage.pollSignInRequest(
                id: id, at: polledAt, slowDownStep: signIn.settings.slowDownStep)
        else { throw unknown }
        let expired: Bool =
            switch request.status {
            case .pending: polledAt >= request.expiresAt
            case .approved, .denied: !SignInRequests.isCollectable(request, at: polledAt)
            case .issued: false
            }
        if expired { throw Self.expiredSignIn }
        if tooEarly {
            throw ServiceError(
                .pollTooFast,
                "polled faster than every \(request.pollInterval) s; wait \(request.pollInterval.addingSaturating(signIn.settings.slowDownStep)) s"
            )
        }
        switch request.status {
        case .pending:
            throw ServiceError(.authorizationPending, "the user has not answered yet")
        case .denied:
            throw ServiceError(.deviceDenied, "the user denied the sign-in")
        case .issued:
            throw ServiceError(.invalidGrant, "the sign-in was already collected")
        case .approved:
            guard let kid = request.answeringKID, let device = try storage.device(kid: kid), device.status == .active,
                device.user == request.user
            else { throw ServiceError(.deviceDenied, "the device that approved the sign-in was revoked") }
            // Checked again, for an approval stored before the rule: by a device without a PIN,
            // or without a presence check.
            if client.kind == .host {
                guard device.mayStandInForPassword else {
                    throw ServiceError(.deviceDenied, Self.unprotectedHostApprover.description)
                }
                guard request.methods.contains(where: AuthenticationMethod.presenceChecks.contains) else {
                    throw ServiceError(.deviceDenied, "a login to a host needs an approval after a presence check")
                }
            }
            // The approval met the request's acr_values; the device's tier is read again, as the
            // token states it now.
            guard
                let acr = RequestedAuthenticationContext(stored: request.acrValues).achieved(
                    tier: device.tier, methods: request.methods)
            else {
                throw ServiceError(.deviceDenied, "the device that approved does not meet the requested acr_values")
            }
            var claims = JWTClaims()
            claims.set("aud", string: client.id)
            claims.set("client_id", string: client.id)
            claims.set("acr", string: acr)
            claims.set("amr", strings: request.methods)
            claims.set("device_tier", string: device.tier.rawValue)
            if let scope = request.scope { claims.set("scope", string: scope) }
            // The approving device, named without `cnf`: the client holds no device key, and a
            // `cnf.jkt` would make the token DPoP-bound to a key it cannot prove.
            claims.set("device_jkt", string: device.kid)
            // Signed before the request is collected: a signature that failed after would leave
            // the client a request its retry finds collected.
            let token = try tokens.issue(user: request.user, deviceKID: device.kid, bound: false, extra: claims)
            let idToken = try openID.backchannelIDToken(for: request, client: client, accessToken: token, acr: acr)
            // The grace is checked again in the collection, against the clock read for it.
            let collectedAt = now()
            guard
                try storage.markSignInRequestIssued(
                    id: id, expiringAfter: SignInRequests.collectionCutoff(at: collectedAt),
                    audit: HostClients.loginEvent(of: request, by: device.kid, client: client, at: collectedAt))
            else {
                // Collected by another poll, its grace over, or its device revoked since the
                // checks above.
                if try storage.signInRequest(id: id)?.status == .issued {
                    throw ServiceError(.invalidGrant, "the sign-in was already collected")
                }
                if !SignInRequests.isCollectable(request, at: collectedAt) { throw Self.expiredSignIn }
                throw ServiceError(.deviceDenied, "the device that approved the sign-in was revoked")
            }
            return SignInGrant(
                accessToken: token, expiresIn: settings.accessTokenLifetime, idToken: idToken, scope: request.scope,
                user: request.user, deviceKID: device.kid)
        }
    }

    /// A poll's answer for a request left unanswered past its expiry, or answered and left
    /// uncollected past ``SignInRequests/answerGrace``.
    private static let expiredSignIn = ServiceError(.expiredToken, "the sign-in request expired")

    /// The name a device shows for who asks: the client's (with its redirect host for an
    /// authorization request), or the account page's.
    func requesterName(of request: SignInRequestRecord) throws(StorageError) -> String {
        switch request.kind {
        case .account:
            return "keyauth account page (\(settings.issuer)/account)"
        case .backchannel:
            guard let id = request.clientID, let client = try storage.client(id: id) else { return "a removed client" }
            // A host says so: the user approves a login to a machine, not to an application.
            return client.kind == .host ? "log in to host \(client.name)" : client.name
        case .authorization:
            // The redirect host next to the registered name: a phishing site that registered
            // (or reuses) a trusted name still shows where the browser is sent.
            guard let id = request.clientID, let client = try storage.client(id: id) else { return "a removed client" }
            return "\(client.name) (redirects to \(RedirectURI.host(of: request.redirectURI ?? "")))"
        case .device:
            // What is approved, so that the user sees whose registration they let in.
            guard let kid = request.subject, let device = try storage.device(kid: kid) else {
                return "keyauth account page: approve a device that no longer exists"
            }
            return "keyauth account page: approve the new device \"\(device.name)\" (\(kid.prefix(8))), "
                + "registered from \(device.registeredFrom ?? "an unknown address")"
        case .recoveryCodes:
            return "keyauth account page: make new recovery codes (the old ones stop working)"
        case .recovery:
            guard let kid = request.subject, let device = try storage.device(kid: kid) else {
                return "keyauth: a recovery code enrolled a device that no longer exists"
            }
            return "keyauth: a recovery code enrolled the new device \"\(device.name)\" (\(kid.prefix(8))) "
                + "from \(device.registeredFrom ?? "an unknown address"); deny this if it was not you"
        }
    }
}
