/// The `enrollment_codes` table: one-time codes, kept only as SHA-256 hashes.
extension SQLStorage {
    public func insertEnrollmentCode(hash: [UInt8], user: String, expiresAt: Int64) throws(StorageError) {
        try database.write { connection throws(StorageError) in
            try connection.execute(
                "INSERT INTO enrollment_codes (code_hash, user_name, expires_at) VALUES ($1, $2, $3)",
                [.blob(hash), .text(user), .integer(expiresAt)])
            return ()
        }
    }

    /// One conditional `UPDATE`: of two servers consuming the same code at once, the second
    /// waits for the first and then finds `used_at` set.
    public func consumeEnrollmentCode(hash: [UInt8], user: String, now: Int64) throws(StorageError) -> Bool {
        try database.write { connection throws(StorageError) in
            try connection.execute(
                """
                UPDATE enrollment_codes SET used_at = $3
                WHERE code_hash = $1 AND user_name = $2 AND used_at IS NULL AND expires_at > $3
                """,
                [.blob(hash), .text(user), .integer(now)]
            ).affectedRowCount == 1
        }
    }

    public func purgeExpiredEnrollmentCodes(now: Int64) throws(StorageError) -> Int {
        try database.write { connection throws(StorageError) in
            try connection.execute(
                "DELETE FROM enrollment_codes WHERE expires_at < $1 OR used_at IS NOT NULL", [.integer(now)]
            ).affectedRowCount
        }
    }
}
