import KeyAuth

/// The `signing_keys` table: the server's own RSA keys, shared by every instance.
extension SQLStorage {
    /// Serialises the creation of the first signing key: "keyauth1" in ASCII.
    static let firstSigningKeyLock = SQLLock(key: .single(0x6B65_7961_7574_6831))

    public func signingKeys() throws(StorageError) -> [SigningKeyRecord] {
        try database.read { connection throws(StorageError) in
            let rows = try connection.execute(
                "SELECT kid, private_pem, created_at FROM signing_keys ORDER BY created_at, kid"
            ).rows
            var keys: [SigningKeyRecord] = []
            for row in rows {
                guard let kid = row.text(0), let pem = row.blob(1), let createdAt = row.integer(2) else {
                    for var key in keys { CryptoPrimitives.wipe(&key.privatePEM) }
                    throw StorageError(.queryFailed, "a signing key row is incomplete")
                }
                keys.append(SigningKeyRecord(kid: kid, privatePEM: pem, createdAt: createdAt))
            }
            return keys
        }
    }

    public func insertSigningKey(kid: String, privatePEM: [UInt8], createdAt: Int64) throws(StorageError) -> Bool {
        try database.write { connection throws(StorageError) in
            try connection.execute(
                "INSERT INTO signing_keys (kid, private_pem, created_at) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
                [.text(kid), .blob(privatePEM), .integer(createdAt)]
            ).affectedRowCount == 1
        }
    }

    /// Checks for a key and inserts in one transaction under the first-key lock. Under
    /// PostgreSQL's READ COMMITTED a `NOT EXISTS` in the insert would see a snapshot taken before
    /// a concurrent insert committed; the check runs as its own statement after the lock, so it
    /// sees the winner's row. In SQLite the write transaction is the lock.
    public func insertFirstSigningKey(kid: String, privatePEM: [UInt8], createdAt: Int64) throws(StorageError) -> Bool {
        try database.write { connection throws(StorageError) in
            try connection.transaction { () throws(StorageError) in
                try connection.lock(Self.firstSigningKeyLock)
                guard try !connection.exists("SELECT 1 FROM signing_keys LIMIT 1", []) else { return false }
                return try connection.execute(
                    "INSERT INTO signing_keys (kid, private_pem, created_at) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
                    [.text(kid), .blob(privatePEM), .integer(createdAt)]
                ).affectedRowCount == 1
            }
        }
    }
}
