import KeyAuth

/// The `signing_keys` table: the server's own signing keys and their rotation dates, shared by
/// every instance.
extension SQLStorage {
    /// Serialises the creation of the first signing key: "keyauth1" in ASCII.
    static let firstSigningKeyLock = SQLLock(key: .single(0x6B65_7961_7574_6831))

    /// The columns every query reads, in ``signingKey(from:)``'s order.
    private static let signingKeyColumns =
        "kid, private_pem, created_at, algorithm, COALESCE(active_from, created_at), retired_at"

    package func signingKeys(includingRetired: Bool) throws(StorageError) -> [SigningKeyRecord] {
        try database.read { connection throws(StorageError) in
            let rows = try connection.execute(
                """
                SELECT \(Self.signingKeyColumns) FROM signing_keys
                \(includingRetired ? "" : "WHERE retired_at IS NULL")
                ORDER BY COALESCE(active_from, created_at), created_at, kid
                """
            ).rows
            var keys: [SigningKeyRecord] = []
            for row in rows {
                guard let key = Self.signingKey(from: row) else {
                    for var key in keys { CryptoPrimitives.wipe(&key.privatePEM) }
                    throw StorageError(.queryFailed, "a signing key row is incomplete or names an unknown algorithm")
                }
                keys.append(key)
            }
            return keys
        }
    }

    private static func signingKey(from row: SQLRow) -> SigningKeyRecord? {
        guard let kid = row.text(0), let pem = row.blob(1),
            let createdAt = row.integer(2), let algorithm = row.text(3).flatMap(JWSAlgorithm.init(rawValue:)),
            let activeFrom = row.integer(4)
        else { return nil }
        return SigningKeyRecord(
            kid: kid, privatePEM: pem, createdAt: createdAt, algorithm: algorithm, activeFrom: activeFrom,
            retiredAt: row.integer(5))
    }

    package func insertSigningKey(_ record: SigningKeyRecord) throws(StorageError) -> Bool {
        try database.write { connection throws(StorageError) in
            try Self.insert(record, on: connection)
        }
    }

    /// Checks for a key and inserts in one transaction under the first-key lock. Under
    /// PostgreSQL's READ COMMITTED a `NOT EXISTS` in the insert would see a snapshot taken before
    /// a concurrent insert committed; the check runs as its own statement after the lock, so it
    /// sees the winner's row. In SQLite the write transaction is the lock.
    package func insertFirstSigningKey(_ record: SigningKeyRecord) throws(StorageError) -> Bool {
        try database.write { connection throws(StorageError) in
            try connection.transaction { () throws(StorageError) in
                try connection.lock(Self.firstSigningKeyLock)
                guard try !connection.exists("SELECT 1 FROM signing_keys LIMIT 1", []) else { return false }
                return try Self.insert(record, on: connection)
            }
        }
    }

    package func insertIDTokenKey(_ record: SigningKeyRecord) throws(StorageError) -> Bool {
        try database.write { connection throws(StorageError) in
            try connection.transaction { () throws(StorageError) in
                try connection.lock(Self.firstSigningKeyLock)
                let exists = try connection.exists(
                    "SELECT 1 FROM signing_keys WHERE algorithm = $1 AND retired_at IS NULL LIMIT 1",
                    [.text(JWSAlgorithm.rs256.rawValue)])
                guard !exists else { return false }
                return try Self.insert(record, on: connection)
            }
        }
    }

    private static func insert(_ record: SigningKeyRecord, on connection: any SQLConnection) throws(StorageError)
        -> Bool
    {
        try connection.execute(
            """
            INSERT INTO signing_keys (kid, private_pem, created_at, algorithm, active_from, retired_at)
            VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING
            """,
            [
                .text(record.kid), .blob(record.privatePEM), .integer(record.createdAt),
                .text(record.algorithm.rawValue), .integer(record.activeFrom),
                SQLValue(record.retiredAt),
            ]
        ).affectedRowCount == 1
    }

    /// One conditional update: two instances retiring the same key at once change it once.
    package func retireSigningKey(kid: String, at time: Int64) throws(StorageError) -> Bool {
        try database.write { connection throws(StorageError) in
            try connection.execute(
                "UPDATE signing_keys SET retired_at = $2, private_pem = $3 WHERE kid = $1 AND retired_at IS NULL",
                [.text(kid), .integer(time), .blob([])]
            ).affectedRowCount == 1
        }
    }
}
