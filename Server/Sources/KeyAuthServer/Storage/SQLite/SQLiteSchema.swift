/// The SQLite schema as numbered migrations, applied in order at start inside one transaction.
///
/// Each applied version is recorded in `schema_migrations`; a migration is never edited after
/// release, only followed by a new one, so every database reaches the same schema.
enum SQLiteSchema {
    /// Migration `n` brings the schema from version `n - 1` to `n`.
    static let migrations: [(version: Int64, statements: [String])] = [
        (
            1,
            [
                """
                CREATE TABLE devices (
                    kid TEXT PRIMARY KEY NOT NULL,
                    user TEXT NOT NULL,
                    name TEXT NOT NULL,
                    public_key_pem TEXT NOT NULL,
                    status TEXT NOT NULL CHECK (status IN ('pending', 'active', 'denied', 'revoked')),
                    created_at INTEGER NOT NULL,
                    approved_at INTEGER,
                    revoked_at INTEGER,
                    last_login_at INTEGER
                )
                """,
                "CREATE INDEX devices_by_user ON devices (user, created_at)",
                """
                CREATE TABLE used_jtis (
                    key_id TEXT NOT NULL,
                    jti TEXT NOT NULL,
                    expires_at INTEGER NOT NULL,
                    PRIMARY KEY (key_id, jti)
                ) WITHOUT ROWID
                """,
                "CREATE INDEX used_jtis_by_expiry ON used_jtis (expires_at)",
                """
                CREATE TABLE enrollment_codes (
                    code_hash BLOB PRIMARY KEY NOT NULL,
                    user TEXT NOT NULL,
                    expires_at INTEGER NOT NULL,
                    used_at INTEGER
                )
                """,
                """
                CREATE TABLE signing_keys (
                    kid TEXT PRIMARY KEY NOT NULL,
                    private_pem BLOB NOT NULL,
                    created_at INTEGER NOT NULL
                )
                """,
            ]
        ),
        (
            2,
            [
                // Where a registration came from, shown to whoever approves it; NULL for
                // devices registered before this version.
                "ALTER TABLE devices ADD COLUMN registered_from TEXT",
                // The periodic purge of expired pending and old denied devices looks them up by
                // state, without scanning the active and revoked ones that make up the table.
                "CREATE INDEX devices_by_status ON devices (status, created_at)",
            ]
        ),
    ]

    /// The newest version this build knows.
    static var latestVersion: Int64 { migrations.last?.version ?? 0 }

    /// Brings the database up to ``latestVersion``.
    ///
    /// - Throws: `.schemaTooNew` when the file was migrated by a newer server, whose schema this
    ///   build must not write to.
    static func migrate(_ connection: SQLiteConnection, now: Int64) throws(StorageError) {
        try connection.transaction { () throws(StorageError) in
            try connection.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)"
            )
            let current =
                try connection.query("SELECT COALESCE(MAX(version), 0) FROM schema_migrations") { row in
                    row.integer(0) ?? 0
                }.first ?? 0
            guard current <= latestVersion else {
                throw StorageError(
                    .schemaTooNew, "the database schema version \(current) is newer than this server (\(latestVersion))"
                )
            }
            for migration in migrations where migration.version > current {
                for statement in migration.statements {
                    try connection.execute(statement)
                }
                try connection.run(
                    "INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)",
                    [.integer(migration.version), .integer(now)])
            }
        }
    }
}
