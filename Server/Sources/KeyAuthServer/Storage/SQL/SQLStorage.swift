/// ``ServerStorage`` in a SQL database, written once for SQLite and PostgreSQL.
///
/// The SQL and the row mapping of each table live in one extension file
/// (`SQLStorage+Devices.swift`, `+ReplayCache`, `+EnrollmentCodes`, `+SigningKeys`); the schema
/// is one list of migrations (``SQLSchema``); where the dialects differ, the difference is a
/// fragment of ``SQLDialect``. Below sits an ``SQLDatabase``, which decides how connections are
/// used: ``SQLiteDatabase`` (one file, readers beside one group-committing writer) or
/// ``PostgresConnectionPool`` (a shared database, several servers). Open one with
/// `SQLiteStorage(path:)` or `PostgresStorage(url:)`, or let ``StorageFactory`` choose.
///
/// Every race is settled in the database, never by reading first and writing later: a primary
/// key with `ON CONFLICT DO NOTHING` for claims and inserts, a conditional `UPDATE` checked by
/// its changed-row count for status changes and codes, and for a check followed by an insert,
/// a transaction under a lock (SQLite's single writer, a PostgreSQL advisory lock).
///
/// - Warning: the server's private signing keys are stored in the database (`signing_keys`):
///   whoever can read that table, or a copy of the SQLite file, can sign access tokens. Protect
///   the file like a key file, restrict the table to the service's role, and treat backups as
///   secrets.
package final class SQLStorage: ServerStorage {
    let database: any SQLDatabase

    /// Where the data lives, for messages: the SQLite file, or the PostgreSQL URL with its
    /// password masked.
    package let location: String

    /// The devices logins read, kept while no process changes one (SQLite only).
    let loginDevices: LoginDeviceCache?

    /// Opens storage on `database`, migrating its schema first, or with `migrating` false
    /// requiring it to be at the latest version already (``SQLSchema/requireLatest(_:location:)``).
    ///
    /// - Throws: ``StorageError``: `.schemaTooNew` when a newer server migrated the database,
    ///   `.unavailable` or `.queryFailed` when migrating fails; without migrating,
    ///   `.schemaTooOld` or `.notKeyAuthDatabase`. The database is closed then.
    init(database: any SQLDatabase, location: String, now: @Sendable () -> Int64, migrating: Bool = true)
        throws(StorageError)
    {
        self.database = database
        self.location = location
        loginDevices = database.deviceChanges.map { LoginDeviceCache(changes: $0) }
        let migrationTime = now()
        do {
            // Either way through `migrate`, which also sets up what the connections need on a
            // migrated schema (SQLite's device-change triggers).
            try database.migrate { connection throws(StorageError) in
                if migrating {
                    try SQLSchema.migrate(connection, now: migrationTime)
                } else {
                    try SQLSchema.requireLatest(connection, location: location)
                }
            }
        } catch {
            database.close()
            throw error
        }
    }

    /// The dialect of the database, for callers that must tell the backends apart.
    var dialect: SQLDialect { database.dialect }

    // MARK: Operations

    /// Checks that the database answers and is at the schema version this server writes: a
    /// newer server migrating it meanwhile makes this server unhealthy, not a silent writer.
    package func healthCheck() throws(StorageError) {
        let version = try database.read { connection throws(StorageError) in
            try connection.execute("SELECT MAX(version) FROM schema_migrations").firstRow?.integer(0)
        }
        guard version == SQLSchema.latestVersion else {
            throw StorageError(.unavailable, "the database schema is not at version \(SQLSchema.latestVersion)")
        }
    }

    package var writesBlockUntilDurable: Bool { database.writesBlockUntilDurable }

    package var sharesReplayClaims: Bool { database.dialect == .postgres }

    package func close() {
        database.close()
    }
}
