import KeyAuth

/// The `recovery_codes` table: a user's one-time recovery codes, kept only as salted slow hashes.
extension SQLStorage {
    /// One transaction: the old set is gone exactly when the new one is stored, so a user never
    /// has two sets, nor none after a failed write. The device's row is read with a share lock
    /// (PostgreSQL), so a revocation commits either before (and no codes are stored) or after.
    /// Two replacements for one user run one after the other under the user's insert lock:
    /// under PostgreSQL's READ COMMITTED, the second's delete would not see the first's rows,
    /// and both sets would stay. The lock comes first, as in the registrations that use a code.
    @discardableResult
    package func replaceRecoveryCodes(
        user: String, with codes: [RecoveryCodeRecord], whileActive activeDevice: String?,
        askedBy askingSession: (idHash: [UInt8], at: Int64)?, audit: AuditEvent?
    ) throws(StorageError) -> Bool {
        try database.write { connection throws(StorageError) in
            try connection.transaction { () throws(StorageError) -> Bool in
                // The making device's key protection goes with the codes: a key without a PIN
                // could otherwise make codes that enrol a key claiming one.
                try connection.lock(Self.deviceInsertLock(user: user))
                var protection = KeyProtection.pin as KeyProtection?
                if let activeDevice {
                    guard try Self.isActive(activeDevice, of: user, in: connection) else { return false }
                    protection = try Self.keyProtection(of: activeDevice, in: connection)
                }
                if let askingSession {
                    let sessionUser = try Self.liveAccountSessionUser(
                        askingSession.idHash, at: askingSession.at, on: connection)
                    guard sessionUser == user else { return false }
                }
                try connection.execute("DELETE FROM recovery_codes WHERE user_name = $1", [.text(user)])
                for code in codes {
                    try connection.execute(
                        """
                        INSERT INTO recovery_codes (user_name, salt, code_hash, iterations, created_at, key_protection)
                        VALUES ($1, $2, $3, $4, $5, $6)
                        """,
                        [
                            .text(user), .blob(code.salt), .blob(code.hash), .integer(code.iterations),
                            .integer(code.createdAt), SQLValue(protection?.rawValue),
                        ])
                }
                if let audit { try Self.insertAuditRow(audit, in: connection) }
                return true
            }
        }
    }

    package func unusedRecoveryCodes(user: String) throws(StorageError) -> [RecoveryCodeRecord] {
        try database.read { connection throws(StorageError) in
            try connection.query(
                """
                SELECT id, user_name, salt, code_hash, iterations, created_at, key_protection FROM recovery_codes
                WHERE user_name = $1 AND used_at IS NULL ORDER BY id
                """,
                [.text(user)]
            ) { row throws(StorageError) in
                guard let id = row.integer(0), let user = row.text(1), let salt = row.blob(2), let hash = row.blob(3),
                    let iterations = row.integer(4), let createdAt = row.integer(5)
                else { throw StorageError(.queryFailed, "a recovery code row is incomplete") }
                return RecoveryCodeRecord(
                    id: id, user: user, salt: salt, hash: hash, iterations: iterations, createdAt: createdAt,
                    keyProtection: row.text(6).flatMap(KeyProtection.init(rawValue:)))
            }
        }
    }

    /// One conditional `UPDATE`: of two registrations using the same code at once, the second
    /// waits for the first and then finds `used_at` set.
    package func consumeRecoveryCode(_ code: RecoveryCodeRecord, at time: Int64) throws(StorageError) -> Bool {
        try database.write { connection throws(StorageError) in
            try Self.consumeRecoveryCode(code, at: time, in: connection)
        }
    }

    /// The conditional `UPDATE` of ``consumeRecoveryCode(_:at:)`` on `connection`, in whatever
    /// transaction it is in.
    ///
    /// SQLite's `INTEGER PRIMARY KEY` gives a new row the highest id plus one, so a set that
    /// replaced the newest set can get its ids: a registration that matched a code of the old
    /// set while the new one was stored would otherwise use up, and enrol with, a new code it
    /// never knew. Each code's hash has its own salt, so the hash tells the sets apart.
    static func consumeRecoveryCode(
        _ code: RecoveryCodeRecord, at time: Int64, in connection: any SQLConnection
    ) throws(StorageError) -> Bool {
        try connection.execute(
            """
            UPDATE recovery_codes SET used_at = $3
            WHERE id = $1 AND user_name = $2 AND code_hash = $4 AND used_at IS NULL
            """,
            [.integer(code.id), .text(code.user), .integer(time), .blob(code.hash)]
        ).affectedRowCount == 1
    }

    /// How many of `user`'s codes are unused, on `connection` (in the insert's transaction, under
    /// the user's insert lock, which every registration's use of a code and every replacement of
    /// the set takes: the count is exact however many registrations run at once).
    static func unusedRecoveryCodeCount(user: String, in connection: any SQLConnection) throws(StorageError) -> Int64 {
        try connection.execute(
            "SELECT COUNT(*) FROM recovery_codes WHERE user_name = $1 AND used_at IS NULL", [.text(user)]
        ).firstRow?.integer(0) ?? 0
    }
}
