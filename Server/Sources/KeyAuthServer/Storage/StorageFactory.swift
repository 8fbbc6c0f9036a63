/// Chooses the storage implementation for a `--db` value: the one place to add a backend.
public enum StorageFactory {
    /// Opens (and migrates) the store named by `location`.
    ///
    /// - Parameter location: a `postgres://` or `postgresql://` URL, or a SQLite file path.
    /// - Throws: ``StorageError`` from opening the store (`.unavailable` when a PostgreSQL
    ///   server cannot be reached).
    public static func open(_ location: String) throws(StorageError) -> any ServerStorage {
        if isPostgresURL(location) {
            return try PostgresStorage(url: location)
        }
        return try SQLiteStorage(path: location)
    }

    /// Whether `location` names a PostgreSQL server rather than a file.
    public static func isPostgresURL(_ location: String) -> Bool {
        let lowered = location.lowercased()
        return lowered.hasPrefix("postgres://") || lowered.hasPrefix("postgresql://")
    }
}
