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
        /// Open requests per user at most: a device shows each one, so more would only tire
        /// the user into approving one they did not make (push fatigue).
        var maximumOpenPerUser: Int = 3
        /// Seconds a client waits between polls (CIBA `interval`).
        var pollInterval: Int64 = 5
        /// Seconds added to a request's interval each time its client polls faster.
        var slowDownStep: Int64 = 5
        /// How long an expired request is kept, so that a late poll learns `expired_token`.
        var retention: Int64 = 600
    }

    let storage: any ServerStorage
    let settings: Settings
    /// Wakes the long polls of this instance when a request is made here.
    let watchers: SignInRequestWatchers
    let now: @Sendable () -> Int64

    /// Makes a request for `user`.
    ///
    /// - Parameters:
    ///   - kind: who asks.
    ///   - clientID: the client, for `backchannel` requests.
    ///   - bindingMessage: the client's, or nil for a 2-digit number made here.
    ///   - scope: passed on to the token, as asked.
    ///   - requestedExpiry: seconds the client wants the request to live, capped.
    ///   - address: where the request came from, shown to the user.
    ///   - redirectURI: where an `authorization` request sends the browser back.
    /// - Throws: ``ServiceError`` `.unknownUserID` for a user with no active device (or a name
    ///   no user can have), `.invalidBindingMessage`, `.invalidRequest` for an expiry that is
    ///   not a positive number, `.slowDown` when the user has the most open requests already;
    ///   ``StorageError``.
    func start(
        kind: SignInRequestKind, clientID: String?, user: String, bindingMessage: String?, scope: String?,
        requestedExpiry: String?, from address: String?, redirectURI: String? = nil
    ) throws -> SignInRequestRecord {
        var lifetime = settings.maximumLifetime
        if let requestedExpiry {
            guard let seconds = Int64(requestedExpiry), seconds > 0 else {
                throw ServiceError(.invalidRequest, "requested_expiry must be a positive number of seconds")
            }
            lifetime = min(seconds, settings.maximumLifetime)
        }
        let normalizedMessage: String?
        do {
            normalizedMessage = try bindingMessage.map(NameRule.bindingMessage.normalize)
        } catch {
            throw ServiceError(.invalidBindingMessage, "binding_message \(error)")
        }
        guard InputRules.isValidUser(user), try storage.hasActiveDevice(user: user) else {
            throw ServiceError(.unknownUserID, "the user has no device that can approve a sign-in")
        }
        let time = now()
        let request = SignInRequestRecord(
            id: Base64URL.encode(try CryptoPrimitives.randomBytes(count: 32)), kind: kind, clientID: clientID,
            user: user, bindingMessage: try normalizedMessage ?? Self.makeBindingCode(), scope: scope,
            requestedFrom: address, createdAt: time, expiresAt: time + lifetime, pollInterval: settings.pollInterval,
            redirectURI: redirectURI)
        switch try storage.insertSignInRequest(request, maximumOpen: settings.maximumOpenPerUser, now: time) {
        case .inserted:
            // The request is in the group commit's open batch, which the watchers' reads (other
            // connections) see only once it is committed: woken before, they would find nothing
            // and wait for their once-a-second check. So they are woken once it is durable (at
            // once when nothing is pending: outside a scope a write returns durable).
            let watchers = watchers
            if let scope = DurabilityScope.current {
                scope.whenDurable { _ in watchers.notify(user: user) }
            } else {
                watchers.notify(user: user)
            }
            return request
        case .tooManyOpen(let earliestExpiry):
            throw ServiceError(
                .slowDown(retryAfter: Int(max(earliestExpiry - time, 1))),
                "the user has \(settings.maximumOpenPerUser) sign-in requests open already")
        }
    }

    /// `user`'s open requests, oldest first.
    func open(for user: String) throws(StorageError) -> [SignInRequestRecord] {
        try storage.openSignInRequests(user: user, now: now())
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

    /// Whether `request` can no longer be answered or collected.
    func isExpired(_ request: SignInRequestRecord) -> Bool {
        now() >= request.expiresAt
    }

    /// Deletes requests past their retention.
    func purgeExpired() throws(StorageError) {
        try storage.purgeSignInRequests(expiredBefore: now() - settings.retention)
    }

    /// A number from 10 to 99, drawn uniformly: short enough to type, and a user who types what
    /// they see cannot approve someone else's request by chance more often than one time in 90.
    static func makeBindingCode() throws(KeyAuthError) -> String {
        while true {
            let byte = try CryptoPrimitives.randomBytes(count: 1)[0]
            // 180 is the largest multiple of 90 under 256: no value is more likely than another.
            if byte < 180 { return String(10 + Int(byte) % 90) }
        }
    }
}
