/// The `enrollment_codes` table: one-time codes, kept only as SHA-256 hashes.
extension SQLStorage {
    package func insertEnrollmentCode(hash: [UInt8], user: String, expiresAt: Int64) throws(StorageError) {
        try database.write { connection throws(StorageError) in
            try connection.execute(
                "INSERT INTO enrollment_codes (code_hash, user_name, expires_at) VALUES ($1, $2, $3)",
                [.blob(hash), .text(user), .integer(expiresAt)])
            return ()
        }
    }

    /// One conditional `UPDATE`: of two servers consuming the same code at once, the second
    /// waits for the first and then finds `used_at` set.
    package func consumeEnrollmentCode(hash: [UInt8], user: String, now: Int64) throws(StorageError) -> Bool {
        try database.write { connection throws(StorageError) in
            try Self.consumeEnrollmentCode(hash: hash, user: user, now: now, in: connection)
        }
    }

    /// The conditional `UPDATE` of ``consumeEnrollmentCode(hash:user:now:)`` on `connection`, in
    /// whatever transaction it is in.
    static func consumeEnrollmentCode(
        hash: [UInt8], user: String, now: Int64, in connection: any SQLConnection
    ) throws(StorageError) -> Bool {
        try connection.execute(
            """
            UPDATE enrollment_codes SET used_at = $3
            WHERE code_hash = $1 AND user_name = $2 AND used_at IS NULL AND expires_at > $3
            """,
            [.blob(hash), .text(user), .integer(now)]
        ).affectedRowCount == 1
    }

    package func enrollmentCodes(usableAt now: Int64) throws(StorageError) -> [EnrollmentCodeRecord] {
        try database.read { connection throws(StorageError) in
            try connection.query(
                """
                SELECT code_hash, user_name, expires_at FROM enrollment_codes
                WHERE used_at IS NULL AND expires_at > $1 ORDER BY expires_at, user_name
                """,
                [.integer(now)]
            ) { row throws(StorageError) in
                guard let hash = row.blob(0), let user = row.text(1), let expiresAt = row.integer(2) else {
                    throw StorageError(.queryFailed, "an enrollment code row is incomplete")
                }
                return EnrollmentCodeRecord(hash: hash, user: user, expiresAt: expiresAt)
            }
        }
    }

    package func deleteEnrollmentCodes(user: String) throws(StorageError) -> Int {
        try database.write { connection throws(StorageError) in
            try connection.execute(
                "DELETE FROM enrollment_codes WHERE user_name = $1 AND used_at IS NULL", [.text(user)]
            ).affectedRowCount
        }
    }

    package func deleteUser(_ user: String, listingSSHKeysUntil until: Int64) throws(StorageError) -> (
        devices: Int, codes: Int
    ) {
        try database.write { connection throws(StorageError) in
            try connection.transaction { () throws(StorageError) -> (devices: Int, codes: Int) in
                // The insert lock, so that no registration of this user lands in the middle.
                try connection.lock(Self.deviceInsertLock(user: user))
                // In the same transaction: no moment where a deleted device's certificates are
                // in neither the devices nor the revocation list.
                try Self.listSSHKeys(of: user, until: until, in: connection)
                let devices = try connection.execute("DELETE FROM devices WHERE user_name = $1", [.text(user)])
                let codes = try connection.execute("DELETE FROM enrollment_codes WHERE user_name = $1", [.text(user)])
                // A new user of the same name must not inherit a way into the account: no
                // recovery code, and no approval made before (a sign-in request not yet
                // collected, a browser session, an authorization code not yet redeemed), which
                // the same key registered again would otherwise collect.
                try connection.execute("DELETE FROM recovery_codes WHERE user_name = $1", [.text(user)])
                try connection.execute("DELETE FROM sign_in_requests WHERE user_name = $1", [.text(user)])
                try connection.execute("DELETE FROM browser_sessions WHERE user_name = $1", [.text(user)])
                try connection.execute(
                    "DELETE FROM authorization_codes WHERE user_name = $1 AND redeemed_at IS NULL", [.text(user)])
                return (devices.affectedRowCount, codes.affectedRowCount)
            }
        }
    }

    package func purgeExpiredEnrollmentCodes(now: Int64) throws(StorageError) -> Int {
        try database.write { connection throws(StorageError) in
            try connection.execute(
                "DELETE FROM enrollment_codes WHERE expires_at < $1 OR used_at IS NOT NULL", [.integer(now)]
            ).affectedRowCount
        }
    }
}
