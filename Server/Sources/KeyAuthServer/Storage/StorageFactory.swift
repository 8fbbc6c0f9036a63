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
    ///   server cannot be reached or a SQLite file or its directory cannot be written, `.unprotected` for a SQLite
    ///   file others can read or that belongs to another user, `.notFound` for a missing file
    ///   that may not be created, `.notKeyAuthDatabase` for a file that is not SQLite or another
    ///   program's database; without migrating, `.schemaTooOld`).
    package static func open(_ location: String, creatingIfMissing: Bool = true, migrating: Bool = true)
        throws(StorageError) -> any ServerStorage
    {
        if isPostgresURL(location) {
            return try PostgresStorage(url: location, migrating: migrating)
        }
        try checkSQLiteFile(location, creatingIfMissing: creatingIfMissing)
        return try openChecked(location, migrating: migrating, syncingInCommit: true)
    }

    /// The checks of a SQLite file before it is opened or created, the same for `serve`, the
    /// admin commands and `backup`, so that each fault reads the same whichever command met it.
    ///
    /// The directory and the file must be writable for the commands that only read too: SQLite
    /// makes the `-wal` and `-shm` files of a database in WAL mode beside it to read it, and
    /// without the check a read-only directory read as `unable to open database file`.
    ///
    /// - Throws: ``StorageError`` as ``open(_:creatingIfMissing:migrating:)`` before opening.
    static func checkSQLiteFile(_ location: String, creatingIfMissing: Bool) throws(StorageError) {
        // Before the permissions: the settings file given as --db is usually mode 644, and
        // "chmod 600 it, it holds the signing key" would send the operator the wrong way.
        try SQLiteStorage.refuseIfNotSQLite(location)
        try SQLiteFilePermissions.checkBeforeOpening(location, creatingIfMissing: creatingIfMissing)
    }

    /// Opens a SQLite file that passed ``checkSQLiteFile(_:creatingIfMissing:)``, and
    /// makes its companion files private.
    ///
    /// `syncingInCommit` (see ``SQLiteGroupCommitter``) is for every process that may share the file
    /// with a server: the admin commands, and a server that shares it with others. Only a server alone
    /// on its file commits ahead of the fsync, since nobody else reads what it committed before the
    /// fsync returns.
    private static func openChecked(_ location: String, migrating: Bool, syncingInCommit: Bool) throws(StorageError)
        -> SQLiteStorage
    {
        let storage = try SQLiteStorage(path: location, migrating: migrating, syncingInCommit: syncingInCommit)
        do {
            try SQLiteFilePermissions.restrict(location)
        } catch {
            storage.close()
            throw error
        }
        return storage
    }

    /// Opens the store `serve` runs on, and for a SQLite file the lock it holds while serving.
    ///
    /// A SQLite file is checked before anything is created (as ``open(_:creatingIfMissing:migrating:)``
    /// checks it), then locked, which creates it when missing (``SQLiteServeLock``): a file this
    /// call created is removed again when opening it fails.
    ///
    /// - Parameters:
    ///   - alone: whether the server must be alone on a SQLite file (its replay cache is in
    ///     memory): an exclusive lock rather than a shared one.
    ///   - postgresConnections: the connections a PostgreSQL pool keeps (`--db-connections`).
    /// - Throws: ``StorageError`` as ``open(_:creatingIfMissing:migrating:)``, and `.unavailable`
    ///   when another server holds a conflicting lock.
    static func openForServing(
        _ location: String, alone: Bool, postgresConnections: Int = PostgresStorage.defaultPoolSize
    ) throws(StorageError) -> (storage: any ServerStorage, lock: SQLiteServeLock?) {
        guard !isPostgresURL(location) else {
            return (try PostgresStorage(url: location, poolSize: postgresConnections), nil)
        }
        try checkSQLiteFile(location, creatingIfMissing: true)
        let lock = try SQLiteServeLock(path: location, exclusive: alone)
        do {
            return (try openChecked(location, migrating: true, syncingInCommit: !alone), lock)
        } catch {
            lock.removeCreatedDatabase()
            throw error
        }
    }

    /// Whether `location` names a PostgreSQL server rather than a file.
    package static func isPostgresURL(_ location: String) -> Bool {
        let lowered = location.lowercased()
        return lowered.hasPrefix("postgres://") || lowered.hasPrefix("postgresql://")
    }
}
