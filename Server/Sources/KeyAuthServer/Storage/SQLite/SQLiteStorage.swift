import Glibc

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
    ///   - migrating: false for admin commands, which require the latest schema instead.
    ///   - syncingInCommit: whether each `COMMIT` makes the log durable before another process can
    ///     see the transaction (``SQLiteGroupCommitter``): for a process that shares the file.
    /// - Throws: ``StorageError`` when the file cannot be opened or migrated.
    package convenience init(
        path: String, readerCount: Int = 2, busyTimeoutMilliseconds: Int32 = 5000,
        now: @Sendable () -> Int64 = { ServerClock.now() }, migrating: Bool = true, syncingInCommit: Bool = false
    ) throws(StorageError) {
        // Before the database is opened as keyauth's (WAL, the device-changes file): a file that
        // is not keyauth's (or, for an admin command, not yet at this schema) is left exactly as
        // it was, and serve does not make another program's database keyauth's.
        do {
            let plain = try SQLiteConnection(path: path, busyTimeoutMilliseconds: busyTimeoutMilliseconds)
            if migrating {
                try SQLSchema.refuseForeign(plain, location: path)
            } else {
                try SQLSchema.requireLatest(plain, location: path)
            }
        } catch let error where !migrating && Self.isNotADatabase(error) {
            // A file that is not SQLite at all (the settings file given as --db): a wrong file,
            // like a SQLite file keyauth never made, not an unavailable store. (Serve refuses
            // such a file by its header first; one with SQLite's header is damaged, not foreign.)
            throw StorageError(
                .notKeyAuthDatabase, "\(path) is not a keyauth database (it is not a SQLite database file)")
        }
        try self.init(
            database: SQLiteDatabase(
                path: path, readerCount: readerCount, busyTimeoutMilliseconds: busyTimeoutMilliseconds,
                syncingInCommit: syncingInCommit),
            location: path, now: now, migrating: migrating)
    }

    /// Refuses a file that is there, not empty, and does not start with SQLite's header, as not a
    /// keyauth database, without opening it as a database.
    ///
    /// An empty file is left to the schema check (a `serve` that is creating the database), and a
    /// file that cannot be read to SQLite and the permission check. It runs before SQLite opens
    /// the file in this process: closing a plain descriptor drops the process's POSIX locks,
    /// which must not happen once SQLite holds some.
    ///
    /// - Throws: ``StorageError`` `.notKeyAuthDatabase`.
    package static func refuseIfNotSQLite(_ path: String) throws(StorageError) {
        let descriptor = Glibc.open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK)
        guard descriptor >= 0 else { return }
        defer { Glibc.close(descriptor) }
        var header = [UInt8](repeating: 0, count: sqliteHeader.count)
        let count = header.withUnsafeMutableBytes { Glibc.read(descriptor, $0.baseAddress, $0.count) }
        guard count > 0, Array(header[0..<count]) != sqliteHeader else { return }
        throw StorageError(
            .notKeyAuthDatabase, "\(path) is not a keyauth database (it is not a SQLite database file)")
    }

    /// The 16 bytes every SQLite 3 database file starts with: "SQLite format 3" and a zero.
    private static let sqliteHeader = Array("SQLite format 3\0".utf8)

    /// Whether SQLite said `SQLITE_NOTADB` (26): the file's header is not SQLite's.
    private static func isNotADatabase(_ error: StorageError) -> Bool {
        error.underlying?.library == "sqlite" && error.underlying?.code == 26
    }
}
