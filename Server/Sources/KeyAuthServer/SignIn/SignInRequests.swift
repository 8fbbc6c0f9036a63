import KeyAuth

/// Requests to sign a user in by approval on one of their devices (PROTOCOL.md section 8): made
/// by a client application (CIBA) or by the account page, listed to the user's devices, watched
/// for, and purged after they expire.
///
/// One machinery for every way in: a request records who started it (``SignInRequestKind`` and
/// the client), and everything after that (the device's list, the approval with its assertion,
/// the one-time collection) is the same whoever asked.
struct SignInRequests: Sendable {
    /// The limits of sign-in requests.
    struct Settings: Sendable {
        /// The longest a request waits for an answer, in seconds (`requested_expiry` is capped to
        /// it), and the lifetime of a request that asks for none.
        var maximumLifetime: Int64 = 300
        /// The shortest: a `requested_expiry` below is raised to it, so that a client cannot make
        /// requests expire (and free their place) as fast as it makes them.
        var minimumLifetime: Int64 = 60
        /// Requests of an authenticated client (CIBA): 3 open per user at most (a device shows
        /// each one, so more would only tire the user into approving one they did not make),
        /// 20 an hour; of those, one client may hold 2 open and make 10 an hour, so that it
        /// cannot use up what the user's other clients need.
        var clientLimits = SignInRequestLimits(
            maximumOpen: 3, maximumPerWindow: 20, maximumOpenFromClient: 2, maximumPerWindowFromClient: 10)
        /// Requests started by anyone with a browser (the account page's and `/authorize`'s
        /// sign-in), counted per address first: one open per address (a new one from the same
        /// address replaces the old) and 5 an hour, so that one party cannot use up the user's
        /// own browser's share; then 5 open and 20 an hour per user, the push-fatigue bound.
        /// Refusals look like successes to the browser, so that they tell nobody which user names
        /// exist.
        var anonymousLimits = SignInRequestLimits(
            maximumOpen: 5, maximumPerWindow: 20, replacesSameAddress: true, maximumPerWindowFromAddress: 5)
        /// Device approvals the signed-in account page asks for: one open per user, 10 an hour.
        var signedInLimits = SignInRequestLimits(maximumOpen: 1, maximumPerWindow: 10, replacesSameAddress: true)
        /// The server's notices (a recovery code used): no cap. Each notice uses up one of the
        /// user's recovery codes (``RecoveryCodes/count`` to a set, and a new set needs a device's
        /// approval), which bounds them; a cap would let whoever holds several codes fill it with
        /// notices of its own and enrol the next device unannounced (and, before a device under
        /// its own notice was refused denials, empty it again by denying them). The registration stores each notice with its device
        /// (``DeviceEnrollmentCode/recovery(code:notice:audit:)``), not through ``start``, so nothing
        /// checks these limits today; they state the rule for any later path that would.
        var noticeLimits = SignInRequestLimits(maximumOpen: Int.max, maximumPerWindow: Int.max)
        /// How long a notice stays in the devices' lists: a day, since nobody waits for it in
        /// front of a screen.
        var noticeLifetime: Int64 = 86_400
        /// Wrong codes an approving device may type for one request; the last denies it.
        var maximumCodeAttempts = 3
        /// Seconds a client waits between polls (CIBA `interval`).
        var pollInterval: Int64 = 5
        /// Seconds added to a request's interval each time its client polls faster.
        var slowDownStep: Int64 = 5
        /// How long an expired request is kept: a late poll learns `expired_token`, and the hourly
        /// limits count the requests of the last hour.
        var retention: Int64 = 3600

        /// The defaults, with `lifetime` as the longest a request waits (the shortest lowered to
        /// it when it is under a minute, as on a test server).
        init(lifetime: Int64 = 300) {
            maximumLifetime = lifetime
            minimumLifetime = min(minimumLifetime, lifetime)
        }

        /// The limits of requests of `origin`.
        func limits(for origin: SignInRequestOrigin) -> SignInRequestLimits {
            switch origin {
            case .client: clientLimits
            case .anonymous: anonymousLimits
            case .signedIn: signedInLimits
            case .server: noticeLimits
            }
        }
    }

    /// Seconds an answer given in time can still be collected past its request's expiry: the
    /// one rule for a CIBA client's poll, a browser's waiting session and the account page's
    /// new recovery codes.
    ///
    /// A device answers only a live request (one conditional update in storage), so an answer
    /// was always given before the expiry, and the device was told so; the expiry ends the wait
    /// for an answer, not the answer. Whoever collects it learns of it at their next look: a
    /// client polls every 5 s (more after `slow_down`), the waiting page's script every 2 s (5 s
    /// after a failed fetch), a hidden tab's timers may be slowed to once a minute, and a person
    /// clicks Continue or `Show the new codes` a moment after answering on the device. Two
    /// minutes covers all of these. A longer bound would leave an approval nobody collected
    /// usable for the hour a request is kept (``Settings/retention``); past it the answer reads as
    /// expired (CIBA's `expired_token`), as an unanswered request does from its own expiry.
    static let answerGrace: Int64 = 120

    let storage: any ServerStorage
    let settings: Settings
    /// Wakes the long polls of this instance when a request is made here.
    let watchers: SignInRequestWatchers
    let now: @Sendable () -> Int64

    /// Makes a request for `user`.
    ///
    /// - Parameters:
    ///   - kind: who asks; it decides the limits (``Settings/limits(for:)``).
    ///   - clientID: the client, for `backchannel` and `authorization` requests.
    ///   - bindingMessage: the client's, or nil for a 2-digit number made here.
    ///   - scope: passed on to the token, as asked.
    ///   - requestedExpiry: seconds the client wants the request to live, within the bounds.
    ///   - address: where the request came from, shown to the user.
    ///   - redirectURI: where an `authorization` request sends the browser back.
    ///   - subject: the pending device a `device` request approves.
    ///   - requestedBy: the account page's session that made a `device` or `recovery-codes` request.
    ///   - acrValues: the authentication context classes asked for (keyauth's, in the order of
    ///     preference): only an approval meeting one of them completes the request.
    /// - Throws: ``ServiceError`` `.unknownUserID` for a user with no active device (or a name
    ///   no user can have), `.invalidBindingMessage` (also for a message that reads as a
    ///   refusal), `.invalidRequest` for an expiry that is not a positive number, `.slowDown` when
    ///   the user has the most requests of that origin already; ``StorageError``.
    func start(
        kind: SignInRequestKind, clientID: String?, user: String, bindingMessage: String?, scope: String?,
        requestedExpiry: String?, from address: String?, redirectURI: String? = nil, subject: String? = nil,
        acrValues: [String] = [], requestedBy: String? = nil
    ) throws -> SignInRequestRecord {
        var lifetime = kind.origin == .server ? settings.noticeLifetime : settings.maximumLifetime
        if let requestedExpiry {
            guard let seconds = Int64(requestedExpiry), seconds > 0 else {
                throw ServiceError(.invalidRequest, "requested_expiry must be a positive number of seconds")
            }
            lifetime = min(max(seconds, settings.minimumLifetime), settings.maximumLifetime)
        }
        try Self.checkScope(scope)
        let normalizedMessage: String?
        do {
            normalizedMessage = try bindingMessage.map(NameRule.bindingMessage.normalize)
        } catch {
            throw ServiceError(.invalidBindingMessage, "binding_message \(error)")
        }
        if let normalizedMessage, InputRules.refusingAnswers.contains(Self.normalizedCode(normalizedMessage)) {
            throw ServiceError(
                .invalidBindingMessage,
                "binding_message may not be a word that refuses at the device (deny, no, cancel, ...)")
        }
        if let normalizedMessage, InputRules.assentingAnswers.contains(Self.normalizedCode(normalizedMessage)) {
            throw ServiceError(
                .invalidBindingMessage,
                "binding_message may not be a word typed out of habit to agree (yes, ok, approve, ...)")
        }
        if let normalizedMessage {
            try Self.checkTyped(normalizedMessage, shownWith: scope)
            try Self.checkApart(
                normalizedMessage,
                from: shownText(
                    clientID: clientID, scope: nil, address: address, redirectURI: redirectURI, subject: subject))
        }
        guard InputRules.isValidUser(user), try storage.hasActiveDevice(user: user) else {
            throw ServiceError(.unknownUserID, "the user has no device that can approve a sign-in")
        }
        let time = now()
        if kind.origin == .signedIn {
            // A request whose page session idled out holds the user's slot of this origin while
            // no device can list or approve it (``open(for:)``): it goes before the new one, and
            // stays gone if the new one is refused, as nothing could have approved it.
            for open in try storage.openSignInRequests(user: user, now: time) where Self.answersAskingSession(open) {
                if try !isAskingSessionLive(open) { try storage.withdrawSignInRequest(id: open.id, at: time) }
            }
        }
        let code =
            try normalizedMessage
            ?? Self.makeBindingCode(
                avoiding: shownText(
                    clientID: clientID, scope: scope, address: address, redirectURI: redirectURI, subject: subject))
        let request = SignInRequestRecord(
            id: Base64URL.encode(try CryptoPrimitives.randomBytes(count: 32)), kind: kind, clientID: clientID,
            user: user, bindingMessage: code, scope: scope,
            requestedFrom: address, createdAt: time, expiresAt: time + lifetime, pollInterval: settings.pollInterval,
            redirectURI: redirectURI, subject: subject, acrValues: acrValues, requestedBy: requestedBy)
        let limits = settings.limits(for: kind.origin)
        switch try storage.insertSignInRequest(request, limits: limits, now: time) {
        case .inserted:
            wakeWatchers(of: user)
            return request
        case .tooManyOpen(let earliestExpiry):
            throw ServiceError(
                .slowDown(retryAfter: Int(clamping: max(earliestExpiry.subtractingSaturating(time), 1))),
                "the user has \(limits.maximumOpen) sign-in requests open already")
        case .tooManyInWindow(let retryAt):
            throw ServiceError(
                .slowDown(retryAfter: Int(clamping: max(retryAt.subtractingSaturating(time), 1))),
                "the user got \(limits.maximumPerWindow) sign-in requests in the last hour already")
        case .clientShareUsed(let retryAt):
            throw ServiceError(
                .slowDown(retryAfter: Int(clamping: max(retryAt.subtractingSaturating(time), 1))),
                "this client has \(limits.maximumOpenFromClient ?? 0) of the user's sign-in requests open, or made "
                    + "\(limits.maximumPerWindowFromClient ?? 0) in the last hour, already; the rest are kept for the "
                    + "user's other clients")
        }
    }

    /// The notice of `device`, which a recovery code enrolled, to the user's other active
    /// devices: a request of kind `recovery` that they cannot approve, and whose denial revokes
    /// the device. It is not stored here: the device's insert stores it in its own transaction
    /// (``DeviceEnrollmentCode/recovery(code:notice:audit:)``), and the registration then calls
    /// ``wakeWatchers(of:)``.
    func recoveryNotice(of device: DeviceRecord, from address: String) throws -> SignInRequestRecord {
        // The device's own time, so that the notice ends exactly a lifetime after the device
        // was made, whatever the code's hashing took in between.
        let time = device.createdAt
        return SignInRequestRecord(
            id: Base64URL.encode(try CryptoPrimitives.randomBytes(count: 32)), kind: .recovery, clientID: nil,
            user: device.user, bindingMessage: try Self.makeBindingCode(), scope: nil, requestedFrom: address,
            createdAt: time, expiresAt: time + settings.noticeLifetime, pollInterval: settings.pollInterval,
            redirectURI: nil, subject: device.kid, acrValues: [], requestedBy: nil)
    }

    /// Wakes the long polls of `user`'s devices after a request of theirs was stored.
    ///
    /// The request is in the group commit's open batch, which the watchers' reads (other
    /// connections) see only once it is committed: woken before, they would find nothing and wait
    /// for their once-a-second check. So they are woken once it is durable (at once when nothing
    /// is pending: outside a scope a write returns durable).
    func wakeWatchers(of user: String) {
        let watchers = watchers
        if let scope = DurabilityScope.current {
            // A request whose write failed is not one to show: its creator was told so.
            scope.whenDurable { failure in if failure == nil { watchers.notify(user: user) } }
        } else {
            watchers.notify(user: user)
        }
    }

    /// The longest `scope` a request may carry, in bytes.
    static let maximumScopeLength = 256

    /// Refuses a `scope` that is not RFC 6749's (section 3.3): scope tokens of printable ASCII
    /// other than `"` and `\`, separated by single spaces, at most ``maximumScopeLength`` bytes.
    ///
    /// The approving device shows it beside the prompt for the code, and the token carries it: a
    /// client could otherwise put text there that reads as the code ("your code is 57"), in a
    /// script that turns it around, or kilobytes of it into every token.
    static func checkScope(_ scope: String?) throws(ServiceError) {
        guard let scope, !scope.isEmpty else { return }
        let bytes = Array(scope.utf8)
        let isTokenByte = { (byte: UInt8) in
            byte == 0x21 || (0x23...0x5B).contains(byte) || (0x5D...0x7E).contains(byte)
        }
        let tokens = bytes.split(separator: 0x20, omittingEmptySubsequences: false)
        guard bytes.count <= maximumScopeLength,
            tokens.allSatisfy({ !$0.isEmpty && $0.allSatisfy(isTokenByte) })
        else {
            throw ServiceError(
                .invalidScope,
                "scope must be scope tokens of printable ASCII (no quote or backslash) separated by single spaces, "
                    + "at most \(maximumScopeLength) bytes")
        }
    }

    /// A code as typed and as stored, for comparison: surrounding spaces trimmed, lower case, so
    /// that neither case nor a stray space fails a right code.
    static func normalizedCode(_ text: String) -> String {
        Substring(text).trimmingWhitespace().lowercased()
    }

    /// Whether `typed` is `request`'s code, compared in constant time.
    static func isCode(_ typed: String, of request: SignInRequestRecord) -> Bool {
        CryptoPrimitives.constantTimeEquals(
            Array(normalizedCode(typed).utf8), Array(normalizedCode(request.bindingMessage).utf8))
    }

    /// `user`'s open requests, oldest first: those of an account page session that is no longer
    /// signed in (one that idled out is not told) are left out, as no device can approve them.
    func open(for user: String) throws(StorageError) -> [SignInRequestRecord] {
        var open: [SignInRequestRecord] = []
        for request in try storage.openSignInRequests(user: user, now: now()) {
            if Self.answersAskingSession(request), try !isAskingSessionLive(request) { continue }
            open.append(request)
        }
        return open
    }

    /// Whether approving `request` answers the account page session that made it: a device's
    /// approval activates the device that session chose, and new recovery codes are shown to it.
    static func answersAskingSession(_ request: SignInRequestRecord) -> Bool {
        request.kind == .device || request.kind == .recoveryCodes
    }

    /// Whether the account page session that made `request` (tagged with its id's hash) is still
    /// signed in by an active device of the request's user.
    ///
    /// The approval answers that session: a device's approval activates the device the session
    /// chose, and new recovery codes are shown to it alone. A session signed out, expired, or
    /// ended with the device that signed it in (a revocation ends those sessions because they may
    /// be someone else's) takes its open requests with it, so that the code it showed cannot
    /// still be typed into one of the user's devices to finish what it started.
    func isAskingSessionLive(_ request: SignInRequestRecord) throws(StorageError) -> Bool {
        guard let idHash = request.askingSessionHash, let session = try storage.browserSession(idHash: idHash),
            session.user == request.user, now() < session.expiresAt, !session.isApplicationSession
        else { return false }
        return try BrowserSessions.isSignedInByActiveDevice(session, in: storage)
    }

    /// What a long poll gets: the list now, or later.
    enum Watch: Sendable {
        case now([SignInRequestRecord])
        /// The list comes through the answer given to ``open(for:after:waiting:answer:)``.
        case later
    }

    /// `user`'s open requests at once when one of them comes after `position`, when `seconds`
    /// is 0, or when this instance already has as many long polls waiting as it allows
    /// (``SignInRequestWatchers``); otherwise `answer` gets them, on another thread, once one
    /// comes after `position` or when `seconds` have passed.
    func open(
        for user: String, after position: SignInRequestPosition, waiting seconds: Int,
        answer: @escaping @Sendable (Result<[SignInRequestRecord], any Error>) -> Void
    ) throws -> Watch {
        let requests = try open(for: user)
        guard seconds > 0, !requests.contains(where: { $0.position > position }) else { return .now(requests) }
        let waiting = watchers.wait(
            user: user, seconds: seconds, load: { try open(for: user) },
            isNew: { requests in requests.contains { $0.position > position } }, answer: answer)
        return waiting ? .later : .now(requests)
    }

    /// Whether `request` can no longer be answered: an answer given before stays collectable a
    /// while longer (``isCollectable(_:at:)``).
    func isExpired(_ request: SignInRequestRecord) -> Bool {
        now() >= request.expiresAt
    }

    /// Whether the answer a device gave to `request` can still be collected at `time`: it was
    /// approved or denied (necessarily while the request was live) and `time` is less than
    /// ``answerGrace`` past the request's expiry. A pending request has no answer to collect,
    /// and a collected one has nothing left.
    static func isCollectable(_ request: SignInRequestRecord, at time: Int64) -> Bool {
        switch request.status {
        case .approved, .denied: request.expiresAt > collectionCutoff(at: time)
        case .pending, .issued: false
        }
    }

    /// ``isCollectable(_:at:)``'s bound in the form a collection in storage takes it: at `time`,
    /// an answer is collectable while its request's expiry is after this.
    ///
    /// Collections that write (``SignInStorage/markSignInRequestIssued(id:expiringAfter:)``)
    /// carry it in their conditional update, so that the check and the collection are one step
    /// with one clock reading: a collection is decided by the reading it writes with, not by an
    /// earlier check, so one that starts in the grace's last instant and writes after it finds
    /// the grace over.
    static func collectionCutoff(at time: Int64) -> Int64 {
        time.subtractingSaturating(answerGrace)
    }

    /// Deletes requests past their retention, by `time`: the database's (the cleanup's), so that
    /// an instance whose clock ran ahead deletes no request another instance still serves.
    func purgeExpired(now time: Int64) throws(StorageError) {
        try storage.purgeSignInRequests(expiredBefore: time.subtractingSaturating(settings.retention))
    }
}
