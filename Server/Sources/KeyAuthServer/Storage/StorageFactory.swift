/// Chooses the storage implementation for a `--db` value: the one place to add a backend.
package enum StorageFactory {
    /// Opens (and migrates) the store named by `location`.
    ///
    /// A SQLite file is checked before it is opened and restricted to mode 0600 afterwards
    /// (``SQLiteFilePermissions``): it holds the server's signing key.
    ///
    /// - Parameters:
    ///   - location: a `postgres://` or `postgresql://` URL, or a SQLite file path.
    ///   - creatingIfMissing: whether a missing SQLite file may be created. Only `serve` creates
    ///     a database; an admin command pointed at the wrong path must say so rather than list
    ///     an empty new database.
    ///   - migrating: whether the schema may be migrated. Only `serve` migrates; an admin
    ///     command requires the latest schema, so that it neither migrates a database under an
    ///     older running server nor makes a keyauth database of another file.
    /// - Throws: ``StorageError`` from opening the store (`.unavailable` when a PostgreSQL
    ///   server cannot be reached, `.unprotected` for a SQLite file others can read or that
    ///   belongs to another user, `.notFound` for a missing file that may not be created;
    ///   without migrating, `.schemaTooOld` and `.notKeyAuthDatabase`).
    package static func open(_ location: String, creatingIfMissing: Bool = true, migrating: Bool = true)
        throws(StorageError) -> any ServerStorage
    {
        if isPostgresURL(location) {
            return try PostgresStorage(url: location, migrating: migrating)
        }
        if !migrating {
            // Before the permissions: the settings file given as --db is usually mode 644, and
            // "chmod 600 it, it holds the signing key" would send the operator the wrong way.
            try SQLiteStorage.refuseIfNotSQLite(location)
        }
        try SQLiteFilePermissions.checkBeforeOpening(location, creatingIfMissing: creatingIfMissing)
        let storage = try SQLiteStorage(path: location, migrating: migrating)
        do {
            try SQLiteFilePermissions.restrict(location)
        } catch {
            storage.close()
            throw error
        }
        return storage
    }

    /// Whether `location` names a PostgreSQL server rather than a file.
    package static func isPostgresURL(_ location: String) -> Bool {
        let lowered = location.lowercased()
        return lowered.hasPrefix("postgres://") || lowered.hasPrefix("postgresql://")
    }
}
