import KeyAuth

/// The PostgreSQL schema as numbered migrations, the same versions as ``SQLiteSchema``.
///
/// Several servers may start at once against one database, so migrating runs in one
/// transaction that first takes a transaction-scoped advisory lock: the second server waits,
/// then finds the schema current and changes nothing. The lock is released by `COMMIT` or
/// `ROLLBACK`, and by the server when a connection dies, so a crashed migration never leaves
/// the lock held. A migration is never edited after release, only followed by a new one.
///
/// Text columns that are sorted use the `"C"` collation, which compares UTF-8 bytes as SQLite
/// does; the database's default (often `en_US.UTF-8`) would list devices in another order.
enum PostgresSchema {
    /// Migration `n` brings the schema from version `n - 1` to `n`.
    static let migrations: [(version: Int64, statements: [String])] = [
        (
            1,
            [
                """
                CREATE TABLE devices (
                    kid TEXT COLLATE "C" PRIMARY KEY,
                    user_name TEXT COLLATE "C" NOT NULL,
                    name TEXT NOT NULL,
                    public_key_pem TEXT NOT NULL,
                    status TEXT NOT NULL CHECK (status IN ('pending', 'active', 'denied', 'revoked')),
                    created_at BIGINT NOT NULL,
                    approved_at BIGINT,
                    revoked_at BIGINT,
                    last_login_at BIGINT
                )
                """,
                "CREATE INDEX devices_by_user ON devices (user_name, created_at)",
                """
                CREATE TABLE used_jtis (
                    key_id TEXT NOT NULL,
                    jti TEXT NOT NULL,
                    expires_at BIGINT NOT NULL,
                    PRIMARY KEY (key_id, jti)
                )
                """,
                "CREATE INDEX used_jtis_by_expiry ON used_jtis (expires_at)",
                """
                CREATE TABLE enrollment_codes (
                    code_hash BYTEA PRIMARY KEY,
                    user_name TEXT NOT NULL,
                    expires_at BIGINT NOT NULL,
                    used_at BIGINT
                )
                """,
                """
                CREATE TABLE signing_keys (
                    kid TEXT COLLATE "C" PRIMARY KEY,
                    private_pem BYTEA NOT NULL,
                    created_at BIGINT NOT NULL
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

    /// The advisory lock that serialises migrations of one database: "keyauth" in ASCII.
    static let migrationLockKey: Int64 = 0x6b_6579_6175_7468

    /// Brings the database up to ``latestVersion``.
    ///
    /// Safe to repeat: it applies only the versions that `schema_migrations` lacks.
    /// - Throws: `.schemaTooNew` when a newer server migrated the database, whose schema this
    ///   build must not write to; `.queryFailed` when waiting 30 s for another server's
    ///   migration timed out.
    static func migrate(_ connection: PostgresConnection, now: Int64) throws(StorageError) {
        try connection.transaction { () throws(StorageError) in
            try connection.execute("SET LOCAL lock_timeout = '30s'")
            try connection.execute("SELECT pg_advisory_xact_lock($1)", [.integer(migrationLockKey)])
            try connection.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations (version BIGINT PRIMARY KEY, applied_at BIGINT NOT NULL)")
            let current =
                try connection.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations").integer(0, 0) ?? 0
            guard current <= latestVersion else {
                throw StorageError(
                    .schemaTooNew, "the database schema version \(current) is newer than this server (\(latestVersion))"
                )
            }
            for migration in migrations where migration.version > current {
                for statement in migration.statements {
                    try connection.execute(statement)
                }
                try connection.execute(
                    "INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)",
                    [.integer(migration.version), .integer(now)])
            }
        }
    }
}
