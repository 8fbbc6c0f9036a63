/// The checks of a database before it is opened as keyauth's: neither changes anything.
extension SQLSchema {
    /// Checks, without changing anything, that the database is a keyauth database at
    /// ``latestVersion``: what an admin command needs, since only `serve` migrates (an admin
    /// command of a newer release must not migrate the database under an older running server,
    /// nor make a keyauth database of a file it was pointed at by mistake).
    ///
    /// - Throws: `.beingCreated` for a database without any table (a `serve` is creating it,
    ///   or none has started on it), `.notKeyAuthDatabase` for one with tables but without
    ///   `schema_migrations`, `.schemaTooOld` or
    ///   `.schemaTooNew` for another version, `.unavailable` and others when it cannot be read.
    static func requireLatest(_ connection: any SQLConnection, location: String) throws(StorageError) {
        let current = try requireKeyAuth(connection, location: location)
        guard current <= latestVersion else {
            throw StorageError(
                .schemaTooNew, "the database schema version \(current) is newer than this server (\(latestVersion))")
        }
        guard current == latestVersion else {
            throw StorageError(
                .schemaTooOld,
                "the database schema version \(current) is older than this release's (\(latestVersion)); "
                    + "admin commands do not migrate it: restart keyauth-server serve on it first")
        }
    }

    /// Checks, without changing anything, that the database is a keyauth database of any
    /// version: what `backup` needs, which copies an older schema too (before an upgrade).
    ///
    /// - Returns: its schema version.
    /// - Throws: as ``requireLatest(_:location:)``, without the version's errors.
    static func requireKeyAuth(_ connection: any SQLConnection, location: String) throws(StorageError) -> Int64 {
        let hasTable =
            try connection.execute(connection.dialect.tableExists, [.text("schema_migrations")]).firstRow != nil
        guard hasTable else {
            // No table at all: what a starting `serve` shows until its first migration commits
            // (a file it has just created is empty). Tables that are not keyauth's: a foreign
            // database, refused as one.
            guard try connection.execute(connection.dialect.anyTableExists).firstRow != nil else {
                throw StorageError(
                    .beingCreated,
                    "\(location) is empty: the database is still being created by keyauth-server serve; try again "
                        + "in a moment (only serve creates it: start it on this database first if none is running)")
            }
            throw foreignDatabase(location)
        }
        return try connection.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations").firstRow?.integer(0)
            ?? 0
    }

    /// Refuses a database with tables but without `schema_migrations`: another program's, which
    /// `serve` on a SQLite file must not make keyauth's. (A PostgreSQL database may hold other
    /// tables beside keyauth's.)
    ///
    /// - Throws: `.notKeyAuthDatabase`, or `.unavailable` and others when it cannot be read.
    static func refuseForeign(_ connection: any SQLConnection, location: String) throws(StorageError) {
        let dialect = connection.dialect
        guard try connection.execute(dialect.tableExists, [.text("schema_migrations")]).firstRow == nil,
            try connection.execute(dialect.anyTableExists).firstRow != nil
        else { return }
        throw foreignDatabase(location)
    }

    private static func foreignDatabase(_ location: String) -> StorageError {
        StorageError(.notKeyAuthDatabase, "\(location) is not a keyauth database (it has no schema_migrations table)")
    }
}
