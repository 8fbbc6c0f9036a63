/// Answers to sign-in requests: the conditional update from `pending`, and the approval of a
/// new device, which answers its request and activates the device in one transaction.
extension SQLStorage {
    package func answerSignInRequest(
        id: String, status: SignInRequestStatus, answeringKID: String, methods: [String], at time: Int64,
        askingSession: [UInt8]?
    ) throws(StorageError) -> Bool {
        try database.write { connection throws(StorageError) in
            try connection.transaction { () throws(StorageError) -> Bool in
                try Self.answer(
                    id: id, status: status, answeringKID: answeringKID, methods: methods, at: time,
                    askingSession: askingSession, on: connection)
            }
        }
    }

    /// The answer, the activation and the move to `issued` in one transaction; a device that
    /// cannot be activated rolls the answer back (``approvalRefused``), so the request stays
    /// pending, to deny or to let expire. A device that another approval activated meanwhile
    /// leaves the answer standing: the user asked for it to be active, and it is.
    package func approveDeviceSignInRequest(
        id: String, device kid: String, answeringKID: String, methods: [String], at time: Int64,
        askingSession: [UInt8]?, createdAfter oldestLive: Int64
    ) throws(StorageError) -> DeviceRequestApprovalOutcome {
        try database.write { connection throws(StorageError) in
            var refusal: DeviceRequestApprovalOutcome?
            do throws(StorageError) {
                return try connection.transaction { () throws(StorageError) -> DeviceRequestApprovalOutcome in
                    // The device must be the one a `device` request names, and its user's.
                    guard
                        let user = try connection.execute(
                            """
                            SELECT r.user_name FROM sign_in_requests r JOIN devices d ON d.kid = r.subject
                            WHERE r.id = $1 AND r.kind = $3 AND r.subject = $2 AND d.user_name = r.user_name
                            """, [.text(id), .text(kid), .text(SignInRequestKind.device.rawValue)]
                        ).firstRow?.text(0)
                    else { return .deviceNotPending }
                    // The user's lock first, as a user's deletion takes it before any row: the
                    // rows below are then never locked in the opposite order to it.
                    try connection.lock(Self.deviceInsertLock(user: user))
                    guard
                        try Self.answer(
                            id: id, status: .approved, answeringKID: answeringKID, methods: methods, at: time,
                            askingSession: askingSession, on: connection)
                    else { return .requestNotOpen }
                    let outcome: DeviceRequestApprovalOutcome
                    switch try Self.approvePendingDevice(
                        kid: kid, approvedBy: answeringKID, at: time, createdAfter: oldestLive, on: connection)
                    {
                    case .approved:
                        outcome = .approved
                    case .notPending where try Self.isActive(kid, of: user, in: connection):
                        outcome = .alreadyActive
                    case .notPending:
                        refusal = .deviceNotPending
                        throw Self.approvalRefused
                    case .approverNotActive:
                        refusal = .approverNotActive
                        throw Self.approvalRefused
                    }
                    // The approval is the user's answer to "approve this device?": the activation
                    // uses it up.
                    try connection.execute(
                        "UPDATE sign_in_requests SET status = 'issued' WHERE id = $1 AND status = 'approved'",
                        [.text(id)])
                    return outcome
                }
            } catch {
                guard let refusal, error.code == Self.approvalRefused.code else { throw error }
                return refusal
            }
        }
    }

    /// Thrown inside ``approveDeviceSignInRequest(id:device:answeringKID:methods:at:askingSession:createdAfter:)``
    /// only to roll its transaction back; never leaves it.
    private static let approvalRefused = StorageError(
        StorageError.Code(rawValue: "approval_refused"), "the device approval was refused")

    /// The user of the account page's own session `idHash` (`signed_in_for` null) when it is
    /// signed in at `time` by a device that is active, else nil. The device's row and then the
    /// session's are read under share locks, so that a sign-out or revocation deleting the
    /// session either commits before or waits for the caller's transaction. The device comes
    /// first because a revocation takes the device's row and then the session's: in the other
    /// order the two could deadlock.
    static func liveAccountSessionUser(
        _ idHash: [UInt8], at time: Int64, on connection: any SQLConnection
    ) throws(StorageError) -> String? {
        // Only the account page's own sessions ask for device approvals and recovery codes.
        let columns =
            "SELECT user_name, approving_kid, expires_at, signed_in_at FROM browser_sessions"
            + " WHERE signed_in_for IS NULL AND"
        let lock = connection.dialect.rowShareLock
        guard
            let seen = try connection.execute(columns + " id_hash = $1", [.blob(idHash)]).firstRow,
            let user = seen.text(0), let kid = seen.text(1),
            try Self.isActive(kid, of: user, in: connection),
            // Read again under the lock; without row locks (SQLite) the write
            // transaction already holds the whole database, and the first read stands.
            let session = lock.isEmpty
                ? seen : try connection.execute(columns + " id_hash = $1" + lock, [.blob(idHash)]).firstRow,
            session.text(0) == user, session.text(1) == kid, session.integer(3) != nil,
            let expiresAt = session.integer(2), time < expiresAt
        else { return nil }
        return user
    }

    /// One conditional `UPDATE` from `pending`: the loser of two answers matches nothing. With
    /// an asking session, its approving device's row and then the session's are read first
    /// under share locks, so that a sign-out or revocation deleting the session either commits
    /// before (nothing is approved) or waits for the approval; the update then also matches only
    /// the session's user's request. The device comes first because a revocation takes the
    /// device's row and then the session's: in the other order the two could deadlock.
    static func answer(
        id: String, status: SignInRequestStatus, answeringKID: String, methods: [String], at time: Int64,
        askingSession: [UInt8]?, on connection: any SQLConnection
    ) throws(StorageError) -> Bool {
        var sessionUser: String?
        if let askingSession {
            guard let user = try liveAccountSessionUser(askingSession, at: time, on: connection) else { return false }
            sessionUser = user
        }
        // The session must be the one that made the request; without one, an approval of a
        // request that a session made matches nothing.
        let sessionCondition: String
        var values: [SQLValue] = [
            .text(id), .text(status.rawValue), .integer(time), .text(answeringKID),
            .text(methods.joined(separator: " ")),
        ]
        if let askingSession, let sessionUser {
            sessionCondition = " AND user_name = $6 AND requested_by = $7"
            values += [.text(sessionUser), .text(BrowserSessionRecord.requestTag(idHash: askingSession))]
        } else if status == .approved {
            sessionCondition = " AND kind NOT IN ($6, $7)"
            values += [
                .text(SignInRequestKind.device.rawValue), .text(SignInRequestKind.recoveryCodes.rawValue),
            ]
        } else {
            sessionCondition = ""
        }
        return try connection.execute(
            """
            UPDATE sign_in_requests SET status = $2, answered_at = $3, answering_kid = $4, methods = $5
            WHERE id = $1 AND status = 'pending' AND expires_at > $3
            """ + sessionCondition, values
        ).affectedRowCount == 1
    }
}
