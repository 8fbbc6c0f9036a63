/// The `sign_in_requests` table: requests to sign a user in, waiting for one of their devices.
extension SQLStorage {
    static let signInRequestColumns = """
        id, kind, client_id, user_name, binding_message, scope, requested_from, status, created_at, expires_at, \
        poll_interval, last_polled_at, answered_at, answering_kid, methods, redirect_uri, code_attempts, subject, \
        acr_values, requested_by
        """

    /// Serialises the open-request cap per user: "sirq" in ASCII, the user name hashed.
    static func signInRequestInsertLock(user: String) -> SQLLock {
        SQLLock(key: .named(space: 0x7369_7271, name: user))
    }

    /// Serialises the polls of one request: "poll" in ASCII, the request id hashed.
    static func signInRequestPollLock(id: String) -> SQLLock {
        SQLLock(key: .named(space: 0x706f_6c6c, name: id))
    }

    /// Counts and inserts in one transaction under the user's lock, as device inserts do (see
    /// ``insertDevice(_:rule:)`` for why a lock and not one statement under PostgreSQL's READ
    /// COMMITTED).
    package func insertSignInRequest(
        _ request: SignInRequestRecord, limits: SignInRequestLimits, now: Int64
    ) throws(StorageError) -> SignInRequestInsertion {
        let kinds = request.kind.origin.kinds.map { "'\($0.rawValue)'" }.joined(separator: ", ")
        return try database.write { connection throws(StorageError) in
            try connection.transaction { () throws(StorageError) -> SignInRequestInsertion in
                try connection.lock(Self.signInRequestInsertLock(user: request.user))
                let windowStart = now.subtractingSaturating(limits.window)
                if let perAddress = limits.maximumPerWindowFromAddress, let address = request.requestedFrom {
                    // Counted by the rate limits' key (an IPv4 address, an IPv6 /64), not the
                    // text: one IPv6 host picks a new address of its /64 for each request. The
                    // rows are the user's in the window, which the per-user limit keeps few.
                    let key = RateLimitKey(address: address)
                    let times = try connection.query(
                        """
                        SELECT requested_from, created_at FROM sign_in_requests
                        WHERE user_name = $1 AND kind IN (\(kinds)) AND created_at > $2 AND requested_from IS NOT NULL
                        """,
                        [.text(request.user), .integer(windowStart)]
                    ) { row throws(StorageError) -> Int64? in
                        guard let from = row.text(0), RateLimitKey(address: from) == key else { return nil }
                        return row.integer(1)
                    }.compactMap { $0 }
                    if times.count >= perAddress, let oldest = times.min() {
                        return .tooManyInWindow(retryAt: oldest.addingSaturating(limits.window))
                    }
                }
                if let client = request.clientID,
                    let refusal = try Self.clientShareRefusal(
                        client, of: request.user, kinds: kinds, limits: limits, now: now, on: connection)
                {
                    return refusal
                }
                let recent = try connection.execute(
                    """
                    SELECT COUNT(*), MIN(created_at) FROM sign_in_requests
                    WHERE user_name = $1 AND kind IN (\(kinds)) AND created_at > $2
                    """,
                    [.text(request.user), .integer(windowStart)]
                ).firstRow
                if let count = recent?.integer(0), count >= Int64(limits.maximumPerWindow),
                    let oldest = recent?.integer(1)
                {
                    return .tooManyInWindow(retryAt: oldest.addingSaturating(limits.window))
                }
                // Open requests, not counting the ones this request replaces: those of the same
                // address, by the rate limits' key again (the per-user cap keeps them few).
                let open = try connection.query(
                    """
                    SELECT id, requested_from, expires_at FROM sign_in_requests
                    WHERE user_name = $1 AND kind IN (\(kinds)) AND status = 'pending' AND expires_at > $2
                    """,
                    [.text(request.user), .integer(now)]
                ) { row throws(StorageError) in
                    (id: row.text(0) ?? "", from: row.text(1), expiresAt: row.integer(2) ?? 0)
                }
                let replacedKey =
                    limits.replacesSameAddress ? request.requestedFrom.map(RateLimitKey.init(address:)) : nil
                let replaced = open.filter { row in
                    replacedKey != nil && row.from.map(RateLimitKey.init(address:)) == replacedKey
                }
                let kept = open.filter { row in !replaced.contains { $0.id == row.id } }
                if kept.count >= limits.maximumOpen, let earliest = kept.map(\.expiresAt).min() {
                    return .tooManyOpen(earliestExpiry: earliest)
                }
                // Only once the request is allowed: a refused one replaces nothing.
                // Ended as a withdrawal is, so that no instance's clock finds it open.
                for row in replaced {
                    try connection.execute(
                        """
                        UPDATE sign_in_requests SET expires_at = $3
                        WHERE id = $1 AND status = 'pending' AND expires_at > $2
                        """,
                        [.text(row.id), .integer(now), .integer(Self.withdrawnExpiry(at: now))])
                }
                try Self.insertSignInRequestRow(request, in: connection)
                return .inserted
            }
        }
    }

    /// Inserts `request` as it is, in the caller's transaction, which has checked its limits.
    static func insertSignInRequestRow(
        _ request: SignInRequestRecord, in connection: any SQLConnection
    ) throws(StorageError) {
        try connection.execute(
            """
            INSERT INTO sign_in_requests (\(signInRequestColumns))
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20)
            """,
            request.columnValues)
    }

    /// The count and the denial under the request's poll lock, so that two wrong codes at once
    /// cannot both find a last attempt left.
    package func recordWrongCode(
        id: String, maximumAttempts: Int, answeringKID: String, at time: Int64
    ) throws(StorageError) -> WrongCodeOutcome {
        try database.write { connection throws(StorageError) in
            try connection.transaction { () throws(StorageError) -> WrongCodeOutcome in
                try connection.lock(Self.signInRequestPollLock(id: id))
                let counted = try connection.execute(
                    """
                    UPDATE sign_in_requests SET code_attempts = code_attempts + 1
                    WHERE id = $1 AND status = 'pending' AND expires_at > $2
                    """,
                    [.text(id), .integer(time)])
                guard counted.affectedRowCount == 1,
                    let attempts = try connection.execute(
                        "SELECT code_attempts FROM sign_in_requests WHERE id = $1", [.text(id)]
                    ).firstRow?.integer(0)
                else { return .closed }
                guard attempts >= Int64(maximumAttempts) else {
                    return .tryAgain(
                        attemptsLeft: Int(clamping: Int64(maximumAttempts).subtractingSaturating(attempts)))
                }
                try connection.execute(
                    """
                    UPDATE sign_in_requests SET status = 'denied', answered_at = $2, answering_kid = $3
                    WHERE id = $1 AND status = 'pending'
                    """,
                    [.text(id), .integer(time), .text(answeringKID)])
                return .denied
            }
        }
    }

    package func signInRequest(id: String) throws(StorageError) -> SignInRequestRecord? {
        try database.read { connection throws(StorageError) in
            try Self.signInRequest(id: id, on: connection)
        }
    }

    private static func signInRequest(id: String, on connection: any SQLConnection) throws(StorageError)
        -> SignInRequestRecord?
    {
        try connection.queryFirst("SELECT \(signInRequestColumns) FROM sign_in_requests WHERE id = $1", [.text(id)]) {
            row throws(StorageError) in try SignInRequestRecord(row: row)
        }
    }

    package func openSignInRequests(user: String, now: Int64) throws(StorageError) -> [SignInRequestRecord] {
        try database.read { connection throws(StorageError) in
            try connection.query(
                """
                SELECT \(Self.signInRequestColumns) FROM sign_in_requests
                WHERE user_name = $1 AND status = 'pending' AND expires_at > $2 ORDER BY created_at, id
                """,
                [.text(user), .integer(now)]
            ) { row throws(StorageError) in try SignInRequestRecord(row: row) }
        }
    }

    package func approvedSignInRequests(
        user: String, kind: SignInRequestKind, expiringAfter oldestCollectable: Int64
    ) throws(StorageError) -> [SignInRequestRecord] {
        try database.read { connection throws(StorageError) in
            try connection.query(
                """
                SELECT \(Self.signInRequestColumns) FROM sign_in_requests WHERE user_name = $1 AND kind = $2
                AND status = 'approved' AND expires_at > $3 ORDER BY created_at, id
                """,
                [.text(user), .text(kind.rawValue), .integer(oldestCollectable)]
            ) { row throws(StorageError) in try SignInRequestRecord(row: row) }
        }
    }

    /// The read and the update under the request's poll lock, so that two polls at once cannot
    /// both find the previous one old enough.
    package func pollSignInRequest(
        id: String, at time: Int64, slowDownStep: Int64
    ) throws(StorageError) -> (request: SignInRequestRecord, tooEarly: Bool)? {
        try database.write { connection throws(StorageError) in
            try connection.transaction { () throws(StorageError) -> (request: SignInRequestRecord, tooEarly: Bool)? in
                try connection.lock(Self.signInRequestPollLock(id: id))
                guard let request = try Self.signInRequest(id: id, on: connection) else { return nil }
                let tooEarly =
                    request.lastPolledAt.map { time.subtractingSaturating($0) < request.pollInterval } ?? false
                try connection.execute(
                    "UPDATE sign_in_requests SET last_polled_at = $2, poll_interval = $3 WHERE id = $1",
                    [
                        .text(id), .integer(time),
                        .integer(request.pollInterval.addingSaturating(tooEarly ? slowDownStep : 0)),
                    ])
                return (request, tooEarly)
            }
        }
    }

    /// Whether `client` holds its share (``SignInRequestLimits/maximumOpenFromClient``,
    /// ``SignInRequestLimits/maximumPerWindowFromClient``) of `user`'s requests of `kinds`: the
    /// refusal, or nil.
    private static func clientShareRefusal(
        _ client: String, of user: String, kinds: String, limits: SignInRequestLimits, now: Int64,
        on connection: any SQLConnection
    ) throws(StorageError) -> SignInRequestInsertion? {
        if let perWindow = limits.maximumPerWindowFromClient {
            let recent = try connection.execute(
                """
                SELECT COUNT(*), MIN(created_at) FROM sign_in_requests
                WHERE user_name = $1 AND kind IN (\(kinds)) AND created_at > $2 AND client_id = $3
                """,
                [.text(user), .integer(now.subtractingSaturating(limits.window)), .text(client)]
            ).firstRow
            if let count = recent?.integer(0), count >= Int64(perWindow), let oldest = recent?.integer(1) {
                return .clientShareUsed(retryAt: oldest.addingSaturating(limits.window))
            }
        }
        if let open = limits.maximumOpenFromClient {
            let pending = try connection.execute(
                """
                SELECT COUNT(*), MIN(expires_at) FROM sign_in_requests
                WHERE user_name = $1 AND kind IN (\(kinds)) AND status = 'pending' AND expires_at > $2
                AND client_id = $3
                """,
                [.text(user), .integer(now), .text(client)]
            ).firstRow
            if let count = pending?.integer(0), count >= Int64(open), let earliest = pending?.integer(1) {
                return .clientShareUsed(retryAt: earliest)
            }
        }
        return nil
    }

    package func markSignInRequestIssued(id: String, expiringAfter oldestCollectable: Int64, audit: AuditEvent?)
        throws(StorageError) -> Bool
    {
        try database.write { connection throws(StorageError) in
            try connection.transaction { () throws(StorageError) -> Bool in
                guard
                    let request = try connection.execute(
                        """
                        SELECT answering_kid, user_name FROM sign_in_requests
                        WHERE id = $1 AND status = 'approved' AND expires_at > $2
                        """,
                        [.text(id), .integer(oldestCollectable)]
                    ).firstRow
                else { return false }
                if let kid = request.text(0) {
                    guard try Self.isActive(kid, of: request.text(1), in: connection) else { return false }
                }
                guard
                    try connection.execute(
                        """
                        UPDATE sign_in_requests SET status = 'issued'
                        WHERE id = $1 AND status = 'approved' AND expires_at > $2
                        """,
                        [.text(id), .integer(oldestCollectable)]
                    ).affectedRowCount == 1
                else { return false }
                if let audit { try Self.insertAuditRow(audit, in: connection) }
                return true
            }
        }
    }

    package func withdrawSignInRequest(id: String, at time: Int64) throws(StorageError) -> Bool {
        try database.write { connection throws(StorageError) in
            try connection.execute(
                "UPDATE sign_in_requests SET expires_at = $3 WHERE id = $1 AND status = 'pending' AND expires_at > $2",
                [.text(id), .integer(time), .integer(Self.withdrawnExpiry(at: time))]
            ).affectedRowCount == 1
        }
    }

    package func withdrawSignInRequests(requestedBy tag: String, at time: Int64) throws(StorageError) {
        try database.write { connection throws(StorageError) in
            try Self.withdrawSignInRequests(requestedBy: tag, at: time, in: connection)
        }
    }

    /// ``withdrawSignInRequests(requestedBy:at:)`` inside `connection`'s transaction.
    static func withdrawSignInRequests(
        requestedBy tag: String, at time: Int64, in connection: any SQLConnection
    ) throws(StorageError) {
        try connection.execute(
            """
            UPDATE sign_in_requests SET expires_at = $3
            WHERE requested_by = $1 AND status = 'pending' AND expires_at > $2
            """,
            [.text(tag), .integer(time), .integer(withdrawnExpiry(at: time))])
    }

    /// The expiry of a request withdrawn at `time`: ``ClockSkewCheck/purgeMargin`` before it. Each
    /// instance judges expiry by its own clock, and an expiry of `time` left the request open to
    /// approval on an instance whose clock was behind the withdrawing one's; every instance that
    /// `serve` lets start is within that margin of every other.
    static func withdrawnExpiry(at time: Int64) -> Int64 {
        time.subtractingSaturating(ClockSkewCheck.purgeMargin)
    }

    package func purgeSignInRequests(expiredBefore: Int64) throws(StorageError) -> Int {
        try database.write { connection throws(StorageError) in
            try connection.execute("DELETE FROM sign_in_requests WHERE expires_at < $1", [.integer(expiredBefore)])
                .affectedRowCount
        }
    }
}

extension SignInRequestRecord {
    /// Reads a row of ``SQLStorage/signInRequestColumns``.
    init(row: SQLRow) throws(StorageError) {
        guard let id = row.text(0), let kind = row.text(1).flatMap(SignInRequestKind.init(rawValue:)),
            let user = row.text(3), let bindingMessage = row.text(4),
            let status = row.text(7).flatMap(SignInRequestStatus.init(rawValue:)), let createdAt = row.integer(8),
            let expiresAt = row.integer(9), let pollInterval = row.integer(10), let methods = row.text(14)
        else { throw StorageError(.queryFailed, "a sign-in request row is incomplete") }
        self.init(
            id: id, kind: kind, clientID: row.text(2), user: user, bindingMessage: bindingMessage, scope: row.text(5),
            requestedFrom: row.text(6), status: status, createdAt: createdAt, expiresAt: expiresAt,
            pollInterval: pollInterval, lastPolledAt: row.integer(11), answeredAt: row.integer(12),
            answeringKID: row.text(13), methods: methods.split(separator: " ").map(String.init),
            redirectURI: row.text(15), codeAttempts: Int(clamping: row.integer(16) ?? 0), subject: row.text(17),
            acrValues: (row.text(18) ?? "").split(separator: " ").map(String.init), requestedBy: row.text(19))
    }

    /// The values of ``SQLStorage/signInRequestColumns``, in order.
    var columnValues: [SQLValue] {
        [
            .text(id), .text(kind.rawValue), SQLValue(clientID), .text(user), .text(bindingMessage), SQLValue(scope),
            SQLValue(requestedFrom), .text(status.rawValue), .integer(createdAt), .integer(expiresAt),
            .integer(pollInterval), SQLValue(lastPolledAt), SQLValue(answeredAt), SQLValue(answeringKID),
            .text(methods.joined(separator: " ")), SQLValue(redirectURI), .integer(Int64(codeAttempts)),
            SQLValue(subject), SQLValue(acrValues.isEmpty ? nil : acrValues.joined(separator: " ")),
            SQLValue(requestedBy),
        ]
    }
}
