/// ``SQLStorage`` on a SQLite file, under the name by which callers choose it:
/// `SQLiteStorage(path:)`.
package typealias SQLiteStorage = SQLStorage

extension SQLStorage {
    /// Opens or creates the SQLite database at `path`, switches it to WAL and applies
    /// migrations.
    ///
    /// The file holds the server's private signing key: acceptable for a single-host deployment
    /// where it is as protected as a key file would be (mode 0600, owned by the service user).
    /// - Parameters:
    ///   - path: the database file (created if missing).
    ///   - readerCount: connections for reads, besides the one writer.
    ///   - busyTimeoutMilliseconds: how long a statement waits for another process's lock.
    ///   - now: the clock, for the migration record.
    /// - Throws: ``StorageError`` when the file cannot be opened or migrated.
    package convenience init(
        path: String, readerCount: Int = 2, busyTimeoutMilliseconds: Int32 = 5000,
        now: @Sendable () -> Int64 = { ServerClock.now() }
    ) throws(StorageError) {
        try self.init(
            database: SQLiteDatabase(
                path: path, readerCount: readerCount, busyTimeoutMilliseconds: busyTimeoutMilliseconds),
            location: path, now: now)
    }
}
