import KeyAuth

/// The account page's sessions (PROTOCOL.md section 9): begun by a sign-in request of kind
/// `account`, completed once a device of the user approves it, kept on the server, 15 minutes
/// from their last use, and ended by signing out or by revoking the device that approved them.
///
/// The browser holds only a random 256-bit session id in a cookie; storage keys the session by
/// its SHA-256, so reading the table opens no session. Each session has its own CSRF token.
/// The same type serves any later page that signs a browser in by approval.
struct BrowserSessions: Sendable {
    /// Seconds a signed-in session lasts after its last use.
    static let idleLifetime: Int64 = 900

    /// A session as a request presents it: its record and the cookie value that found it.
    struct Presented: Sendable {
        var record: BrowserSessionRecord
        let cookie: String
    }

    /// Where a waiting session's sign-in stands.
    enum SignInState: String, Sendable {
        case pending, approved, denied, expired
    }

    let service: KeyAuthService
    var storage: any ServerStorage { service.storage }

    /// Starts signing `user` in: a sign-in request for their devices (of kind `account`, or
    /// `authorization` for a relying party's `client` and `redirectURI`), and a waiting session
    /// that shows its code.
    ///
    /// A user name with no active device, or whose user got as many requests as the limits
    /// allow, gets a waiting session too, with a code of its own and no request behind it: the
    /// page looks the same, so it tells nobody which names exist. Either session ends
    /// ``SignInRequests/answerGrace`` after the request's expiry (or the expiry a request would
    /// have): as long as an answer given in time can be collected, and no longer. After a
    /// request of the default 5 minutes that is well before the 10 minutes `/authorize` keeps its
    /// pending request. The longer wait grants nothing: the session is still a waiting one,
    /// signed in only when a Continue collects the approval, and an unanswered request shows as
    /// expired from its own expiry on, for a name without devices too.
    /// - Returns: the session, with the cookie value to set.
    /// - Throws: what
    ///   ``SignInRequests/start(kind:clientID:user:bindingMessage:scope:requestedExpiry:from:redirectURI:subject:acrValues:)``
    ///   throws but `.unknownUserID` and `.slowDown`; ``StorageError``.
    func begin(
        user: String, from address: String, client: String? = nil, redirectURI: String? = nil, acrValues: [String] = []
    ) throws -> Presented {
        let time = service.now()
        var request: SignInRequestRecord?
        do {
            request = try service.signIn.start(
                kind: client == nil ? .account : .authorization, clientID: client, user: user, bindingMessage: nil,
                scope: nil, requestedExpiry: nil, from: address, redirectURI: redirectURI, acrValues: acrValues)
        } catch let error as ServiceError {
            // No device to ask, or the user got as many requests as the limits allow: the same
            // waiting page, with nothing behind it, so that neither says which names exist.
            switch error.kind {
            case .unknownUserID, .slowDown: request = nil
            default: throw error
            }
        }
        let cookie = try Self.randomToken()
        // A name with nobody to ask shows a code drawn as a real request's is, from the same
        // text: one drawn otherwise would tell the two apart.
        let code =
            try request?.bindingMessage
            ?? SignInRequests.makeBindingCode(
                avoiding: service.signIn.shownText(
                    clientID: client, scope: nil, address: address, redirectURI: redirectURI, subject: nil))
        let record = BrowserSessionRecord(
            idHash: try Self.hash(cookie), csrfToken: try Self.randomToken(), user: user, signInRequestID: request?.id,
            bindingCode: code, createdAt: time,
            expiresAt: (request?.expiresAt ?? time.addingSaturating(service.signIn.settings.maximumLifetime))
                .addingSaturating(SignInRequests.answerGrace),
            signedInFor: client)
        try storage.insertBrowserSession(record)
        return Presented(record: record, cookie: cookie)
    }

    /// The live session a cookie value names, extended by ``idleLifetime`` when signed in.
    ///
    /// An expired session, or a signed-in one whose approving device is no longer an active
    /// device of its user (revoked since), is deleted and nil is returned.
    ///
    /// Requests of one browser come at once (tabs, an `/authorize` and the account page), and
    /// the read above is already old when one of them decides: the expiry is decided in storage,
    /// by the conditional extension and deletion, so that of two requests at the moment of
    /// expiry either both use the session (the first extended it) or neither does (the first
    /// ended it). A request never uses a session another one ended, nor ends one another used.
    func session(cookie: String?) throws -> Presented? {
        guard let cookie, !cookie.isEmpty, cookie.utf8.count <= 128 else { return nil }
        let idHash = try Self.hash(cookie)
        guard var record = try storage.browserSession(idHash: idHash) else { return nil }
        let time = service.now()
        guard time < record.expiresAt else {
            try storage.deleteBrowserSession(idHash: idHash, expiredAt: time)
            return nil
        }
        if record.isSignedIn {
            guard try isSignedInByActiveDevice(record) else {
                try storage.deleteBrowserSession(idHash: idHash)
                return nil
            }
            record.expiresAt = time + Self.idleLifetime
            guard try storage.extendBrowserSession(idHash: idHash, until: record.expiresAt, ifLiveAt: time) else {
                return nil
            }
        }
        return Presented(record: record, cookie: cookie)
    }

    /// Whether `record` is signed in by a device of its user that is still active: a session
    /// the revoked device approved may be someone else's.
    func isSignedInByActiveDevice(_ record: BrowserSessionRecord) throws(StorageError) -> Bool {
        try Self.isSignedInByActiveDevice(record, in: storage)
    }

    /// ``isSignedInByActiveDevice(_:)`` read from `storage`.
    static func isSignedInByActiveDevice(
        _ record: BrowserSessionRecord, in storage: any ServerStorage
    ) throws(StorageError) -> Bool {
        guard record.isSignedIn, let kid = record.approvingKID, let device = try storage.device(kid: kid) else {
            return false
        }
        return device.status == .active && device.user == record.user
    }

    /// Where a waiting session's sign-in request stands.
    ///
    /// The expiry ends the wait for an answer, not an answer given in time (PROTOCOL.md section
    /// 9): a device answers only a live request (one conditional update), and what it was told
    /// is what the browser gets while it can be collected (``SignInRequests/isCollectable(_:at:)``,
    /// as long as the waiting session lasts). A request left unanswered is `.expired` from its
    /// expiry.
    func state(of session: BrowserSessionRecord) throws(StorageError) -> SignInState {
        guard let id = session.signInRequestID, let request = try storage.signInRequest(id: id) else {
            // Nothing behind it: it expires when a request would, like any other.
            let expiry = session.expiresAt.subtractingSaturating(SignInRequests.answerGrace)
            return service.now() >= expiry ? .expired : .pending
        }
        let time = service.now()
        // A request cut short (replaced by a later start from the same address) waits as a
        // session with nothing behind it does, until the session's own expiry: a name without
        // a device has no request to replace, so "expired" at once would tell this browser that
        // the name has one.
        let waitsUntil = max(request.expiresAt, session.expiresAt.subtractingSaturating(SignInRequests.answerGrace))
        switch request.status {
        case .approved where SignInRequests.isCollectable(request, at: time): return .approved
        case .denied where SignInRequests.isCollectable(request, at: time): return .denied
        case .pending where time < waitsUntil: return .pending
        // Unanswered past its expiry, answered but left past the grace, or collected.
        default: return .expired
        }
    }

    /// Completes an approved sign-in: the request is collected once, and the session is
    /// replaced by a signed-in one under a new id and a new CSRF token, so that an id a page
    /// showed (or someone planted) before the sign-in is worth nothing after it.
    ///
    /// The request's expiry does not end it: it was approved while live, and the approval is
    /// collected until ``SignInRequests/answerGrace`` past that expiry, a bound the collection
    /// checks itself (the waiting session ends then too).
    ///
    /// - Returns: the signed-in session, or nil when the request was not approved, was collected
    ///   already, or its device was revoked since.
    func complete(_ session: Presented) throws -> Presented? {
        guard let id = session.record.signInRequestID, let request = try storage.signInRequest(id: id),
            request.status == .approved, let kid = request.answeringKID,
            let device = try storage.device(kid: kid), device.status == .active, device.user == session.record.user,
            case let time = service.now(),
            try storage.markSignInRequestIssued(id: id, expiringAfter: SignInRequests.collectionCutoff(at: time))
        else { return nil }
        let cookie = try Self.randomToken()
        var record = session.record
        record.idHash = try Self.hash(cookie)
        record.csrfToken = try Self.randomToken()
        record.approvingKID = kid
        record.methods = request.methods
        // When the user approved on the device, not when this browser collected it: `auth_time`
        // and `max_age` speak of the authentication, and a collection may come minutes later.
        record.signedInAt = min(request.answeredAt ?? time, time)
        // Whichever page collects it, an application's approval signs in to applications only
        // (a waiting session says so from its start; one made before schema version 18 does not).
        if request.kind == .authorization { record.signedInFor = request.clientID ?? "" }
        record.expiresAt = time + Self.idleLifetime
        guard try storage.replaceBrowserSession(idHash: session.record.idHash, with: record) else { return nil }
        try AuditTrail(storage: storage, now: service.now).record(
            .browserSignIn, by: .accountPage(approvedBy: kid), user: record.user,
            subject: request.clientID.map { "client:" + $0 } ?? "account-page",
            detail: "from \(request.requestedFrom ?? "an unknown address")")
        return Presented(record: record, cookie: cookie)
    }

    /// Whether the sign-in request of a waiting session was collected: by another tab of the
    /// same browser (same cookie), which replaces this session with its signed-in one. Ending
    /// this session then would end that one before it is stored, and both tabs would lose it.
    func wasCollected(_ session: BrowserSessionRecord) throws(StorageError) -> Bool {
        guard let id = session.signInRequestID else { return false }
        return try storage.signInRequest(id: id)?.status == .issued
    }

    /// Ends a session; a waiting one withdraws its sign-in request too, so that the user's
    /// devices stop asking about a sign-in that its browser gave up (Cancel, "Use another name",
    /// or a sign-in that can no longer complete): what the person did at the screen is what the
    /// device then shows. A signed-in one withdraws what it asked the devices for (a device's
    /// approval, new recovery codes): an approval answers the session that asked.
    ///
    /// The session goes first. An approval of what it asked checks, in its own transaction,
    /// that the session is still stored, so from the deletion on nothing it asked for can be
    /// approved; the withdrawal then takes the requests off the devices' lists.
    func end(_ session: Presented) throws(StorageError) {
        try storage.deleteBrowserSession(idHash: session.record.idHash)
        if session.record.isSignedIn {
            try storage.withdrawSignInRequests(requestedBy: session.record.requestTag, at: service.now())
        } else if let id = session.record.signInRequestID {
            try storage.withdrawSignInRequest(id: id, at: service.now())
        }
    }

    /// 256 random bits, base64url: session ids and CSRF tokens.
    static func randomToken() throws(KeyAuthError) -> String {
        Base64URL.encode(try CryptoPrimitives.randomBytes(count: 32))
    }

    /// The `sid` of a signed-in session in ID tokens: a hash of the stored hash, so it names the
    /// session without opening it.
    static func sessionID(of session: BrowserSessionRecord) throws(KeyAuthError) -> String {
        Base64URL.encode(Array(try CryptoPrimitives.sha256(Array("keyauth sid\n".utf8) + session.idHash).prefix(16)))
    }

    /// The stored form of a session id.
    static func hash(_ cookie: String) throws(KeyAuthError) -> [UInt8] {
        try CryptoPrimitives.sha256(Array(cookie.utf8))
    }
}
