import KeyAuth

/// The `devices` table: registered device keys and their life cycle.
extension SQLStorage {
    static let deviceColumns =
        "kid, user_name, name, public_key_pem, status, created_at, approved_at, revoked_at, last_login_at, registered_from, "
        + "tier, key_protection"

    /// Serialises conditional device inserts per user: "keyd" in ASCII, the user name hashed.
    static func deviceInsertLock(user: String) -> SQLLock {
        SQLLock(key: .named(space: 0x6b65_7964, name: user))
    }

    /// Records a login; deferred, see ``recordLogin(kid:at:)``.
    static let recordLoginSQL = "UPDATE devices SET last_login_at = $1 WHERE kid = $2"

    /// Checks the rule, then inserts, in one transaction under the user's insert lock.
    ///
    /// Under PostgreSQL's READ COMMITTED, a check in the same statement as the insert would read
    /// a snapshot taken before a concurrent registration committed, so two could pass a cap of
    /// 10 at 9. With the lock, registrations of one user run their check and insert one after
    /// another, and each check is a statement of its own after the lock, which sees the previous
    /// holder's committed row. SQLite needs no lock: its write transaction holds the database's
    /// only write lock from before the first check until the commit.
    package func insertDevice(_ device: DeviceRecord, rule: DeviceInsertRule) throws(StorageError) -> DeviceInsertion {
        try database.write { connection throws(StorageError) in
            try connection.transaction { () throws(StorageError) -> DeviceInsertion in
                try connection.lock(Self.deviceInsertLock(user: device.user))
                if try connection.exists("SELECT 1 FROM devices WHERE kid = $1", [.text(device.kid)]) {
                    return .kidTaken
                }
                switch rule {
                case .unconditional, .usingCode:
                    break
                case .userHasNoDevices:
                    let known = try connection.exists(
                        "SELECT 1 FROM devices WHERE user_name = $1 LIMIT 1", [.text(device.user)])
                    if known { return .userHasDevices }
                case .pendingBelow(let limit, let createdAfter):
                    let counted = try connection.execute(
                        """
                        SELECT COUNT(*), MIN(created_at) FROM devices
                        WHERE user_name = $1 AND status = 'pending' AND created_at > $2
                        """,
                        [.text(device.user), .integer(createdAfter)]
                    ).firstRow
                    if let count = counted?.integer(0), count >= Int64(limit), let oldest = counted?.integer(1) {
                        return .pendingLimitReached(oldestCreatedAt: oldest)
                    }
                }
                let inserted = try connection.execute(
                    """
                    INSERT INTO devices (\(Self.deviceColumns)) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
                    ON CONFLICT (kid) DO NOTHING
                    """,
                    device.columnValues)
                // Another user's registration of the same key, under that user's lock.
                guard inserted.affectedRowCount == 1 else { return .kidTaken }
                if case .usingCode(let code) = rule,
                    try !Self.useUp(code, user: device.user, at: device.createdAt, in: connection)
                {
                    // The row inserted just above, in this transaction: as if it never was.
                    try connection.execute("DELETE FROM devices WHERE kid = $1", [.text(device.kid)])
                    return .codeNotUsable
                }
                if case .usingCode(.recovery(_, let notice, var audit)) = rule {
                    let left = try Self.unusedRecoveryCodeCount(user: device.user, in: connection)
                    audit.detail = [audit.detail, "\(left) code\(left == 1 ? "" : "s") left"].compactMap { $0 }
                        .joined(separator: ", ")
                    try Self.insertAuditRow(audit, in: connection)
                    try Self.announce(device, with: notice, in: connection)
                }
                return .inserted
            }
        }
    }

    /// Stores the notice of `device`, which a recovery code enrolled, when its user has another
    /// active device to show it on (``DeviceEnrollmentCode/recovery(code:notice:audit:)``).
    private static func announce(
        _ device: DeviceRecord, with notice: SignInRequestRecord, in connection: any SQLConnection
    ) throws(StorageError) {
        let others = try connection.exists(
            "SELECT 1 FROM devices WHERE user_name = $1 AND status = 'active' AND kid <> $2 LIMIT 1",
            [.text(device.user), .text(device.kid)])
        if others { try insertSignInRequestRow(notice, in: connection) }
    }

    /// Uses up `code` for `user` at `time`; false when it is not usable.
    private static func useUp(
        _ code: DeviceEnrollmentCode, user: String, at time: Int64, in connection: any SQLConnection
    ) throws(StorageError) -> Bool {
        switch code {
        case .enrollment(let hashes):
            for hash in hashes where try consumeEnrollmentCode(hash: hash, user: user, now: time, in: connection) {
                return true
            }
            return false
        case .recovery(let code, _, _):
            // Another user's code enrols nobody.
            guard code.user == user else { return false }
            return try consumeRecoveryCode(code, at: time, in: connection)
        }
    }

    /// Every login reads its device by `kid`: the text is built once, not per call.
    static let deviceByKIDSQL = "SELECT \(deviceColumns) FROM devices WHERE kid = $1"

    package func device(kid: String) throws(StorageError) -> DeviceRecord? {
        let stored = try database.read { connection throws(StorageError) in
            try connection.queryFirst(Self.deviceByKIDSQL, [.text(kid)]) {
                row throws(StorageError) in try DeviceRecord(row: row)
            }
        }
        guard var device = stored else { return nil }
        if case .integer(let time) = database.pendingValue(of: Self.recordLoginSQL, key: kid) {
            device.lastLoginAt = time
        }
        return device
    }

    package func loginDevice(kid: String) throws(StorageError) -> DeviceRecord? {
        guard let loginDevices else { return try device(kid: kid) }
        let found = try loginDevices.device(kid: kid) { () throws(StorageError) in try device(kid: kid) }
        // A kept record counts as settled once its change committed, which is before that
        // change is on disk: the answer built on it waits for the disk, as one read would.
        database.noteKeptRead()
        return found
    }

    package func devices(
        user: String, after position: DeviceListPosition, limit: Int
    ) throws(StorageError) -> [DeviceRecord] {
        withRecordedLogins(
            try database.read { connection throws(StorageError) in
                try connection.query(
                    """
                    SELECT \(Self.deviceColumns) FROM devices WHERE user_name = $1 AND (created_at, kid) > ($2, $3)
                    ORDER BY created_at, kid LIMIT $4
                    """,
                    [.text(user), .integer(position.createdAt), .text(position.kid), .integer(Int64(max(limit, 0)))]
                ) { row throws(StorageError) in try DeviceRecord(row: row) }
            })
    }

    package func allDevices() throws(StorageError) -> [DeviceRecord] {
        withRecordedLogins(
            try database.read { connection throws(StorageError) in
                try connection.query("SELECT \(Self.deviceColumns) FROM devices ORDER BY user_name, created_at, kid") {
                    row throws(StorageError) in try DeviceRecord(row: row)
                }
            })
    }

    /// `devices` with the login times recorded but not yet written.
    private func withRecordedLogins(_ devices: [DeviceRecord]) -> [DeviceRecord] {
        let logins = database.pendingValues(of: Self.recordLoginSQL)
        guard !logins.isEmpty else { return devices }
        return devices.map { device in
            var device = device
            if case .integer(let time) = logins[device.kid] { device.lastLoginAt = time }
            return device
        }
    }

    package func deviceStatuses(user: String) throws(StorageError) -> Set<DeviceStatus.Stored> {
        try database.read { connection throws(StorageError) in
            Set(
                try connection.query("SELECT DISTINCT status FROM devices WHERE user_name = $1", [.text(user)]) { row in
                    row.text(0).flatMap(DeviceStatus.Stored.init(rawValue:))
                }.compactMap { $0 })
        }
    }

    /// One conditional `UPDATE`. Under PostgreSQL's READ COMMITTED a concurrent update of the
    /// same row waits, then re-checks the `WHERE` clause against the committed row; SQLite runs
    /// writes one at a time. Either way the loser of a race matches nothing.
    package func updateStatus(
        kid: String, from expected: DeviceStatus.Stored, to status: DeviceStatus.Stored, at time: Int64
    ) throws(StorageError) -> Bool {
        try database.write { connection throws(StorageError) in
            try Self.updateStatus(kid: kid, from: expected, to: status, at: time, in: connection)
        }
    }

    package func revokeOrDeny(
        kid: String, from expected: DeviceStatus.Stored, to status: DeviceStatus.Stored, at time: Int64,
        audit: AuditEvent
    ) throws(StorageError) -> Bool {
        try database.write { connection throws(StorageError) in
            try connection.transaction { () throws(StorageError) -> Bool in
                guard try Self.updateStatus(kid: kid, from: expected, to: status, at: time, in: connection) else {
                    return false
                }
                if status == .revoked {
                    // The sessions it signed in end, and with them what they asked the user's
                    // devices for (an account page's device approval, new recovery codes).
                    let ended = try connection.query(
                        "SELECT id_hash FROM browser_sessions WHERE approving_kid = $1", [.text(kid)]
                    ) { row in row.blob(0) }
                    for case let idHash? in ended {
                        try Self.withdrawSignInRequests(
                            requestedBy: BrowserSessionRecord.requestTag(idHash: idHash), at: time, in: connection)
                    }
                    try connection.execute("DELETE FROM browser_sessions WHERE approving_kid = $1", [.text(kid)])
                }
                try Self.insertAuditRow(audit, in: connection)
                return true
            }
        }
    }

    private static func updateStatus(
        kid: String, from expected: DeviceStatus.Stored, to status: DeviceStatus.Stored, at time: Int64,
        in connection: any SQLConnection
    ) throws(StorageError) -> Bool {
        try connection.execute(
            """
            UPDATE devices SET status = $1,
                approved_at = CASE WHEN $1 = 'active' THEN $4 ELSE approved_at END,
                revoked_at = CASE WHEN $1 IN ('revoked', 'denied') THEN $4 ELSE revoked_at END
            WHERE kid = $2 AND status = $3
            """,
            [.text(status.rawValue), .text(kid), .text(expected.rawValue), .integer(time)]
        ).affectedRowCount == 1
    }

    package func approvePendingDevice(
        kid: String, approvedBy approverKID: String?, at time: Int64, createdAfter oldestLive: Int64
    ) throws(StorageError) -> DeviceApprovalOutcome {
        try database.write { connection throws(StorageError) in
            try connection.transaction { () throws(StorageError) -> DeviceApprovalOutcome in
                try Self.approvePendingDevice(
                    kid: kid, approvedBy: approverKID, at: time, createdAfter: oldestLive, on: connection)
            }
        }
    }

    /// ``approvePendingDevice(kid:approvedBy:at:createdAfter:)`` inside the caller's transaction.
    static func approvePendingDevice(
        kid: String, approvedBy approverKID: String?, at time: Int64, createdAfter oldestLive: Int64,
        on connection: any SQLConnection
    ) throws(StorageError) -> DeviceApprovalOutcome {
        // What the approver's own key lets the new one keep of its stated protection: a key that
        // signs without a PIN could approve a key of anyone's making.
        var cap = KeyProtection.pin as KeyProtection?
        if let approverKID {
            guard try isActive(approverKID, in: connection) else { return .approverNotActive }
            cap = try keyProtection(of: approverKID, in: connection)
        }
        let kept = KeyProtection.lesser(try keyProtection(of: kid, in: connection), cap)
        let approved = try connection.execute(
            """
            UPDATE devices SET status = 'active', approved_at = $2, key_protection = $4
            WHERE kid = $1 AND status = 'pending' AND created_at > $3
            """,
            [.text(kid), .integer(time), .integer(oldestLive), SQLValue(kept?.rawValue)])
        return approved.affectedRowCount == 1 ? .approved : .notPending
    }

    /// The key protection device `kid` was registered (or approved) with; nil when it is unknown
    /// or there is no such device.
    static func keyProtection(of kid: String, in connection: any SQLConnection) throws(StorageError)
        -> KeyProtection?
    {
        try connection.execute("SELECT key_protection FROM devices WHERE kid = $1", [.text(kid)]).firstRow?
            .text(0).flatMap(KeyProtection.init(rawValue:))
    }

    /// Whether device `kid` is active (and, given `user`, that user's), its row read with a
    /// share lock (PostgreSQL) so that it stays so until the transaction that asks commits: a
    /// revocation or a user's deletion commits before or after.
    static func isActive(_ kid: String, of user: String? = nil, in connection: any SQLConnection)
        throws(StorageError) -> Bool
    {
        guard
            let row = try connection.execute(
                "SELECT status, user_name FROM devices WHERE kid = $1" + connection.dialect.rowShareLock, [.text(kid)]
            ).firstRow
        else { return false }
        return row.text(0) == DeviceStatus.Stored.active.rawValue && (user == nil || row.text(1) == user)
    }

    package func renameDevice(kid: String, name: String) throws(StorageError) -> Bool {
        try database.write { connection throws(StorageError) in
            try connection.execute("UPDATE devices SET name = $2 WHERE kid = $1", [.text(kid), .text(name)])
                .affectedRowCount == 1
        }
    }

    package func raiseTier(kid: String, from expected: DeviceTier, to tier: DeviceTier) throws(StorageError) -> Bool {
        try database.write { connection throws(StorageError) in
            try connection.execute(
                "UPDATE devices SET tier = $3 WHERE kid = $1 AND tier = $2",
                [.text(kid), .text(expected.rawValue), .text(tier.rawValue)]
            ).affectedRowCount == 1
        }
    }

    /// Notes the login as a deferred write: SQLite writes it with the next batch of writes or
    /// within a second, and may lose that second in a crash; PostgreSQL writes it at once.
    /// Reads through this instance show it either way.
    package func recordLogin(kid: String, at time: Int64) throws(StorageError) {
        try database.writeEventually(SQLDeferredWrite(sql: Self.recordLoginSQL, key: kid, value: .integer(time)))
    }

    package func purgeDevices(pendingCreatedBefore: Int64, deniedBefore: Int64) throws(StorageError) -> Int {
        try database.write { connection throws(StorageError) in
            try connection.execute(
                """
                DELETE FROM devices
                WHERE (status = 'pending' AND created_at < $1)
                    OR (status = 'denied' AND COALESCE(revoked_at, created_at) < $2)
                """,
                [.integer(pendingCreatedBefore), .integer(deniedBefore)]
            ).affectedRowCount
        }
    }
}

extension DeviceRecord {
    /// Reads a row of ``SQLStorage/deviceColumns``.
    init(row: SQLRow) throws(StorageError) {
        guard let kid = row.text(0), let user = row.text(1), let name = row.text(2), let pem = row.text(3),
            let status = row.text(4).flatMap(DeviceStatus.Stored.init(rawValue:)), let createdAt = row.integer(5)
        else { throw StorageError(.queryFailed, "a device row is incomplete") }
        self.init(
            kid: kid, user: user, name: name, publicKeyPEM: pem, status: status, createdAt: createdAt,
            approvedAt: row.integer(6), revokedAt: row.integer(7), lastLoginAt: row.integer(8),
            registeredFrom: row.text(9), tier: row.text(10).map(DeviceTier.init(rawValue:)) ?? .software,
            keyProtection: row.text(11).flatMap(KeyProtection.init(rawValue:)))
    }

    /// The values of ``SQLStorage/deviceColumns``, in order.
    var columnValues: [SQLValue] {
        [
            .text(kid), .text(user), .text(name), .text(publicKeyPEM), .text(status.rawValue), .integer(createdAt),
            SQLValue(approvedAt), SQLValue(revokedAt), SQLValue(lastLoginAt), SQLValue(registeredFrom),
            .text(tier.rawValue), SQLValue(keyProtection?.rawValue),
        ]
    }
}
