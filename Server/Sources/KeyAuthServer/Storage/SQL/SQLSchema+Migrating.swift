/// Applying ``SQLSchema/migrations``: under the migration lock, in one transaction.
extension SQLSchema {
    /// The newest version this build knows.
    static var latestVersion: Int64 { migrations.last?.version ?? 0 }

    /// Serialises migrations of one database: "keyauth" in ASCII. Waiting for another server's
    /// migration fails after 30 s rather than hanging a start.
    static let migrationLock = SQLLock(key: .single(0x6b_6579_6175_7468), timeoutSeconds: 30)

    /// Brings the database up to ``latestVersion``.
    ///
    /// Safe to repeat: it applies only the versions that `schema_migrations` lacks. Its
    /// statements wait as long as the database works on them (a table rewritten, an index
    /// built), with no limit of the client's (``SQLConnection/withoutStatementDeadline(_:)``);
    /// waiting for another server's migration still ends at the lock's timeout.
    /// - Throws: `.schemaTooNew` when a newer server migrated the database, whose schema this
    ///   build must not write to; `.queryFailed` when a statement fails or waiting for another
    ///   server's migration timed out.
    static func migrate(_ connection: any SQLConnection, now: Int64) throws(StorageError) {
        let sql = connection.dialect
        try connection.withoutStatementDeadline { () throws(StorageError) in
            try migrateInTransaction(connection, dialect: sql, now: now)
        }
    }

    private static func migrateInTransaction(
        _ connection: any SQLConnection, dialect sql: SQLDialect, now: Int64
    ) throws(StorageError) {
        try connection.transaction { () throws(StorageError) in
            try connection.lock(migrationLock)
            try connection.execute(
                """
                CREATE TABLE IF NOT EXISTS schema_migrations (
                    version \(sql.integer) PRIMARY KEY, applied_at \(sql.integer) NOT NULL
                )
                """)
            let current =
                try connection.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations")
                .firstRow?.integer(0) ?? 0
            guard current <= latestVersion else {
                throw StorageError(
                    .schemaTooNew, "the database schema version \(current) is newer than this server (\(latestVersion))"
                )
            }
            for migration in migrations where migration.version > current {
                for statement in migration.statements(sql) {
                    try connection.execute(statement)
                }
                try connection.execute(
                    "INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)",
                    [.integer(migration.version), .integer(now)])
            }
        }
    }
}
