/// The `used_jtis` table: the replay cache of accepted device assertions.
extension SQLStorage {
    /// One insert that detects the conflict: never a read first, or two concurrent replays
    /// could both succeed.
    package func claimJTI(keyID: String, jti: String, expiresAt: Int64) throws(StorageError) -> Bool {
        try database.write { connection throws(StorageError) in
            try connection.execute(
                "INSERT INTO used_jtis (key_id, jti, expires_at) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
                [.text(keyID), .text(jti), .integer(expiresAt)]
            ).affectedRowCount == 1
        }
    }

    package func isJTIClaimed(keyID: String, jti: String) throws(StorageError) -> Bool {
        try database.read { connection throws(StorageError) in
            try !connection.query(
                "SELECT 1 FROM used_jtis WHERE key_id = $1 AND jti = $2", [.text(keyID), .text(jti)]
            ) { _ throws(StorageError) in true }.isEmpty
        }
    }

    /// Rows deleted per write by ``purgeExpiredJTIs(now:)``.
    static let purgeChunkSize = 1000

    /// Deletes in chunks of ``purgeChunkSize``, each its own write: under load the cache gains
    /// thousands of entries a second, and deleting a minute's worth in one statement would hold
    /// up the logins waiting behind it (in SQLite, the batch committed with it; in PostgreSQL,
    /// the row locks and the transaction's WAL) for as long.
    ///
    /// Of a memory replay cache's rows only the entries (16 hexadecimal digits) go: its markers
    /// hold times, not expiries, and a start reads them after those times (a crash's horizon for
    /// as long as a token issued before it could be valid: ``ReplayGuard/horizonRelevance``).
    /// A start drops the markers it no longer needs.
    package func purgeExpiredJTIs(now: Int64) throws(StorageError) -> Int {
        var total = 0
        while true {
            let deleted = try database.write { connection throws(StorageError) in
                try connection.execute(
                    """
                    DELETE FROM used_jtis WHERE (key_id, jti) IN
                        (SELECT key_id, jti FROM used_jtis
                         WHERE expires_at < $1 AND (key_id <> $3 OR length(jti) = 16) LIMIT $2)
                    """,
                    [.integer(now), .integer(Int64(Self.purgeChunkSize)), .text(Self.replaySnapshotKeyID)]
                ).affectedRowCount
            }
            total += deleted
            if deleted < Self.purgeChunkSize { return total }
        }
    }
}

extension SQLStorage {
    /// The `key_id` of the rows a memory replay cache keeps in `used_jtis` (``ReplayGuard``):
    /// its markers and, after a clean stop, its entries. No device key id (43 base64url
    /// characters) and no other prefix of the table (`dpop `, `authorization`) can equal it.
    static let replaySnapshotKeyID = "replay-snapshot"

    package func replaySnapshot() throws(StorageError) -> [ReplaySnapshotRow] {
        try database.read { connection throws(StorageError) in
            try connection.query(
                "SELECT jti, expires_at FROM used_jtis WHERE key_id = $1", [.text(Self.replaySnapshotKeyID)]
            ) { row throws(StorageError) in
                ReplaySnapshotRow(name: row.text(0) ?? "", expiresAt: row.integer(1) ?? 0)
            }
        }
    }

    package func replaceReplaySnapshot(with snapshot: ReplaySnapshot) throws(StorageError) {
        try database.write { connection throws(StorageError) in
            try connection.transaction { () throws(StorageError) in
                try connection.execute("DELETE FROM used_jtis WHERE key_id = $1", [.text(Self.replaySnapshotKeyID)])
                for row in snapshot.rows {
                    try connection.execute(
                        "INSERT INTO used_jtis (key_id, jti, expires_at) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
                        [.text(Self.replaySnapshotKeyID), .text(row.name), .integer(row.expiresAt)])
                }
            }
        }
    }

    package func raiseReplaySnapshotRow(_ row: ReplaySnapshotRow) throws(StorageError) {
        try database.write { connection throws(StorageError) in
            try connection.execute(
                """
                INSERT INTO used_jtis (key_id, jti, expires_at) VALUES ($1, $2, $3)
                ON CONFLICT (key_id, jti) DO UPDATE SET expires_at = excluded.expires_at
                    WHERE excluded.expires_at > used_jtis.expires_at
                """,
                [.text(Self.replaySnapshotKeyID), .text(row.name), .integer(row.expiresAt)])
        }
    }

    package func claimedJTIs(expiringAfter time: Int64) throws(StorageError) -> [ClaimedJTI] {
        try database.read { connection throws(StorageError) in
            try connection.query(
                "SELECT key_id, jti, expires_at FROM used_jtis WHERE expires_at >= $1 AND key_id <> $2",
                [.integer(time), .text(Self.replaySnapshotKeyID)]
            ) { row throws(StorageError) in
                ClaimedJTI(keyID: row.text(0) ?? "", jti: row.text(1) ?? "", expiresAt: row.integer(2) ?? 0)
            }
        }
    }
}
